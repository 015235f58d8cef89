/// @file
/// Dense GEMM through cuBLAS on the device actor, in the kernels layer's one GEMM vocabulary
/// (DenseGemmShape + DenseGemmOperands, row-major semantics; GemmProblem + GemmOperands untyped).
/// A reference and fallback beside the CUTLASS catalog: f32, f64, f16 and bf16 inputs, any alignment.
/// Built on DeviceActor::submit with the actor's cuBLAS handle (OpContext::cublas()); uses
/// Boost.Asio, so include it from .cpp files only.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <utility>

#include "cuactor/kernels/dense_gemm_actor.hpp"
#include "cuactor/kernels/gemm_plan.hpp"

namespace cuactor::kernels {

/// Checks, without a GPU, that cuBLAS can compute `problem` with `operands`: sizes >= 0 and within
/// cuBLAS's int range, batch >= 1; A and B of one type among f32, f64, f16, bf16 with D (and C) of
/// that type or f32 for 16-bit inputs, else `unsupported` (fp8 and scales need async_dense_gemm);
/// non-null A, B, D; leading dimensions at least the contiguous extent; batch strides at least one
/// matrix; C present when beta != 0; an aliased C == D with D's leading dimension and stride.
/// Errors name the operand, the value and the rule.
[[nodiscard]] Status validate_cublas_gemm(const GemmProblem& problem, const GemmOperands& operands);

/// Validates (validate_cublas_gemm), then enqueues D = alpha * A B + beta * C on `stream` with
/// `handle` (which must already be bound to `stream`): a stream-ordered copy of C into D when they
/// differ and beta != 0 (cuBLAS accumulates in place), then cublasGemmEx, or
/// cublasGemmStridedBatchedEx for batch > 1. Row-major problems are mapped onto column-major cuBLAS
/// by computing D^T = B^T A^T. No allocation, no synchronisation (capturable).
Status enqueue_cublas_gemm(cublasHandle_t handle, cudaStream_t stream, const GemmProblem& problem,
                           const GemmOperands& operands);

/// Enqueues D = alpha * A B + beta * C with cuBLAS on the actor's stream (A, B and a distinct C are
/// read, D is written) and replies with D once the work finished. Element types: TA == TB in
/// {float, double, __half, __nv_bfloat16}, TD == TA or float for the 16-bit ones. Validation
/// failures reply `invalid_argument` naming the operand (buffer sizes included); fp8 types, scales
/// and SKU overrides reply `unsupported` (they belong to async_dense_gemm).
template <class TA, class TB, class TD, class Token>
auto async_cublas_gemm(runtime::DeviceActor& actor, DenseGemmShape shape, DenseGemmOperands<TA, TB, TD> ops,
                       Token&& token) {
  runtime::Reads reads = detail::dense_reads(ops);
  runtime::Writes writes{ops.d};
  return actor.template submit<runtime::GpuRef<TD>>(
      std::move(reads), std::move(writes),
      [shape = std::move(shape), ops = std::move(ops)](runtime::OpContext& ctx) -> Result<runtime::GpuRef<TD>> {
        if (shape.sku_override)
          return fail(errc::unsupported, "cuBLAS GEMM: sku_override " + shape.sku_override->to_string() +
                                             " names a catalog kernel; use async_dense_gemm to run it");
        const GemmProblem problem = detail::dense_problem<TA, TB, TD>(shape);
        auto operands = detail::dense_operands(ops);
        if (!operands) return fail(operands.error());
        CUACTOR_TRY(validate_cublas_gemm(problem, *operands));
        CUACTOR_TRY(check_gemm_buffer_sizes(problem, *operands, ops.a.size_bytes(), ops.b.size_bytes(),
                                            ops.c.size_bytes(), ops.d.size_bytes()));
        CUACTOR_TRY(enqueue_cublas_gemm(ctx.cublas(), ctx.stream(), problem, *operands));
        return ops.d;
      },
      std::forward<Token>(token));
}

}  // namespace cuactor::kernels
