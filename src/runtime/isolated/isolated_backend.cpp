// The client of an isolated worker: admission of requests, the queue, answers, stats and shutdown. How each
// command becomes requests to the worker is in isolated_commands.cpp.
#include "runtime/isolated/isolated_backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <future>

#include "cuactor/core/log.hpp"
#include "runtime/isolated/host_copy.hpp"
#include "runtime/isolated/isolated_job.hpp"
#include "runtime/isolated/shm.hpp"

namespace cuactor::runtime::isolated {

namespace {

/// Frees buffers of one worker generation in that worker; memory of a lost worker went with it.
class RemoteOwner final : public AllocationOwner {
 public:
  RemoteOwner(std::weak_ptr<WorkerLink> link, std::weak_ptr<DeviceState> state, std::uint64_t generation)
      : link_(std::move(link)), state_(std::move(state)), generation_(generation) {}

  void deallocate(void*, std::size_t, cudaEvent_t) noexcept override {}  // no memory of this process
  [[nodiscard]] bool context_lost() const noexcept override {
    const auto s = state_.lock();
    return !s || s->generation() != generation_;
  }
  void deallocate_remote(std::uint64_t id, std::size_t) noexcept override {
    const auto link = link_.lock();
    if (!link) return;
    try {
      LinkRequest r;
      r.kind = MsgKind::free;
      r.payload = encode_payload(FreeMsg{id});
      r.generation = generation_;  // refused (silently) if the worker was replaced meanwhile
      r.name = "free";
      link->post(std::move(r));
    } catch (const std::exception& e) {
      log(LogLevel::error, fmt::format("isolated free of buffer #{} failed: {}", id, e.what()));
    }
  }
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }

 private:
  std::weak_ptr<WorkerLink> link_;
  std::weak_ptr<DeviceState> state_;
  std::uint64_t generation_;
};

bool valid_fill_element(std::size_t bytes) {
  return bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8 || bytes == 16;
}

}  // namespace

IsolatedBackend::IsolatedBackend(int ordinal, std::shared_ptr<DeviceState> state, std::size_t queue_capacity)
    : ordinal_(ordinal), state_(std::move(state)), queue_capacity_(queue_capacity) {}

Result<std::shared_ptr<IsolatedBackend>> IsolatedBackend::start(int ordinal, const ActorOptions& options,
                                                                std::vector<std::string> worker_args) {
  constexpr std::size_t min_shared = std::size_t{64} << 10;
  if (ordinal < 0)
    return fail(errc::invalid_argument, fmt::format("isolated device: ordinal {} must be >= 0", ordinal));
  if (options.shared_bytes < min_shared)
    return fail(errc::invalid_argument, fmt::format("isolated device {}: shared_bytes={} must be >= {} (64 KiB)",
                                                    ordinal, options.shared_bytes, min_shared));
  if (options.request_deadline.count() <= 0 || options.worker_start_timeout.count() <= 0)
    return fail(errc::invalid_argument,
                fmt::format("isolated device {}: request_deadline={} ms and worker_start_timeout={} ms must be > 0",
                            ordinal, options.request_deadline.count(), options.worker_start_timeout.count()));
  auto state = std::make_shared<DeviceState>(ordinal);
  auto backend = std::make_shared<IsolatedBackend>(ordinal, state, options.mailbox_capacity);
  LinkOptions lo;
  lo.executable = options.worker_path;
  lo.args =
      worker_args.empty() ? std::vector<std::string>{"--device", std::to_string(ordinal)} : std::move(worker_args);
  lo.shm_bytes = options.shared_bytes;
  lo.queue_capacity = options.mailbox_capacity;
  lo.max_in_flight = options.max_in_flight;
  lo.deadline = options.request_deadline;
  lo.start_timeout = options.worker_start_timeout;
  lo.max_losses = options.breaker.max_poisonings;
  lo.window = options.breaker.window;
  if (options.on_escalation)
    lo.on_escalation = [hook = options.on_escalation, ordinal](const Error& cause) { hook(ordinal, cause); };
  auto link = WorkerLink::start(state, std::move(lo));
  if (!link) return fail(link.error());
  backend->link_ = std::move(*link);
  backend->ring_ = ShmRing(backend->link_->shm().size());
  backend->chunk_ = std::max<std::size_t>(backend->link_->shm().size() / 4, 1);
  return backend;
}

