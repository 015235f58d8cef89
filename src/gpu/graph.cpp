#include "cuactor/gpu/graph.hpp"

#include <fmt/format.h>

#include <utility>

#include "cuactor/gpu/check.hpp"

namespace cuactor::gpu {

cudaStreamCaptureMode to_cuda(CaptureMode mode) noexcept {
  switch (mode) {
    case CaptureMode::global:
      return cudaStreamCaptureModeGlobal;
    case CaptureMode::per_thread:
      return cudaStreamCaptureModeThreadLocal;
    case CaptureMode::relaxed:
      return cudaStreamCaptureModeRelaxed;
  }
  return cudaStreamCaptureModeGlobal;
}

const char* to_string(CaptureMode mode) noexcept {
  switch (mode) {
    case CaptureMode::global:
      return "global";
    case CaptureMode::per_thread:
      return "thread-local";
    case CaptureMode::relaxed:
      return "relaxed";
  }
  return "unknown";
}

Result<CaptureState> capture_state(cudaStream_t stream) {
  cudaStreamCaptureStatus status{};
  unsigned long long id = 0;
  CUACTOR_CUDA_TRY(cudaStreamGetCaptureInfo(stream, &status, &id));
  CaptureState s;
  s.id = id;
  switch (status) {
    case cudaStreamCaptureStatusNone:
      s.status = CaptureStatus::none;
      s.id = 0;
      break;
    case cudaStreamCaptureStatusActive:
      s.status = CaptureStatus::active;
      break;
    case cudaStreamCaptureStatusInvalidated:
      s.status = CaptureStatus::invalidated;
      break;
  }
  return s;
}

ScopedCaptureMode::ScopedCaptureMode(CaptureMode mode) noexcept : previous_(to_cuda(mode)) {
  swapped_ = cudaThreadExchangeStreamCaptureMode(&previous_) == cudaSuccess;
}

ScopedCaptureMode::~ScopedCaptureMode() {
  if (swapped_) (void)cudaThreadExchangeStreamCaptureMode(&previous_);
}

Result<Graph> Graph::create() {
  Graph g;
  CUACTOR_CUDA_TRY(cudaGraphCreate(&g.graph_, 0));
  return g;
}

Graph Graph::adopt(cudaGraph_t graph) noexcept {
  Graph g;
  g.graph_ = graph;
  return g;
}

Graph::Graph(Graph&& o) noexcept : graph_(std::exchange(o.graph_, nullptr)) {}

Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    if (graph_) (void)cudaGraphDestroy(graph_);
    graph_ = std::exchange(o.graph_, nullptr);
  }
  return *this;
}

Graph::~Graph() {
  if (graph_) (void)cudaGraphDestroy(graph_);
}

Result<std::size_t> Graph::node_count() const {
  if (!graph_) return fail(errc::invalid_argument, "node_count of an empty Graph");
  std::size_t n = 0;
  CUACTOR_CUDA_TRY(cudaGraphGetNodes(graph_, nullptr, &n));
  return n;
}

Status Graph::write_dot(const std::string& path, bool verbose) const {
  if (!graph_) return fail(errc::invalid_argument, fmt::format("write_dot('{}') of an empty Graph", path));
  const unsigned flags = verbose ? static_cast<unsigned>(cudaGraphDebugDotFlagsVerbose) : 0U;
  return check(cudaGraphDebugDotPrint(graph_, path.c_str(), flags), fmt::format("cudaGraphDebugDotPrint('{}')", path));
}

Status begin_stream_capture(cudaStream_t stream, CaptureMode mode) {
  if (stream == nullptr)
    return fail(errc::invalid_argument,
                "begin_stream_capture: stream is null; the legacy default stream cannot capture");
  auto state = capture_state(stream);
  if (!state) return fail(state.error());
  if (state->status != CaptureStatus::none)
    return fail(errc::invalid_argument,
                fmt::format("begin_stream_capture: stream {} is already capturing (capture id {})",
                            static_cast<const void*>(stream), state->id));
  return check(cudaStreamBeginCapture(stream, to_cuda(mode)),
               fmt::format("cudaStreamBeginCapture(mode {})", to_string(mode)));
}

Result<Graph> end_stream_capture(cudaStream_t stream) {
  cudaGraph_t raw = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream, &raw);
  Graph g = Graph::adopt(raw);
  if (e == cudaErrorStreamCaptureInvalidated) {
    // The illegal call already reported its own error; capture errors are not sticky, so clear it
    // so that the stream's next user does not see a stale failure.
    (void)cudaGetLastError();
    return fail(errc::capture_invalidated,
                "end_capture: an illegal call during capture (synchronisation, allocation in global or "
                "thread-local mode, a wait across captures, ...) invalidated it; the stream is usable again");
  }
  CUACTOR_TRY(check(e, "cudaStreamEndCapture"));
  if (!g) return fail(errc::internal, "cudaStreamEndCapture succeeded but returned no graph");
  return g;
}

