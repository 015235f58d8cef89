#include "cuactor/graph/capture.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "cuactor/core/nvtx.hpp"
#include "cuactor/gpu/check.hpp"
#include "graph/reclaimer.hpp"

namespace cuactor::graph {

Status GenerationStamp::check(std::string_view what) const {
  if (!bound) return ok();
  const auto s = state.lock();
  if (!s) return fail(runtime::stale_error(what, runtime::StaleReason::state_gone, generation, 0, device, device));
  if (!s->accepting_ops())
    return fail(
        runtime::stale_error(what, runtime::StaleReason::shutting_down, generation, s->generation(), device, device));
  if (const auto current = s->generation(); current != generation)
    return fail(runtime::stale_error(what, runtime::StaleReason::context_rebuilt, generation, current, device, device));
  return ok();
}

namespace detail {

/// Shared state of one capture: what operations registered, and the generation it belongs to.
struct CaptureCore {
  cudaStream_t stream = nullptr;
  CaptureMode mode = CaptureMode::global;
  int device = -1;
  std::mutex mutex;
  std::shared_ptr<CapturePool> pool;
  GenerationStamp stamp;
  std::vector<std::shared_ptr<runtime::DeviceAllocation>> reads;
  std::vector<std::shared_ptr<runtime::DeviceAllocation>> writes;
  std::atomic<bool> active{true};

  /// Remembers that the graph reads or writes `allocation` (a written buffer is listed once, as written).
  void record_use(const std::shared_ptr<runtime::DeviceAllocation>& allocation, BufferUse use) {
    std::lock_guard lock(mutex);
    const auto in = [&](const auto& list) { return std::find(list.begin(), list.end(), allocation) != list.end(); };
    if (use == BufferUse::write) {
      std::erase(reads, allocation);
      if (!in(writes)) writes.push_back(allocation);
    } else if (!in(writes) && !in(reads)) {
      reads.push_back(allocation);
    }
  }

  Result<std::shared_ptr<CapturePool>> get_pool() {
    std::lock_guard lock(mutex);
    if (!pool) {
      auto p = CapturePool::create(device);
      if (!p) return fail(p.error());
      pool = std::move(*p);
    }
    return pool;
  }

  Status bind(const std::shared_ptr<runtime::DeviceState>& state, std::uint64_t generation) {
    if (!state) return ok();
    if (state->device_id() != device)
      return fail(errc::wrong_device, fmt::format("capture on device {}: a buffer or state of device {} was used",
                                                  device, state->device_id()));
    std::lock_guard lock(mutex);
    if (!stamp.bound || generation > stamp.generation) {
      stamp.state = state;
      stamp.generation = generation;
      stamp.device = state->device_id();
      stamp.bound = true;
    }
    return ok();
  }
};

}  // namespace detail

namespace {

using detail::CaptureCore;

/// Streams capturing under a CaptureSession, for operations that must find their capture.
struct Registry {
  std::mutex mutex;
  std::unordered_map<cudaStream_t, std::weak_ptr<CaptureCore>> sessions;
  std::atomic<int> count{0};
};
Registry& registry() {
  static Registry* const r = new Registry();  // leaked: usable during static destruction
  return *r;
}

std::shared_ptr<CaptureCore> find_session(cudaStream_t stream) {
  auto& r = registry();
  if (r.count.load(std::memory_order_acquire) == 0) return nullptr;  // no capture anywhere: no lock
  std::lock_guard lock(r.mutex);
  const auto it = r.sessions.find(stream);
  return it == r.sessions.end() ? nullptr : it->second.lock();
}

void unregister(const CaptureCore& core) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.sessions.find(core.stream);
  if (it != r.sessions.end() && it->second.lock().get() == &core) {
    r.sessions.erase(it);
    r.count.fetch_sub(1, std::memory_order_acq_rel);
  }
}

/// CUDA's destructor for a graph's reference to its pool: hands the reference to the reclaimer.
void release_pool_token(void* payload) {
  auto* token = static_cast<std::shared_ptr<CapturePool>*>(payload);
  detail::Reclaimer::instance().token_released(std::shared_ptr<void>(std::move(*token)));
  delete token;
}

/// Makes `graph` hold `pool` through a CUDA user object ([G2]): CUDA keeps the reference until the
/// graph, every executable instantiated from it and every launch in flight are gone.
Status tie_pool_to_graph(const gpu::Graph& graph, const std::shared_ptr<CapturePool>& pool) {
  auto* token = new std::shared_ptr<CapturePool>(pool);
  auto object = gpu::UserObject::create(token, &release_pool_token);
  if (!object) {
    delete token;
    return fail(object.error());
  }
  detail::Reclaimer::instance().token_created();
  return object->move_into(graph);
}

Status keep_allocation(CaptureCore& core, const std::shared_ptr<runtime::DeviceAllocation>& allocation, BufferUse use,
                       bool* added) {
  if (!allocation) return fail(errc::invalid_argument, "capture keep-alive: null GpuRef allocation");
  CUACTOR_TRY(allocation->access(core.device));
  CUACTOR_TRY(core.bind(allocation->state(), allocation->generation()));
  auto pool = core.get_pool();
  if (!pool) return fail(pool.error());
  auto r = (*pool)->keep_alive(allocation, allocation->data(), allocation->bytes());
  if (!r) return fail(r.error());
  if (added) *added = *r;
  core.record_use(allocation, use);
  return ok();
}

}  // namespace

