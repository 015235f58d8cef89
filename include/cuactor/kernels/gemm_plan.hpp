/// @file
/// GemmPlan ([K3]): a host-only, cacheable choice of one catalog kernel for a dense GEMM problem on
/// one GPU architecture, with an explicit SKU override, and the checked launch of that kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/dtype.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/core/lru_cache.hpp"
#include "cuactor/kernels/sku.hpp"

namespace cuactor::kernels {

struct CatalogEntry;
}  // namespace cuactor::kernels

extern "C" {
struct cuactor_gemm_instance;
}

namespace cuactor::kernels {

/// What a dense GEMM computes: D (M x N) = alpha * [scale_a * scale_b] * A (M x K) * B (K x N) +
/// beta * C, `batch` times. Layouts say how each operand is stored: A row-major with B `col` is the
/// "TN" case of weights stored N x K; C and D share `layout_c`.
struct GemmProblem {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::int64_t batch = 1;
  DType a = DType::bf16;
  DType b = DType::bf16;
  DType c = DType::bf16;
  DType d = DType::bf16;
  MatrixLayout layout_a = MatrixLayout::row;
  MatrixLayout layout_b = MatrixLayout::col;
  MatrixLayout layout_c = MatrixLayout::row;
  /// Epilogue: a preset or a tree ([K8]; sm_90a). fp8 inputs need scaled_linear_combination
  /// (per-tensor scales) or a tree (which may scale per row and column).
  EpilogueSpec epilogue;

