// Launchers of the grouped-GEMM helper kernels (kernels/grouped_args.cuh).
#include <algorithm>

#include "kernels/grouped_launch.hpp"

namespace cuactor::kernels::detail {
namespace {
constexpr int kThreads = 128;
unsigned blocks_for(int count) {
  return static_cast<unsigned>((count + kThreads - 1) / kThreads);
}
}  // namespace

cudaError_t launch_build_device_sized_args(const grouped::DeviceSizedParams& params, const grouped::GroupedArrays& out,
                                           cudaStream_t stream) noexcept {
  // One block (it writes the error flag last); groups beyond its threads are strided over.
  const int threads = std::clamp((params.group_count + 31) / 32 * 32, 32, 1024);
  grouped::build_device_sized_args<<<1, static_cast<unsigned>(threads), 0, stream>>>(params, out);
  return cudaGetLastError();
}

cudaError_t launch_fold_fp8_scales(int group_count, float alpha, const float* scale_a, bool scale_a_per_group,
                                   const float* scale_b, float* out, cudaStream_t stream) noexcept {
  grouped::fold_fp8_scales<<<blocks_for(group_count), kThreads, 0, stream>>>(group_count, alpha, scale_a,
                                                                             scale_a_per_group, scale_b, out);
  return cudaGetLastError();
}

cudaError_t launch_beta_times_c(DType d_type, const grouped::GroupedArrays& a, int group_count, float beta,
                                cudaStream_t stream) noexcept {
  const dim3 grid(64, static_cast<unsigned>(group_count));
  switch (d_type) {
    case DType::bf16:
      grouped::beta_times_c<__nv_bfloat16>
          <<<grid, 256, 0, stream>>>(a.k0_rows, a.problem_shapes, a.ptr_c, a.ptr_d, a.ld_c, a.ld_d, beta);
      break;
    case DType::f16:
      grouped::beta_times_c<__half>
          <<<grid, 256, 0, stream>>>(a.k0_rows, a.problem_shapes, a.ptr_c, a.ptr_d, a.ld_c, a.ld_d, beta);
      break;
    case DType::f32:
      grouped::beta_times_c<float>
          <<<grid, 256, 0, stream>>>(a.k0_rows, a.problem_shapes, a.ptr_c, a.ptr_d, a.ld_c, a.ld_d, beta);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace cuactor::kernels::detail
