// Grouped GEMM plans, validation and packing ([K3]-[K6]).
#include "cuactor/kernels/grouped_gemm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "cuactor/core/nvtx.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "kernels/gemm_geometry.hpp"
#include "kernels/grouped_instance_abi.h"
#include "kernels/grouped_launch.hpp"
#include "kernels/grouped_layout.hpp"

namespace cuactor::kernels {

struct GroupedMetadata {
  GemmSku sku;
  const cuactor_gemm_instance* instance = nullptr;
  std::shared_ptr<const void> owner;  // keeps a JIT instance's module loaded
  GroupedGemmSpec spec;
  GroupedScalars scalars;
  detail::GroupedLayout layout;
  gpu::PinnedBuffer image;                        // host-prepared groups: the metadata image
  std::optional<DeviceSizedGroups> device_sized;  // device-sized groups: built on the device
};

namespace detail {
namespace {

std::string hex(const void* p) {
  return fmt::format("{:#x}", reinterpret_cast<std::uintptr_t>(p));
}

/// The rules every operand of a non-empty group follows: present, 16-byte aligned, leading
/// dimension at least the row length and a multiple of 16 bytes.
Status check_operand(std::string_view where, char operand, const void* ptr, std::int64_t ld, std::int64_t row_length,
                     std::string_view row_length_name, DType t) {
  const int align = grouped_alignment_elements(t);
  if (ptr == nullptr) return fail(errc::invalid_argument, fmt::format("{}: {} is null", where, operand));
  if (!aligned16(ptr))
    return fail(errc::invalid_argument,
                fmt::format("{}: {}={} is not 16-byte aligned (TMA needs 16-byte aligned base pointers)", where,
                            operand, hex(ptr)));
  if (ld < row_length)
    return fail(errc::invalid_argument,
                fmt::format("{}: ld{}={} is less than {}={}", where, operand, ld, row_length_name, row_length));
  if (ld % align != 0)
    return fail(errc::invalid_argument,
                fmt::format("{}: ld{}={} is not a multiple of {} for {}", where, operand, ld, align, name(t)));
  return ok();
}

}  // namespace

GroupedLayout make_grouped_layout(int group_count, bool has_k0_groups, bool has_alpha, bool has_error_flag,
                                  std::size_t scratch_bytes, const EpilogueSpec& vectors) noexcept {
  GroupedLayout l;
  l.group_count = group_count;
  const auto g = static_cast<std::size_t>(group_count);
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t here = at;
    at = align_up(at + bytes, 16);
    return here;
  };
  l.shapes = take(g * 3 * sizeof(std::int32_t));
  l.ptr_a = take(g * sizeof(void*));
  l.ptr_b = take(g * sizeof(void*));
  l.ptr_c = take(g * sizeof(void*));
  l.ptr_d = take(g * sizeof(void*));
  l.ld_a = take(g * sizeof(std::int64_t));
  l.ld_b = take(g * sizeof(std::int64_t));
  l.ld_c = take(g * sizeof(std::int64_t));
  l.ld_d = take(g * sizeof(std::int64_t));
  if (has_k0_groups) l.k0_rows = take(g * sizeof(std::int32_t));
  l.upload_bytes = at;
  if (has_alpha) l.alpha = take(g * sizeof(float));
  if (has_error_flag) l.error_flag = take(sizeof(std::int32_t));
  if (!vectors.is_preset()) {
    const std::pair<EpilogueNode, std::size_t*> slots[] = {{EpilogueNode::row_scale, &l.row_scale},
                                                           {EpilogueNode::col_scale, &l.col_scale},
                                                           {EpilogueNode::row_bias, &l.row_bias},
                                                           {EpilogueNode::col_bias, &l.col_bias}};
    for (auto [node, offset] : slots)
      if (vectors.uses(node)) *offset = take(g * sizeof(void*));
  }
  l.scratch = align_up(at, kWorkspaceAlignment);
  l.scratch_bytes = scratch_bytes;
  l.total = l.scratch + scratch_bytes;
  return l;
}

Status validate_group(int index, const GroupedProblem& p, const GroupedGemmSpec& spec, float beta) {
  const std::string where = fmt::format("group {}", index);
  if (p.m < 0 || p.n < 0 || p.k < 0)
    return fail(errc::invalid_argument,
                fmt::format("{}: m={}, n={}, k={}: sizes must not be negative", where, p.m, p.n, p.k));
  if (p.m == 0 || p.n == 0) return ok();  // empty group: skipped, nothing is read or written
  const int align_d = grouped_alignment_elements(spec.d);
  if (p.n % align_d != 0)
    return fail(errc::invalid_argument,
                fmt::format("{}: n={} is not a multiple of {} for {} (D's rows must be 16-byte multiples)", where, p.n,
                            align_d, name(spec.d)));
  CUACTOR_TRY(check_operand(where, 'd', p.d, p.ldd, p.n, "n", spec.d));
  if (beta != 0.0f) {
    if (p.c == nullptr)
      return fail(errc::invalid_argument, fmt::format("{}: c is null but beta={} reads C", where, beta));
    CUACTOR_TRY(check_operand(where, 'c', p.c, p.ldc, p.n, "n", spec.d));
  }
  if (p.k == 0) return ok();  // D = beta * C: A and B are not read
  const int align_a = grouped_alignment_elements(spec.a);
  if (p.k % align_a != 0)
    return fail(errc::invalid_argument,
                fmt::format("{}: k={} is not a multiple of {} for {} (A's rows must be 16-byte multiples)", where, p.k,
                            align_a, name(spec.a)));
  CUACTOR_TRY(check_operand(where, 'a', p.a, p.lda, p.k, "k", spec.a));
  if (spec.layout_b == MatrixLayout::col) return check_operand(where, 'b', p.b, p.ldb, p.k, "k", spec.b);
  if (p.n % grouped_alignment_elements(spec.b) != 0)
    return fail(errc::invalid_argument, fmt::format("{}: n={} is not a multiple of {} for {} (B is K x N row-major)",
                                                    where, p.n, grouped_alignment_elements(spec.b), name(spec.b)));
  return check_operand(where, 'b', p.b, p.ldb, p.n, "n", spec.b);
}

Status validate_device_sized(const DeviceSizedGroups& g, const GroupedGemmSpec& spec, float beta) {
  if (g.group_count <= 0)
    return fail(errc::invalid_argument,
                fmt::format("group_count={}: a grouped GEMM needs at least one group", g.group_count));
  if ((g.rows == nullptr) == (g.offsets == nullptr))
    return fail(errc::invalid_argument, "device-sized groups: give exactly one of rows and offsets");
  if (g.capacity_rows < 0 || g.n < 0 || g.k < 0)
    return fail(errc::invalid_argument,
                fmt::format("device-sized groups: capacity_rows={}, n={}, k={} must not be negative", g.capacity_rows,
                            g.n, g.k));
  // D holds n columns, or n / 2 under a swiglu root (which pairs columns 2j and 2j + 1).
  const bool paired = pairs_columns(spec.epilogue);
  const std::int64_t d_columns = output_columns(spec.epilogue, g.n);
  if (g.n > 0 && (d_columns % grouped_alignment_elements(spec.d) != 0 || (paired && g.n % 2 != 0)))
    return fail(errc::invalid_argument, fmt::format("device-sized groups: n={} is not a multiple of {} for {}{}", g.n,
                                                    (paired ? 2 : 1) * grouped_alignment_elements(spec.d), name(spec.d),
                                                    paired ? " (swiglu writes n / 2 columns of 16-byte rows)" : ""));
  if (g.k > 0 && g.k % grouped_alignment_elements(spec.a) != 0)
    return fail(errc::invalid_argument, fmt::format("device-sized groups: k={} is not a multiple of {} for {}", g.k,
                                                    grouped_alignment_elements(spec.a), name(spec.a)));
  const std::string where = "device-sized groups";
  CUACTOR_TRY(check_operand(where, 'd', g.d, g.ldd, d_columns, paired ? "n / 2" : "n", spec.d));
  CUACTOR_TRY(check_epilogue_operands(spec.epilogue, g.epilogue, "grouped GEMM"));
  const bool tree = !spec.epilogue.is_preset();
  if (tree && spec.epilogue.uses(EpilogueNode::c) && g.c == nullptr)
    return fail(errc::invalid_argument,
                fmt::format("{}: c is null but the epilogue '{}' reads it", where, spec.epilogue.token()));
  if (tree && g.k == 0)
    return fail(errc::unsupported, fmt::format("{}: k=0 (D = beta * C) with the epilogue tree '{}' is not supported",
                                               where, spec.epilogue.token()));
  if ((!tree && beta != 0.0f) || (tree && g.c != nullptr)) {
    if (g.c == nullptr)
      return fail(errc::invalid_argument, fmt::format("{}: c is null but beta={} reads C", where, beta));
    CUACTOR_TRY(check_operand(where, 'c', g.c, g.ldc, g.n, "n", spec.d));
  }
  if (g.k == 0) return ok();
  CUACTOR_TRY(check_operand(where, 'a', g.a, g.lda, g.k, "k", spec.a));
  const bool b_col = spec.layout_b == MatrixLayout::col;
  if (!b_col && g.n % grouped_alignment_elements(spec.b) != 0)
    return fail(errc::invalid_argument, fmt::format("{}: n={} is not a multiple of {} for {} (B is K x N row-major)",
                                                    where, g.n, grouped_alignment_elements(spec.b), name(spec.b)));
  CUACTOR_TRY(check_operand(where, 'b', g.b, g.ldb, b_col ? g.k : g.n, b_col ? "k" : "n", spec.b));
  const std::int64_t b_matrix = static_cast<std::int64_t>(b_col ? g.n : g.k) * g.ldb;
  if (g.group_count > 1 && g.b_group_stride < b_matrix)
    return fail(errc::invalid_argument,
                fmt::format("{}: b_group_stride={} is less than one B matrix ({} elements): experts would overlap",
                            where, g.b_group_stride, b_matrix));
  if (g.b_group_stride % grouped_alignment_elements(spec.b) != 0)
    return fail(errc::invalid_argument,
                fmt::format("{}: b_group_stride={} is not a multiple of {} for {}", where, g.b_group_stride,
                            grouped_alignment_elements(spec.b), name(spec.b)));
  return ok();
}

void pack_grouped_metadata(std::span<const GroupedProblem> groups, const GroupedLayout& layout,
                           std::span<std::byte> image) noexcept {
  std::fill(image.begin(), image.end(), std::byte{0});
  auto at = [&](std::size_t offset) { return image.data() + offset; };
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const GroupedProblem& p = groups[g];
    const bool empty = p.m == 0 || p.n == 0;
    const bool k0 = !empty && p.k == 0;
    const std::int32_t shape[3] = {empty || k0 ? 0 : p.m, p.n, p.k};
    std::memcpy(at(layout.shapes + g * sizeof(shape)), shape, sizeof(shape));
    const void* c = p.c != nullptr ? p.c : p.d;
    const std::int64_t ldc = p.c != nullptr ? p.ldc : p.ldd;
    const void* ptrs[4] = {p.a, p.b, c, p.d};
    const std::size_t ptr_offsets[4] = {layout.ptr_a, layout.ptr_b, layout.ptr_c, layout.ptr_d};
    const std::int64_t lds[4] = {p.lda, p.ldb, ldc, p.ldd};
    const std::size_t ld_offsets[4] = {layout.ld_a, layout.ld_b, layout.ld_c, layout.ld_d};
    for (int i = 0; i < 4; ++i) {
      std::memcpy(at(ptr_offsets[i] + g * sizeof(void*)), &ptrs[i], sizeof(void*));
      std::memcpy(at(ld_offsets[i] + g * sizeof(std::int64_t)), &lds[i], sizeof(std::int64_t));
    }
    if (layout.k0_rows != GroupedLayout::none) {
      const std::int32_t rows = k0 ? p.m : 0;
      std::memcpy(at(layout.k0_rows + g * sizeof(rows)), &rows, sizeof(rows));
    }
  }
}

}  // namespace detail