  friend bool operator==(const GemmProblem&, const GemmProblem&) = default;
};

/// Hash of every field of a problem (for plan caches keyed by problem and arch).
std::size_t hash_value(const GemmProblem& p) noexcept;

/// The dense SKU fields that `p` fixes: element types, layouts and epilogue. Architecture, tile, cluster and
/// schedule keep GemmSku's defaults for the caller to choose.
GemmSku dense_sku_for(const GemmProblem& p);

/// Device pointers and run-time scalars of one GEMM launch. A leading dimension or batch stride of 0
/// means "packed" (the operand's contiguous extent, resp. rows x leading dimension).
struct GemmOperands {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;  ///< May be null when beta == 0 (D is then passed as C).
  void* d = nullptr;
  std::int64_t lda = 0;
  std::int64_t ldb = 0;
  std::int64_t ldc = 0;
  std::int64_t ldd = 0;
  std::int64_t batch_stride_a = 0;
  std::int64_t batch_stride_b = 0;
  std::int64_t batch_stride_c = 0;
  std::int64_t batch_stride_d = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  const float* scale_a = nullptr;  ///< Device pointer, per-tensor scale of A (scaled epilogue), null = 1.
  const float* scale_b = nullptr;  ///< Device pointer, per-tensor scale of B (scaled epilogue), null = 1.
  EpilogueOperands epilogue;       ///< Vectors, amax and clamp bounds of an epilogue tree.
};

/// Checks that buffers of the given byte sizes hold every element the operands address (their last
/// batch's last row at its leading dimension, packed defaults applied); `invalid_argument` naming
/// the operand, the bytes needed and the bytes given. A null C is not checked. Shared by every dense
/// GEMM back end (GemmPlan, cuBLAS).
[[nodiscard]] Status check_gemm_buffer_sizes(const GemmProblem& problem, const GemmOperands& operands,
                                             std::size_t a_bytes, std::size_t b_bytes, std::size_t c_bytes,
                                             std::size_t d_bytes);

/// The most K slices GemmPlanOptions::split_k may ask for.
inline constexpr int kMaxSplitK = 16;

/// Options of GemmPlan::make.
struct GemmPlanOptions {
  /// Use exactly this catalog kernel instead of the heuristic's choice.
  std::optional<GemmSku> sku_override;
  /// Multiprocessor count of the target device (tile-count heuristic and persistent grid); 0 = 132.
  int sm_count = 0;
  /// Ordinal of the device the plan's kernels run on.
  int device = 0;
  /// sm_90a tile rasterisation: swizzle width (1, 2, 4 or 8; 0 = the plan's default) and order
  /// (0 = heuristic, 1 = along M, 2 = along N). Ignored by sm_80 kernels. With both 0, the heuristic's
  /// 16-bit plans of 128-row tiles group tiles by the widest swizzle that pads their grid by at most 3%
  /// (8, 4 or 2), along N; other plans, an overriding SKU included, take CUTLASS's defaults (swizzle 1,
  /// its order).
  int max_swizzle = 0;
  int raster_order = 0;
  /// Split-K: 0 = the plan decides (16-bit decode problems whose grid of 64x64 tiles leaves most SMs
  /// idle are split, and so are 16-bit problems of at most 32 columns whose 64-row tiles do over K of
  /// 8192 or more), 1 = never, 2..16 = split K into that many slices (`unsupported` naming the rule
  /// where the problem cannot be). A split plan runs its kernel (float32 output) over the slices into
  /// its workspace, then a reduction that adds them in order (deterministic) and applies alpha, beta, C.
  int split_k = 0;
  /// Swap-AB: 0 = the plan decides (decode problems of up to 32 rows, 16-bit or e4m3 with per-tensor
  /// scales, and up to 64 on grids of few tiles where it does not split them unswapped), 1 = never, 2 =
  /// always (`unsupported` naming the rule where the problem cannot). A swapped plan computes D^T =
  /// B^T A^T: its kernel's 64-row tile runs over the problem's N and a 16- or 32-column tile over its
  /// few rows, so that shared memory holds weights rather than the padding of a 64-row tile of A.
  /// Combines with split_k (16-bit problems).
  int swap_ab = 0;
  /// sm_90a kernels launch as programmatic dependents of the stream's previous kernel: their CTAs
  /// become resident and run their prologue (barrier set-up, descriptor prefetch) while that kernel
  /// finishes, and wait for its completion and memory (griddepcontrol.wait) before they read or write
  /// their operands, so the result is the same as a plain launch's. What it hides is the gap between
  /// back-to-back kernels, which a decode step's short GEMMs feel most (H200, 16 back-to-back decode
  /// GEMMs of 8 unsplit shapes: 1.04-1.06x plain launches in the geometric mean of two runs, 0.93-1.13x
  /// per shape; 8x5120x5120, 80 CTAs, lost). These kernels also release their own programmatic
  /// dependents once their last tile's mainloop is done: a kernel of yours launched that way after one
  /// must wait (griddepcontrol.wait) before it reads D. A split plan's slices do the same, and its
  /// reduction releases its dependent once it has waited for the slices. Runs with device scales
  /// (GemmOperands::scale_a / scale_b, read before the wait) launch plainly, and so do stream-K
  /// kernels (built without the wait): see sm90_gemm.cuh. False: every kernel launches plainly (a
  /// split plan's reduction stays a programmatic dependent of its slices).
  bool programmatic_launch = true;
};

/// The revision of GemmPlan::make's choices, raised whenever they change (2: swap-AB decode plans; 3:
/// decode splits of up to 64 rows, the reduction a programmatic dependent launch; 4: pingpong 128x128
/// tiles for large 16-bit problems, swizzled along N; 5: e4m3 decode swapped; 6: 16-bit problems of at
/// most 32 columns on 16- or 32-column tiles; 7: those split along K on grids of few row tiles). A
/// tuned choice beat the heuristic of one revision; against a later one it may lose, so the tuning
/// database serves it only to plans of the revision it was measured against.
inline constexpr int kDenseHeuristicRevision = 7;

/// Where a plan's kernel choice came from ([K9]).
enum class PlanSource {
  heuristic,   ///< The catalog heuristic (tile waves, memory traffic, stream-K for few tiles).
  overridden,  ///< GemmPlanOptions::sku_override.
  tuned,       ///< A tuning database entry for this device and problem class (jit::TuningDb).
};
/// "heuristic", "override", "tuned".
std::string_view name(PlanSource s) noexcept;

/// A dense GEMM plan: the chosen kernel for one problem on one architecture. Host only, immutable,
/// cheap to copy, so it can be cached by (problem, arch, options).
class GemmPlan {
 public:
  /// Chooses a catalog kernel for `problem` on a device whose best target is `device_arch`: the
  /// heuristic's tile by estimated cost; for decode rows (M <= 64) the swapped kernel and split-K
  /// where GemmPlanOptions and the shape call for them; for 16-bit problems of at most 32 columns a
  /// 16- or 32-column tile, split along K on grids of few row tiles. `invalid_argument` for malformed problems
  /// (negative sizes, fp8 without scaled epilogue, an override that computes something else), `unsupported` for dtype x
  /// arch combinations no kernel can serve (fp8 below sm_89, fp4 below sm_100, an sm_90a kernel on another GPU, a SKU
  /// not compiled in), each message naming the values and the rule.
  static Result<GemmPlan> make(const GemmProblem& problem, GpuArch device_arch, const GemmPlanOptions& options = {});

