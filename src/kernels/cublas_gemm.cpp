// Dense GEMM through cuBLAS in the kernels layer's vocabulary (GemmProblem + GemmOperands).
#include "cuactor/kernels/cublas_gemm.hpp"

#include <cublas_v2.h>
#include <fmt/format.h>

#include <climits>
#include <cstdint>
#include <optional>
#include <string>

#include "cuactor/core/nvtx.hpp"
#include "cuactor/gpu/check.hpp"
#include "gemm_geometry.hpp"

namespace cuactor::kernels {
namespace {

using detail::extents;
using detail::ld_or_packed;
using detail::stride_or_packed;

/// The cuBLAS types of a problem's elements, or `unsupported` naming them.
struct CublasTypes {
  cudaDataType_t ab;
  cudaDataType_t cd;
  cublasComputeType_t compute;
};
Result<CublasTypes> cublas_types(const GemmProblem& p) {
  // cublasGemmEx's own subset of the types CUDA names.
  const bool ab_ok = p.a == DType::f64 || p.a == DType::f32 || p.a == DType::f16 || p.a == DType::bf16;
  const bool d_ok = p.d == p.a || ((p.a == DType::f16 || p.a == DType::bf16) && p.d == DType::f32);
  if (!ab_ok || p.b != p.a || !d_ok || p.c != p.d)
    return fail(errc::unsupported,
                fmt::format("cuBLAS GEMM A={} B={} C={} D={}: cublasGemmEx takes A and B of one type among f32, f64, "
                            "f16, bf16 and C = D of that type or f32 for 16-bit inputs (fp8 runs through "
                            "async_dense_gemm)",
                            name(p.a), name(p.b), name(p.c), name(p.d)));
  return CublasTypes{*library_data_type(p.a), *library_data_type(p.d),
                     p.a == DType::f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F};
}

/// cuBLAS's operation for an operand stored in `layout` when D is stored in `layout_c`: the
/// column-major view of a row-major problem is its transpose (D^T = B^T A^T), so an operand stored
/// like D needs no transpose and one stored the other way does.
cublasOperation_t op_for(MatrixLayout layout, MatrixLayout layout_c) {
  return layout == layout_c ? CUBLAS_OP_N : CUBLAS_OP_T;
}

/// Copies C into D (stream-ordered, all batches) so that cuBLAS can accumulate in place.
Status copy_c_into_d(const GemmProblem& p, const GemmOperands& o, cudaStream_t stream) {
  const std::size_t es = storage_bytes(p.d, 1);
  const auto [contiguous, strided] = extents(p.m, p.n, p.layout_c);
  const std::int64_t ldc = ld_or_packed(p.m, p.n, p.layout_c, o.ldc);
  const std::int64_t ldd = ld_or_packed(p.m, p.n, p.layout_c, o.ldd);
  const std::int64_t sc = stride_or_packed(p.m, p.n, p.layout_c, ldc, o.batch_stride_c);
  const std::int64_t sd = stride_or_packed(p.m, p.n, p.layout_c, ldd, o.batch_stride_d);
  // Batches laid out back to back at the leading dimension make one 2-D copy of batch x rows.
  const bool one_copy = p.batch == 1 || (sc == strided * ldc && sd == strided * ldd);
  const std::int64_t copies = one_copy ? 1 : p.batch;
  const std::int64_t height = one_copy ? strided * p.batch : strided;
  for (std::int64_t i = 0; i < copies; ++i)
    CUACTOR_CUDA_TRY(cudaMemcpy2DAsync(static_cast<char*>(o.d) + i * sd * es, ldd * es,
                                       static_cast<const char*>(o.c) + i * sc * es, ldc * es, contiguous * es, height,
                                       cudaMemcpyDeviceToDevice, stream));
  return ok();
}

}  // namespace

Status validate_cublas_gemm(const GemmProblem& p, const GemmOperands& o) {
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 1)
    return fail(
        errc::invalid_argument,
        fmt::format("cuBLAS GEMM m={} n={} k={} batch={}: sizes must be >= 0 and batch >= 1", p.m, p.n, p.k, p.batch));
  if (p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX || p.batch > INT_MAX)
    return fail(errc::invalid_argument, fmt::format("cuBLAS GEMM m={} n={} k={} batch={}: each must be <= {} (int)",
                                                    p.m, p.n, p.k, p.batch, INT_MAX));
  CUACTOR_TRY(cublas_types(p));
  for (auto [what, ptr] : {std::pair{"scale_a", o.scale_a}, std::pair{"scale_b", o.scale_b}})
    if (ptr != nullptr)
      return fail(errc::unsupported,
                  fmt::format("cuBLAS GEMM {} is set: per-tensor scales run through async_dense_gemm", what));
  if (p.m == 0 || p.n == 0) return ok();  // nothing to compute
  struct Operand {
    const char* what;
    const void* ptr;
    std::int64_t rows, cols;
    MatrixLayout layout;
    std::int64_t ld, batch_stride;
  };
  const Operand operands[] = {
      {"A", o.a, p.m, p.k, p.layout_a, o.lda, o.batch_stride_a},
      {"B", o.b, p.k, p.n, p.layout_b, o.ldb, o.batch_stride_b},
      {"D", o.d, p.m, p.n, p.layout_c, o.ldd, o.batch_stride_d},
      {"C", o.c, p.m, p.n, p.layout_c, o.ldc, o.batch_stride_c},
  };
  for (const Operand& x : operands) {
    if (x.ptr == nullptr && x.what[0] == 'C') {
      if (o.beta != 0.0f)
        return fail(
            errc::invalid_argument,
            fmt::format("GEMM operand C: pointer is null but beta={} (C may be omitted only when beta is 0)", o.beta));
      continue;
    }
    const std::int64_t ld = ld_or_packed(x.rows, x.cols, x.layout, x.ld);
    CUACTOR_TRY(detail::check_operand_geometry(x.what, x.ptr, x.rows, x.cols, x.layout, ld, p.batch,
                                               stride_or_packed(x.rows, x.cols, x.layout, ld, x.batch_stride)));
    if (ld > INT_MAX)
      return fail(errc::invalid_argument,
                  fmt::format("cuBLAS GEMM operand {}: ld{}={} is more than {} (int)", x.what, x.what, ld, INT_MAX));
  }
  if (o.c != nullptr && o.c == o.d) {
    const std::int64_t ldc = ld_or_packed(p.m, p.n, p.layout_c, o.ldc);
    const std::int64_t ldd = ld_or_packed(p.m, p.n, p.layout_c, o.ldd);
    const std::int64_t sc = stride_or_packed(p.m, p.n, p.layout_c, ldc, o.batch_stride_c);
    const std::int64_t sd = stride_or_packed(p.m, p.n, p.layout_c, ldd, o.batch_stride_d);
    if (ldc != ldd || (p.batch > 1 && sc != sd))
      return fail(errc::invalid_argument,
                  fmt::format("GEMM operands C and D alias but ldc={} ldd={} batch strides {} and {} differ (an "
                              "in-place accumulate needs them equal)",
                              ldc, ldd, sc, sd));
  }
  return ok();
}

