// The runtime's own kernels: a typed fill and the canary run after a context reset ([R8]).
#include <cuda_runtime.h>

#include <cstring>

#include "runtime/kernels.hpp"

namespace cuactor::runtime::kernels {
namespace {

template <class Word>
__global__ void fill_kernel(Word* dst, std::size_t count, Word value) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    dst[i] = value;
}

template <class Word>
cudaError_t fill_as(void* dst, std::size_t count, const void* value, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  Word word;
  std::memcpy(&word, value, sizeof(Word));
  constexpr unsigned threads = 256;
  // Enough blocks to cover the device a few times over; the grid-stride loop does the rest.
  const std::size_t wanted = (count + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(wanted < 4096 ? wanted : 4096);
  fill_kernel<Word><<<blocks, threads, 0, stream>>>(static_cast<Word*>(dst), count, word);
  return cudaGetLastError();
}

__global__ void canary_kernel(std::uint32_t* out, std::uint32_t seed) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < canary_elements) out[i] = canary_value(i, seed);
}

}  // namespace

cudaError_t launch_fill(void* dst, std::size_t count, const void* value, std::size_t element_bytes,
                        cudaStream_t stream) {
  switch (element_bytes) {
    case 1:
      return fill_as<unsigned char>(dst, count, value, stream);
    case 2:
      return fill_as<unsigned short>(dst, count, value, stream);
    case 4:
      return fill_as<unsigned int>(dst, count, value, stream);
    case 8:
      return fill_as<unsigned long long>(dst, count, value, stream);
    case 16:
      return fill_as<uint4>(dst, count, value, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t launch_canary(std::uint32_t* out, std::uint32_t seed, cudaStream_t stream) {
  canary_kernel<<<(canary_elements + 255) / 256, 256, 0, stream>>>(out, seed);
  return cudaGetLastError();
}

}  // namespace cuactor::runtime::kernels