DeviceSizedGroups packed_device_groups(int group_count, const std::int32_t* offsets, std::int64_t capacity_rows, int n,
                                       int k, const void* a, const void* b, void* d, std::int64_t ldd) noexcept {
  DeviceSizedGroups g;
  g.group_count = group_count;
  g.offsets = offsets;
  g.capacity_rows = capacity_rows;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = k;
  g.b = b;
  g.ldb = k;  // N x K per group (layout_b = col)
  g.b_group_stride = static_cast<std::int64_t>(n) * k;
  g.d = d;
  g.ldd = ldd;
  return g;
}

int shape_hint_bucket(int hint) noexcept {
  return hint > 0 ? static_cast<int>(std::bit_ceil(static_cast<unsigned>(std::min(hint, 1 << 30)))) : 0;
}

bool grouped_sku_runs_on(const GemmSku& sku, GpuArch device) noexcept {
  // sm_80 instances are also compiled to sm_90 machine code (catalog.cmake), so Hopper runs them.
  return can_run(sku.arch, device) || (sku.arch == GpuArch{8, 0, false} && device.major == 9);
}

GroupedSizeClass grouped_size_class(const GroupedGemmSpec& spec) noexcept {
  // Sweeps (`cuactor tune grouped`, H100, rows per group jittered by +-90%): 64x128 pingpong is the
  // decode kernel. 16-bit: pingpong 64x256 beats cooperative 128x256 up to about 192 rows per group
  // (seven shapes of 140-190 rows, N and K 1024-4096: 0.98-1.07x, geometric mean 1.027x); from 200
  // to 256 rows they tie (0.98-1.04x, mean 1.006x) and the cooperative one wins at 256 rows with long K
  // (1.03-1.10x), past 280 rows (1.04-1.38x) and on large groups; with N or K past 4096 it wins on 4 of 6
  // shapes of 100-240 rows (1.08-1.17x). e4m3 keeps pingpong 64x256 to 256 rows (the session-8 sweep)
  // and to N and K of 8192: on 6 shapes of 100-240 rows with N or K of 5120-7168 (64-256 groups, row-wise
  // scales) it ran 0.985-1.17x the cooperative 256x128 kernel, 1.07x in the geometric mean.
  // Not worth retrying (H200, session 45): giving each group's short last tile (<= 64 rows) to the 64x256
  // pingpong kernel in a second launch ran 2-28% slower than the cooperative kernel alone on 7 ragged
  // shapes of 200-400 rows per group, although it cut the padded rows: that launch reads every split
  // expert's weights again (0.2-2.6 GB), which the one kernel's tiles of a group share in L2.
  constexpr int kDecodeRows = 64;
  const bool fp8 = spec.a == DType::e4m3;
  const int medium_rows = fp8 ? 256 : 192, medium_nk = fp8 ? 8192 : 4096;
  const int rows = spec.rows_per_group_hint;
  if (rows > 0 && rows <= kDecodeRows) return GroupedSizeClass::decode;
  if (rows > kDecodeRows && rows <= medium_rows && spec.n_hint > 0 && spec.n_hint <= medium_nk && spec.k_hint > 0 &&
      spec.k_hint <= medium_nk)
    return GroupedSizeClass::medium;
  return GroupedSizeClass::large;
}