Status enqueue_cublas_gemm(cublasHandle_t handle, cudaStream_t stream, const GemmProblem& p, const GemmOperands& o) {
  const nvtx::Range range("gemm.cublas");
  CUACTOR_TRY(validate_cublas_gemm(p, o));
  if (p.m == 0 || p.n == 0) return ok();
  const CublasTypes types = *cublas_types(p);
  if (o.c != nullptr && o.c != o.d && o.beta != 0.0f) CUACTOR_TRY(copy_c_into_d(p, o, stream));
  const std::int64_t lda = ld_or_packed(p.m, p.k, p.layout_a, o.lda);
  const std::int64_t ldb = ld_or_packed(p.k, p.n, p.layout_b, o.ldb);
  const std::int64_t ldd = ld_or_packed(p.m, p.n, p.layout_c, o.ldd);
  // cuBLAS computes X (rows x cols, column-major) = op(P) op(Q). A column-major D is X with P = A,
  // Q = B; a row-major D is the column-major X = D^T = B^T A^T, so P = B, Q = A and m, n swap.
  const bool row = p.layout_c == MatrixLayout::row;
  const int rows = static_cast<int>(row ? p.n : p.m);
  const int cols = static_cast<int>(row ? p.m : p.n);
  const void* first = row ? o.b : o.a;
  const void* second = row ? o.a : o.b;
  const auto ld_first = static_cast<int>(row ? ldb : lda), ld_second = static_cast<int>(row ? lda : ldb);
  const cublasOperation_t op_first = op_for(row ? p.layout_b : p.layout_a, p.layout_c);
  const cublasOperation_t op_second = op_for(row ? p.layout_a : p.layout_b, p.layout_c);
  const long long stride_first = row ? stride_or_packed(p.k, p.n, p.layout_b, ldb, o.batch_stride_b)
                                     : stride_or_packed(p.m, p.k, p.layout_a, lda, o.batch_stride_a);
  const long long stride_second = row ? stride_or_packed(p.m, p.k, p.layout_a, lda, o.batch_stride_a)
                                      : stride_or_packed(p.k, p.n, p.layout_b, ldb, o.batch_stride_b);
  const long long stride_d = stride_or_packed(p.m, p.n, p.layout_c, ldd, o.batch_stride_d);
  // A C that was not copied into D is only read when beta != 0, which the copy above handled.
  const double alpha64 = o.alpha, beta64 = o.beta;
  const float alpha32 = o.alpha, beta32 = o.beta;
  const bool f64 = types.compute == CUBLAS_COMPUTE_64F;
  const void* alpha = f64 ? static_cast<const void*>(&alpha64) : static_cast<const void*>(&alpha32);
  const void* beta = f64 ? static_cast<const void*>(&beta64) : static_cast<const void*>(&beta32);
  const std::string what = fmt::format("cuBLAS GEMM m={} n={} k={} batch={} {}x{}->{}", p.m, p.n, p.k, p.batch,
                                       name(p.a), name(p.b), name(p.d));
  if (p.batch == 1)
    return gpu::check(cublasGemmEx(handle, op_first, op_second, rows, cols, static_cast<int>(p.k), alpha, first,
                                   types.ab, ld_first, second, types.ab, ld_second, beta, o.d, types.cd,
                                   static_cast<int>(ldd), types.compute, CUBLAS_GEMM_DEFAULT),
                      what);
  return gpu::check(cublasGemmStridedBatchedEx(handle, op_first, op_second, rows, cols, static_cast<int>(p.k), alpha,
                                               first, types.ab, ld_first, stride_first, second, types.ab, ld_second,
                                               stride_second, beta, o.d, types.cd, static_cast<int>(ldd), stride_d,
                                               static_cast<int>(p.batch), types.compute, CUBLAS_GEMM_DEFAULT),
                    what);
}

}  // namespace cuactor::kernels
