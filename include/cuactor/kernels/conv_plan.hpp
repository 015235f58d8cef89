/// @file
/// ConvPlan ([K7]): 2-D convolution forward (fprop), data gradient (dgrad) and filter gradient
/// (wgrad) as implicit GEMM, with the GEMM plan life cycle: a ConvSpec says what to compute,
/// ConvPlan::create chooses a kernel (or rejects the spec naming the field and the rule),
/// workspace_size() says what scratch it needs and run() enqueues it on a stream without allocating
/// or synchronising, so it can be captured into a CUDA graph.
///
/// Tensors are packed with the channels contiguous: activations x / dx are N x H x W x C (NHWC),
/// filters w / dw are K x R x S x C (KRSC), outputs y / dy are N x P x Q x K with
/// P = (H + 2 pad_h - dilation_h (R - 1) - 1) / stride_h + 1 (likewise Q). The operation is a
/// cross-correlation, as in PyTorch and cuDNN.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/dtype.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "cuactor/kernels/sku.hpp"

extern "C" {
struct cuactor_gemm_instance;
}

namespace cuactor::kernels {

/// Which convolution is computed.
enum class ConvOperation {
  fprop,  ///< y = alpha * conv(x, w) + beta * y_source.
  dgrad,  ///< dx = alpha * conv_transpose(dy, w) + beta * dx_source.
  wgrad,  ///< dw = alpha * correlate(dy, x) + beta * dw_source.
};
/// "fprop", "dgrad", "wgrad".
std::string_view name(ConvOperation op) noexcept;
/// Parses a token of name(ConvOperation).
std::optional<ConvOperation> parse_conv_operation(std::string_view s) noexcept;
/// The SKU family of an operation (conv_fprop, conv_dgrad, conv_wgrad).
GemmFamily family_of(ConvOperation op) noexcept;

/// Which of x, w and dy an operation reads.
struct ConvReads {
  bool x = false;
  bool w = false;
  bool dy = false;
};

/// The tensors `op` reads: fprop x and w, dgrad dy and w, wgrad dy and x.
constexpr ConvReads reads_of(ConvOperation op) noexcept {
  return {op != ConvOperation::dgrad, op != ConvOperation::wgrad, op != ConvOperation::fprop};
}

/// What a convolution computes. `element` is the type of the tensors the operation reads (x and w
/// for fprop, dy and w for dgrad, dy and x for wgrad); `output` the type of the tensor it writes
/// (and of its optional source C). fp32 tensors run on tf32 tensor cores.
struct ConvSpec {
  ConvOperation operation = ConvOperation::fprop;
  DType element = DType::bf16;
  DType output = DType::bf16;
  std::int64_t n = 1;  ///< Batch.
  std::int64_t h = 1;  ///< Input height.
  std::int64_t w = 1;  ///< Input width.
  std::int64_t c = 1;  ///< Input channels.
  std::int64_t k = 1;  ///< Output channels (filters).
  std::int64_t r = 1;  ///< Filter height.
  std::int64_t s = 1;  ///< Filter width.
  std::int64_t pad_h = 0;
  std::int64_t pad_w = 0;
  std::int64_t stride_h = 1;
  std::int64_t stride_w = 1;
  std::int64_t dilation_h = 1;
  std::int64_t dilation_w = 1;
  std::int64_t groups = 1;  ///< Channel groups; only 1 has a kernel.

  /// Output height P (may be <= 0 for an invalid spec; create() rejects it).
  [[nodiscard]] std::int64_t p() const noexcept;
  /// Output width Q.
  [[nodiscard]] std::int64_t q() const noexcept;
  /// Elements of x / dx (N H W C), of w / dw (K R S C) and of y / dy (N P Q K).
  [[nodiscard]] std::int64_t activation_elements() const noexcept { return n * h * w * c; }
  [[nodiscard]] std::int64_t filter_elements() const noexcept { return k * r * s * c; }
  [[nodiscard]] std::int64_t output_elements() const noexcept { return n * p() * q() * k; }
  /// Elements of the tensor the operation writes (y, dx or dw).
  [[nodiscard]] std::int64_t result_elements() const noexcept;
  /// 2 N P Q K C R S: the multiply-adds of every operation, times two.
  [[nodiscard]] double flops() const noexcept;
  /// The operation's implicit GEMM (M, N, K): fprop (N P Q, K, C R S), dgrad (N H W, C, K R S), wgrad
  /// (K, C R S, N P Q).
  [[nodiscard]] std::array<std::int64_t, 3> implicit_gemm() const noexcept;
  /// e.g. "fprop bf16->bf16 n=32 h=56 w=56 c=64 k=64 r=3 s=3 pad=1,1 stride=1,1 dilation=1,1".
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const ConvSpec&, const ConvSpec&) = default;
};

