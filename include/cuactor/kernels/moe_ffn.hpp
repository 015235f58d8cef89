/// @file
/// The mixture-of-experts expert FFN ([K8], [K6]): for tokens already grouped by expert (rows of
/// expert e are offsets[e-1]..offsets[e]),
///   h   = x W_gate_up[e]^T          (grouped GEMM, 2F columns)
///   a   = silu(gate) * up           (SwiGLU)
///   out = w * (a W_down[e]^T)        (grouped GEMM, the routing weight w[t] of each row fused into the
///                                     epilogue as the tree mul(acc,rowscale))
/// with the group sizes in device memory (no host synchronisation, capturable: one captured graph
/// serves every routing). Life cycle as for every plan: create(spec) -> workspace_size() ->
/// run(tensors, workspace, stream), which allocates nothing and does not synchronise.
///
/// Where the SwiGLU runs depends on the gate/up weight layout (GateUpLayout):
/// - stacked (nn.Linear's, torch's `h[:, :F]` and `h[:, F:]`): gate[t, f] and up[t, f] are F columns
///   apart, in different output tiles, so h (T x 2F) is written and one elementwise kernel pairs them;
/// - interleaved (row 2f gate f, row 2f + 1 up f; interleave_gate_up() converts once, at load time):
///   each pair is two adjacent accumulator columns of one thread, and the first GEMM's epilogue tree
///   swiglu(acc) writes `a` directly (h never exists); SwigluPlacement says where that is chosen.
///   Under automatic, other devices and builds without the fused kernel take the elementwise kernel on
///   the interleaved h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/dtype.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"

namespace cuactor::kernels {

/// How the gate and up projections share the E x 2F x H weight tensor.
enum class GateUpLayout : std::uint8_t {
  stacked,      ///< Per expert rows [0, F) gate, [F, 2F) up (nn.Linear's and torch's layout).
  interleaved,  ///< Per expert row 2f gate f, row 2f + 1 up f: the SwiGLU fuses into the first GEMM.
};

/// Where the SwiGLU between the two GEMMs runs.
enum class SwigluPlacement : std::uint8_t {
  automatic,  ///< In the first GEMM's epilogue if the catalog has the swiglu form of the separate GEMM's kernel.
  epilogue,   ///< In the first GEMM's epilogue: that swiglu kernel, else any of the dtype (interleaved weights only).
  separate,   ///< One elementwise kernel over h (T x 2F), which the first GEMM writes.
};

/// What an expert FFN computes and where it runs.
struct MoeFfnSpec {
  DType dtype = DType::bf16;       ///< Element of x, the weights, the intermediates and out (bf16 or f16).
  int hidden = 0;                  ///< H: columns of x and out (multiple of 8).
  int ffn = 0;                     ///< F: the expert's intermediate width (multiple of 8).
  int experts = 0;                 ///< E: number of experts (groups).
  std::int64_t capacity_rows = 0;  ///< T: rows of x, out and the routing weights (tokens x top-k slots).
  bool weighted = true;            ///< Scale each output row by its routing weight (else weight 1).
  GpuArch arch{9, 0, true};        ///< Best target of the device.
  int sm_count = 0;                ///< Its multiprocessor count.
  int device = 0;                  ///< Its ordinal.
  int rows_per_expert_hint = 0;    ///< Typical rows per expert (0 = unknown); with H and F, the size class.
  GateUpLayout gate_up_layout = GateUpLayout::stacked;  ///< Row order of w_gate_up.
  SwigluPlacement swiglu = SwigluPlacement::automatic;  ///< Where the SwiGLU runs.
  friend bool operator==(const MoeFfnSpec&, const MoeFfnSpec&) = default;
};
/// Hash of every field of `spec` (plan caches key on the whole spec).
std::size_t hash_value(const MoeFfnSpec& spec) noexcept;

/// Device pointers of one expert FFN launch.
struct MoeFfnTensors {
  const void* x = nullptr;                 ///< T x H, row-major, rows grouped by expert.
  const void* w_gate_up = nullptr;         ///< E x 2F x H, rows in the spec's GateUpLayout.
  const void* w_down = nullptr;            ///< E x H x F (nn.Linear layout).
  const std::int32_t* offsets = nullptr;   ///< E cumulative end rows in device memory (torch `offs`).
  const float* routing_weights = nullptr;  ///< T floats (weighted specs), the weight of each row.
  void* out = nullptr;                     ///< T x H; rows past offsets[E-1] are not written.
};

/// Copies E x 2F x H gate/up weights from the stacked layout (`src`) into the interleaved one (`dst`):
/// dst row 2f of expert e is src row f (gate), dst row 2f + 1 is src row F + f (up). Two strided 3-D
/// copies on `stream`, no allocation; a one-time conversion when weights are loaded. `unsupported` for
/// a dtype other than bf16 / f16 (as MoeExpertFfn::create), `invalid_argument` for sizes below 1, null
/// pointers or overlapping buffers.
Status interleave_gate_up(DType dtype, const void* src, void* dst, int experts, int ffn, int hidden,
                          cudaStream_t stream);

/// An expert FFN plan: two grouped GEMM plans and the SwiGLU between them. Host only, cheap to copy.
class MoeExpertFfn {
 public:
  /// Checks `spec` (`invalid_argument` naming the field and the rule; SwigluPlacement::epilogue with
  /// stacked weights is one) and chooses both GEMMs' kernels (`unsupported` when the build has none for
  /// the dtype on this device, or, under SwigluPlacement::epilogue, no swiglu kernel for it).
  static Result<MoeExpertFfn> create(const MoeFfnSpec& spec);

