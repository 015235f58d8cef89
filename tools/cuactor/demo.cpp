// `cuactor demo`: runs a bf16 GEMM on the GPU and checks it against an fp64 host reference.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <random>
#include <vector>

#include "commands.hpp"
#include "cuactor/cuda/check.hpp"
#include "cuactor/cuda/device.hpp"
#include "cuactor/cuda/memory.hpp"
#include "cuactor/cuda/stream.hpp"

namespace cuactor::cli {
namespace {

struct CublasHandle {
  cublasHandle_t h = nullptr;
  ~CublasHandle() {
    if (h) cublasDestroy(h);
  }
};

Status run_demo(int m, int n, int k) {
  auto props = cuda::device_properties(0);
  if (!props) return fail(props.error());
  std::cout << fmt::format("device 0: {} ({})\n", props->name, props->arch.name());

  std::mt19937 rng(2026);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<__nv_bfloat16> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n);
  for (auto& v : a) v = __float2bfloat16(dist(rng));
  for (auto& v : b) v = __float2bfloat16(dist(rng));
  std::vector<float> d(static_cast<std::size_t>(m) * n);

  auto stream = cuda::Stream::create(0);
  if (!stream) return fail(stream.error());
  auto pool = cuda::MemPool::create(0);
  if (!pool) return fail(pool.error());
  auto da = cuda::DeviceBuffer::allocate(*pool, a.size() * sizeof(a[0]), stream->get());
  auto db = cuda::DeviceBuffer::allocate(*pool, b.size() * sizeof(b[0]), stream->get());
  auto dd = cuda::DeviceBuffer::allocate(*pool, d.size() * sizeof(float), stream->get());
  for (auto* r : {&da, &db, &dd})
    if (!*r) return fail(r->error());
  CUACTOR_TRY(cuda::copy_async(da->data(), a.data(), da->size(), stream->get()));
  CUACTOR_TRY(cuda::copy_async(db->data(), b.data(), db->size(), stream->get()));
  CUACTOR_TRY(cuda::memset_async(dd->data(), 0xff, dd->size(), stream->get()));  // poison: NaN

  CublasHandle handle;
  CUACTOR_CUDA_TRY(cublasCreate(&handle.h));
  CUACTOR_CUDA_TRY(cublasSetStream(handle.h, stream->get()));
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major D[m,n] = A[m,k] * B[k,n] is column-major D^T = B^T * A^T.
  CUACTOR_CUDA_TRY(cublasGemmEx(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, db->data(), CUDA_R_16BF, n,
                                da->data(), CUDA_R_16BF, k, &beta, dd->data(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
  CUACTOR_TRY(cuda::copy_async(d.data(), dd->data(), dd->size(), stream->get()));
  CUACTOR_TRY(stream->synchronize());

  double num = 0, den = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int p = 0; p < k; ++p)
        ref += static_cast<double>(__bfloat162float(a[static_cast<std::size_t>(i) * k + p])) *
               static_cast<double>(__bfloat162float(b[static_cast<std::size_t>(p) * n + j]));
      const double got = d[static_cast<std::size_t>(i) * n + j];
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
  const double rel = std::sqrt(num / den);
  std::cout << fmt::format("bf16 GEMM {}x{}x{} (fp32 accumulate) through cuBLAS: relative error vs fp64 = {:.3e}\n", m,
                           n, k, rel);
  if (!(rel < 1e-5))  // exact bf16 products summed in fp32: far below bf16 rounding
    return fail(errc::internal, fmt::format("demo result check failed: relative error {:.3e} >= 1e-5", rel));
  std::cout << "result check: PASS\n";
  return ok();
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Run a short GPU demonstration and check its result");
  cmd->callback([] {
    if (cuda::device_count() == 0) {
      std::cout << "cuactor demo: no CUDA GPU is visible on this machine, so nothing can run on a device.\n"
                   "What still works here: `cuactor info`, building everything, and the unit tests\n"
                   "(scripts/test). Run scripts/demo on a machine with an NVIDIA GPU (sm_80 or newer).\n";
      return;
    }
    if (auto s = run_demo(512, 384, 640); !s) {
      std::cerr << "cuactor demo failed: " << s.error().to_string() << "\n";
      std::exit(1);
    }
  });
}

}  // namespace cuactor::cli
