/// @file
/// Device kernels that feed the ptr-array grouped GEMM from device memory: building every group's
/// shape, pointers and leading dimensions from row counts or offsets written by an earlier kernel
/// (device-resident sizes, [K6]), folding per-tensor fp8 scales into a per-group alpha, and
/// D = beta * C for groups with K = 0 (which the GEMM kernel does not define). Plain CUDA, no
/// CUTLASS: these are also the kernels the NVRTC back end may compile. The parameter structs are
/// plain C++ (host code includes this header for them; the kernels need nvcc).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace cuactor::kernels::grouped {

/// Where the per-group metadata arrays live (device memory, group_count entries each).
struct GroupedArrays {
  std::int32_t* problem_shapes;  ///< {M, N, K} per group, as the GEMM kernel reads them.
  const void** ptr_a;
  const void** ptr_b;
  const void** ptr_c;
  void** ptr_d;
  std::int64_t* ld_a;
  std::int64_t* ld_b;
  std::int64_t* ld_c;
  std::int64_t* ld_d;
  float* alpha;            ///< alpha[g], or null when one alpha serves every group.
  std::int32_t* k0_rows;   ///< Rows of D = beta * C for K = 0 groups (0 elsewhere), or null.
  const void** row_scale;  ///< Epilogue tree vectors per group (rowscale, colscale, rowbias, colbias), or null.
  const void** col_scale;
  const void** row_bias;
  const void** col_bias;
};

/// A grouped GEMM over one packed A (rows of all groups stacked, as torch._grouped_mm's input) and
/// one weight tensor of group_count experts, whose per-group rows come from device memory.
struct DeviceSizedParams {
  int group_count;
  const std::int32_t* rows;     ///< Rows per group, or null when `offsets` is given.
  const std::int32_t* offsets;  ///< Cumulative end row of each group (torch `offs`), or null.
  std::int64_t capacity_rows;   ///< Rows of the packed A and D buffers.
  int n;
  int k;
  const char* a;  ///< Packed A, capacity_rows x lda elements of a_bytes.
  std::int64_t lda;
  int a_bytes;
  const char* b;  ///< Expert g's B starts at b + g * b_group_bytes.
  std::int64_t ldb;
  std::int64_t b_group_bytes;
  const char* c;  ///< Packed C (capacity_rows x ldc, element d_bytes) or null.
  std::int64_t ldc;
  char* d;  ///< Packed D, capacity_rows x ldd.
  std::int64_t ldd;
  int d_bytes;
  float alpha;
  const float* scale_a;       ///< fp8: scale of A (one value for the packed tensor), or null.
  const float* scale_b;       ///< fp8: scale of B[g] (group_count values), or null.
  std::int32_t* error_group;  ///< Set to 1 + the first group whose rows were invalid (0 = none).
  const char* row_scale;      ///< Epilogue tree: capacity_rows floats, or null.
  const char* col_scale;      ///< Epilogue tree: group_count x n floats, or null.
  const char* row_bias;       ///< Epilogue tree: capacity_rows values of D's type, or null.
  const char* col_bias;       ///< Epilogue tree: group_count x n values of D's type, or null.
};