EpilogueSpec rowwise_scaled_epilogue() {
  return epi::mul(epi::mul(epi::acc(), epi::row_scale()), epi::col_scale());
}

int grouped_alignment_elements(DType t) noexcept {
  return 128 / std::max(size_bits(t), 1);
}

namespace {

bool spec_matches(const GemmSku& sku, const GroupedGemmSpec& spec) {
  const bool epilogue = spec.epilogue.is_preset() ? sku.epilogue.is_preset() : sku.epilogue == spec.epilogue;
  return sku.family == GemmFamily::grouped && sku.a == spec.a && sku.b == spec.b && sku.d == spec.d &&
         sku.layout_b == spec.layout_b && epilogue && grouped_sku_runs_on(sku, spec.arch);
}

bool is_small_m(GemmSchedule s) {
  return s == GemmSchedule::pingpong || s == GemmSchedule::pingpong_fp8_fast_accum;
}

/// How well a SKU's schedule and tile suit a size class (higher is better): the class's own kernel
/// first; a medium class without its 64x256 kernel in the build falls back to the large one.
int class_fit(const GemmSku& sku, GroupedSizeClass size) {
  const bool small_m = is_small_m(sku.schedule);
  switch (size) {
    case GroupedSizeClass::decode:
      return small_m ? (sku.tile.n == 128 ? 3 : 2) : 0;
    case GroupedSizeClass::medium:
      return small_m ? (sku.tile.n == 256 ? 3 : 0) : 1;
    case GroupedSizeClass::large:
      return small_m ? 0 : 3;
  }
  return 0;
}

/// A rank of how well `sku` fits: arch-specific kernels first, then the kernel of the size class.
int preference(const GemmSku& sku, const GroupedGemmSpec& spec) {
  return (sku.arch.arch_specific ? 4 : 0) + class_fit(sku, grouped_size_class(spec));
}

Status check_dtypes(const GroupedGemmSpec& spec) {
  if (spec.a == DType::e2m1 || spec.b == DType::e2m1)
    return fail(errc::unsupported,
                fmt::format("grouped GEMM: e2m1 (fp4) needs sm_100 or newer and no such kernel is built; device is {}",
                            spec.arch.name()));
  if (spec.a != spec.b)
    return fail(errc::unsupported, fmt::format("grouped GEMM: a={} with b={}: A and B must have the same element type",
                                               name(spec.a), name(spec.b)));
  const bool fp8 = spec.a == DType::e4m3 || spec.a == DType::e5m2;
  if (fp8 && spec.arch.sm() < 89)
    return fail(errc::unsupported,
                fmt::format("grouped GEMM: {} needs sm_89 or newer; device is {}", name(spec.a), spec.arch.name()));
  if (spec.a != DType::bf16 && spec.a != DType::f16 && spec.a != DType::e4m3)
    return fail(errc::unsupported,
                fmt::format("grouped GEMM: a={} is not supported (bf16, f16 or e4m3)", name(spec.a)));
  if (fp8 && spec.layout_b != MatrixLayout::col)
    return fail(errc::unsupported,
                fmt::format("grouped GEMM: {} takes B only as N x K (layout_b=col, \"TN\"), not layout_b={}",
                            name(spec.a), name(spec.layout_b)));
  if (fp8 && spec.d != DType::bf16)
    return fail(errc::unsupported,
                fmt::format("grouped GEMM: {} inputs write d=bf16 only, not d={}", name(spec.a), name(spec.d)));
  if (spec.d != DType::bf16 && spec.d != DType::f16 && spec.d != DType::f32)
    return fail(errc::unsupported, fmt::format("grouped GEMM: d={} is not supported (bf16, f16 or f32)", name(spec.d)));
  return ok();
}

}  // namespace

