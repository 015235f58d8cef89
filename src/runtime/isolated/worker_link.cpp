#include "runtime/isolated/worker_link.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "cuactor/core/log.hpp"
#include "cuactor/runtime/detail/request.hpp"

namespace cuactor::runtime::isolated {
namespace {

using Clock = std::chrono::steady_clock;

/// A request written to the channel and not answered yet.
struct InFlight {
  LinkRequest request;
  Clock::time_point deadline;
};

/// One handler call to make outside the lock.
struct Completion {
  ReplyHandler done;
  Result<std::vector<std::byte>> outcome;
};

void run_all(std::vector<Completion>& completions) {
  for (auto& c : completions)
    if (c.done) c.done(std::move(c.outcome), 0);
  completions.clear();
}

Completion failed(LinkRequest& r, Error e) {
  return {std::move(r.done), cuda::std::unexpected<Error>(std::move(e))};
}

}  // namespace

struct WorkerLink::Impl {
  Impl(std::shared_ptr<DeviceState> s, LinkOptions o)
      : state(std::move(s)), options(std::move(o)), breaker(options.max_losses, options.window) {}

  // Immutable after start().
  std::shared_ptr<DeviceState> state;
  LinkOptions options;
  SharedRegion shm;

  mutable std::mutex mutex;
  std::condition_variable supervisor_cv;  // loss, stop, new deadline
  std::condition_variable idle_cv;        // in-flight count dropped (shutdown waits)
  std::deque<LinkRequest> queue;
  std::unordered_map<std::uint64_t, InFlight> in_flight;
  std::uint64_t next_id = 1;
  std::shared_ptr<WorkerProcess> worker;  // current worker (null while replacing)
  std::uint64_t incarnation = 0;          // number of the current worker
  bool ready = false;                     // the current worker said hello and may take requests
  bool draining = false;                  // a thread is writing queued requests to the channel
  bool stopping = false;
  bool circuit_open = false;
  std::optional<std::pair<std::uint64_t, Error>> loss;  // (incarnation, cause) reported, not handled yet
  std::uint64_t restarts = 0;
  std::uint64_t losses = 0;
  HelloMsg hello;
  CircuitBreaker breaker;
  std::thread supervisor;
  std::thread reader;

  // ---- sending ----------------------------------------------------------------------------------

  /// Writes queued requests to the channel in FIFO order while there is room; one drainer at a time
  /// so that requests leave in the order they were queued.
  void pump() {
    std::vector<Completion> completions;
    std::unique_lock lock(mutex);
    if (draining) return;
    draining = true;
    while (ready && !queue.empty() && in_flight.size() < options.max_in_flight) {
      LinkRequest r = std::move(queue.front());
      queue.pop_front();
      const auto gen = state->generation();
      if (r.generation != 0 && r.generation != gen) {
        completions.push_back(failed(
            r, stale_error(r.name.empty() ? kind_name(static_cast<std::uint16_t>(r.kind)) : r.name,
                           StaleReason::context_rebuilt, r.generation, gen, state->device_id(), state->device_id())));
        continue;
      }
      const std::uint64_t id = r.done ? next_id++ : 0;  // id 0: no reply expected (free)
      const auto kind = r.kind;
      auto payload = std::move(r.payload);
      const int fd = r.fd;
      const auto fd_owner = r.fd_owner;
      if (id != 0) {
        const auto deadline = Clock::now() + r.deadline.value_or(options.deadline);
        in_flight.emplace(id, InFlight{std::move(r), deadline});
      }
      auto w = worker;
      lock.unlock();
      run_all(completions);
      // A failed send closes the channel; the reader reports the loss and the supervisor fails this
      // request with the others in flight.
      (void)(fd >= 0 ? w->channel().send(kind, id, payload, fd) : w->channel().send(kind, id, payload));
      lock.lock();
      supervisor_cv.notify_all();  // a new deadline may be the earliest
    }
    draining = false;
    lock.unlock();
    run_all(completions);
  }

