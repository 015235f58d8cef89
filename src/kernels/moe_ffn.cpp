// The expert FFN: gate/up grouped GEMM -> SwiGLU (in its epilogue, or a kernel) -> down grouped GEMM with
// the routing weights fused.
#include "cuactor/kernels/moe_ffn.hpp"

#include <fmt/format.h>

#include <boost/container_hash/hash.hpp>
#include <climits>
#include <optional>
#include <utility>

#include "cuactor/core/nvtx.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "kernels/gemm_geometry.hpp"
#include "kernels/grouped_layout.hpp"
#include "kernels/moe_launch.hpp"

namespace cuactor::kernels {
namespace {

using detail::aligned16;
constexpr std::size_t kAlign = detail::kWorkspaceAlignment;

std::size_t align_up(std::size_t v) {
  return detail::align_up(v, kAlign);
}

/// The device-sized groups of one of the two GEMMs (x -> h or act, act -> out): n columns computed,
/// `d_columns` of them stored (n / 2 under the fused SwiGLU).
DeviceSizedGroups groups_of(const MoeFfnSpec& s, const std::int32_t* offsets, const void* a, int k, const void* b,
                            int n, void* d, int d_columns) {
  return packed_device_groups(s.experts, offsets, s.capacity_rows, n, k, a, b, d, d_columns);
}

/// The spec of the gate/up GEMM (`down` false; `fused`: its epilogue is the SwiGLU) or the down GEMM.
GroupedGemmSpec gemm_spec(const MoeFfnSpec& s, bool down, bool fused) {
  GroupedGemmSpec g;
  g.a = g.b = g.d = s.dtype;
  g.layout_b = MatrixLayout::col;
  g.arch = s.arch;
  g.sm_count = s.sm_count;
  g.device = s.device;
  g.rows_per_group_hint = s.rows_per_expert_hint;
  // gate/up: (rows x H) x (H x 2F); down: (rows x F) x (F x H). The shapes pick the size class.
  g.group_count_hint = shape_hint(s.experts);
  g.n_hint = shape_hint(down ? s.hidden : 2 * static_cast<std::int64_t>(s.ffn));
  g.k_hint = shape_hint(down ? s.ffn : s.hidden);
  if (down && s.weighted) g.epilogue = epi::mul(epi::acc(), epi::row_scale());
  if (!down && fused) g.epilogue = epi::apply(EpilogueNode::swiglu, epi::acc());
  return g;
}

/// Workspace bytes of a plan's device-sized launch (prepare() of device-sized groups reads no
/// memory: fake, aligned addresses stand in for the tensors).
Result<std::size_t> grouped_workspace(const GroupedGemmPlan& plan, const MoeFfnSpec& s, int k, int n, bool weighted) {
  auto* fake = reinterpret_cast<void*>(std::uintptr_t{1} << 20);
  const auto d_columns = static_cast<int>(output_columns(plan.spec().epilogue, n));
  DeviceSizedGroups g = groups_of(s, static_cast<const std::int32_t*>(fake), fake, k, fake, n, fake, d_columns);
  if (weighted) g.epilogue.row_scale = static_cast<const float*>(fake);
  auto prepared = plan.prepare(g);
  if (!prepared) return fail(prepared.error());
  return prepared->workspace_size();
}

}  // namespace

std::size_t hash_value(const MoeFfnSpec& s) noexcept {
  std::size_t h = 0;
  for (long long v : {static_cast<long long>(s.dtype), static_cast<long long>(s.hidden), static_cast<long long>(s.ffn),
                      static_cast<long long>(s.experts), static_cast<long long>(s.capacity_rows),
                      static_cast<long long>(s.weighted), static_cast<long long>(s.arch.sm()),
                      static_cast<long long>(s.arch.arch_specific), static_cast<long long>(s.sm_count),
                      static_cast<long long>(s.device), static_cast<long long>(s.rows_per_expert_hint),
                      static_cast<long long>(s.gate_up_layout), static_cast<long long>(s.swiglu)})
    boost::hash_combine(h, v);
  return h;
}

MoeExpertFfn::MoeExpertFfn(MoeFfnSpec spec, GroupedGemmPlan gate_up, GroupedGemmPlan down, std::size_t gate_up_ws,
                           std::size_t down_ws)
    : spec_(spec),
      fused_(pairs_columns(gate_up.spec().epilogue)),
      gate_up_(std::move(gate_up)),
      down_(std::move(down)),
      gate_up_ws_(gate_up_ws),
      down_ws_(down_ws) {
  const std::size_t elem = static_cast<std::size_t>(size_bits(spec_.dtype) / 8);
  const auto t = static_cast<std::size_t>(spec_.capacity_rows), f = static_cast<std::size_t>(spec_.ffn);
  std::size_t at = 0;
  h_offset_ = at;
  if (!fused_) at = align_up(at + t * 2 * f * elem);  // the fused SwiGLU never writes h
  act_offset_ = at;
  at = align_up(at + t * f * elem);
  gate_up_ws_offset_ = at;
  at = align_up(at + gate_up_ws_);
  down_ws_offset_ = at;
  workspace_size_ = at + down_ws_;
}

Result<MoeExpertFfn> MoeExpertFfn::create(const MoeFfnSpec& s) {
  const nvtx::Range range("moe_ffn.plan");
  if (s.dtype != DType::bf16 && s.dtype != DType::f16)
    return fail(errc::unsupported, fmt::format("expert FFN: dtype={} is not supported (bf16 or f16)", name(s.dtype)));
  if (s.hidden <= 0 || s.ffn <= 0 || s.experts <= 0 || s.capacity_rows < 0)
    return fail(errc::invalid_argument,
                fmt::format("expert FFN: hidden={}, ffn={}, experts={} must be >= 1 and capacity_rows={} >= 0",
                            s.hidden, s.ffn, s.experts, s.capacity_rows));
  if (s.hidden % 8 != 0 || s.ffn % 8 != 0)
    return fail(errc::invalid_argument,
                fmt::format("expert FFN: hidden={} and ffn={} must be multiples of 8 (16-byte rows)", s.hidden, s.ffn));
  if (s.ffn > INT_MAX / 2 || s.capacity_rows > INT_MAX)
    return fail(errc::invalid_argument, fmt::format("expert FFN: 2 * ffn={} and capacity_rows={} must fit in int32",
                                                    2 * static_cast<std::int64_t>(s.ffn), s.capacity_rows));
  if (s.swiglu == SwigluPlacement::epilogue && s.gate_up_layout != GateUpLayout::interleaved)
    return fail(errc::invalid_argument,
                "expert FFN: swiglu=epilogue needs gate_up_layout=interleaved (the stacked layout puts gate f and up "
                "f F columns apart, in different tiles; interleave_gate_up converts)");
  // automatic fuses where the catalog has the swiglu form of the kernel the separate GEMM runs: with
  // the quad-transposed stores of the swiglu root the fused FFN measured faster in every size class
  // (H100, bench/moe_ffn_torch.py: 1.00-1.09x the separate kernel, the cooperative Mixtral-like
  // prefill 1.045x). Another kernel shape just to fuse is not assumed to pay; epilogue takes one.
  const GroupedGemmSpec separate = gemm_spec(s, false, false);
  auto gate_up = GroupedGemmPlan::create(separate);
  if (s.gate_up_layout == GateUpLayout::interleaved && s.swiglu != SwigluPlacement::separate) {
    const GroupedGemmSpec fused = gemm_spec(s, false, true);
    std::optional<GemmSku> same_kernel;
    if (gate_up) {
      GemmSku sku = gate_up->sku();
      sku.epilogue = fused.epilogue;
      if (find_in_catalog(sku) != nullptr) same_kernel = sku;
    }
    if (same_kernel) {
      GroupedGemmSpec pinned = fused;
      pinned.sku_override = same_kernel;
      gate_up = GroupedGemmPlan::create(pinned);
    } else if (s.swiglu == SwigluPlacement::epilogue) {
      gate_up = GroupedGemmPlan::create(fused);  // any swiglu kernel of the dtype
    }
  }
  if (!gate_up) return fail(gate_up.error());
  auto down = GroupedGemmPlan::create(gemm_spec(s, true, false));
  if (!down) return fail(down.error());
  auto gate_up_ws = grouped_workspace(*gate_up, s, s.hidden, 2 * s.ffn, false);
  if (!gate_up_ws) return fail(gate_up_ws.error());
  auto down_ws = grouped_workspace(*down, s, s.ffn, s.hidden, s.weighted);
  if (!down_ws) return fail(down_ws.error());
  return MoeExpertFfn(s, std::move(*gate_up), std::move(*down), *gate_up_ws, *down_ws);
}

Status MoeExpertFfn::run(const MoeFfnTensors& t, void* workspace, std::size_t workspace_bytes,
                         cudaStream_t stream) const {
  const nvtx::Range range("moe_ffn.run");
  const std::pair<const char*, const void*> tensors[] = {
      {"x", t.x}, {"w_gate_up", t.w_gate_up}, {"w_down", t.w_down}, {"offsets", t.offsets}, {"out", t.out}};
  for (const auto& [what, ptr] : tensors) {
    if (ptr == nullptr) return fail(errc::invalid_argument, fmt::format("expert FFN: {} is null", what));
    if (!aligned16(ptr))
      return fail(errc::invalid_argument, fmt::format("expert FFN: {}={} is not 16-byte aligned", what, fmt::ptr(ptr)));
  }
  if (spec_.weighted != (t.routing_weights != nullptr))
    return fail(errc::invalid_argument,
                fmt::format("expert FFN: routing_weights {} but the plan is {}weighted",
                            t.routing_weights != nullptr ? "given" : "missing", spec_.weighted ? "" : "not "));
  if (t.routing_weights != nullptr && !aligned16(t.routing_weights))
    return fail(errc::invalid_argument, "expert FFN: routing_weights is not 16-byte aligned");
  if (workspace_bytes < workspace_size_)
    return fail(errc::workspace_too_small,
                fmt::format("expert FFN: workspace of {} bytes, needs {}", workspace_bytes, workspace_size_));
  if (workspace == nullptr || reinterpret_cast<std::uintptr_t>(workspace) % kAlign != 0)
    return fail(errc::invalid_argument, "expert FFN: workspace must be 256-byte aligned device memory");
  if (spec_.capacity_rows == 0) return ok();
  auto* ws = static_cast<std::byte*>(workspace);
  void* h = ws + h_offset_;
  void* act = ws + act_offset_;
  // Host-only preparation (no CUDA calls): the groups name this call's tensors and workspace.
  const int two_f = 2 * spec_.ffn;
  auto first =
      gate_up_.prepare(fused_ ? groups_of(spec_, t.offsets, t.x, spec_.hidden, t.w_gate_up, two_f, act, spec_.ffn)
                              : groups_of(spec_, t.offsets, t.x, spec_.hidden, t.w_gate_up, two_f, h, two_f));
  if (!first) return fail(first.error());
  CUACTOR_TRY(first->run(stream, ws + gate_up_ws_offset_, gate_up_ws_));
  if (!fused_)
    CUACTOR_TRY(gpu::check(detail::launch_swiglu(spec_.dtype, h, act, t.offsets, spec_.experts, spec_.capacity_rows,
                                                 spec_.ffn, spec_.gate_up_layout == GateUpLayout::interleaved,
                                                 (spec_.sm_count > 0 ? spec_.sm_count : 132) * 8, stream),
                           "expert FFN: SwiGLU"));
  DeviceSizedGroups second = groups_of(spec_, t.offsets, act, spec_.ffn, t.w_down, spec_.hidden, t.out, spec_.hidden);
  second.epilogue.row_scale = t.routing_weights;
  auto down = down_.prepare(second);
  if (!down) return fail(down.error());
  return down->run(stream, ws + down_ws_offset_, down_ws_);
}

Status interleave_gate_up(DType dtype, const void* src, void* dst, int experts, int ffn, int hidden,
                          cudaStream_t stream) {
  if (dtype != DType::bf16 && dtype != DType::f16)
    return fail(errc::unsupported,
                fmt::format("interleave_gate_up: dtype={} is not supported (bf16 or f16)", name(dtype)));
  if (experts <= 0 || ffn <= 0 || hidden <= 0)
    return fail(errc::invalid_argument,
                fmt::format("interleave_gate_up: experts={}, ffn={}, hidden={} must be >= 1", experts, ffn, hidden));
  if (src == nullptr || dst == nullptr)
    return fail(errc::invalid_argument, "interleave_gate_up: src and dst must not be null");
  const std::size_t row = static_cast<std::size_t>(hidden) * static_cast<std::size_t>(size_bits(dtype) / 8);
  const std::size_t bytes = row * 2 * static_cast<std::size_t>(ffn) * static_cast<std::size_t>(experts);
  if (detail::bytes_overlap(src, bytes, dst, bytes))
    return fail(errc::invalid_argument,
                fmt::format("interleave_gate_up: src={} and dst={} overlap ({} bytes each)", src, dst, bytes));
  // Per expert, the F gate rows go to even destination rows and the F up rows to odd ones: as 3-D
  // copies, x = the row's bytes, y = f, z = the expert; the source pitch is one row over 2F rows per
  // expert, the destination pitch two rows over F row pairs per expert.
  for (int half = 0; half < 2; ++half) {
    cudaMemcpy3DParms p{};
    const auto f = static_cast<std::size_t>(ffn);
    p.srcPtr = cudaPitchedPtr{const_cast<void*>(src), row, row, 2 * f};
    p.srcPos = cudaPos{0, static_cast<std::size_t>(half) * f, 0};
    p.dstPtr = cudaPitchedPtr{static_cast<char*>(dst) + static_cast<std::size_t>(half) * row, 2 * row, row, f};
    p.extent = cudaExtent{row, f, static_cast<std::size_t>(experts)};
    p.kind = cudaMemcpyDeviceToDevice;
    CUACTOR_TRY(gpu::check(cudaMemcpy3DAsync(&p, stream), "interleave_gate_up: copy"));
  }
  return ok();
}

}  // namespace cuactor::kernels
