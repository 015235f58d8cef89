// The expert-parallel layer's device side (expert_routing.hpp): routing into expert rows, the row
// gather, and the per-token sum of the experts' outputs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cub/block/block_scan.cuh>

#include "parallel/expert_routing.hpp"

namespace cuactor::parallel::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kScanThreads = 1024;
constexpr int kVector = 8;  // elements of 16 bits per 16-byte access

__device__ std::int64_t global_thread() {
  return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
}
__device__ std::int64_t grid_threads() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

/// Pairs per local expert: a histogram per block in shared memory, added to the global one.
__global__ void count_pairs(LocalRouting r) {
  extern __shared__ std::int32_t block_counts[];
  for (int e = threadIdx.x; e < r.local_experts; e += blockDim.x) block_counts[e] = 0;
  __syncthreads();
  const std::int64_t slots = r.tokens * r.top_k;
  int errors = 0;
  for (std::int64_t i = global_thread(); i < slots; i += grid_threads()) {
    const int id = r.expert_ids[i];
    if (id < -1 || id >= r.experts) {
      ++errors;
      continue;
    }
    const int local = id - r.first_local;
    if (id >= 0 && local >= 0 && local < r.local_experts) atomicAdd(&block_counts[local], 1);
  }
  if (errors != 0) atomicAdd(r.error_count, errors);
  __syncthreads();
  for (int e = threadIdx.x; e < r.local_experts; e += blockDim.x)
    if (block_counts[e] != 0) atomicAdd(&r.counts[e], block_counts[e]);
}

/// offsets = inclusive prefix sum of counts; cursors = the exclusive one (each expert's first row).
__global__ void __launch_bounds__(kScanThreads) scan_counts(LocalRouting r) {
  using Scan = cub::BlockScan<std::int32_t, kScanThreads>;
  __shared__ typename Scan::TempStorage storage;
  std::int32_t carry = 0;
  for (int base = 0; base < r.local_experts; base += kScanThreads) {
    const int e = base + static_cast<int>(threadIdx.x);
    const std::int32_t count = e < r.local_experts ? r.counts[e] : 0;
    std::int32_t inclusive = 0, total = 0;
    Scan(storage).InclusiveSum(count, inclusive, total);
    if (e < r.local_experts) {
      r.offsets[e] = carry + inclusive;
      r.cursors[e] = carry + inclusive - count;
    }
    carry += total;
    __syncthreads();  // the next chunk reuses the scan's shared storage
  }
}

/// Gives each local slot a row of its expert and records the row's token and weight.
__global__ void place_pairs(LocalRouting r) {
  const std::int64_t slots = r.tokens * r.top_k;
  for (std::int64_t i = global_thread(); i < slots; i += grid_threads()) {
    const int id = r.expert_ids[i];
    const int local = id - r.first_local;
    if (id < 0 || id >= r.experts || local < 0 || local >= r.local_experts) {
      r.pair_rows[i] = -1;
      continue;
    }
    const std::int32_t row = atomicAdd(&r.cursors[local], 1);
    r.pair_rows[i] = row;
    r.row_tokens[row] = static_cast<std::int32_t>(i / r.top_k);
    r.row_weights[row] = r.weights[i];
  }
}

__global__ void gather_rows(const uint4* x, const std::int32_t* row_tokens, const std::int32_t* offsets,
                            int local_experts, std::int64_t capacity, int vectors_per_row, uint4* expert_x) {
  std::int64_t rows = offsets[local_experts - 1];
  rows = rows < 0 ? 0 : (rows > capacity ? capacity : rows);
  const std::int64_t total = rows * vectors_per_row;
  for (std::int64_t i = global_thread(); i < total; i += grid_threads()) {
    const std::int64_t row = i / vectors_per_row, v = i % vectors_per_row;
    expert_x[i] = x[static_cast<std::int64_t>(row_tokens[row]) * vectors_per_row + v];
  }
}