  void post(LinkRequest r) {
    std::optional<Error> reject;
    {
      std::lock_guard lock(mutex);
      if (stopping)
        reject = Error(errc::device_shutting_down, fmt::format("{}: the isolated device is shutting down", r.name));
      else if (circuit_open)
        reject = Error(errc::circuit_open,
                       fmt::format("{}: the worker of device {} was lost more than {} times within the window", r.name,
                                   state->device_id(), options.max_losses));
      else if (queue.size() >= options.queue_capacity)
        reject = Error(errc::queue_full, fmt::format("{}: {} requests already wait for the worker (capacity {})",
                                                     r.name, queue.size(), options.queue_capacity));
      else
        queue.push_back(std::move(r));
    }
    if (reject) {
      if (r.done) r.done(cuda::std::unexpected<Error>(std::move(*reject)), 0);
      return;
    }
    pump();
  }

  // ---- receiving --------------------------------------------------------------------------------

  void report_loss(std::uint64_t of_incarnation, Error cause) {
    std::lock_guard lock(mutex);
    if (of_incarnation == incarnation && !loss) loss.emplace(of_incarnation, std::move(cause));
    supervisor_cv.notify_all();
  }

  void read_loop(std::shared_ptr<WorkerProcess> w, std::uint64_t of_incarnation, std::uint64_t generation) {
    const detail::InternalThreadScope internal;  // replies must not run user handlers inline here
    for (;;) {
      auto m = w->channel().receive();
      if (!m) return report_loss(of_incarnation, m.error());
      if (m->kind == MsgKind::poisoned) {
        auto p = PoisonedMsg::decode(m->payload);
        if (!p) return report_loss(of_incarnation, p.error());
        return report_loss(of_incarnation, Error(errc::context_poisoned,
                                                 fmt::format("worker {} of device {} reported a poisoned context: {}",
                                                             w->pid(), state->device_id(), p->cause.message())));
      }
      if (m->kind != MsgKind::reply) {
        return report_loss(of_incarnation,
                           Error(errc::protocol_error, fmt::format("worker sent an unexpected {} message",
                                                                   kind_name(static_cast<std::uint16_t>(m->kind)))));
      }
      auto reply = ReplyMsg::decode(m->payload);
      if (!reply) return report_loss(of_incarnation, reply.error());
      std::optional<InFlight> done;
      {
        std::lock_guard lock(mutex);
        if (auto it = in_flight.find(m->id); it != in_flight.end()) {
          done.emplace(std::move(it->second));
          in_flight.erase(it);
          idle_cv.notify_all();
        }
      }
      if (!done) {
        return report_loss(
            of_incarnation,
            Error(errc::protocol_error, fmt::format("worker answered request #{}, which is not in flight", m->id)));
      }
      if (reply->error)
        done->request.done(cuda::std::unexpected<Error>(std::move(*reply->error)), generation);
      else
        done->request.done(std::move(reply->result), generation);
      pump();
    }
  }

  // ---- supervision ------------------------------------------------------------------------------

  /// Spawns a worker and waits for its hello. Runs on the supervisor thread only.
  Result<std::shared_ptr<WorkerProcess>> spawn_worker(HelloMsg& said) {
    SpawnOptions so;
    so.executable = options.executable.empty() ? default_worker_path() : options.executable;
    so.args = options.args;
    so.shm = shm.fd() >= 0 ? &shm : nullptr;
    so.max_payload = options.max_payload;
    auto spawned = WorkerProcess::spawn(so);
    if (!spawned) return fail(spawned.error());
    std::shared_ptr<WorkerProcess> w = std::move(*spawned);
    pollfd p{w->channel().native_handle(), POLLIN, 0};
    const int ready_fds = ::poll(&p, 1, static_cast<int>(options.start_timeout.count()));
    if (ready_fds <= 0) {
      const int st = w->kill_now();
      return fail(errc::worker_lost, fmt::format("worker '{}' did not say hello within {} ms ({})", so.executable,
                                                 options.start_timeout.count(), describe_wait_status(st)));
    }
    auto m = w->channel().receive();
    if (!m || m->kind != MsgKind::hello) {
      const int st = w->kill_now();
      return fail(errc::worker_lost,
                  fmt::format("worker '{}' failed to start: {} ({})", so.executable,
                              m ? "its first message was not hello" : m.error().to_string(), describe_wait_status(st)));
    }
    auto h = HelloMsg::decode(m->payload);
    if (!h) {
      w->kill_now();
      return fail(h.error());
    }
    said = *h;
    return w;
  }