IsolatedBackend::~IsolatedBackend() {
  shutdown();
}

std::optional<Error> IsolatedBackend::check(const detail::OpRecord& op) const {
  const Command* command = op.command();
  if (!command)
    return Error(errc::unsupported,
                 fmt::format("request '{}' #{}: host closures (submit, execute) run only in-process; device {} is "
                             "isolated (ActorOptions::isolation = worker)",
                             op.name, op.id, ordinal_));
  if (std::holds_alternative<LaunchCmd>(*command))
    return Error(errc::unsupported,
                 fmt::format("launch #{}: a gpu::Kernel loaded in this process cannot run in device {}'s isolated "
                             "worker; launch from a ModuleImage (DeviceActor::launch(module, name, ...))",
                             op.id, ordinal_));
  for (const auto* list : {&op.reads, &op.writes}) {
    for (const auto& a : *list) {
      if (!a) return Error(errc::invalid_argument, fmt::format("request '{}' #{}: empty GpuRef", op.name, op.id));
      if (a->remote_id() == 0 || a->state() != state_)
        return Error(errc::invalid_argument, fmt::format("request '{}' #{}: {} does not belong to isolated device {}",
                                                         op.name, op.id, a->describe(), ordinal_));
      if (Status s = a->access(ordinal_); !s) return s.error();
    }
  }
  auto foreign_host = [&](const HostBuffer* h) -> std::optional<Error> {
    if (h && h->shared_fd() < 0)
      return Error(errc::invalid_argument,
                   fmt::format("{} #{}: the host buffer was allocated by an in-process actor; allocate it with "
                               "isolated device {}'s allocate_host()",
                               op.name, op.id, ordinal_));
    return std::nullopt;
  };
  if (const auto* c = std::get_if<CopyToDeviceCmd>(command)) {
    if (auto e = foreign_host(c->src.host_buffer)) return e;
    if (!c->src.owner || (!c->src.data && c->src.bytes > 0))
      return Error(errc::invalid_argument, fmt::format("{} #{}: null host buffer", op.name, op.id));
    if (c->src.bytes > c->dst->bytes())
      return Error(errc::invalid_argument, fmt::format("{} #{}: {} bytes do not fit the {}-byte destination", op.name,
                                                       op.id, c->src.bytes, c->dst->bytes()));
  } else if (const auto* h = std::get_if<CopyToHostCmd>(command)) {
    if (auto e = foreign_host(h->dst.host_buffer)) return e;
    if (!h->dst.owner || (!h->dst.data && h->dst.bytes > 0))
      return Error(errc::invalid_argument, fmt::format("{} #{}: null host buffer", op.name, op.id));
  } else if (const auto* f = std::get_if<FillCmd>(command)) {
    if (!valid_fill_element(f->element_bytes))
      return Error(errc::unsupported,
                   fmt::format("fill #{}: element size {} bytes; supported: 1, 2, 4, 8, 16", op.id, f->element_bytes));
    if (f->count > f->dst->bytes() / f->element_bytes)
      return Error(errc::invalid_argument, fmt::format("fill #{}: {} elements of {} bytes exceed the {}-byte buffer",
                                                       op.id, f->count, f->element_bytes, f->dst->bytes()));
  } else if (const auto* a = std::get_if<AllocateHostCmd>(command)) {
    if (a->bytes == 0)
      return Error(errc::invalid_argument,
                   fmt::format("allocate_host #{}: 0 bytes; a host buffer needs at least 1", op.id));
  } else if (const auto* o = std::get_if<WorkerOpCmd>(command)) {
    if (o->op == 0)
      return Error(errc::invalid_argument,
                   fmt::format("{} #{}: worker operation 0 names no operation (a null handle?)", op.name, op.id));
    if (o->buffers.size() > kMaxWorkerOpBuffers)
      return Error(errc::invalid_argument, fmt::format("{} #{}: {} buffer operands; at most {}", op.name, op.id,
                                                       o->buffers.size(), kMaxWorkerOpBuffers));
    for (const auto& [allocation, written] : o->buffers)
      if (!allocation) return Error(errc::invalid_argument, fmt::format("{} #{}: empty GpuRef", op.name, op.id));
    if (o->generation != 0 && o->generation != state_->generation())
      return Error(errc::stale_handle,
                   fmt::format("{} #{}: it names objects of worker generation {}, but device {} is at generation {} "
                               "(the worker that held them is gone)",
                               op.name, op.id, o->generation, ordinal_, state_->generation()));
  } else if (const auto* l = std::get_if<LaunchModuleCmd>(command)) {
    if (!l->module) return Error(errc::invalid_argument, fmt::format("launch #{}: null module image", op.id));
    if (l->kernel.empty()) return Error(errc::invalid_argument, fmt::format("launch #{}: empty kernel name", op.id));
    if (l->args.slots().size() > kMaxLaunchArgs)
      return Error(errc::invalid_argument, fmt::format("launch {} #{}: {} arguments; at most {}", l->kernel, op.id,
                                                       l->args.slots().size(), kMaxLaunchArgs));
    for (const auto& slot : l->args.slots())
      if (slot.size > kMaxArgBytes)
        return Error(errc::invalid_argument, fmt::format("launch {} #{}: a {}-byte argument; at most {} bytes",
                                                         l->kernel, op.id, slot.size, kMaxArgBytes));
  }
  return std::nullopt;
}

