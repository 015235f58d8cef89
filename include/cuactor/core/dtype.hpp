/// @file
/// Element types cuactor kernels and buffers understand.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <library_types.h>

#include <cstddef>
#include <optional>
#include <string_view>

#include "cuactor/core/cxx20.hpp"

namespace cuactor {

/// Element type of a buffer or a kernel operand.
enum class DType {
  f64,
  f32,
  tf32,  ///< f32 storage, tensor-core tf32 arithmetic.
  f16,
  bf16,
  e4m3,  ///< fp8 E4M3 (OCP).
  e5m2,  ///< fp8 E5M2 (OCP).
  e2m1,  ///< fp4 E2M1 (OCP), two elements per byte.
  i64,
  i32,
  i8,
  u8,
};

/// Size of one element in bits (4 for e2m1).
constexpr int size_bits(DType t) noexcept {
  switch (t) {
    case DType::f64:
    case DType::i64:
      return 64;
    case DType::f32:
    case DType::tf32:
    case DType::i32:
      return 32;
    case DType::f16:
    case DType::bf16:
      return 16;
    case DType::e4m3:
    case DType::e5m2:
    case DType::i8:
    case DType::u8:
      return 8;
    case DType::e2m1:
      return 4;
  }
  return 0;
}

/// Bytes taken by `count` elements (rounded up for sub-byte types).
constexpr std::size_t storage_bytes(DType t, std::size_t count) noexcept {
  return (count * static_cast<std::size_t>(size_bits(t)) + 7) / 8;
}

/// True for the fp8 and fp4 types.
constexpr bool is_low_precision_float(DType t) noexcept {
  return t == DType::e4m3 || t == DType::e5m2 || t == DType::e2m1;
}

/// Canonical lower-case name ("bf16", "e4m3", ...).
std::string_view name(DType t) noexcept;
/// Parses a canonical name (also accepts "float32", "half", "bfloat16", "fp8_e4m3", ...).
std::optional<DType> parse_dtype(std::string_view s) noexcept;

/// CUDA's library name of a type (cudaDataType_t, as cuBLAS and cuBLASLt take it), or nullopt for
/// types without one (tf32 is f32 storage: CUDA_R_32F).
constexpr std::optional<cudaDataType_t> library_data_type(DType t) noexcept {
  switch (t) {
    case DType::f64:
      return CUDA_R_64F;
    case DType::f32:
    case DType::tf32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::e4m3:
      return CUDA_R_8F_E4M3;
    case DType::e5m2:
      return CUDA_R_8F_E5M2;
    case DType::e2m1:
      return CUDA_R_4F_E2M1;
    case DType::i64:
      return CUDA_R_64I;
    case DType::i32:
      return CUDA_R_32I;
    case DType::i8:
      return CUDA_R_8I;
    case DType::u8:
      return CUDA_R_8U;
  }
  return std::nullopt;
}

/// Maps a C++ element type to its DType (float, double, int32_t, CUDA's __half, __nv_bfloat16,
/// __nv_fp8_e4m3, __nv_fp8_e5m2, ...).
template <class T>
struct dtype_of;
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<long long> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<long> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<int> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<signed char> {
  static constexpr DType value = DType::i8;
};
template <>
struct dtype_of<unsigned char> {
  static constexpr DType value = DType::u8;
};
template <>
struct dtype_of<__half> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<__nv_bfloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<__nv_fp8_e4m3> {
  static constexpr DType value = DType::e4m3;
};
template <>
struct dtype_of<__nv_fp8_e5m2> {
  static constexpr DType value = DType::e5m2;
};

}  // namespace cuactor