  /// A plan running `instance` (of SKU `sku`; a catalog instance, or one compiled at run time whose
  /// library `owner` keeps loaded) for `problem`. The same checks as make() apply: the SKU must
  /// compute the problem and run on `device_arch`. `source` is what the caller reports (a tuning
  /// database hit is `tuned`). GemmPlanOptions::swap_ab 2 runs the kernel on the swapped problem
  /// (D^T = B^T A^T), and split_k > 1 runs it as the slice kernel of that many K slices (float32 C and
  /// D), each under make()'s rules for a forced swap or split; the SKU must compute that kernel problem
  /// (`invalid_argument` naming it). Otherwise (0, 1) the plan runs the kernel on the problem as it is.
  static Result<GemmPlan> with_instance(const GemmProblem& problem, GpuArch device_arch, const GemmSku& sku,
                                        const cuactor_gemm_instance& instance, std::shared_ptr<const void> owner,
                                        PlanSource source, const GemmPlanOptions& options = {});
  /// Whether a forced split (GemmPlanOptions::split_k > 1) or swap (swap_ab 2) in `options` meets its
  /// rules for `problem` on `device_arch` (`unsupported` naming the broken one): what make() and
  /// with_instance() check first. A tuned choice that swaps or splits asks it of each problem of its class.
  static Status check_decode_options(const GemmProblem& problem, GpuArch device_arch, const GemmPlanOptions& options);

  /// The SKU of the chosen kernel ([K2]).
  [[nodiscard]] const GemmSku& sku() const noexcept { return sku_; }
  /// Where the choice came from (heuristic, override, tuning database).
  [[nodiscard]] PlanSource source() const noexcept { return source_; }
  /// The problem this plan was made for.
  [[nodiscard]] const GemmProblem& problem() const noexcept { return problem_; }
  /// The SKU the heuristic would choose for `problem` if every standard configuration were compiled
  /// (what the JIT instantiates when the catalog lacks the problem's epilogue tree): the tile compared
  /// by estimated cost, or for 16-bit sm_90a problems of at most 32 columns (one GEMM, layouts
  /// row,col,row, A, B, C and D of one type, no side outputs) the narrow-column tile of make()'s preset
  /// plans; never swapped or split. Checked like make().
  static Result<GemmSku> sku_for(const GemmProblem& problem, GpuArch device_arch, const GemmPlanOptions& options = {});

  /// K slices the plan splits the problem into (1: not split); see GemmPlanOptions::split_k.
  [[nodiscard]] int split_k() const noexcept { return launch_.split_k; }
  /// Whether the plan's kernel computes D^T = B^T A^T; see GemmPlanOptions::swap_ab.
  [[nodiscard]] bool swap_ab() const noexcept { return launch_.swap_ab; }
  /// The tile swizzle and raster order the kernel runs with: the options', or the plan's default where
  /// both were 0 (see GemmPlanOptions::max_swizzle).
  [[nodiscard]] int max_swizzle() const noexcept { return options_.max_swizzle; }
  [[nodiscard]] int raster_order() const noexcept { return options_.raster_order; }

  /// Architecture of the device the plan targets.
  [[nodiscard]] GpuArch device_arch() const noexcept { return device_arch_; }
  /// Scratch bytes run() needs (split-K plans keep their partial products there; always check).
  [[nodiscard]] std::size_t workspace_size() const noexcept { return workspace_size_; }
  /// Multiply-adds times two: the FLOP count of one run.
  [[nodiscard]] double flops() const noexcept;

  /// Checks the operands against the problem: non-null pointers, 16-byte pointer alignment, leading
  /// dimensions at least the contiguous extent and multiples of the alignment (8 elements for 16-bit
  /// types, 16 for fp8, 4 for f32), batch strides that keep batches apart. `invalid_argument` naming
  /// the operand and the rule.
  [[nodiscard]] Status validate(const GemmOperands& operands) const;

