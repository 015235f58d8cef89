// Device helpers of the grouped GEMM GPU tests: random fills, an fp64 reference GEMM and an
// element-by-element comparison that counts every wrong element (a single wrong tile must show).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/grouped_test_kernels.hpp"

namespace cuactor::kernels::test_support {
namespace {

__device__ float hash_unit(std::uint64_t i, std::uint64_t seed) {
  std::uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
  x ^= x >> 31;
  x *= 0x7FB5D329728EA185ull;
  x ^= x >> 27;
  x *= 0x81DADEF4BC2DD44Dull;
  x ^= x >> 33;
  return static_cast<float>(x >> 40) / static_cast<float>(1ull << 24) * 2.0f - 1.0f;  // [-1, 1)
}

template <class T>
__device__ T from_float(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __half from_float<__half>(float v) {
  return __float2half(v);
}
template <>
__device__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float v) {
  return __nv_fp8_e4m3(v);
}

template <class T>
__device__ double to_double(T v) {
  return static_cast<double>(static_cast<float>(v));
}

template <class T>
__global__ void fill_kernel(T* p, std::size_t count, std::uint64_t seed, float scale) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += std::size_t{gridDim.x} * blockDim.x)
    p[i] = from_float<T>(scale * hash_unit(i, seed));
}

template <class TA, class TD>
__global__ void reference_kernel(RefProblem p, double* ref, double* mag) {
  const auto* a = static_cast<const TA*>(p.a);
  const auto* b = static_cast<const TA*>(p.b);
  const auto* c = static_cast<const TD*>(p.c);
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < std::int64_t{p.m} * p.n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t r = i / p.n, col = i % p.n;
    double acc = 0.0, abs_acc = 0.0;
    for (int q = 0; q < p.k; ++q) {
      const double av = to_double(a[r * p.lda + q]);
      const double bv = to_double(p.b_col ? b[col * p.ldb + q] : b[std::int64_t{q} * p.ldb + col]);
      acc += av * bv;
      abs_acc += fabs(av * bv);
    }
    double out = double{p.alpha} * acc;
    double out_mag = fabs(double{p.alpha}) * abs_acc;
    if (p.beta != 0.0f) {
      const double cv = to_double(c[r * p.ldc + col]);
      out += double{p.beta} * cv;
      out_mag += fabs(double{p.beta} * cv);
    }
    ref[i] = out;
    mag[i] = out_mag;
  }
}

template <class TD>
__global__ void compare_kernel(const void* d_ptr, std::int64_t ldd, const double* ref, const double* mag, int m, int n,
                               double rel_tol, double mag_tol, unsigned long long* bad, double* worst) {
  const auto* d = static_cast<const TD*>(d_ptr);
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < std::int64_t{m} * n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t r = i / n, col = i % n;
    const double got = to_double(d[r * ldd + col]);
    const double err = fabs(got - ref[i]);
    const double bound = rel_tol * fabs(ref[i]) + mag_tol * mag[i] + 1e-30;
    if (!(err <= bound)) {  // NaN (poison left in place) counts as wrong
      atomicAdd(bad, 1ull);
      const double ratio = err == err ? err / bound : 1e300;
      // Positive doubles order like their bit patterns.
      atomicMax(reinterpret_cast<unsigned long long*>(worst), __double_as_longlong(ratio));
    }
  }
}

constexpr int kBlocks = 264, kThreads = 256;

}  // namespace

cudaError_t fill_random(DType t, void* p, std::size_t count, std::uint64_t seed, float scale, cudaStream_t s) {
  switch (t) {
    case DType::bf16:
      fill_kernel<<<kBlocks, kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(p), count, seed, scale);
      break;
    case DType::f16:
      fill_kernel<<<kBlocks, kThreads, 0, s>>>(static_cast<__half*>(p), count, seed, scale);
      break;
    case DType::f32:
      fill_kernel<<<kBlocks, kThreads, 0, s>>>(static_cast<float*>(p), count, seed, scale);
      break;
    case DType::e4m3:
      fill_kernel<<<kBlocks, kThreads, 0, s>>>(static_cast<__nv_fp8_e4m3*>(p), count, seed, scale);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t reference_gemm(DType ab, DType d, const RefProblem& p, double* ref, double* mag, cudaStream_t s) {
  if (ab == DType::bf16 && d == DType::bf16)
    reference_kernel<__nv_bfloat16, __nv_bfloat16><<<kBlocks, kThreads, 0, s>>>(p, ref, mag);
  else if (ab == DType::bf16 && d == DType::f32)
    reference_kernel<__nv_bfloat16, float><<<kBlocks, kThreads, 0, s>>>(p, ref, mag);
  else if (ab == DType::f16 && d == DType::f16)
    reference_kernel<__half, __half><<<kBlocks, kThreads, 0, s>>>(p, ref, mag);
  else if (ab == DType::e4m3 && d == DType::bf16)
    reference_kernel<__nv_fp8_e4m3, __nv_bfloat16><<<kBlocks, kThreads, 0, s>>>(p, ref, mag);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t compare_output(DType d, const void* out, std::int64_t ldd, const double* ref, const double* mag, int m,
                           int n, double rel_tol, double mag_tol, unsigned long long* bad, double* worst,
                           cudaStream_t s) {
  switch (d) {
    case DType::bf16:
      compare_kernel<__nv_bfloat16>
          <<<kBlocks, kThreads, 0, s>>>(out, ldd, ref, mag, m, n, rel_tol, mag_tol, bad, worst);
      break;
    case DType::f16:
      compare_kernel<__half><<<kBlocks, kThreads, 0, s>>>(out, ldd, ref, mag, m, n, rel_tol, mag_tol, bad, worst);
      break;
    case DType::f32:
      compare_kernel<float><<<kBlocks, kThreads, 0, s>>>(out, ldd, ref, mag, m, n, rel_tol, mag_tol, bad, worst);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace cuactor::kernels::test_support
