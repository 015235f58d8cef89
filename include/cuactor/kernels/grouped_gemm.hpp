/// @file
/// Grouped GEMM ([K3]-[K6]): D[g] = alpha * A[g] B[g] + beta * C[g] for many groups in one launch,
/// the mixture-of-experts workhorse. Life cycle: GroupedGemmPlan (host-only, cacheable, chooses a
/// SKU) -> prepare(groups) (validates every group, packs the metadata into pinned host memory) ->
/// PreparedGroupedGemm::run(stream, workspace) (one async copy of the metadata into the head of the
/// caller's workspace plus the kernel(s): no allocation, no synchronisation, capturable).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/dtype.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "cuactor/kernels/sku.hpp"

extern "C" {
struct cuactor_gemm_instance;
}

namespace cuactor::kernels {

/// What a grouped GEMM computes and where it runs; the plan chooses a SKU from this.
struct GroupedGemmSpec {
  DType a = DType::bf16;                      ///< Element of A (bf16, f16 or e4m3).
  DType b = DType::bf16;                      ///< Element of B (equal to a).
  DType d = DType::bf16;                      ///< Element of C and D (bf16, f16, f32; bf16 for e4m3).
  MatrixLayout layout_b = MatrixLayout::col;  ///< col: B[g] is N x K row-major ("TN"); row: K x N.
  GpuArch arch{9, 0, true};                   ///< Best target of the device (gpu::DeviceProperties::arch).
  int sm_count = 0;                           ///< Multiprocessors of the device (persistent grid size).
  int device = 0;                             ///< Device ordinal the kernel will run on.
  int rows_per_group_hint = 0;                ///< Typical rows (M) per group (0 = unknown); see GroupedSizeClass.
  /// Typical group count, N and K (0 = unknown): with rows_per_group_hint, the problem class under which
  /// a tuned kernel is looked up (jit::GroupedGemmClass, `cuactor tune grouped`).
  int group_count_hint = 0;
  int n_hint = 0;                       ///< See group_count_hint.
  int k_hint = 0;                       ///< See group_count_hint.
  std::optional<GemmSku> sku_override;  ///< Use exactly this SKU (must be compiled in and fit the spec).
  /// A preset, or an epilogue tree ([K8]; sm_90a, device-sized groups) whose vectors are per row of
  /// the packed rows (rowscale, rowbias: e.g. MoE routing weights) or per group and column
  /// (colscale, colbias: e.g. a per-expert bias); the side outputs amax, aux and rowsum are dense only.
  /// A swiglu root computes N columns and stores N / 2 (D[m, j] = silu(x[m, 2j]) * x[m, 2j + 1]).
  EpilogueSpec epilogue;
};

/// The class of problem sizes by which the heuristic picks a grouped kernel (learned from
/// `cuactor tune grouped` sweeps on an H100):
enum class GroupedSizeClass {
  large,   ///< Unknown or large groups: cooperative 128x256 tiles (16-bit; e4m3 256x128 in a 1x2 cluster).
  medium,  ///< 65..192 rows per group with N and K known and <= 4096 (e4m3: 65..256 rows, N and K <= 8192): pingpong
           ///< 64x256 tiles.
  decode,  ///< 1..64 rows per group: pingpong 64x128 tiles.
};
/// The class of a spec's hints (rows_per_group_hint, n_hint, k_hint).
GroupedSizeClass grouped_size_class(const GroupedGemmSpec& spec) noexcept;

/// The epilogue tree of fp8 grouped GEMM with row-wise scales, torch._scaled_grouped_mm's form:
/// D[m, n] = acc[m, n] * scale_a[m] * scale_b[g, n], i.e. mul(mul(acc,rowscale),colscale) with
/// DeviceSizedGroups::epilogue.row_scale = scale_a (capacity_rows floats, one per packed row) and
/// col_scale = scale_b (group_count x N floats). The catalog has it for e4m3 in every size class.
EpilogueSpec rowwise_scaled_epilogue();

/// One group's problem: A is M x K row-major (lda >= K), B is N x K row-major (ldb >= K) for
/// layout_b = col or K x N row-major (ldb >= N) for row, C and D are M x N row-major. M = 0 groups
/// are skipped; K = 0 means D = beta * C. Pointers are device pointers of the plan's device.
struct GroupedProblem {
  int m = 0;
  int n = 0;
  int k = 0;
  const void* a = nullptr;
  std::int64_t lda = 0;
  const void* b = nullptr;
  std::int64_t ldb = 0;
  const void* c = nullptr;  ///< Needed when beta != 0 (may equal d); ignored otherwise.
  std::int64_t ldc = 0;
  void* d = nullptr;
  std::int64_t ldd = 0;
};

/// Epilogue scalars of one prepared grouped GEMM. For fp8, the per-tensor scales are device
/// pointers (written by earlier kernels, read at run time): alpha[g] = alpha * scale_a * scale_b[g].
struct GroupedScalars {
  float alpha = 1.0f;
  float beta = 0.0f;
  const float* scale_a = nullptr;  ///< fp8: scale of A; one value, or one per group if scale_a_per_group.
  bool scale_a_per_group = false;  ///< True when scale_a holds group_count values.
  const float* scale_b = nullptr;  ///< fp8: scale of B[g], group_count values.
};

/// A grouped GEMM over one packed A (all groups' rows stacked, as torch._grouped_mm takes it) and
/// one tensor of group_count weight matrices, whose per-group row counts (or cumulative end
/// offsets, torch's `offs`) live in device memory written by an earlier kernel ([K6]). One prepared
/// object, hence one captured graph, serves every routing.
struct DeviceSizedGroups {
  int group_count = 0;
  const std::int32_t* rows = nullptr;     ///< Device: rows of each group; or null when offsets is set.
  const std::int32_t* offsets = nullptr;  ///< Device: cumulative end row of each group; or null.
  std::int64_t capacity_rows = 0;         ///< Rows of the packed A, C and D buffers.
  int n = 0;
  int k = 0;
  const void* a = nullptr;  ///< capacity_rows x K, leading dimension lda.
  std::int64_t lda = 0;
  const void* b = nullptr;  ///< group_count matrices, each N x K (col) or K x N (row), ldb.
  std::int64_t ldb = 0;
  std::int64_t b_group_stride = 0;  ///< Elements from one group's B to the next.
  const void* c = nullptr;          ///< capacity_rows x N or null (needed when beta != 0).
  std::int64_t ldc = 0;
  void* d = nullptr;  ///< capacity_rows x N (N / 2 under a swiglu root; ldd >= that).
  std::int64_t ldd = 0;
  /// Operands of an epilogue tree: rowscale (float) and rowbias (D's dtype) hold capacity_rows values,
  /// one per packed row; colscale (float) and colbias (D's dtype) hold group_count x N values, one
  /// row of N per group. Unused ones stay null.
  EpilogueOperands epilogue;
};

/// Device-sized groups over packed operands, as an MoE layer lays them out: A `capacity_rows` x `k`
/// (lda = k), one `n` x `k` matrix per group back to back in B (layout_b col), D `capacity_rows` rows
/// with leading dimension `ldd`; group rows from the cumulative end rows `offsets` (device memory).
/// No C and no epilogue operands: set them on the result where the plan needs them.
DeviceSizedGroups packed_device_groups(int group_count, const std::int32_t* offsets, std::int64_t capacity_rows, int n,
                                       int k, const void* a, const void* b, void* d, std::int64_t ldd) noexcept;

/// Packed metadata of one prepared grouped GEMM (opaque; defined in the implementation).
struct GroupedMetadata;

/// A plan bound to one set of groups: owns the validated metadata in pinned host memory, no device
/// memory. The caller keeps this object and every buffer it names alive while any launch or
/// captured graph that uses them may still run.
class PreparedGroupedGemm {
 public:
  PreparedGroupedGemm(PreparedGroupedGemm&&) noexcept;
  PreparedGroupedGemm& operator=(PreparedGroupedGemm&&) noexcept;
  PreparedGroupedGemm(const PreparedGroupedGemm&) = delete;
  PreparedGroupedGemm& operator=(const PreparedGroupedGemm&) = delete;
  ~PreparedGroupedGemm();