/// Hash of every field of a spec (for plan caches).
std::size_t hash_value(const ConvSpec& spec) noexcept;

/// Device pointers and scalars of one convolution launch. Which tensors an operation reads:
/// fprop x and w, dgrad dy and w, wgrad dy and x; the others are ignored. `out` is what it writes
/// (y, dx or dw); `source` (same shape and type as `out`, may equal it) is read when beta != 0.
struct ConvTensors {
  const void* x = nullptr;   ///< Activation, N x H x W x C.
  const void* w = nullptr;   ///< Filter, K x R x S x C.
  const void* dy = nullptr;  ///< Output gradient, N x P x Q x K.
  void* out = nullptr;       ///< y (N x P x Q x K), dx (N x H x W x C) or dw (K x R x S x C).
  const void* source = nullptr;
  float alpha = 1.0f;
  float beta = 0.0f;
};

/// How a plan splits its reduction into slices, computed side by side in one launch into fp32
/// partials that a second kernel adds, so that an output of few tiles still fills the device. Wgrad
/// splits N x P x Q: `images` ranges of the batch times `rows` ranges of output rows within each
/// image (the filter gradient alone often has fewer tiles than the device has multiprocessors).
/// fprop splits its input channels into `channels` ranges of whole K steps, on the kernels that do
/// (the one-warpgroup 64x64 tile of 16-bit tensors), for grids of few output tiles over long
/// reductions. dgrad is never split.
struct ConvSplit {
  int images = 1;
  int rows = 1;
  int channels = 1;
  /// images * rows * channels.
  [[nodiscard]] int slices() const noexcept { return images * rows * channels; }
  /// "IMAGESxROWS", or "IMAGESxROWSxCHANNELS" for a channel split.
  [[nodiscard]] std::string to_string() const;
  friend bool operator==(const ConvSplit&, const ConvSplit&) = default;
};

/// The most slices a split has.
inline constexpr int kMaxConvSlices = 32;
/// The most slices an fprop channel split has.
inline constexpr int kMaxConvChannelSlices = 16;

/// Options of ConvPlan::create.
struct ConvPlanOptions {
  /// Use exactly this catalog kernel instead of the heuristic's choice: a convolution kernel, or for a
  /// pointwise fprop (1x1 filter, unit stride, no padding) a dense GEMM one (row, col, row layouts).
  std::optional<GemmSku> sku_override;
  /// Multiprocessor count of the target device (0: queried by the kernel at run time; a plan on a
  /// dense GEMM kernel assumes an H100's 132 then, as GemmPlan does).
  int sm_count = 0;
  /// Ordinal of the device the plan's kernels run on.
  int device = 0;
  /// Use exactly this split instead of the plan's. Rules: wgrad: images in [1, N], rows in [1, P],
  /// channels 1, slices at most kMaxConvSlices, rows > 1 only with images == N and pad_h <=
  /// dilation_h (R - 1) (every slice reads an input row); fprop: images and rows 1, channels in [1,
  /// the K steps of C] and at most kMaxConvChannelSlices, above 1 only on a kernel that splits channels
  /// (without sku_override the plan then chooses among those);
  /// dgrad, and sm_80 kernels, {1, 1, 1} only. Any split override keeps a pointwise fprop on the conv
  /// kernels (a dense GEMM kernel does not split).
  std::optional<ConvSplit> split_override;
};

/// A convolution plan: the chosen kernel for one spec on one architecture. Host only, immutable,
/// cheap to copy.
class ConvPlan {
 public:
  /// Chooses a catalog kernel for `spec` on a device whose best target is `device_arch`.
  /// `invalid_argument` for malformed specs (non-positive extents, negative padding, an empty
  /// output, channel counts that break 16-byte alignment, tensors past int32 extents), `unsupported`
  /// for what no kernel computes (groups > 1, strided dgrad with dilation, fp8, a dtype pair or
  /// architecture without a kernel, the sm_90a kernels' TMA im2col limits on padding and filter
  /// extent), each naming the value and the rule. sm_90a kernels are chosen wherever one computes
  /// the spec; catalog sm_80 (CUTLASS 2.x) ones compute strided dgrad (on Hopper too) and dgrad on
  /// Ampere / Ada. sm_80 fprop and wgrad exist only through the JIT and with_instance(). A pointwise
  /// fprop (1x1 filter, unit stride, no padding) is a dense GEMM; on grids of few tiles over long
  /// reductions it runs on the catalog's dense 64x32 kernel, and sku() is then that dense SKU.
  static Result<ConvPlan> create(const ConvSpec& spec, GpuArch device_arch, const ConvPlanOptions& options = {});