namespace {

/// The checks every plan makes, whichever way its kernel was chosen.
Status check_spec(const GroupedGemmSpec& spec) {
  if (spec.sm_count <= 0)
    return fail(errc::invalid_argument,
                fmt::format("grouped GEMM: sm_count={} must be the device's multiprocessor count", spec.sm_count));
  for (auto [what, v] : {std::pair{"group_count_hint", spec.group_count_hint},
                         {"n_hint", spec.n_hint},
                         {"k_hint", spec.k_hint},
                         {"rows_per_group_hint", spec.rows_per_group_hint}})
    if (v < 0)
      return fail(errc::invalid_argument, fmt::format("grouped GEMM: {}={} must be 0 (unknown) or positive", what, v));
  CUACTOR_TRY(check_dtypes(spec));
  if (!spec.epilogue.is_preset()) {
    CUACTOR_TRY(spec.epilogue.check());
    if (const auto node = dense_only_output(spec.epilogue))
      return fail(errc::unsupported, fmt::format("grouped GEMM epilogue '{}': {} is supported for dense GEMM only",
                                                 spec.epilogue.token(), name(*node)));
    if (spec.arch != GpuArch{9, 0, true})
      return fail(errc::unsupported, fmt::format("grouped GEMM epilogue tree '{}' needs an sm_90a device, not {}",
                                                 spec.epilogue.token(), spec.arch.name()));
  }
  return ok();
}

Status check_sku_fits(const GemmSku& sku, const GroupedGemmSpec& spec) {
  if (spec_matches(sku, spec)) return ok();
  return fail(errc::unsupported,
              fmt::format("grouped GEMM: SKU {} does not compute a={} b={} d={} layout_b={} epilogue {} on {}",
                          sku.to_string(), name(spec.a), name(spec.b), name(spec.d), name(spec.layout_b),
                          spec.epilogue.token(), spec.arch.name()));
}

}  // namespace