struct CaptureSession::Ended {
  gpu::Graph graph;
  std::shared_ptr<CapturePool> pool;
  GenerationStamp stamp;
  std::vector<std::shared_ptr<runtime::DeviceAllocation>> reads;
  std::vector<std::shared_ptr<runtime::DeviceAllocation>> writes;
  int device = -1;
};

Result<CaptureSession> CaptureSession::begin(cudaStream_t stream, CaptureMode mode, std::shared_ptr<CapturePool> pool) {
  const nvtx::Range range("capture.begin");
  if (stream == nullptr)
    return fail(errc::invalid_argument, "begin_capture: stream is null; the legacy default stream cannot capture");
  int device = -1;
  CUACTOR_CUDA_TRY(cudaStreamGetDevice(stream, &device));
  if (pool && pool->device() != device)
    return fail(errc::wrong_device,
                fmt::format("begin_capture: pool of device {} for a stream of device {}", pool->device(), device));
  auto core = std::make_shared<CaptureCore>();
  core->stream = stream;
  core->mode = mode;
  core->device = device;
  core->pool = std::move(pool);
  (void)detail::Reclaimer::instance();  // start the reclaimer thread before any capture runs
  CUACTOR_TRY(gpu::begin_stream_capture(stream, mode));
  auto& r = registry();
  {
    std::lock_guard lock(r.mutex);
    r.sessions[stream] = core;
    r.count.fetch_add(1, std::memory_order_acq_rel);
  }
  return CaptureSession(std::move(core));
}

Result<CaptureSession> begin_capture(cudaStream_t stream, CaptureMode mode, std::shared_ptr<CapturePool> pool) {
  return CaptureSession::begin(stream, mode, std::move(pool));
}

CaptureSession::CaptureSession(CaptureSession&&) noexcept = default;

CaptureSession& CaptureSession::operator=(CaptureSession&& o) noexcept {
  if (this != &o) {
    if (active()) (void)abandon();
    core_ = std::move(o.core_);
  }
  return *this;
}

CaptureSession::~CaptureSession() {
  if (active()) (void)abandon();
}

cudaStream_t CaptureSession::stream() const noexcept {
  return core_ ? core_->stream : nullptr;
}
CaptureMode CaptureSession::mode() const noexcept {
  return core_ ? core_->mode : CaptureMode::global;
}
int CaptureSession::device() const noexcept {
  return core_ ? core_->device : -1;
}
bool CaptureSession::active() const noexcept {
  return core_ && core_->active.load(std::memory_order_acquire);
}

Result<CaptureStatus> CaptureSession::status() const {
  if (!active()) return CaptureStatus::none;
  auto s = gpu::capture_state(core_->stream);
  if (!s) return fail(s.error());
  return s->status;
}

Result<std::shared_ptr<CapturePool>> CaptureSession::pool() {
  if (!core_) return fail(errc::invalid_argument, "pool() of a moved-from CaptureSession");
  return core_->get_pool();
}

Result<bool> CaptureSession::keep_alive(std::shared_ptr<void> owner, const void* address, std::size_t bytes) {
  auto p = pool();
  if (!p) return fail(p.error());
  return (*p)->keep_alive(std::move(owner), address, bytes);
}

Result<bool> CaptureSession::keep_alive_allocation(const std::shared_ptr<runtime::DeviceAllocation>& allocation,
                                                   BufferUse use) {
  if (!core_) return fail(errc::invalid_argument, "keep_alive on a moved-from CaptureSession");
  bool added = false;
  CUACTOR_TRY(keep_allocation(*core_, allocation, use, &added));
  return added;
}

Result<void*> CaptureSession::allocate(std::size_t bytes) {
  auto p = pool();
  if (!p) return fail(p.error());
  return (*p)->allocate(bytes);
}

Status CaptureSession::bind_device_state(const std::shared_ptr<runtime::DeviceState>& state) {
  if (!core_) return fail(errc::invalid_argument, "bind_device_state on a moved-from CaptureSession");
  if (!state) return fail(errc::invalid_argument, "bind_device_state: null DeviceState");
  return core_->bind(state, state->generation());
}

Result<CaptureSession::Ended> CaptureSession::finish(std::shared_ptr<CapturePool> into) {
  if (!active()) return fail(errc::invalid_argument, "end_capture: the capture already ended");
  core_->active.store(false, std::memory_order_release);
  unregister(*core_);
  auto graph = gpu::end_stream_capture(core_->stream);
  if (!graph) return fail(graph.error());
  Ended out;
  out.graph = std::move(*graph);
  out.device = core_->device;
  std::shared_ptr<CapturePool> own;
  {
    std::lock_guard lock(core_->mutex);
    own = std::move(core_->pool);
    out.stamp = core_->stamp;
    out.reads = std::move(core_->reads);
    out.writes = std::move(core_->writes);
  }
  if (into) {
    if (into->device() != core_->device)
      return fail(errc::wrong_device, fmt::format("end_capture_with_pool: pool of device {} for a capture on device {}",
                                                  into->device(), core_->device));
    if (own) CUACTOR_TRY(into->absorb(*own));
    out.pool = std::move(into);
  } else {
    out.pool = std::move(own);
  }
  if (out.pool) CUACTOR_TRY(tie_pool_to_graph(out.graph, out.pool));
  return out;
}