  /// Makes `w` the current worker: raises the generation, starts its reader, sends what waits.
  void install(std::shared_ptr<WorkerProcess> w, const HelloMsg& said) {
    {
      std::lock_guard lock(mutex);
      worker = w;
      hello = said;
      ++incarnation;
      const auto generation = state->advance_generation();
      state->set_accepting_ops(true);
      ready = true;
      reader = std::thread([this, w, inc = incarnation, generation] { read_loop(w, inc, generation); });
    }
    pump();
  }

  /// Ends the current worker after a loss: kills and reaps it before failing what was in flight (so
  /// it can no longer write the shared memory those requests use), raises the generation, counts the
  /// loss. Returns false when the circuit opened.
  bool retire(Error cause) {
    std::shared_ptr<WorkerProcess> w;
    {
      std::lock_guard lock(mutex);
      ready = false;
      w = std::move(worker);
      state->advance_generation();  // every outstanding handle is stale from here on
    }
    if (w) {
      const int st = w->kill_now();
      w->channel().close();
      log(LogLevel::warn, fmt::format("isolated device {}: worker {} lost ({}): {}", state->device_id(), w->pid(),
                                      describe_wait_status(st), cause.to_string()));
    }
    if (reader.joinable()) reader.join();
    std::vector<Completion> completions;
    bool open = false;
    {
      std::lock_guard lock(mutex);
      loss.reset();
      ++losses;
      for (auto& [id, f] : in_flight) {
        auto e = cause.code() == errc::context_poisoned ? cause : Error(errc::worker_lost, cause.message());
        completions.push_back(
            failed(f.request, Error(e.code(), fmt::format("{} #{}: {}", f.request.name, id, e.message()))));
      }
      in_flight.clear();
      idle_cv.notify_all();
      if (breaker.record(Clock::now()) && !circuit_open) {
        circuit_open = true;
        open = true;
        for (auto& r : queue)
          completions.push_back(
              failed(r, Error(errc::circuit_open, fmt::format("{}: worker of device {} lost too often; circuit open",
                                                              r.name, state->device_id()))));
        queue.clear();
      }
    }
    run_all(completions);
    if (open && options.on_escalation) options.on_escalation(cause);
    return !open;
  }

  /// The supervisor thread: watches deadlines and losses, replaces lost workers.
  void supervise() {
    const detail::InternalThreadScope internal;
    std::unique_lock lock(mutex);
    for (;;) {
      if (stopping && !ready) return;
      if (loss) {
        auto cause = loss->second;
        lock.unlock();
        const bool go_on = retire(std::move(cause));
        while (go_on) {
          {
            std::lock_guard l(mutex);
            if (stopping) break;
          }
          HelloMsg said;
          auto w = spawn_worker(said);
          if (w) {
            {
              std::lock_guard l(mutex);
              ++restarts;
            }
            install(std::move(*w), said);
            break;
          }
          log(LogLevel::error,
              fmt::format("isolated device {}: restart failed: {}", state->device_id(), w.error().to_string()));
          {
            std::lock_guard l(mutex);
            loss.emplace(incarnation, w.error());
          }
          if (!retire(w.error())) break;
        }
        lock.lock();
        continue;
      }
      if (stopping) return;
      // Earliest deadline of what is in flight.
      auto wake = Clock::now() + std::chrono::milliseconds(200);
      std::optional<std::pair<std::uint64_t, std::string>> overdue;
      const auto now = Clock::now();
      for (const auto& [id, f] : in_flight) {
        if (f.deadline <= now) {
          overdue.emplace(id, f.request.name);
          break;
        }
        wake = std::min(wake, f.deadline);
      }
      if (overdue && ready) {
        loss.emplace(incarnation,
                     Error(errc::worker_lost, fmt::format("request {} #{} exceeded its deadline; the worker was killed",
                                                          overdue->second, overdue->first)));
        continue;
      }
      supervisor_cv.wait_until(lock, wake);
    }
  }