Result<GroupedGemmPlan> GroupedGemmPlan::create(const GroupedGemmSpec& spec) {
  const nvtx::Range range("grouped.plan");
  CUACTOR_TRY(check_spec(spec));
  if (spec.sku_override) {
    const GemmSku& want = *spec.sku_override;
    const CatalogEntry* entry = find_in_catalog(want);
    if (entry == nullptr)
      return fail(errc::unsupported,
                  fmt::format("grouped GEMM: SKU {} is not compiled into this build", want.to_string()));
    CUACTOR_TRY(check_sku_fits(want, spec));
    CUACTOR_TRY(check_instance_abi(*entry->instance, sizeof(cuactor_grouped_args)));
    return GroupedGemmPlan(spec, entry->sku, entry->instance, nullptr, PlanSource::overridden);
  }
  const CatalogEntry* best = nullptr;
  for (const CatalogEntry* e : catalog_entries(GemmFamily::grouped)) {
    if (!spec_matches(e->sku, spec)) continue;
    if (best == nullptr || preference(e->sku, spec) > preference(best->sku, spec)) best = e;
  }
  if (best == nullptr)
    return fail(
        errc::unsupported,
        fmt::format("grouped GEMM: no kernel in this build computes a={} b={} d={} layout_b={} epilogue {} on {}",
                    name(spec.a), name(spec.b), name(spec.d), name(spec.layout_b), spec.epilogue.token(),
                    spec.arch.name()));
  CUACTOR_TRY(check_instance_abi(*best->instance, sizeof(cuactor_grouped_args)));
  return GroupedGemmPlan(spec, best->sku, best->instance, nullptr, PlanSource::heuristic);
}

