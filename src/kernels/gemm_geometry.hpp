// Operand geometry shared by every dense GEMM back end (CUTLASS plans and cuBLAS): packed defaults
// of leading dimensions and batch strides, and the checks every back end needs (non-null pointer,
// leading dimension at least the contiguous extent, batch stride at least one matrix), and the two
// facts every CUTLASS plan of this layer (dense GEMM, convolution) assumes: the default SM count and
// the 16-byte alignment in elements. Host only; uses fmt.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "cuactor/core/dtype.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/kernels/gemm_plan.hpp"

namespace cuactor::kernels::detail {

/// The SM count plans assume when none is given: the H100/H200 SXM count.
inline constexpr int kDefaultSmCount = 132;

/// a / b rounded up (tiles covering an extent); b > 0.
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept {
  return (a + b - 1) / b;
}

/// The widest sm_90a tile swizzle (8, 4 or 2; else 1) that pads the grid of `sku`'s tiles over `p` by
/// at most 3%. CUTLASS rounds the grid up to swizzle x cluster tiles in both modes and runs the padding
/// tiles' mainloops on zero-filled loads, so a swizzle of 8 in 2x1 clusters would double the work of a
/// 1000-row problem; its own floor (at least 6, 3 or 2 tiles in the smaller mode) applies too.
inline int grid_swizzle(const GemmProblem& p, const GemmSku& sku) noexcept {
  const std::int64_t blocks_m = ceil_div(p.m, sku.tile.m), blocks_n = ceil_div(p.n, sku.tile.n);
  const auto padded = [&](std::int64_t swizzle) {
    const auto round_up = [](std::int64_t v, std::int64_t to) { return ceil_div(v, to) * to; };
    return round_up(blocks_m, swizzle * sku.cluster.m) * round_up(blocks_n, swizzle * sku.cluster.n);
  };
  for (const auto& [swizzle, min_blocks] : {std::pair{8, 6}, {4, 3}, {2, 2}})
    if (std::min(blocks_m, blocks_n) >= min_blocks && 100 * padded(swizzle) <= 103 * padded(1)) return swizzle;
  return 1;
}

/// Elements per 16 bytes: the alignment TMA and cp.async need of pointers, strides and the
/// contiguous extent (GEMM rows, convolution channels).
inline std::int64_t alignment_elements(DType t) {
  return 128 / size_bits(t);
}

/// `v` rounded up to a multiple of `a` (workspace layouts).
inline std::size_t align_up(std::size_t v, std::size_t a) noexcept {
  return (v + a - 1) / a * a;
}

/// True if `p` is 16-byte aligned (TMA base pointers).
inline bool aligned16(const void* p) noexcept {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

/// Extents of an R x C matrix stored in `layout`: the contiguous one and the other.
struct Extents {
  std::int64_t contiguous;
  std::int64_t strided;
};
inline Extents extents(std::int64_t rows, std::int64_t cols, MatrixLayout layout) {
  return layout == MatrixLayout::row ? Extents{cols, rows} : Extents{rows, cols};
}
/// `ld`, or the packed leading dimension (the contiguous extent) when it is 0.
inline std::int64_t ld_or_packed(std::int64_t rows, std::int64_t cols, MatrixLayout layout, std::int64_t ld) {
  return ld != 0 ? ld : extents(rows, cols, layout).contiguous;
}
/// `stride`, or the packed batch stride (strided extent x ld) when it is 0.
inline std::int64_t stride_or_packed(std::int64_t rows, std::int64_t cols, MatrixLayout layout, std::int64_t ld,
                                     std::int64_t stride) {
  return stride != 0 ? stride : extents(rows, cols, layout).strided * ld;
}

/// Bytes from the first element of a batch of R x C matrices to just past its last one (`ld` and
/// `batch_stride` already resolved); 0 for an empty matrix.
inline std::size_t span_bytes(DType t, std::int64_t rows, std::int64_t cols, MatrixLayout layout, std::int64_t ld,
                              std::int64_t batch, std::int64_t batch_stride) {
  if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
  const auto [contiguous, strided] = extents(rows, cols, layout);
  return storage_bytes(t, static_cast<std::size_t>((batch - 1) * batch_stride + (strided - 1) * ld + contiguous));
}

/// True when the byte ranges [a, a + a_bytes) and [b, b + b_bytes) share a byte (null pointers and
/// empty ranges share none).
inline bool bytes_overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a != nullptr && b != nullptr && a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

/// Non-null pointer, `ld` at least the contiguous extent and, for batch > 1, `batch_stride` at least
/// one matrix; `invalid_argument` naming the operand, the value and the rule.
inline Status check_operand_geometry(std::string_view what, const void* ptr, std::int64_t rows, std::int64_t cols,
                                     MatrixLayout layout, std::int64_t ld, std::int64_t batch,
                                     std::int64_t batch_stride) {
  const auto [contiguous, strided] = extents(rows, cols, layout);
  if (ptr == nullptr) return fail(errc::invalid_argument, fmt::format("GEMM operand {}: pointer is null", what));
  if (ld < contiguous)
    return fail(errc::invalid_argument,
                fmt::format("GEMM operand {} ({}x{} {}-major): ld{}={} is less than its contiguous extent {}", what,
                            rows, cols, name(layout), what, ld, contiguous));
  if (batch > 1 && batch_stride < strided * ld)
    return fail(errc::invalid_argument,
                fmt::format("GEMM operand {}: batch stride {} is less than one matrix ({} x ld {}) for batch {}", what,
                            batch_stride, strided, ld, batch));
  return ok();
}

}  // namespace cuactor::kernels::detail