Result<CapturedGraph> CaptureSession::end_capture() {
  return end_capture_with_pool(nullptr);
}

Result<CapturedGraph> CaptureSession::end_capture_with_pool(std::shared_ptr<CapturePool> pool) {
  const nvtx::Range range("capture.end");  // ends the capture and instantiates the graph
  auto ended = finish(std::move(pool));
  if (!ended) return fail(ended.error());
  auto exec = gpu::GraphExec::instantiate(ended->graph);
  if (!exec) return fail(exec.error());
  CapturedGraph g;
  g.graph_ = std::move(ended->graph);
  g.exec_ = std::move(*exec);
  g.pool_ = std::move(ended->pool);
  g.stamp_ = std::move(ended->stamp);
  g.reads_ = std::move(ended->reads);
  g.writes_ = std::move(ended->writes);
  g.device_ = ended->device;
  return g;
}

Status CaptureSession::abandon() {
  if (!active()) return ok();
  core_->active.store(false, std::memory_order_release);
  unregister(*core_);
  auto graph = gpu::end_stream_capture(core_->stream);
  if (!graph && !(graph.error() == errc::capture_invalidated)) return fail(graph.error());
  return ok();
}

bool is_capturing_session(cudaStream_t stream) {
  return find_session(stream) != nullptr;
}

bool detail::any_capture_session_active() noexcept {
  return registry().count.load(std::memory_order_acquire) > 0;
}

Result<bool> keep_alive_if_capturing(cudaStream_t stream, std::shared_ptr<void> owner, const void* address,
                                     std::size_t bytes) {
  const auto core = find_session(stream);
  if (!core) return false;
  auto pool = core->get_pool();
  if (!pool) return fail(pool.error());
  CUACTOR_TRY((*pool)->keep_alive(std::move(owner), address, bytes));
  return true;
}

Result<bool> keep_alive_if_capturing(cudaStream_t stream, const std::shared_ptr<runtime::DeviceAllocation>& allocation,
                                     BufferUse use) {
  const auto core = find_session(stream);
  if (!core) return false;
  CUACTOR_TRY(keep_allocation(*core, allocation, use, nullptr));
  return true;
}

std::optional<std::uint64_t> CapturedGraph::generation() const noexcept {
  if (!stamp_.bound) return std::nullopt;
  return stamp_.generation;
}

Status CapturedGraph::check_current() const {
  if (!exec_) return fail(errc::invalid_argument, "CapturedGraph is empty (moved from)");
  return stamp_.check("captured graph");
}

Status CapturedGraph::launch(cudaStream_t stream) {
  const nvtx::Range range("graph.launch", replays_);
  CUACTOR_TRY(check_current());
  CUACTOR_TRY(exec_.launch(stream));
  ++replays_;
  return ok();
}

Status CapturedGraph::upload(cudaStream_t stream) {
  CUACTOR_TRY(check_current());
  if (uploaded_) return ok();
  const nvtx::Range range("graph.upload");
  CUACTOR_TRY(exec_.upload(stream));
  uploaded_ = true;
  return ok();
}

Result<std::size_t> CapturedGraph::node_count() const {
  return graph_.node_count();
}

Status CapturedGraph::write_dot(const std::string& path, bool verbose) const {
  return graph_.write_dot(path, verbose);
}

Result<GraphUpdate> CapturedGraph::update_from(CaptureSession&& next) {
  const nvtx::Range range("graph.update");
  if (!exec_) return fail(errc::invalid_argument, "update_from on an empty CapturedGraph");
  if (next.device() != device_)
    return fail(errc::wrong_device, fmt::format("update_from: graph of device {} cannot take a capture of device {}",
                                                device_, next.device()));
  auto ended = next.finish(nullptr);
  if (!ended) return fail(ended.error());
  auto outcome = exec_.update(ended->graph);
  if (!outcome) return fail(outcome.error());
  GraphUpdate u;
  u.cuda_result = outcome->result;
  if (outcome->updated) {
    // CUDA replaces the exec's user-object references with those of the new source graph and keeps the
    // old ones until launches in flight finished, so the previous pool outlives its last replay.
    u.in_place = true;
  } else {
    auto exec = gpu::GraphExec::instantiate(ended->graph);
    if (!exec) return fail(exec.error());
    exec_ = std::move(*exec);
    uploaded_ = false;
    u.topology_changed = outcome->topology_changed;
  }
  graph_ = std::move(ended->graph);
  pool_ = std::move(ended->pool);
  stamp_ = std::move(ended->stamp);
  reads_ = std::move(ended->reads);
  writes_ = std::move(ended->writes);
  return u;
}

}  // namespace cuactor::graph
