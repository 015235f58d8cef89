/// @file
/// Test support: host elements of the GEMM and convolution dtypes (bf16, f16, e4m3, f32) as the
/// device stores them, with the rounded value the fp64 references use.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuactor/core/dtype.hpp"

namespace cuactor::test_support {

/// Rounds `x` to `t` and returns the stored bytes (appended to `bytes`) and the rounded value.
inline double store(DType t, double x, std::vector<std::uint8_t>& bytes) {
  const auto put = [&bytes](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  };
  const float f = static_cast<float>(x);
  switch (t) {
    case DType::bf16: {
      const __nv_bfloat16 v = __float2bfloat16_rn(f);
      put(&v, sizeof v);
      return static_cast<double>(__bfloat162float(v));
    }
    case DType::f16: {
      const __half v = __float2half_rn(f);
      put(&v, sizeof v);
      return static_cast<double>(__half2float(v));
    }
    case DType::e4m3: {
      const __nv_fp8_e4m3 v(f);
      put(&v, sizeof v);
      return static_cast<double>(static_cast<float>(v));
    }
    case DType::f32:
      put(&f, sizeof f);
      return static_cast<double>(f);
    default:
      ADD_FAILURE() << "no host conversion for " << name(t);
      return 0;
  }
}

/// Reads element `i` of a buffer of `t`.
inline double load(DType t, const std::vector<std::uint8_t>& bytes, std::size_t i) {
  switch (t) {
    case DType::bf16: {
      __nv_bfloat16_raw v{};
      std::memcpy(&v.x, bytes.data() + 2 * i, 2);
      return static_cast<double>(__bfloat162float(__nv_bfloat16(v)));
    }
    case DType::f16: {
      __half_raw v{};
      std::memcpy(&v.x, bytes.data() + 2 * i, 2);
      return static_cast<double>(__half2float(__half(v)));
    }
    case DType::f32: {
      float v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      return static_cast<double>(v);
    }
    default:
      ADD_FAILURE() << "no host conversion for " << name(t);
      return 0;
  }
}

/// Random values rounded to a dtype: the device bytes and the rounded doubles.
struct HostVector {
  std::vector<std::uint8_t> bytes;
  std::vector<double> values;
};
/// `count` values uniform in [lo, hi), rounded to `t`.
inline HostVector random_values(DType t, std::size_t count, double lo, double hi, std::mt19937_64& rng) {
  HostVector v;
  std::uniform_real_distribution<double> dist(lo, hi);
  for (std::size_t i = 0; i < count; ++i) v.values.push_back(store(t, dist(rng), v.bytes));
  return v;
}
/// Overwrites element i of `v` with `x` (rounded to `t`).
inline void set_value(HostVector& v, DType t, std::size_t i, double x) {
  std::vector<std::uint8_t> one;
  v.values[i] = store(t, x, one);
  std::memcpy(v.bytes.data() + i * one.size(), one.data(), one.size());
}

/// Relative Frobenius error of outputs against an fp64 reference, accumulated element by element; a
/// NaN or infinite output counts as a miss instead (where the reference is finite).
struct RelativeError {
  double num = 0, den = 0;
  long misses = 0;
  void add(double got, double ref) {
    if (!std::isfinite(got)) {
      ++misses;
      return;
    }
    num += (got - ref) * (got - ref);
    den += ref * ref;
  }
  [[nodiscard]] double value() const { return den > 0 ? std::sqrt(num / den) : std::sqrt(num); }
};

}  // namespace cuactor::test_support
