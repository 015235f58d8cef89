// The SwiGLU between the expert FFN's two grouped GEMMs (moe_launch.hpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/activations.cuh"
#include "kernels/moe_launch.hpp"

namespace cuactor::kernels::detail {
namespace {

template <class T>
struct Pair;
template <>
struct Pair<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ float2 to_float2(type v) { return __bfloat1622float2(v); }
  static __device__ type from_float2(float2 v) { return __float22bfloat162_rn(v); }
};
template <>
struct Pair<__half> {
  using type = __half2;
  static __device__ float2 to_float2(type v) { return __half22float2(v); }
  static __device__ type from_float2(float2 v) { return __float22half2_rn(v); }
};

/// Two output columns per thread (F is even), grid-stride over the valid rows read from the device.
template <class T>
__global__ void swiglu(const T* h, T* out, const std::int32_t* offsets, int experts, std::int64_t capacity_rows,
                       int ffn, bool interleaved) {
  using P = Pair<T>;
  std::int64_t rows = offsets[experts - 1];
  rows = rows < 0 ? 0 : (rows > capacity_rows ? capacity_rows : rows);
  const std::int64_t half = ffn / 2;
  const std::int64_t pairs = rows * half;
  const auto* hp = reinterpret_cast<const typename P::type*>(h);
  auto* op = reinterpret_cast<typename P::type*>(out);
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < pairs;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / half, c = i % half;
    float2 g, u;
    if (interleaved) {  // h row r: (gate, up) of column 2c, then of column 2c + 1
      g = P::to_float2(hp[r * ffn + 2 * c]);
      u = P::to_float2(hp[r * ffn + 2 * c + 1]);
      const float up0 = g.y;
      g.y = u.x;
      u.x = up0;
    } else {
      g = P::to_float2(hp[r * ffn + c]);         // h row r holds 2F values = F pairs
      u = P::to_float2(hp[r * ffn + half + c]);  // up starts F values (F/2 pairs) later
    }
    op[r * half + c] = P::from_float2(make_float2(fast_silu(g.x) * u.x, fast_silu(g.y) * u.y));
  }
}

}  // namespace

cudaError_t launch_swiglu(DType dtype, const void* h, void* out, const std::int32_t* offsets, int experts,
                          std::int64_t capacity_rows, int ffn, bool interleaved, int blocks,
                          cudaStream_t stream) noexcept {
  constexpr int kThreads = 256;
  const auto grid = static_cast<unsigned>(blocks > 0 ? blocks : 1);
  if (dtype == DType::bf16)
    swiglu<<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(h), static_cast<__nv_bfloat16*>(out),
                                          offsets, experts, capacity_rows, ffn, interleaved);
  else if (dtype == DType::f16)
    swiglu<<<grid, kThreads, 0, stream>>>(static_cast<const __half*>(h), static_cast<__half*>(out), offsets, experts,
                                          capacity_rows, ffn, interleaved);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace cuactor::kernels::detail