  /// Device workspace bytes run() needs: packed metadata, then (256-byte aligned) kernel scratch
  /// (per-SM TMA descriptors for the sm_90a kernels).
  [[nodiscard]] std::size_t workspace_size() const noexcept;
  /// The SKU of the kernel this plan chose.
  [[nodiscard]] const GemmSku& sku() const noexcept;
  /// Number of groups this object was prepared for.
  [[nodiscard]] int group_count() const noexcept;
  /// Enqueues the metadata upload (or, for device-sized groups, the kernel that builds it) into the
  /// head of `workspace` and the GEMM kernel(s) on `stream`. No allocation, no synchronisation, so
  /// it may be captured. `workspace` must be 256-byte aligned device memory of at least
  /// workspace_size() bytes (`workspace_too_small` otherwise) on the plan's device.
  Status run(cudaStream_t stream, void* workspace, std::size_t workspace_bytes) const;
  /// Device-sized groups only: where in the workspace run() records 1 + the first group whose
  /// device rows/offsets were out of range (such groups are skipped, never read out of bounds);
  /// 0 when every group was valid. Null for host-prepared groups.
  [[nodiscard]] const std::int32_t* routing_error_flag(const void* workspace) const noexcept;

 private:
  friend class GroupedGemmPlan;
  explicit PreparedGroupedGemm(std::unique_ptr<GroupedMetadata> meta) noexcept;
  std::unique_ptr<GroupedMetadata> meta_;
};

/// The revision of GroupedGemmPlan::create's choices, raised whenever they change; see
/// kDenseHeuristicRevision.
inline constexpr int kGroupedHeuristicRevision = 1;

/// A host-only, cacheable grouped GEMM plan: the chosen SKU and its compiled instance. Creating it
/// rejects unsupported dtype x arch x layout combinations with `unsupported`.
class GroupedGemmPlan {
 public:
  /// Chooses a SKU for `spec` from the kernel catalog (or checks spec.sku_override).
  static Result<GroupedGemmPlan> create(const GroupedGemmSpec& spec);
  /// A plan running `instance` (of `sku`, e.g. compiled by the JIT; `owner` keeps its module loaded
  /// while this plan or anything prepared from it lives), reported with `source`. Checks like create().
  static Result<GroupedGemmPlan> with_instance(const GroupedGemmSpec& spec, const GemmSku& sku,
                                               const cuactor_gemm_instance& instance, std::shared_ptr<const void> owner,
                                               PlanSource source);