#if defined(__CUDACC__)
/// One block; each thread takes groups tid, tid + blockDim, ...: computes the group's row range,
/// checks it against the capacity (a bad routing skips the group and reports it instead of
/// faulting), and writes the group's metadata. The block writes error_group itself at the end (the
/// smallest bad group + 1, or 0), so the flag needs no memset launch before it.
__global__ void build_device_sized_args(DeviceSizedParams p, GroupedArrays out) {
  __shared__ int first_bad;
  if (threadIdx.x == 0) first_bad = 0x7fffffff;
  __syncthreads();
  for (int g = static_cast<int>(threadIdx.x); g < p.group_count; g += static_cast<int>(blockDim.x)) {
    std::int64_t begin = 0, end = 0;
    if (p.offsets != nullptr) {
      begin = g == 0 ? 0 : p.offsets[g - 1];
      end = p.offsets[g];
    } else {
      for (int i = 0; i < g; ++i) begin += p.rows[i];
      end = begin + p.rows[g];
    }
    std::int64_t rows = end - begin;
    if (begin < 0 || rows < 0 || end > p.capacity_rows) {
      atomicMin(&first_bad, g);
      rows = 0;
      begin = 0;
    }
    const int m = static_cast<int>(rows);
    out.problem_shapes[3 * g + 0] = p.k == 0 ? 0 : m;
    out.problem_shapes[3 * g + 1] = p.n;
    out.problem_shapes[3 * g + 2] = p.k;
    out.ptr_a[g] = p.a + begin * p.lda * p.a_bytes;
    out.ptr_b[g] = p.b + g * p.b_group_bytes;
    out.ptr_d[g] = p.d + begin * p.ldd * p.d_bytes;
    out.ptr_c[g] = p.c != nullptr ? static_cast<const void*>(p.c + begin * p.ldc * p.d_bytes) : out.ptr_d[g];
    out.ld_a[g] = p.lda;
    out.ld_b[g] = p.ldb;
    out.ld_c[g] = p.c != nullptr ? p.ldc : p.ldd;
    out.ld_d[g] = p.ldd;
    if (out.alpha != nullptr)
      out.alpha[g] =
          p.alpha * (p.scale_a != nullptr ? p.scale_a[0] : 1.0f) * (p.scale_b != nullptr ? p.scale_b[g] : 1.0f);
    if (out.k0_rows != nullptr) out.k0_rows[g] = p.k == 0 ? m : 0;
    const std::int64_t col_offset = static_cast<std::int64_t>(g) * p.n;
    if (out.row_scale != nullptr) out.row_scale[g] = p.row_scale + begin * static_cast<std::int64_t>(sizeof(float));
    if (out.col_scale != nullptr)
      out.col_scale[g] = p.col_scale + col_offset * static_cast<std::int64_t>(sizeof(float));
    if (out.row_bias != nullptr) out.row_bias[g] = p.row_bias + begin * p.d_bytes;
    if (out.col_bias != nullptr) out.col_bias[g] = p.col_bias + col_offset * p.d_bytes;
  }
  __syncthreads();
  if (threadIdx.x == 0) *p.error_group = first_bad == 0x7fffffff ? 0 : first_bad + 1;
}

/// alpha[g] = alpha * scale_a[g or 0] * scale_b[g]: per-tensor fp8 scales folded on the device so
/// that scales written by an earlier kernel need no host round trip.
__global__ void fold_fp8_scales(int group_count, float alpha, const float* scale_a, bool scale_a_per_group,
                                const float* scale_b, float* out) {
  const int g = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (g >= group_count) return;
  out[g] = alpha * (scale_a != nullptr ? scale_a[scale_a_per_group ? g : 0] : 1.0f) *
           (scale_b != nullptr ? scale_b[g] : 1.0f);
}

/// D[g] = beta * C[g] (or 0 without C) for every group with k0_rows[g] > 0; blockIdx.y is the group.
template <class Element>
__global__ void beta_times_c(const std::int32_t* k0_rows, const std::int32_t* problem_shapes, const void* const* ptr_c,
                             void* const* ptr_d, const std::int64_t* ld_c, const std::int64_t* ld_d, float beta) {
  const int g = static_cast<int>(blockIdx.y);
  const std::int64_t m = k0_rows[g];
  if (m == 0) return;
  const std::int64_t n = problem_shapes[3 * g + 1];
  auto* d = static_cast<Element*>(ptr_d[g]);
  const auto* c = static_cast<const Element*>(ptr_c[g]);
  const bool read_c = beta != 0.0f && c != nullptr && c != d;
  const bool in_place = beta != 0.0f && c == d;
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < m * n; i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t r = i / n, col = i % n;
    Element& out = d[r * ld_d[g] + col];
    float v = 0.0f;
    if (read_c)
      v = beta * static_cast<float>(c[r * ld_c[g] + col]);
    else if (in_place)
      v = beta * static_cast<float>(out);
    out = static_cast<Element>(v);
  }
}

#endif  // __CUDACC__

}  // namespace cuactor::kernels::grouped