__device__ float to_f32(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ float to_f32(__half v) {
  return __half2float(v);
}
template <class T>
__device__ T from_f32(float v);
template <>
__device__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

template <class T>
__global__ void combine_rows(const uint4* expert_y, const std::int32_t* pair_rows, std::int64_t tokens, int top_k,
                             int vectors_per_row, uint4* out) {
  const std::int64_t total = tokens * vectors_per_row;
  for (std::int64_t i = global_thread(); i < total; i += grid_threads()) {
    const std::int64_t token = i / vectors_per_row, v = i % vectors_per_row;
    float sum[kVector] = {};
    for (int j = 0; j < top_k; ++j) {
      const std::int32_t row = pair_rows[token * top_k + j];
      if (row < 0) continue;
      const uint4 packed = expert_y[static_cast<std::int64_t>(row) * vectors_per_row + v];
      const T* values = reinterpret_cast<const T*>(&packed);
#pragma unroll
      for (int e = 0; e < kVector; ++e) sum[e] += to_f32(values[e]);
    }
    uint4 packed;
    T* values = reinterpret_cast<T*>(&packed);
#pragma unroll
    for (int e = 0; e < kVector; ++e) values[e] = from_f32<T>(sum[e]);
    out[i] = packed;
  }
}

unsigned grid_for(std::int64_t work, int sm_count) {
  const std::int64_t most = static_cast<std::int64_t>(sm_count > 0 ? sm_count : 132) * 8;
  const std::int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > most ? most : blocks));
}

}  // namespace

cudaError_t launch_route(const LocalRouting& r, int sm_count, cudaStream_t stream) noexcept {
  if (const cudaError_t e = cudaMemsetAsync(r.counts, 0, sizeof(std::int32_t) * r.local_experts, stream);
      e != cudaSuccess)
    return e;
  if (const cudaError_t e = cudaMemsetAsync(r.error_count, 0, sizeof(std::int32_t), stream); e != cudaSuccess) return e;
  const std::int64_t slots = r.tokens * r.top_k;
  const unsigned grid = grid_for(slots, sm_count);
  count_pairs<<<grid, kThreads, sizeof(std::int32_t) * r.local_experts, stream>>>(r);
  scan_counts<<<1, kScanThreads, 0, stream>>>(r);
  place_pairs<<<grid, kThreads, 0, stream>>>(r);
  return cudaGetLastError();
}

cudaError_t launch_gather_rows(DType dtype, const void* x, const std::int32_t* row_tokens, const std::int32_t* offsets,
                               int local_experts, std::int64_t capacity, int hidden, void* expert_x, int sm_count,
                               cudaStream_t stream) noexcept {
  if (dtype != DType::bf16 && dtype != DType::f16) return cudaErrorInvalidValue;
  const int vectors = hidden / kVector;
  gather_rows<<<grid_for(capacity * vectors, sm_count), kThreads, 0, stream>>>(static_cast<const uint4*>(x), row_tokens,
                                                                               offsets, local_experts, capacity,
                                                                               vectors, static_cast<uint4*>(expert_x));
  return cudaGetLastError();
}

cudaError_t launch_combine_rows(DType dtype, const void* expert_y, const std::int32_t* pair_rows, std::int64_t tokens,
                                int top_k, int hidden, void* out, int sm_count, cudaStream_t stream) noexcept {
  const int vectors = hidden / kVector;
  const unsigned grid = grid_for(tokens * vectors, sm_count);
  const auto* y = static_cast<const uint4*>(expert_y);
  auto* o = static_cast<uint4*>(out);
  if (dtype == DType::bf16)
    combine_rows<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(y, pair_rows, tokens, top_k, vectors, o);
  else if (dtype == DType::f16)
    combine_rows<__half><<<grid, kThreads, 0, stream>>>(y, pair_rows, tokens, top_k, vectors, o);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace cuactor::parallel::detail
