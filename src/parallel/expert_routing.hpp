/// @file
/// Internal: the device kernels of the expert-parallel layer (expert_routing.cu) that turn gathered
/// routing into the local experts' row layout and sum the experts' outputs back per token. Every
/// count stays on the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuactor/core/dtype.hpp"

namespace cuactor::parallel::detail {

/// The routing of the gathered tokens as the local experts see it.
struct LocalRouting {
  const std::int32_t* expert_ids = nullptr;  ///< tokens x top_k global ids (-1: empty slot).
  const float* weights = nullptr;            ///< tokens x top_k.
  std::int64_t tokens = 0;                   ///< Gathered tokens (R * T).
  int top_k = 0;
  int experts = 0;      ///< E over all ranks (ids at or past it are errors).
  int first_local = 0;  ///< Global id of the first local expert.
  int local_experts = 0;
  // Outputs and scratch, all in the workspace:
  std::int32_t* counts = nullptr;       ///< local_experts: pairs per local expert (zeroed by the launch).
  std::int32_t* offsets = nullptr;      ///< local_experts: cumulative end rows (the FFN's `offs`).
  std::int32_t* cursors = nullptr;      ///< local_experts: next free row per expert.
  std::int32_t* error_count = nullptr;  ///< Slots with an id outside [-1, E).
  std::int32_t* pair_rows = nullptr;    ///< tokens x top_k: the expert row of each local slot, else -1.
  std::int32_t* row_tokens = nullptr;   ///< capacity: the gathered token of each expert row.
  float* row_weights = nullptr;         ///< capacity: the routing weight of each expert row.
};

/// Counts, lays out and labels the local (token, expert) pairs: four kernels and a memset on `stream`.
/// Rows within one expert come in no particular order; nothing downstream depends on it.
cudaError_t launch_route(const LocalRouting& r, int sm_count, cudaStream_t stream) noexcept;

/// expert_x[row] = x[row_tokens[row]] for the rows below offsets[local_experts - 1] (each H elements of
/// `dtype`, H a multiple of 8).
cudaError_t launch_gather_rows(DType dtype, const void* x, const std::int32_t* row_tokens, const std::int32_t* offsets,
                               int local_experts, std::int64_t capacity, int hidden, void* expert_x, int sm_count,
                               cudaStream_t stream) noexcept;

/// out[t] = sum over j of expert_y[pair_rows[t k + j]] (slots with row -1 add nothing), in f32, rounded
/// once: the weighted outputs of the local experts, per gathered token.
cudaError_t launch_combine_rows(DType dtype, const void* expert_y, const std::int32_t* pair_rows, std::int64_t tokens,
                                int top_k, int hidden, void* out, int sm_count, cudaStream_t stream) noexcept;

}  // namespace cuactor::parallel::detail