void IsolatedBackend::post(std::shared_ptr<detail::OpRecord> op) {
  std::optional<Error> rejection = check(*op);
  if (!rejection) {
    std::lock_guard lock(mutex_);
    if (stopping_)
      rejection =
          Error(errc::device_shutting_down,
                fmt::format("device {}: request '{}' rejected: the actor is shutting down", ordinal_, op->name));
    else if (queue_.size() >= queue_capacity_)
      rejection =
          Error(errc::queue_full, fmt::format("device {}: request '{}' rejected: {} requests wait (capacity {})",
                                              ordinal_, op->name, queue_.size(), queue_capacity_));
    else {
      op->span = nvtx::Span::start(op->name.data(), op->id);
      auto job = std::make_shared<Job>();
      job->op = std::move(op);
      queue_.push_back(std::move(job));
    }
  }
  if (rejection) return detail::finish_error_later(counters_, std::move(op), std::move(*rejection));
  pump();
}

void IsolatedBackend::cancel(std::uint64_t id) noexcept {
  std::shared_ptr<Job> job;
  {
    std::lock_guard lock(mutex_);
    auto it = std::find_if(queue_.begin(), queue_.end(),
                           [id](const std::shared_ptr<Job>& j) { return j->op->id == id && !j->started; });
    if (it == queue_.end()) return;
    job = std::move(*it);
    queue_.erase(it);
    job->answered = true;
  }
  detail::finish_error_later(counters_, std::move(job->op),
                             Error(errc::cancelled, fmt::format("request #{} cancelled before it was sent", id)));
}

std::shared_ptr<AllocationOwner> IsolatedBackend::owner_for(std::uint64_t generation) {
  std::lock_guard lock(mutex_);
  auto* current = static_cast<RemoteOwner*>(owner_.get());
  if (!current || current->generation() != generation)
    owner_ = std::make_shared<RemoteOwner>(link_, state_, generation);
  return owner_;
}

LinkRequest IsolatedBackend::request_for(const std::shared_ptr<Job>& job, MsgKind kind, Bytes payload,
                                         std::uint64_t generation, std::function<Status(Bytes&, std::uint64_t)> on_ok,
                                         std::optional<std::size_t> shm_range) {
  ++job->outstanding;
  job->started = true;
  LinkRequest r;
  r.kind = kind;
  r.payload = std::move(payload);
  r.generation = generation;
  r.name = std::string(job->op->name);
  r.done = [self = shared_from_this(), job, on_ok = std::move(on_ok), shm_range](Result<Bytes> out,
                                                                                 std::uint64_t served) mutable {
    std::optional<Error> error;
    if (!out)
      error = std::move(out.error());
    else if (on_ok)
      if (Status s = on_ok(*out, served); !s) error = std::move(s.error());
    bool answer_now = false;
    {
      std::lock_guard lock(self->mutex_);
      if (shm_range) self->ring_.release(*shm_range);
      --job->outstanding;
      if (error && !job->error) job->error = std::move(error);
      if (job->all_posted && job->outstanding == 0 && !job->answered) answer_now = job->answered = true;
    }
    if (answer_now) self->answer(job);
    self->pump();
  };
  return r;
}