Result<GroupedGemmPlan> GroupedGemmPlan::with_instance(const GroupedGemmSpec& spec, const GemmSku& sku,
                                                       const cuactor_gemm_instance& instance,
                                                       std::shared_ptr<const void> owner, PlanSource source) {
  const nvtx::Range range("grouped.plan");
  CUACTOR_TRY(check_spec(spec));
  CUACTOR_TRY(check_sku_fits(sku, spec));
  CUACTOR_TRY(check_instance_abi(instance, sizeof(cuactor_grouped_args)));
  return GroupedGemmPlan(spec, sku, &instance, std::move(owner), source);
}

Result<std::size_t> GroupedGemmPlan::kernel_scratch_bytes() const {
  cuactor_grouped_args args{};
  args.group_count = 1;
  args.device = spec_.device;
  args.sm_count = spec_.sm_count;
  args.alpha = 1.0f;
  return instance_->workspace_size(&args);
}

Status GroupedGemmPlan::check_scalars(const GroupedScalars& s, int group_count) const {
  const bool fp8 = spec_.a == DType::e4m3;
  if (!fp8 && (s.scale_a != nullptr || s.scale_b != nullptr))
    return fail(errc::invalid_argument,
                fmt::format("scale_a/scale_b are per-tensor fp8 scales; this plan multiplies {}", name(spec_.a)));
  (void)group_count;
  return ok();
}

Result<PreparedGroupedGemm> GroupedGemmPlan::prepare(std::span<const GroupedProblem> groups,
                                                     const GroupedScalars& scalars) const {
  const nvtx::Range range([&] { return "grouped.prepare " + std::to_string(groups.size()) + " groups"; });
  if (groups.empty()) return fail(errc::invalid_argument, "group_count=0: a grouped GEMM needs at least one group");
  if (!spec_.epilogue.is_preset())
    return fail(errc::unsupported, fmt::format("grouped GEMM epilogue tree '{}': trees take device-sized groups "
                                               "(DeviceSizedGroups), whose vectors are laid out per packed row / group",
                                               spec_.epilogue.token()));
  if (groups.size() > static_cast<std::size_t>(INT32_MAX / 3))
    return fail(errc::invalid_argument, fmt::format("group_count={} is too large", groups.size()));
  CUACTOR_TRY(check_scalars(scalars, static_cast<int>(groups.size())));
  bool any_k0 = false;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    CUACTOR_TRY(detail::validate_group(static_cast<int>(g), groups[g], spec_, scalars.beta));
    any_k0 |= groups[g].m > 0 && groups[g].n > 0 && groups[g].k == 0;
  }
  auto scratch = kernel_scratch_bytes();
  if (!scratch) return fail(scratch.error());
  const bool has_alpha = scalars.scale_a != nullptr || scalars.scale_b != nullptr;
  auto meta = std::make_unique<GroupedMetadata>();
  meta->layout = detail::make_grouped_layout(static_cast<int>(groups.size()), any_k0, has_alpha, false, *scratch);
  auto image = gpu::PinnedBuffer::allocate(meta->layout.upload_bytes);
  if (!image) return fail(image.error());
  detail::pack_grouped_metadata(groups, meta->layout, {static_cast<std::byte*>(image->data()), image->size()});
  meta->image = std::move(*image);
  meta->sku = sku_;
  meta->instance = instance_;
  meta->owner = owner_;
  meta->spec = spec_;
  meta->scalars = scalars;
  return PreparedGroupedGemm(std::move(meta));
}