  /// Checks that buffers of the given byte sizes hold every element the operands address (their
  /// last batch's last row at its leading dimension); `invalid_argument` naming the operand, the
  /// bytes needed and the bytes given. A null C is not checked.
  [[nodiscard]] Status check_buffer_sizes(const GemmOperands& operands, std::size_t a_bytes, std::size_t b_bytes,
                                          std::size_t c_bytes, std::size_t d_bytes) const;

  /// Validates, then enqueues the kernel on `stream`: no allocation, no synchronisation (capturable).
  /// `workspace_too_small` if `workspace_bytes` < workspace_size().
  Status run(const GemmOperands& operands, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) const;

 private:
  /// How the kernel covers the problem: whether A and B trade places, and K slices.
  struct Launch {
    bool swap_ab = false;
    int split_k = 1;
    std::size_t partials_offset = 0;  // split-K: where the float32 partial products start in the workspace
  };
  GemmPlan(const GemmProblem& problem, GpuArch arch, const GemmSku& sku, const cuactor_gemm_instance* instance,
           std::shared_ptr<const void> owner, PlanSource source, const GemmPlanOptions& options, std::size_t workspace,
           Launch launch)
      : problem_(problem),
        device_arch_(arch),
        sku_(sku),
        instance_(instance),
        owner_(std::move(owner)),
        source_(source),
        options_(options),
        workspace_size_(workspace),
        launch_(launch) {}
  /// Resolves the SM count and sizes the workspace of a checked choice (`split_k` slices of K; with
  /// `swap_ab` the kernel computes the transposed problem).
  static GemmPlan finish(const GemmProblem& problem, GpuArch arch, const GemmSku& sku,
                         const cuactor_gemm_instance& instance, std::shared_ptr<const void> owner, PlanSource source,
                         const GemmPlanOptions& options, int split_k = 1, bool swap_ab = false);

  GemmProblem problem_;
  GpuArch device_arch_;
  GemmSku sku_;
  const cuactor_gemm_instance* instance_ = nullptr;
  std::shared_ptr<const void> owner_;  // keeps a run-time compiled instance's library loaded
  PlanSource source_ = PlanSource::heuristic;
  GemmPlanOptions options_;  // sm_count resolved
  std::size_t workspace_size_ = 0;
  Launch launch_;
};

/// Dense GEMM plans by everything that chooses the kernel (problem, architecture, SM count, device,
/// rasterisation, override), never by pointers or run-time scalars ([J4]): core's LruCache (bounded,
/// single flight; failures are returned to every waiter and not cached).
class GemmPlanCache {
 public:
  /// What makes a plan on a miss: GemmPlan::make by default; jit::tuned_planner() consults the tuning
  /// database first ([K9]).
  using Planner = std::function<Result<GemmPlan>(const GemmProblem&, GpuArch, const GemmPlanOptions&)>;

  /// A cache holding at most `capacity` plans (at least 1), made by `planner` (empty: GemmPlan::make).
  explicit GemmPlanCache(std::size_t capacity = 64, Planner planner = {})
      : cache_(capacity), planner_(std::move(planner)) {}

  /// The plan for (problem, arch, options), made on first use.
  Result<GemmPlan> get(const GemmProblem& problem, GpuArch arch, const GemmPlanOptions& options = {});
  /// Plans currently held.
  [[nodiscard]] std::size_t size() const { return cache_.size(); }
  /// Lookups answered from the cache.
  [[nodiscard]] std::size_t hits() const { return cache_.stats().hits; }
  /// Lookups that made a plan.
  [[nodiscard]] std::size_t misses() const { return cache_.stats().misses; }
  /// All counters (hits, misses, evictions, size, capacity).
  [[nodiscard]] CacheStats stats() const { return cache_.stats(); }

 private:
  struct Key {
    GemmProblem problem;
    GpuArch arch;
    int sm_count = 0;
    int device = 0;
    int max_swizzle = 0;
    int raster_order = 0;
    int split_k = 0;
    int swap_ab = 0;
    bool programmatic_launch = true;
    std::optional<GemmSku> sku_override;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept;
  };

  LruCache<Key, GemmPlan, KeyHash> cache_;
  Planner planner_;
};

}  // namespace cuactor::kernels

/// Lets GemmProblem key unordered containers.
template <>
struct std::hash<cuactor::kernels::GemmProblem> {
  std::size_t operator()(const cuactor::kernels::GemmProblem& p) const noexcept { return hash_value(p); }
};