  /// Device workspace bytes run() needs: the intermediates (T x F, and T x 2F unless the SwiGLU is
  /// fused) and both GEMMs' metadata.
  [[nodiscard]] std::size_t workspace_size() const noexcept { return workspace_size_; }
  /// The specification this plan was made for.
  [[nodiscard]] const MoeFfnSpec& spec() const noexcept { return spec_; }
  /// The SKUs of the gate/up and down GEMMs.
  [[nodiscard]] const GemmSku& gate_up_sku() const noexcept { return gate_up_.sku(); }
  [[nodiscard]] const GemmSku& down_sku() const noexcept { return down_.sku(); }
  /// True when the first GEMM's epilogue computes the SwiGLU (see SwigluPlacement); false when a
  /// separate kernel does.
  [[nodiscard]] bool fused_swiglu() const noexcept { return fused_; }

  /// Validates `tensors` (non-null, 16-byte aligned; `invalid_argument` naming the tensor) and enqueues
  /// the two GEMMs, the SwiGLU kernel unless fused, and the GEMMs' argument builders on `stream`. `workspace` must be
  /// 256-byte aligned device memory of workspace_size() bytes. Rows whose offsets are out of range are
  /// skipped and flagged as in grouped GEMM (routing_error_flag).
  Status run(const MoeFfnTensors& tensors, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) const;

 private:
  MoeExpertFfn(MoeFfnSpec spec, GroupedGemmPlan gate_up, GroupedGemmPlan down, std::size_t gate_up_ws,
               std::size_t down_ws);

  MoeFfnSpec spec_;
  bool fused_ = false;
  GroupedGemmPlan gate_up_;
  GroupedGemmPlan down_;
  std::size_t h_offset_ = 0, act_offset_ = 0, gate_up_ws_offset_ = 0, down_ws_offset_ = 0;
  std::size_t gate_up_ws_ = 0, down_ws_ = 0, workspace_size_ = 0;
};

}  // namespace cuactor::kernels

/// Lets MoeFfnSpec key unordered containers.
template <>
struct std::hash<cuactor::kernels::MoeFfnSpec> {
  std::size_t operator()(const cuactor::kernels::MoeFfnSpec& s) const noexcept { return hash_value(s); }
};
