// The reduction of a split-K dense GEMM (split_k.hpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/split_k.hpp"

namespace cuactor::kernels::detail {
namespace {

/// One output element per thread, grid-stride; the partial sums are read coalesced, slice by slice.
/// A programmatic dependent launch: nothing is read before griddepcontrol.wait, which returns once the
/// slice kernel has completed and its writes are visible (at once after a plain launch); then it
/// releases its own programmatic dependent (the next GEMM's prologue overlaps the reduction).
template <class T>
__global__ void split_k_reduce(const float* partials, int splits, std::int64_t m, std::int64_t n, float alpha,
                               float beta, const T* c, std::int64_t ldc, T* d, std::int64_t ldd) {
  const std::int64_t elements = m * n;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  // The next kernel on the stream may become resident now: a programmatic dependent waits for this
  // grid's completion before it touches memory.
  asm volatile("griddepcontrol.launch_dependents;");
#endif
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < elements;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) acc += partials[s * elements + i];
    const std::int64_t r = i / n, col = i % n;
    float v = alpha * acc;
    if (beta != 0.0f) v += beta * static_cast<float>(c[r * ldc + col]);
    d[r * ldd + col] = static_cast<T>(v);  // round to nearest
  }
}

template <class T>
cudaError_t launch(const float* partials, int splits, std::int64_t m, std::int64_t n, float alpha, float beta,
                   const void* c, std::int64_t ldc, void* d, std::int64_t ldd, int blocks, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const std::int64_t needed = (m * n + kThreads - 1) / kThreads;
  const auto grid = static_cast<unsigned>(needed < blocks ? (needed > 0 ? needed : 1) : (blocks > 0 ? blocks : 1));
  // The wait exists in sm_90 code only: code compiled for an older virtual architecture launches
  // plainly. That is the PTX version, not the binary's: PTX JIT-compiled for the device reports the
  // device's binary version (a build for the compiler's default sm_75 ran a programmatic reduction
  // without its wait). Looked up once per element type (split plans run on sm_90a devices only).
  static const bool programmatic_launch = [] {
    cudaFuncAttributes attributes{};
    if (cudaFuncGetAttributes(&attributes, split_k_reduce<T>) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attributes.ptxVersion >= 90;
  }();
  if (!programmatic_launch) {
    split_k_reduce<<<grid, kThreads, 0, stream>>>(partials, splits, m, n, alpha, beta, static_cast<const T*>(c), ldc,
                                                  static_cast<T*>(d), ldd);
    return cudaGetLastError();
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  cudaLaunchAttribute programmatic{};
  programmatic.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  programmatic.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &programmatic;
  config.numAttrs = 1;
  const cudaError_t launched = cudaLaunchKernelEx(&config, split_k_reduce<T>, partials, splits, m, n, alpha, beta,
                                                  static_cast<const T*>(c), ldc, static_cast<T*>(d), ldd);
  if (launched != cudaSuccess) (void)cudaGetLastError();  // reported here, not again by a later launch
  return launched;
}

}  // namespace

cudaError_t launch_split_k_reduce(DType dtype, const float* partials, int splits, std::int64_t m, std::int64_t n,
                                  float alpha, float beta, const void* c, std::int64_t ldc, void* d, std::int64_t ldd,
                                  int blocks, cudaStream_t stream) noexcept {
  switch (dtype) {
    case DType::bf16:
      return launch<__nv_bfloat16>(partials, splits, m, n, alpha, beta, c, ldc, d, ldd, blocks, stream);
    case DType::f16:
      return launch<__half>(partials, splits, m, n, alpha, beta, c, ldc, d, ldd, blocks, stream);
    case DType::f32:
      return launch<float>(partials, splits, m, n, alpha, beta, c, ldc, d, ldd, blocks, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace cuactor::kernels::detail
