/// @file
/// Host entry points of the runtime's own kernels (kernels.cu): fill and the recovery canary.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace cuactor::runtime::kernels {

/// Enqueues a fill of `count` elements of `element_bytes` (1, 2, 4, 8 or 16) bytes with the pattern at
/// `value`; cudaErrorInvalidValue for other widths.
cudaError_t launch_fill(void* dst, std::size_t count, const void* value, std::size_t element_bytes,
                        cudaStream_t stream);

/// Number of elements the canary kernel writes.
inline constexpr unsigned canary_elements = 1024;
/// Value the canary kernel writes at index `i` for `seed` (host and device agree on it).
constexpr std::uint32_t canary_value(std::uint32_t i, std::uint32_t seed) {
  return (i * 2654435761u) ^ seed;
}
/// Enqueues the canary kernel writing canary_value(i, seed) to out[i] for i < canary_elements.
cudaError_t launch_canary(std::uint32_t* out, std::uint32_t seed, cudaStream_t stream);

}  // namespace cuactor::runtime::kernels