Result<PreparedGroupedGemm> GroupedGemmPlan::prepare(const DeviceSizedGroups& groups,
                                                     const GroupedScalars& scalars) const {
  const nvtx::Range range(
      [&] { return "grouped.prepare " + std::to_string(groups.group_count) + " device-sized groups"; });
  CUACTOR_TRY(detail::validate_device_sized(groups, spec_, scalars.beta));
  CUACTOR_TRY(check_scalars(scalars, groups.group_count));
  auto scratch = kernel_scratch_bytes();
  if (!scratch) return fail(scratch.error());
  const bool has_alpha = scalars.scale_a != nullptr || scalars.scale_b != nullptr;
  auto meta = std::make_unique<GroupedMetadata>();
  meta->layout =
      detail::make_grouped_layout(groups.group_count, groups.k == 0, has_alpha, true, *scratch, spec_.epilogue);
  meta->sku = sku_;
  meta->instance = instance_;
  meta->owner = owner_;
  meta->spec = spec_;
  meta->scalars = scalars;
  meta->device_sized = groups;
  return PreparedGroupedGemm(std::move(meta));
}

PreparedGroupedGemm::PreparedGroupedGemm(std::unique_ptr<GroupedMetadata> meta) noexcept : meta_(std::move(meta)) {}
PreparedGroupedGemm::PreparedGroupedGemm(PreparedGroupedGemm&&) noexcept = default;
PreparedGroupedGemm& PreparedGroupedGemm::operator=(PreparedGroupedGemm&&) noexcept = default;
PreparedGroupedGemm::~PreparedGroupedGemm() = default;

std::size_t PreparedGroupedGemm::workspace_size() const noexcept {
  return meta_->layout.total;
}
const GemmSku& PreparedGroupedGemm::sku() const noexcept {
  return meta_->sku;
}
int PreparedGroupedGemm::group_count() const noexcept {
  return meta_->layout.group_count;
}

const std::int32_t* PreparedGroupedGemm::routing_error_flag(const void* workspace) const noexcept {
  if (meta_->layout.error_flag == detail::GroupedLayout::none || workspace == nullptr) return nullptr;
  return reinterpret_cast<const std::int32_t*>(static_cast<const std::byte*>(workspace) + meta_->layout.error_flag);
}

