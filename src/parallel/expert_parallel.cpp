// The expert-parallel MoE layer: all-gather dispatch, local routing and expert FFN, reduce-scatter
// combine (expert_parallel.hpp).
#include "cuactor/parallel/expert_parallel.hpp"

#include <fmt/format.h>

#include <climits>
#include <cstdint>

#include "cuactor/core/nvtx.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "kernels/gemm_geometry.hpp"
#include "kernels/grouped_layout.hpp"
#include "parallel/expert_routing.hpp"

namespace cuactor::parallel {
namespace {

using kernels::detail::aligned16;
constexpr std::size_t kAlign = kernels::detail::kWorkspaceAlignment;
// Local experts per rank the routing histogram keeps in shared memory (4 bytes each).
constexpr int kMaxLocalExperts = 8192;

// The fields every rank of one layer shares (NCCL's counts follow from them).
bool same_layer(const ExpertParallelSpec& a, const ExpertParallelSpec& b) {
  return a.dtype == b.dtype && a.hidden == b.hidden && a.ffn == b.ffn && a.experts == b.experts && a.top_k == b.top_k &&
         a.tokens_per_rank == b.tokens_per_rank && a.ranks == b.ranks;
}

}  // namespace

struct ExpertParallelMoe::Buffers {
  const void* x = nullptr;  // gathered tokens (this rank's x when R = 1)
  const std::int32_t* ids = nullptr;
  const float* weights = nullptr;
  void* gathered_x = nullptr;
  std::int32_t* gathered_ids = nullptr;
  float* gathered_weights = nullptr;
  detail::LocalRouting routing;
  void* expert_x = nullptr;
  void* expert_y = nullptr;
  void* partial = nullptr;  // per-token sums of the local experts (the output itself when R = 1)
  void* ffn_workspace = nullptr;
};

ExpertParallelMoe::ExpertParallelMoe(ExpertParallelSpec spec, kernels::MoeExpertFfn ffn)
    : spec_(spec), ffn_(std::move(ffn)), capacity_rows_(ffn_.spec().capacity_rows) {
  const std::size_t elem = static_cast<std::size_t>(size_bits(spec_.dtype) / 8);
  const auto gathered = static_cast<std::size_t>(spec_.ranks) * static_cast<std::size_t>(spec_.tokens_per_rank);
  const std::size_t slots = gathered * static_cast<std::size_t>(spec_.top_k);
  const auto hidden = static_cast<std::size_t>(spec_.hidden);
  const auto capacity = static_cast<std::size_t>(capacity_rows_);
  const bool remote = spec_.ranks > 1;
  std::size_t at = 0;
  auto take = [&at](std::size_t bytes) {
    const std::size_t offset = at;
    at = kernels::detail::align_up(at + bytes, kAlign);
    return offset;
  };
  gathered_x_ = take(remote ? gathered * hidden * elem : 0);
  gathered_ids_ = take(remote ? slots * sizeof(std::int32_t) : 0);
  gathered_weights_ = take(remote ? slots * sizeof(float) : 0);
  meta_ = take((3 * static_cast<std::size_t>(local_experts()) + 1) * sizeof(std::int32_t));
  pair_rows_ = take(slots * sizeof(std::int32_t));
  row_tokens_ = take(capacity * sizeof(std::int32_t));
  row_weights_ = take(capacity * sizeof(float));
  expert_x_ = take(capacity * hidden * elem);
  expert_y_ = take(capacity * hidden * elem);
  partial_ = take(remote ? gathered * hidden * elem : 0);
  ffn_workspace_ = take(ffn_.workspace_size());
  workspace_size_ = at;
}

Result<ExpertParallelMoe> ExpertParallelMoe::create(const ExpertParallelSpec& s) {
  const nvtx::Range range("expert_parallel.plan");
  if (s.ranks < 1 || s.rank < 0 || s.rank >= s.ranks)
    return fail(errc::invalid_argument,
                fmt::format("expert parallel: rank={} must be in [0, ranks={}) and ranks >= 1", s.rank, s.ranks));
  if (s.experts < 1 || s.experts % s.ranks != 0)
    return fail(errc::invalid_argument,
                fmt::format("expert parallel: experts={} must be a positive multiple of ranks={} (equal shares)",
                            s.experts, s.ranks));
  if (s.experts / s.ranks > kMaxLocalExperts)
    return fail(errc::unsupported, fmt::format("expert parallel: {} experts per rank, at most {} are supported",
                                               s.experts / s.ranks, kMaxLocalExperts));
  if (s.top_k < 1 || s.top_k > s.experts)
    return fail(errc::invalid_argument,
                fmt::format("expert parallel: top_k={} must be in [1, experts={}]", s.top_k, s.experts));
  if (s.tokens_per_rank < 1)
    return fail(errc::invalid_argument,
                fmt::format("expert parallel: tokens_per_rank={} must be at least 1", s.tokens_per_rank));
  if (s.hidden <= 0 || s.hidden % 8 != 0)
    return fail(errc::invalid_argument,
                fmt::format("expert parallel: hidden={} must be a positive multiple of 8 (16-byte rows)", s.hidden));
  // Every (token, slot) of the gathered batch may land here, and rows are int32 on the device.
  const std::int64_t slots = static_cast<std::int64_t>(s.ranks) * s.tokens_per_rank * s.top_k;
  if (slots > INT_MAX)
    return fail(errc::invalid_argument,
                fmt::format("expert parallel: ranks * tokens_per_rank * top_k = {} must fit in int32", slots));
  kernels::MoeFfnSpec f;
  f.dtype = s.dtype;
  f.hidden = s.hidden;
  f.ffn = s.ffn;
  f.experts = s.experts / s.ranks;
  f.capacity_rows = slots;
  f.weighted = true;
  f.gate_up_layout = s.gate_up_layout;
  f.arch = s.arch;
  f.sm_count = s.sm_count;
  f.device = s.device;
  // Under balanced routing each expert receives tokens * k / E rows of the whole batch.
  f.rows_per_expert_hint = static_cast<int>(slots / s.experts);
  auto ffn = kernels::MoeExpertFfn::create(f);
  if (!ffn) return fail(ffn.error());
  return ExpertParallelMoe(s, std::move(*ffn));
}

const std::int32_t* ExpertParallelMoe::routing_error_count(const void* workspace) const noexcept {
  return reinterpret_cast<const std::int32_t*>(static_cast<const std::byte*>(workspace) + meta_) +
         3 * static_cast<std::size_t>(local_experts());
}

Status ExpertParallelMoe::check(const Communicator& comm, const ExpertParallelTensors& t, const void* workspace,
                                std::size_t workspace_bytes) const {
  if (comm.size() != spec_.ranks || comm.rank() != spec_.rank)
    return fail(
        errc::invalid_argument,
        fmt::format("expert parallel: the communicator is rank {} of {}, the layer was planned for rank {} of {}",
                    comm.rank(), comm.size(), spec_.rank, spec_.ranks));
  if (comm.device() != spec_.device)
    return fail(errc::wrong_device, fmt::format("expert parallel: the communicator runs on device {}, the layer on {}",
                                                comm.device(), spec_.device));
  const std::pair<const char*, const void*> tensors[] = {{"x", t.x},
                                                         {"expert_ids", t.expert_ids},
                                                         {"routing_weights", t.routing_weights},
                                                         {"w_gate_up", t.w_gate_up},
                                                         {"w_down", t.w_down},
                                                         {"out", t.out}};
  for (const auto& [what, ptr] : tensors) {
    if (ptr == nullptr) return fail(errc::invalid_argument, fmt::format("expert parallel: {} is null", what));
    if (!aligned16(ptr))
      return fail(errc::invalid_argument,
                  fmt::format("expert parallel: {}={} is not 16-byte aligned", what, fmt::ptr(ptr)));
  }
  if (workspace_bytes < workspace_size_)
    return fail(errc::workspace_too_small,
                fmt::format("expert parallel: workspace of {} bytes, needs {}", workspace_bytes, workspace_size_));
  if (workspace == nullptr || reinterpret_cast<std::uintptr_t>(workspace) % kAlign != 0)
    return fail(errc::invalid_argument, "expert parallel: workspace must be 256-byte aligned device memory");
  return ok();
}

ExpertParallelMoe::Buffers ExpertParallelMoe::buffers(void* workspace, const ExpertParallelTensors& t) const {
  auto* ws = static_cast<std::byte*>(workspace);
  const bool remote = spec_.ranks > 1;
  Buffers b;
  b.gathered_x = ws + gathered_x_;
  b.gathered_ids = reinterpret_cast<std::int32_t*>(ws + gathered_ids_);
  b.gathered_weights = reinterpret_cast<float*>(ws + gathered_weights_);
  b.x = remote ? b.gathered_x : t.x;
  b.ids = remote ? b.gathered_ids : t.expert_ids;
  b.weights = remote ? b.gathered_weights : t.routing_weights;
  auto* meta = reinterpret_cast<std::int32_t*>(ws + meta_);
  const int local = local_experts();
  detail::LocalRouting& r = b.routing;
  r.expert_ids = b.ids;
  r.weights = b.weights;
  r.tokens = static_cast<std::int64_t>(spec_.ranks) * spec_.tokens_per_rank;
  r.top_k = spec_.top_k;
  r.experts = spec_.experts;
  r.first_local = first_local_expert();
  r.local_experts = local;
  r.counts = meta;
  r.offsets = meta + local;
  r.cursors = meta + 2 * local;
  r.error_count = meta + 3 * local;
  r.pair_rows = reinterpret_cast<std::int32_t*>(ws + pair_rows_);
  r.row_tokens = reinterpret_cast<std::int32_t*>(ws + row_tokens_);
  r.row_weights = reinterpret_cast<float*>(ws + row_weights_);
  b.expert_x = ws + expert_x_;
  b.expert_y = ws + expert_y_;
  b.partial = remote ? static_cast<void*>(ws + partial_) : t.out;
  b.ffn_workspace = ws + ffn_workspace_;
  return b;
}

Status ExpertParallelMoe::dispatch(Communicator& comm, const ExpertParallelTensors& t, const Buffers& b,
                                   cudaStream_t stream) const {
  if (spec_.ranks == 1) return ok();
  const auto tokens = static_cast<std::size_t>(spec_.tokens_per_rank);
  const auto slots = tokens * static_cast<std::size_t>(spec_.top_k);
  CUACTOR_TRY(comm.all_gather(t.x, b.gathered_x, tokens * static_cast<std::size_t>(spec_.hidden), spec_.dtype, stream,
                              kDispatchGather));
  CUACTOR_TRY(comm.all_gather(t.expert_ids, b.gathered_ids, slots, DType::i32, stream, kDispatchGather));
  return comm.all_gather(t.routing_weights, b.gathered_weights, slots, DType::f32, stream, kDispatchGather);
}

Status ExpertParallelMoe::compute(const ExpertParallelTensors& t, const Buffers& b, cudaStream_t stream) const {
  const detail::LocalRouting& r = b.routing;
  CUACTOR_TRY(gpu::check(detail::launch_route(r, spec_.sm_count, stream), "expert parallel: routing kernels"));
  CUACTOR_TRY(gpu::check(detail::launch_gather_rows(spec_.dtype, b.x, r.row_tokens, r.offsets, r.local_experts,
                                                    capacity_rows_, spec_.hidden, b.expert_x, spec_.sm_count, stream),
                         "expert parallel: row gather"));
  kernels::MoeFfnTensors f;
  f.x = b.expert_x;
  f.w_gate_up = t.w_gate_up;
  f.w_down = t.w_down;
  f.offsets = r.offsets;
  f.routing_weights = r.row_weights;
  f.out = b.expert_y;
  CUACTOR_TRY(ffn_.run(f, b.ffn_workspace, ffn_.workspace_size(), stream));
  return gpu::check(detail::launch_combine_rows(spec_.dtype, b.expert_y, r.pair_rows, r.tokens, spec_.top_k,
                                                spec_.hidden, b.partial, spec_.sm_count, stream),
                    "expert parallel: combine");
}

Status ExpertParallelMoe::combine(Communicator& comm, const ExpertParallelTensors& t, const Buffers& b,
                                  cudaStream_t stream) const {
  if (spec_.ranks == 1) return ok();
  return comm.reduce_scatter(b.partial, t.out,
                             static_cast<std::size_t>(spec_.tokens_per_rank) * static_cast<std::size_t>(spec_.hidden),
                             spec_.dtype, stream);
}

Status ExpertParallelMoe::run(Communicator& comm, const ExpertParallelTensors& t, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t stream) const {
  const nvtx::Range range("expert_parallel.run");
  CUACTOR_TRY(check(comm, t, workspace, workspace_bytes));
  auto device = gpu::ScopedDevice::make(spec_.device);
  if (!device) return fail(device.error());
  const Buffers b = buffers(workspace, t);
  // One NCCL group: the three gathers go out together.
  CUACTOR_TRY(Communicator::grouped(std::span(&comm, 1), [&](Communicator& c) { return dispatch(c, t, b, stream); }));
  if (Status computed = compute(t, b, stream); !computed) {
    comm.abort();  // the peers' reduce-scatter would wait for this rank forever
    return computed;
  }
  return combine(comm, t, b, stream);
}

Status ExpertParallelMoe::run_local(std::span<const ExpertParallelMoe> layers, std::span<Communicator> comms,
                                    std::span<const ExpertParallelTensors> tensors, std::span<void* const> workspaces,
                                    std::size_t workspace_bytes, std::span<const cudaStream_t> streams) {
  const nvtx::Range range("expert_parallel.run_local");
  const std::size_t n = comms.size();
  if (layers.size() != n || tensors.size() != n || workspaces.size() != n || streams.size() != n)
    return fail(
        errc::invalid_argument,
        fmt::format("expert parallel: {} communicators but {} layers, {} tensor sets, {} workspaces, {} streams", n,
                    layers.size(), tensors.size(), workspaces.size(), streams.size()));
  // Every rank of the layer takes part in each collective: a missing one would leave the others waiting.
  if (n == 0 || n != static_cast<std::size_t>(layers[0].spec_.ranks))
    return fail(errc::invalid_argument,
                fmt::format("expert parallel: run_local drives every rank of the layer: {} given, the layer has {}", n,
                            n == 0 ? 0 : layers[0].spec_.ranks));
  std::vector<Buffers> buffers;
  for (std::size_t i = 0; i < n; ++i) {
    if (!same_layer(layers[i].spec_, layers[0].spec_))
      return fail(errc::invalid_argument,
                  fmt::format("expert parallel: rank {}'s layer differs from rank 0's in dtype, sizes or ranks (every "
                              "rank must plan the same layer)",
                              i));
    if (comms[i].rank() != static_cast<int>(i))
      return fail(errc::invalid_argument,
                  fmt::format("expert parallel: communicator {} is rank {} (must be rank {})", i, comms[i].rank(), i));
    CUACTOR_TRY(layers[i].check(comms[i], tensors[i], workspaces[i], workspace_bytes));
    buffers.push_back(layers[i].buffers(workspaces[i], tensors[i]));
  }
  auto each = [&](auto&& step) {
    return Communicator::grouped(comms, [&](Communicator& c) {
      const auto i = static_cast<std::size_t>(c.rank());
      auto device = gpu::ScopedDevice::make(c.device());
      if (!device) return Status(fail(device.error()));
      return step(layers[i], tensors[i], buffers[i], streams[i], c);
    });
  };
  CUACTOR_TRY(each([](const ExpertParallelMoe& l, const ExpertParallelTensors& t, const Buffers& b, cudaStream_t s,
                      Communicator& c) { return l.dispatch(c, t, b, s); }));
  for (std::size_t i = 0; i < n; ++i) {
    auto device = gpu::ScopedDevice::make(comms[i].device());
    Status computed = device ? layers[i].compute(tensors[i], buffers[i], streams[i]) : Status(fail(device.error()));
    if (!computed) {
      for (Communicator& c : comms) c.abort();  // the dispatch is out on every rank: nothing may wait for the rest
      return computed;
    }
  }
  return each([](const ExpertParallelMoe& l, const ExpertParallelTensors& t, const Buffers& b, cudaStream_t s,
                 Communicator& c) { return l.combine(c, t, b, s); });
}

}  // namespace cuactor::parallel
