/// @file
/// Device helpers of the grouped GEMM GPU tests (grouped_test_kernels.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuactor/core/dtype.hpp"

namespace cuactor::kernels::test_support {

/// One GEMM for the reference: D = alpha * A B + beta * C, A row-major M x K, B N x K (b_col) or
/// K x N row-major, C row-major in D's type.
struct RefProblem {
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  std::int64_t lda = 0;
  const void* b = nullptr;
  std::int64_t ldb = 0;
  bool b_col = true;
  const void* c = nullptr;
  std::int64_t ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
};

/// Fills `count` elements of type `t` with hashed values uniform in [-scale, scale).
cudaError_t fill_random(DType t, void* p, std::size_t count, std::uint64_t seed, float scale, cudaStream_t s);

/// ref[i] = the exact (fp64) result of element i (row-major m x n), mag[i] = the sum of the absolute
/// values of its terms (the scale of the accumulated rounding).
cudaError_t reference_gemm(DType ab, DType d, const RefProblem& p, double* ref, double* mag, cudaStream_t s);

/// Counts into *bad every element of `out` (element type d, leading dimension ldd) with
/// |out - ref| > rel_tol * |ref| + mag_tol * mag (NaN included), and raises *worst to the largest
/// error / bound ratio seen.
cudaError_t compare_output(DType d, const void* out, std::int64_t ldd, const double* ref, const double* mag, int m,
                           int n, double rel_tol, double mag_tol, unsigned long long* bad, double* worst,
                           cudaStream_t s);

}  // namespace cuactor::kernels::test_support
