/// @file
/// Test support for bf16 results: random inputs, their fp64 values, and the relative Frobenius error
/// against an fp64 reference that the kernel tests bound (8e-3 for bf16 outputs).
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace cuactor::test_support {

/// `n` values uniform in [-1, 1), rounded to bf16; the same for the same seed.
inline std::vector<__nv_bfloat16> random_bf16(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<__nv_bfloat16> v(n);
  for (auto& x : v) x = __float2bfloat16(d(rng));
  return v;
}

/// The exact value of a bf16.
inline double f64(__nv_bfloat16 x) {
  return double(__bfloat162float(x));
}

/// The exact values of bf16s.
inline std::vector<double> to_f64(const std::vector<__nv_bfloat16>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = f64(v[i]);
  return out;
}

/// Relative Frobenius error of `got` against `ref` (infinite when the sizes differ).
inline double relative_error(const std::vector<__nv_bfloat16>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = f64(got[i]);
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

}  // namespace cuactor::test_support