  /// The SKU this plan chose.
  [[nodiscard]] const GemmSku& sku() const noexcept { return sku_; }
  /// Where the choice came from (catalog heuristic, override, tuning database).
  [[nodiscard]] PlanSource source() const noexcept { return source_; }
  /// The specification the plan was made for.
  [[nodiscard]] const GroupedGemmSpec& spec() const noexcept { return spec_; }

  /// Validates every group ([K5]: alignment of pointers, leading dimensions and contiguous extents,
  /// M = 0 skipped, K = 0 as D = beta * C, beta != 0 needs C) and packs the metadata into pinned
  /// host memory. `invalid_argument` names the group and the rule. Never call during capture.
  Result<PreparedGroupedGemm> prepare(std::span<const GroupedProblem> groups, const GroupedScalars& scalars = {}) const;

  /// Prepares a grouped GEMM whose per-group rows are read from device memory at run time ([K6]).
  Result<PreparedGroupedGemm> prepare(const DeviceSizedGroups& groups, const GroupedScalars& scalars = {}) const;

 private:
  GroupedGemmPlan(GroupedGemmSpec spec, GemmSku sku, const cuactor_gemm_instance* instance,
                  std::shared_ptr<const void> owner, PlanSource source)
      : spec_(std::move(spec)), sku_(std::move(sku)), instance_(instance), owner_(std::move(owner)), source_(source) {}
  Result<std::size_t> kernel_scratch_bytes() const;
  Status check_scalars(const GroupedScalars& scalars, int group_count) const;

  GroupedGemmSpec spec_;
  GemmSku sku_;
  const cuactor_gemm_instance* instance_ = nullptr;
  std::shared_ptr<const void> owner_;  ///< Keeps a JIT instance's module loaded; null for the catalog's.
  PlanSource source_ = PlanSource::heuristic;
};

/// A shape hint (GroupedGemmSpec) from a tensor extent: the extent capped at 2^30 (a hint only picks a
/// class), 0 for none.
constexpr int shape_hint(std::int64_t extent) noexcept {
  return static_cast<int>(extent < 0 ? 0 : extent > (1 << 30) ? (1 << 30) : extent);
}
/// The class of a shape hint, shared by the plan cache's keys and the tuning database's classes: the
/// power of two at or above it (capped at 2^30), 0 for an unknown (0) or invalid (negative) one.
int shape_hint_bucket(int hint) noexcept;

/// True if the grouped kernel `sku` runs on a device whose best target is `device`: can_run(), plus
/// the sm_80 instances on Hopper (they are compiled to sm_90 machine code as well).
bool grouped_sku_runs_on(const GemmSku& sku, GpuArch device) noexcept;

/// Elements per 16 bytes of `t` (8 for 16-bit types, 16 for fp8, 4 for f32): the multiple that
/// leading dimensions and contiguous extents must have for the TMA-based kernels.
int grouped_alignment_elements(DType t) noexcept;

}  // namespace cuactor::kernels