Status PreparedGroupedGemm::run(cudaStream_t stream, void* workspace, std::size_t workspace_bytes) const {
  const nvtx::Range range("grouped.run");
  const detail::GroupedLayout& l = meta_->layout;
  if (workspace_bytes < l.total)
    return fail(errc::workspace_too_small,
                fmt::format("grouped GEMM ({} groups, {}): workspace of {} bytes, needs {}", l.group_count,
                            meta_->sku.to_string(), workspace_bytes, l.total));
  if (workspace == nullptr || reinterpret_cast<std::uintptr_t>(workspace) % detail::kWorkspaceAlignment != 0)
    return fail(errc::invalid_argument,
                fmt::format("grouped GEMM: workspace={:#x} is not {}-byte aligned",
                            reinterpret_cast<std::uintptr_t>(workspace), detail::kWorkspaceAlignment));
  auto* ws = static_cast<std::byte*>(workspace);
  auto at = [&](std::size_t offset) { return offset == detail::GroupedLayout::none ? nullptr : ws + offset; };
  kernels::grouped::GroupedArrays arrays{
      reinterpret_cast<std::int32_t*>(at(l.shapes)),   reinterpret_cast<const void**>(at(l.ptr_a)),
      reinterpret_cast<const void**>(at(l.ptr_b)),     reinterpret_cast<const void**>(at(l.ptr_c)),
      reinterpret_cast<void**>(at(l.ptr_d)),           reinterpret_cast<std::int64_t*>(at(l.ld_a)),
      reinterpret_cast<std::int64_t*>(at(l.ld_b)),     reinterpret_cast<std::int64_t*>(at(l.ld_c)),
      reinterpret_cast<std::int64_t*>(at(l.ld_d)),     reinterpret_cast<float*>(at(l.alpha)),
      reinterpret_cast<std::int32_t*>(at(l.k0_rows)),  reinterpret_cast<const void**>(at(l.row_scale)),
      reinterpret_cast<const void**>(at(l.col_scale)), reinterpret_cast<const void**>(at(l.row_bias)),
      reinterpret_cast<const void**>(at(l.col_bias))};
  const GroupedScalars& s = meta_->scalars;
  const GroupedGemmSpec& spec = meta_->spec;
  if (meta_->device_sized) {
    const DeviceSizedGroups& g = *meta_->device_sized;
    auto* error_flag = reinterpret_cast<std::int32_t*>(at(l.error_flag));
    const int a_bytes = size_bits(spec.a) / 8, d_bytes = size_bits(spec.d) / 8;
    kernels::grouped::DeviceSizedParams p{g.group_count,
                                          g.rows,
                                          g.offsets,
                                          g.capacity_rows,
                                          g.n,
                                          g.k,
                                          static_cast<const char*>(g.a),
                                          g.lda,
                                          a_bytes,
                                          static_cast<const char*>(g.b),
                                          g.ldb,
                                          g.b_group_stride * (size_bits(spec.b) / 8),
                                          static_cast<const char*>(g.c),
                                          g.ldc,
                                          static_cast<char*>(g.d),
                                          g.ldd,
                                          d_bytes,
                                          s.alpha,
                                          s.scale_a,
                                          s.scale_b,
                                          error_flag,
                                          reinterpret_cast<const char*>(g.epilogue.row_scale),
                                          reinterpret_cast<const char*>(g.epilogue.col_scale),
                                          static_cast<const char*>(g.epilogue.row_bias),
                                          static_cast<const char*>(g.epilogue.col_bias)};
    CUACTOR_TRY(gpu::check(detail::launch_build_device_sized_args(p, arrays, stream),
                           "grouped GEMM: building device-sized arguments"));
  } else {
    CUACTOR_TRY(gpu::copy_async(ws, meta_->image.data(), l.upload_bytes, stream));
    if (arrays.alpha != nullptr)
      CUACTOR_TRY(gpu::check(detail::launch_fold_fp8_scales(l.group_count, s.alpha, s.scale_a, s.scale_a_per_group,
                                                            s.scale_b, arrays.alpha, stream),
                             "grouped GEMM: folding fp8 scales"));
  }
  if (arrays.k0_rows != nullptr)
    CUACTOR_TRY(gpu::check(detail::launch_beta_times_c(spec.d, arrays, l.group_count, s.beta, stream),
                           "grouped GEMM: D = beta * C for K = 0 groups"));

  cuactor_grouped_args args{};
  args.group_count = l.group_count;
  args.problem_shapes = arrays.problem_shapes;
  args.ptr_a = arrays.ptr_a;
  args.ptr_b = arrays.ptr_b;
  args.ptr_c = arrays.ptr_c;
  args.ptr_d = arrays.ptr_d;
  args.ld_a = arrays.ld_a;
  args.ld_b = arrays.ld_b;
  args.ld_c = arrays.ld_c;
  args.ld_d = arrays.ld_d;
  args.alpha = s.alpha;
  args.beta = s.beta;
  args.alpha_per_group = arrays.alpha;
  args.epilogue.row_scale = arrays.row_scale;
  args.epilogue.col_scale = arrays.col_scale;
  args.epilogue.row_bias = arrays.row_bias;
  args.epilogue.col_bias = arrays.col_bias;
  if (meta_->device_sized) {
    args.epilogue.clamp_lo = meta_->device_sized->epilogue.clamp_lo;
    args.epilogue.clamp_hi = meta_->device_sized->epilogue.clamp_hi;
  }
  args.device = spec.device;
  args.sm_count = spec.sm_count;
  const int rc = meta_->instance->run(&args, ws + l.scratch, l.scratch_bytes, stream);
  if (rc == CUACTOR_KERNEL_OK) return ok();
  if (rc == CUACTOR_KERNEL_LAUNCH_FAILED)
    return gpu::check(cudaGetLastError(), fmt::format("grouped GEMM {}: launch", meta_->sku.to_string()));
  return fail(errc::internal,
              fmt::format("grouped GEMM {}: instance run returned status {}", meta_->sku.to_string(), rc));
}

}  // namespace cuactor::kernels
