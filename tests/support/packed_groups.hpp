/// @file
/// Test support: the device-sized groups of an MoE layer's packed operands.
#pragma once

#include <cstdint>

#include "cuactor/kernels/grouped_gemm.hpp"

namespace cuactor::test_support {

/// Device-sized groups over packed operands, as an MoE layer lays them out: A `capacity_rows` x `k`
/// (lda = k), one `n` x `k` matrix per group back to back in B (layout_b col), D `capacity_rows` rows
/// with leading dimension `ldd`; group rows from `offsets` (device memory).
inline kernels::DeviceSizedGroups packed_groups(int group_count, const std::int32_t* offsets,
                                                std::int64_t capacity_rows, int n, int k, const void* a, const void* b,
                                                void* d, std::int64_t ldd) {
  kernels::DeviceSizedGroups g;
  g.group_count = group_count;
  g.offsets = offsets;
  g.capacity_rows = capacity_rows;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = k;
  g.b = b;
  g.ldb = k;
  g.b_group_stride = std::int64_t{n} * k;
  g.d = d;
  g.ldd = ldd;
  return g;
}

}  // namespace cuactor::test_support