  /// A plan running `instance` (of SKU `sku`: a catalog instance, or one compiled at run time whose
  /// library `owner` keeps loaded). The same checks as create() apply.
  static Result<ConvPlan> with_instance(const ConvSpec& spec, GpuArch device_arch, const GemmSku& sku,
                                        const cuactor_gemm_instance& instance, std::shared_ptr<const void> owner,
                                        PlanSource source, const ConvPlanOptions& options = {});

  /// The SKU a spec needs on an architecture with the given tile: what the JIT compiles for a
  /// configuration the catalog lacks (fp32 accumulation, linear combination). On sm_90a `schedule` is
  /// warpspecialized (CUTLASS's kernel: one consumer warpgroup, tiles up to 128x128), cooperative
  /// (cuactor's: two consumer warpgroups share a tile of 128 or more rows), coresident (cuactor's:
  /// one consumer warpgroup, two CTAs per multiprocessor) or pingpong (cuactor's persistent kernel:
  /// two consumer warpgroups take tiles of at most 128 x 128 elements in turn) and `stages` 0; on sm_80
  /// it is multistage with `stages` >= 2 (CUTLASS 2.x).
  static GemmSku sku_for(const ConvSpec& spec, GpuArch arch, Shape3 tile, Shape3 cluster = {1, 1, 1},
                         GemmSchedule schedule = GemmSchedule::warpspecialized, int stages = 0);

  [[nodiscard]] const GemmSku& sku() const noexcept { return sku_; }
  [[nodiscard]] const ConvSpec& spec() const noexcept { return spec_; }
  [[nodiscard]] PlanSource source() const noexcept { return source_; }
  [[nodiscard]] GpuArch device_arch() const noexcept { return device_arch_; }
  /// How the plan splits its reduction ({1, 1, 1}: unsplit; always for dgrad).
  [[nodiscard]] ConvSplit split() const noexcept { return split_; }
  /// Scratch bytes run() needs: a split's fp32 partials (slices x the output's elements x 4 bytes),
  /// 0 unsplit.
  [[nodiscard]] std::size_t workspace_size() const noexcept { return workspace_size_; }
  [[nodiscard]] double flops() const noexcept { return spec_.flops(); }

  /// Checks the tensors against the spec: the operation's inputs and `out` non-null and 16-byte
  /// aligned, `source` required when beta != 0. `invalid_argument` naming the tensor and the rule.
  [[nodiscard]] Status validate(const ConvTensors& tensors) const;
  /// Checks that buffers of the given byte sizes hold the tensors the operation touches (0 for a
  /// tensor it ignores); `invalid_argument` naming the tensor, the bytes needed and the bytes given.
  [[nodiscard]] Status check_buffer_sizes(std::size_t x_bytes, std::size_t w_bytes, std::size_t dy_bytes,
                                          std::size_t out_bytes, std::size_t source_bytes) const;

  /// Validates, then enqueues the kernel on `stream`: no allocation, no synchronisation
  /// (capturable). `workspace_too_small` if `workspace_bytes` < workspace_size(); `invalid_argument`
  /// if a workspace the plan needs is not 16-byte aligned.
  Status run(const ConvTensors& tensors, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) const;

 private:
  ConvPlan(const ConvSpec& spec, GpuArch arch, const GemmSku& sku, const cuactor_gemm_instance* instance,
           std::shared_ptr<const void> owner, PlanSource source, const ConvPlanOptions& options, ConvSplit split,
           std::size_t workspace)
      : spec_(spec),
        device_arch_(arch),
        sku_(sku),
        instance_(instance),
        owner_(std::move(owner)),
        source_(source),
        options_(options),
        split_(split),
        workspace_size_(workspace) {}
  static Result<ConvPlan> finish(const ConvSpec& spec, GpuArch arch, const GemmSku& sku,
                                 const cuactor_gemm_instance& instance, std::shared_ptr<const void> owner,
                                 PlanSource source, const ConvPlanOptions& options);
  /// A plan running pointwise fprop as the dense GEMM `sku` (a catalog kernel).
  static Result<ConvPlan> finish_pointwise(const ConvSpec& spec, GpuArch arch, const GemmSku& sku, PlanSource source,
                                           const ConvPlanOptions& options);

  ConvSpec spec_;
  GpuArch device_arch_;
  GemmSku sku_;
  const cuactor_gemm_instance* instance_ = nullptr;
  std::shared_ptr<const void> owner_;  // keeps a run-time compiled instance's library loaded
  std::optional<GemmPlan> gemm_;       // pointwise fprop on a dense GEMM kernel, instead of instance_
  PlanSource source_ = PlanSource::heuristic;
  ConvPlanOptions options_;
  ConvSplit split_;
  std::size_t workspace_size_ = 0;
};

}  // namespace cuactor::kernels

/// Lets ConvSpec key unordered containers.
template <>
struct std::hash<cuactor::kernels::ConvSpec> {
  std::size_t operator()(const cuactor::kernels::ConvSpec& s) const noexcept { return hash_value(s); }
};