  void shutdown() {
    std::vector<Completion> completions;
    {
      std::unique_lock lock(mutex);
      if (stopping) return;
      stopping = true;
      state->set_accepting_ops(false);
      for (auto& r : queue)
        completions.push_back(
            failed(r, Error(errc::device_shutting_down,
                            fmt::format("{}: the isolated device shut down before it was sent", r.name))));
      queue.clear();
    }
    run_all(completions);
    {
      std::unique_lock lock(mutex);
      idle_cv.wait_for(lock, options.grace, [&] { return in_flight.empty() || !ready; });
      ready = false;
      supervisor_cv.notify_all();
    }
    if (supervisor.joinable()) supervisor.join();
    std::shared_ptr<WorkerProcess> w;
    {
      std::lock_guard lock(mutex);
      w = worker;  // read after the join: the supervisor may have installed one meanwhile
    }
    if (w) {
      (void)w->channel().send(MsgKind::shutdown, 0, {});
      w->terminate(options.grace);
    }
    if (reader.joinable()) reader.join();
    {
      std::lock_guard lock(mutex);
      for (auto& [id, f] : in_flight)
        completions.push_back(failed(f.request, Error(errc::timeout, fmt::format("{} #{}: still in flight when the "
                                                                                 "isolated device shut down",
                                                                                 f.request.name, id))));
      in_flight.clear();
      worker.reset();
    }
    run_all(completions);
  }
};

Result<std::shared_ptr<WorkerLink>> WorkerLink::start(std::shared_ptr<DeviceState> state, LinkOptions options) {
  if (!state) return fail(errc::invalid_argument, "WorkerLink::start: null device state");
  auto impl = std::make_shared<Impl>(std::move(state), std::move(options));
  if (impl->options.shm_bytes > 0) {
    auto shm = SharedRegion::create("cuactor-worker-shm", impl->options.shm_bytes);
    if (!shm) return fail(shm.error());
    impl->shm = std::move(*shm);
  }
  // The first worker is spawned on the supervisor thread too: its parent-death signal follows the
  // thread that spawned it, and the caller's thread may end long before the link does.
  std::promise<Status> started;
  auto started_future = started.get_future();
  impl->supervisor = std::thread([impl = impl.get(), &started] {
    HelloMsg said;
    auto w = impl->spawn_worker(said);
    if (!w) {
      started.set_value(fail(w.error()));
      return;
    }
    impl->install(std::move(*w), said);
    started.set_value(ok());
    impl->supervise();
  });
  if (auto s = started_future.get(); !s) {
    impl->supervisor.join();
    return fail(s.error());
  }
  return std::shared_ptr<WorkerLink>(new WorkerLink(std::move(impl)));
}

WorkerLink::~WorkerLink() {
  shutdown();
}

void WorkerLink::post(LinkRequest request) {
  impl_->post(std::move(request));
}

void WorkerLink::shutdown() {
  impl_->shutdown();
}

const SharedRegion& WorkerLink::shm() const noexcept {
  return impl_->shm;
}

void WorkerLink::kill_worker(int signal) {
  pid_t pid = -1;
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->worker && impl_->ready) pid = impl_->worker->pid();
  }
  if (pid > 0) ::kill(pid, signal);
}

LinkStats WorkerLink::stats() const {
  std::lock_guard lock(impl_->mutex);
  LinkStats s;
  s.generation = impl_->state->generation();
  s.restarts = impl_->restarts;
  s.losses = impl_->losses;
  s.queued = impl_->queue.size();
  s.in_flight = impl_->in_flight.size();
  s.circuit_open = impl_->circuit_open;
  s.worker_pid = impl_->worker && impl_->ready ? impl_->worker->pid() : -1;
  s.hello = impl_->hello;
  return s;
}

}  // namespace cuactor::runtime::isolated
