/// @file
/// GemmSku ([K2]): the identity of one compiled GEMM kernel configuration.
#pragma once

#include <compare>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/dtype.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/kernels/epilogue.hpp"

extern "C" {
struct cuactor_gemm_sku_desc;
}

namespace cuactor::kernels {

/// Kind of GEMM a kernel computes.
enum class GemmFamily {
  dense,       ///< One (optionally batched) GEMM with host-known shape.
  grouped,     ///< Ptr-array grouped GEMM; shapes and pointers live in device memory.
  conv_fprop,  ///< Convolution forward (implicit GEMM): y = conv(x, w).
  conv_dgrad,  ///< Convolution data gradient (implicit GEMM): dx from dy and w.
  conv_wgrad,  ///< Convolution filter gradient (implicit GEMM): dw from dy and x.
};

/// True for the three convolution families (their SKUs describe tensors, not matrices).
bool is_conv(GemmFamily f) noexcept;

/// Storage order of a matrix operand.
enum class MatrixLayout {
  row,   ///< Row-major: the last index is contiguous.
  col,   ///< Column-major: the first index is contiguous.
  nhwc,  ///< Convolution activation or its gradient: N x H x W x C, channels contiguous.
  krsc,  ///< Convolution filter or its gradient: K x R x S x C, channels contiguous.
};

/// Mainloop / kernel schedule.
enum class GemmSchedule {
  cooperative,                         ///< sm_90a: two consumer warpgroups share a tile (large M).
  pingpong,                            ///< sm_90a: consumer warpgroups alternate tiles (small M, decode).
  cooperative_fp8_fast_accum,          ///< cooperative, fp8 with fast accumulation.
  pingpong_fp8_fast_accum,             ///< pingpong, fp8 with fast accumulation.
  cooperative_streamk,                 ///< cooperative with the stream-K tile scheduler (few output tiles, long K).
  cooperative_fp8_fast_accum_streamk,  ///< cooperative_fp8_fast_accum with the stream-K tile scheduler.
  multistage,                          ///< sm_80: CUTLASS 2.x cp.async multistage mainloop.
  warpspecialized,                     ///< sm_90a: one TMA producer warp, one consumer warpgroup, one tile per
                                       ///< CTA (CUTLASS 4.2's only sm_90a convolution schedule).
  coresident,  ///< sm_90a convolution: one producer and one consumer warpgroup per CTA, two CTAs per
               ///< multiprocessor (one's fill and epilogue overlap the other's mainloop).
};

/// A (m, n, k) triple: CTA tile or cluster shape.
struct Shape3 {
  int m = 0;
  int n = 0;
  int k = 0;
  friend constexpr auto operator<=>(const Shape3&, const Shape3&) = default;
};

/// Token of each enum value as it appears in SKU strings and instantiation-template placeholders.
std::string_view name(GemmFamily f) noexcept;
/// Token of a layout ("row", "col").
std::string_view name(MatrixLayout l) noexcept;
/// Token of a schedule ("cooperative", "pingpong", "cooperative_streamk", ...).
std::string_view name(GemmSchedule s) noexcept;
/// Parses a family token.
std::optional<GemmFamily> parse_family(std::string_view s) noexcept;
/// Parses a layout token.
std::optional<MatrixLayout> parse_layout(std::string_view s) noexcept;
/// Parses a schedule token.
std::optional<GemmSchedule> parse_schedule(std::string_view s) noexcept;
/// True for schedules with the stream-K tile scheduler (dense sm_90a only; they need a workspace).
bool is_stream_k(GemmSchedule s) noexcept;

/// The identity of a compiled kernel: family, element types, layouts, tile, cluster, schedule,
/// epilogue and target architecture. Two kernels with equal SKUs are interchangeable.
struct GemmSku {
  GemmFamily family = GemmFamily::dense;
  GpuArch arch{9, 0, true};
  DType a = DType::bf16;
  DType b = DType::bf16;
  DType c = DType::bf16;
  DType d = DType::bf16;
  DType accumulator = DType::f32;
  MatrixLayout layout_a = MatrixLayout::row;
  MatrixLayout layout_b = MatrixLayout::col;
  MatrixLayout layout_c = MatrixLayout::row;  ///< Layout of C and D.
  Shape3 tile{128, 256, 64};
  Shape3 cluster{1, 1, 1};
  int stages = 0;  ///< Mainloop stages; 0 = chosen by the collective builder.
  GemmSchedule schedule = GemmSchedule::cooperative;
  EpilogueSpec epilogue;  ///< A preset or an epilogue tree ([K8]).

  /// Canonical text, e.g.
  /// "dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:128x256x64:2x1x1:s0:cooperative:linear_combination".
  [[nodiscard]] std::string to_string() const;
  /// The C identifier the catalog and the JIT give this SKU's instance object
  /// (kernels/catalog.cmake builds the same name).
  [[nodiscard]] std::string symbol_name() const;
  /// Parses to_string()'s format; `invalid_argument` naming the field that does not parse.
  static Result<GemmSku> parse(std::string_view text);
  /// Converts an instance's C description; `invalid_argument` naming the bad token.
  static Result<GemmSku> from_desc(const cuactor_gemm_sku_desc& desc);

  friend bool operator==(const GemmSku&, const GemmSku&) = default;
};

/// True when the convolution template of `sku`'s architecture runs its schedule with its tile: on
/// sm_90a CUTLASS's one-warpgroup kernel (warpspecialized), cuactor's cooperative one, whose two
/// consumer warpgroups share a tile of 128 rows or more, its coresident one (one consumer
/// warpgroup, two CTAs per multiprocessor), or its persistent pingpong one (two consumer warpgroups
/// taking tiles of at most 128x128 in turn, no cluster); on sm_80 the multistage mainloop with 2 or
/// more stages and no cluster. Says nothing about the family: GEMM templates know neither
/// warpspecialized nor coresident.
bool conv_schedule_fits(const GemmSku& sku) noexcept;

/// Hash of every field of a SKU (stable within a process).
std::size_t hash_value(const GemmSku& sku) noexcept;

}  // namespace cuactor::kernels

/// Lets GemmSku key unordered containers.
template <>
struct std::hash<cuactor::kernels::GemmSku> {
  std::size_t operator()(const cuactor::kernels::GemmSku& s) const noexcept { return hash_value(s); }
};