void IsolatedBackend::answer(const std::shared_ptr<Job>& job) {
  auto op = std::move(job->op);
  std::optional<Error> error = std::move(job->error);
  if (!error)
    if (Status s = op->set_result(std::move(job->result)); !s) error = std::move(s.error());
  if (error && (error->code() == errc::worker_lost || error->code() == errc::context_poisoned))
    error = Error(error->code(), fmt::format("device {} (isolated): {}", ordinal_, error->message()));
  if (detail::on_internal_thread()) {
    if (error)
      detail::finish_error(*counters_, std::move(op), *error);
    else
      detail::finish(*counters_, std::move(op), {});
    return;
  }
  // Never answer inside the caller's own call (its handler may run inline on this thread).
  if (error) return detail::finish_error_later(counters_, std::move(op), std::move(*error));
  detail::completion_pool_executor().execute(
      [counters = counters_, op = std::move(op)]() mutable { detail::finish(*counters, std::move(op), {}); });
}

void IsolatedBackend::pump() {
  std::unique_lock lock(mutex_);
  if (draining_) {
    again_ = true;
    return;
  }
  draining_ = true;
  do {
    again_ = false;
    std::vector<Send> sends;
    std::vector<std::shared_ptr<Job>> done;
    while (!queue_.empty()) {
      auto job = queue_.front();
      if (!advance(job, sends, done)) break;
      if (job->all_posted) queue_.pop_front();
    }
    lock.unlock();
    for (auto& s : sends) {
      if (s.stage_bytes > 0) host_copy(s.stage_to, s.stage_from, s.stage_bytes);  // the one host copy
      link_->post(std::move(s.request));
    }
    for (auto& job : done) answer(job);
    lock.lock();
  } while (again_);
  draining_ = false;
}

DeviceStats IsolatedBackend::stats() const {
  DeviceStats s;
  s.device = ordinal_;
  s.isolated = true;
  const auto link = link_->stats();
  {
    std::lock_guard lock(mutex_);
    s.queue_depth = queue_.size() + link.queued;
    s.circuit = link.circuit_open                   ? CircuitState::open
                : link.worker_pid < 0 && !stopping_ ? CircuitState::recovering
                                                    : CircuitState::closed;
  }
  s.in_flight = link.in_flight;
  s.generation = link.generation;
  s.accepting_ops = state_->accepting_ops();
  s.completed = counters_->completed.load(std::memory_order_relaxed);
  s.failed = counters_->failed.load(std::memory_order_relaxed);
  s.poisonings = link.losses;
  s.worker_restarts = link.restarts;
  s.worker_pid = link.worker_pid;
  s.total_bytes = link.hello.total_bytes;
  if (s.circuit != CircuitState::closed || detail::on_internal_thread()) return s;
  // Device memory: ask the worker (at most a second).
  auto answer = std::make_shared<std::promise<Result<Bytes>>>();
  auto future = answer->get_future();
  LinkRequest r;
  r.kind = MsgKind::stats;
  r.name = "stats";
  r.deadline = std::chrono::milliseconds(10000);
  r.done = [answer](Result<Bytes> out, std::uint64_t) { answer->set_value(std::move(out)); };
  link_->post(std::move(r));
  if (future.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return s;
  if (auto out = future.get()) {
    if (auto d = StatsReply::decode(*out)) {
      s.memory_known = true;
      s.free_bytes = d->free_bytes;
      s.total_bytes = d->total_bytes;
      s.worker_buffers = d->buffers;
      s.worker_graphs = d->graphs;
      s.worker_host_buffers = d->host_buffers;
      s.worker_buffer_bytes = d->buffer_bytes;
    }
  }
  return s;
}

void IsolatedBackend::shutdown() noexcept {
  std::vector<std::shared_ptr<Job>> unsent;
  std::vector<std::shared_ptr<Job>> idle;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& job : queue_) {
      if (!job->error)
        job->error =
            Error(errc::device_shutting_down,
                  fmt::format("device {}: request '{}' not sent: the actor shut down", ordinal_, job->op->name));
      job->all_posted = true;  // what was sent answers it; nothing more is sent
      if (job->outstanding == 0 && !job->answered) {
        job->answered = true;
        (job->started ? idle : unsent).push_back(job);
      }
    }
    queue_.clear();
  }
  for (auto& job : unsent) answer(job);
  for (auto& job : idle) answer(job);
  if (link_) link_->shutdown();  // answers what is in flight
}

}  // namespace cuactor::runtime::isolated