const char* to_string(cudaGraphExecUpdateResult result) noexcept {
  switch (result) {
    case cudaGraphExecUpdateSuccess:
      return "success";
    case cudaGraphExecUpdateError:
      return "error";
    case cudaGraphExecUpdateErrorTopologyChanged:
      return "topology changed";
    case cudaGraphExecUpdateErrorNodeTypeChanged:
      return "node type changed";
    case cudaGraphExecUpdateErrorFunctionChanged:
      return "kernel function changed";
    case cudaGraphExecUpdateErrorParametersChanged:
      return "parameters changed unsupportedly";
    case cudaGraphExecUpdateErrorNotSupported:
      return "node not supported by update";
    case cudaGraphExecUpdateErrorUnsupportedFunctionChange:
      return "unsupported kernel function change";
    case cudaGraphExecUpdateErrorAttributesChanged:
      return "node attributes changed";
  }
  return "unknown";
}

Result<GraphExec> GraphExec::instantiate(const Graph& graph, unsigned long long flags) {
  if (!graph) return fail(errc::invalid_argument, "instantiate of an empty Graph");
  GraphExec x;
  CUACTOR_TRY(check(cudaGraphInstantiate(&x.exec_, graph.get(), flags),
                    fmt::format("cudaGraphInstantiate(flags {:#x})", flags)));
  return x;
}

GraphExec::GraphExec(GraphExec&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}

GraphExec& GraphExec::operator=(GraphExec&& o) noexcept {
  if (this != &o) {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}

GraphExec::~GraphExec() {
  if (exec_) (void)cudaGraphExecDestroy(exec_);
}

Status GraphExec::launch(cudaStream_t stream) const {
  if (!exec_) return fail(errc::invalid_argument, "launch of an empty GraphExec");
  return check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
}

Status GraphExec::upload(cudaStream_t stream) const {
  if (!exec_) return fail(errc::invalid_argument, "upload of an empty GraphExec");
  return check(cudaGraphUpload(exec_, stream), "cudaGraphUpload");
}

Result<ExecUpdateOutcome> GraphExec::update(const Graph& graph) const {
  if (!exec_ || !graph) return fail(errc::invalid_argument, "update needs a non-empty GraphExec and Graph");
  cudaGraphExecUpdateResultInfo info{};
  const cudaError_t e = cudaGraphExecUpdate(exec_, graph.get(), &info);
  ExecUpdateOutcome out;
  out.result = info.result;
  if (e == cudaSuccess) {
    out.updated = true;
    return out;
  }
  if (e != cudaErrorGraphExecUpdateFailure) return fail(make_error(e, "cudaGraphExecUpdate"));
  // A refused update is an answer, not a failure: the exec keeps its previous parameters.
  (void)cudaGetLastError();
  out.topology_changed =
      info.result == cudaGraphExecUpdateErrorTopologyChanged || info.result == cudaGraphExecUpdateErrorNodeTypeChanged;
  return out;
}

Result<UserObject> UserObject::create(void* payload, cudaHostFn_t destroy) {
  if (destroy == nullptr) return fail(errc::invalid_argument, "UserObject::create: destroy callback is null");
  UserObject u;
  CUACTOR_CUDA_TRY(cudaUserObjectCreate(&u.object_, payload, destroy, 1, cudaUserObjectNoDestructorSync));
  return u;
}

UserObject::UserObject(UserObject&& o) noexcept : object_(std::exchange(o.object_, nullptr)) {}

UserObject& UserObject::operator=(UserObject&& o) noexcept {
  if (this != &o) {
    if (object_) (void)cudaUserObjectRelease(object_, 1);
    object_ = std::exchange(o.object_, nullptr);
  }
  return *this;
}

UserObject::~UserObject() {
  if (object_) (void)cudaUserObjectRelease(object_, 1);
}

Status UserObject::retain_by(const Graph& graph) const {
  if (!object_ || !graph) return fail(errc::invalid_argument, "retain_by needs a non-empty UserObject and Graph");
  return check(cudaGraphRetainUserObject(graph.get(), object_, 1, 0), "cudaGraphRetainUserObject");
}

Status UserObject::move_into(const Graph& graph) {
  if (!object_ || !graph) return fail(errc::invalid_argument, "move_into needs a non-empty UserObject and Graph");
  const cudaError_t e = cudaGraphRetainUserObject(graph.get(), object_, 1, cudaGraphUserObjectMove);
  if (e != cudaSuccess) {
    (void)cudaUserObjectRelease(std::exchange(object_, nullptr), 1);
    return fail(make_error(e, "cudaGraphRetainUserObject(move)"));
  }
  object_ = nullptr;
  return ok();
}

}  // namespace cuactor::gpu
