#include "cuactor/core/dtype.hpp"

#include <array>
#include <utility>

namespace cuactor {
namespace {

constexpr std::array<std::pair<std::string_view, DType>, 27> kNames{{
    {"f64", DType::f64},
    {"float64", DType::f64},
    {"double", DType::f64},
    {"f32", DType::f32},
    {"float32", DType::f32},
    {"float", DType::f32},
    {"tf32", DType::tf32},
    {"f16", DType::f16},
    {"float16", DType::f16},
    {"half", DType::f16},
    {"fp16", DType::f16},
    {"bf16", DType::bf16},
    {"bfloat16", DType::bf16},
    {"e4m3", DType::e4m3},
    {"fp8_e4m3", DType::e4m3},
    {"float8_e4m3fn", DType::e4m3},
    {"e5m2", DType::e5m2},
    {"fp8_e5m2", DType::e5m2},
    {"float8_e5m2", DType::e5m2},
    {"e2m1", DType::e2m1},
    {"fp4", DType::e2m1},
    {"i64", DType::i64},
    {"int64", DType::i64},
    {"i32", DType::i32},
    {"int32", DType::i32},
    {"i8", DType::i8},
    {"u8", DType::u8},
}};

}  // namespace

std::string_view name(DType t) noexcept {
  for (const auto& [n, d] : kNames)
    if (d == t) return n;  // the first entry of each type is its canonical name
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view s) noexcept {
  for (const auto& [n, d] : kNames)
    if (n == s) return d;
  return std::nullopt;
}

}  // namespace cuactor
