/// @file
/// Dense GEMM requests on the device actor: CUTLASS catalog kernels on GpuRefs, with plans from a
/// GemmPlanCache and the actor's write tracking (A, B, C and the fp8 scales are read, D is
/// written). Header-only on top of DeviceActor::submit (the runtime's extension point); uses
/// Boost.Asio, so include it from .cpp files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "cuactor/gpu/check.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "cuactor/runtime/device_actor.hpp"

namespace cuactor::kernels {

/// Shape and layouts of a dense GEMM request: D (m x n) = alpha * [scale_a * scale_b] * A (m x k) *
/// B (k x n) + beta * C, `batch` times; B `col` means stored N x K ("TN"), `row` means K x N.
struct DenseGemmShape {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::int64_t batch = 1;
  MatrixLayout layout_a = MatrixLayout::row;
  MatrixLayout layout_b = MatrixLayout::col;
  MatrixLayout layout_c = MatrixLayout::row;
  std::optional<GemmSku> sku_override;  ///< Run exactly this catalog kernel.
};

/// The buffers and scalars of a dense GEMM request. An empty `c` means none (beta must be 0); empty
/// scales mean 1 (fp8 inputs only). Leading dimensions / batch strides of 0 mean packed.
template <class TA, class TB, class TD>
struct DenseGemmOperands {
  runtime::GpuRef<TA> a;
  runtime::GpuRef<TB> b;
  runtime::GpuRef<TD> c;
  runtime::GpuRef<TD> d;
  std::int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
  std::int64_t batch_stride_a = 0, batch_stride_b = 0, batch_stride_c = 0, batch_stride_d = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  runtime::GpuRef<float> scale_a;
  runtime::GpuRef<float> scale_b;
};

namespace detail {

/// Architecture and SM count of `device` from two cheap attribute queries.
inline Result<std::pair<GpuArch, int>> dense_device_facts(int device) {
  int sms = 0, major = 0, minor = 0;
  CUACTOR_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUACTOR_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUACTOR_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return std::pair{best_target_for(major, minor), sms};
}

/// Raw device pointer of a non-empty GpuRef (already validated by submit), null for an empty one.
template <class T>
Result<const void*> optional_ptr(const runtime::GpuRef<T>& ref) {
  if (ref.empty()) return static_cast<const void*>(nullptr);
  auto p = ref.raw_device_ptr();
  if (!p) return fail(p.error());
  return static_cast<const void*>(*p);
}

/// The untyped problem of a typed request (element types from TA/TB/TD; fp8 inputs take the scaled
/// epilogue).
template <class TA, class TB, class TD>
GemmProblem dense_problem(const DenseGemmShape& shape) {
  GemmProblem p;
  p.m = shape.m;
  p.n = shape.n;
  p.k = shape.k;
  p.batch = shape.batch;
  p.a = dtype_of<TA>::value;
  p.b = dtype_of<TB>::value;
  p.c = p.d = dtype_of<TD>::value;
  p.layout_a = shape.layout_a;
  p.layout_b = shape.layout_b;
  p.layout_c = shape.layout_c;
  p.epilogue = is_low_precision_float(p.a) ? GemmEpilogue::scaled_linear_combination : GemmEpilogue::linear_combination;
  return p;
}

/// The untyped operands (raw device pointers, null for empty refs) of a typed request; call it on
/// the actor's thread, after submit validated the refs.
template <class TA, class TB, class TD>
Result<GemmOperands> dense_operands(const DenseGemmOperands<TA, TB, TD>& ops) {
  auto a = optional_ptr(ops.a);
  auto b = optional_ptr(ops.b);
  auto c = optional_ptr(ops.c);
  auto sa = optional_ptr(ops.scale_a);
  auto sb = optional_ptr(ops.scale_b);
  for (const auto* r : {&a, &b, &c, &sa, &sb})
    if (!*r) return fail(r->error());
  auto d = ops.d.raw_device_ptr();
  if (!d) return fail(d.error());
  GemmOperands o;
  o.a = *a;
  o.b = *b;
  o.c = *c;
  o.d = *d;
  o.lda = ops.lda;
  o.ldb = ops.ldb;
  o.ldc = ops.ldc;
  o.ldd = ops.ldd;
  o.batch_stride_a = ops.batch_stride_a;
  o.batch_stride_b = ops.batch_stride_b;
  o.batch_stride_c = ops.batch_stride_c;
  o.batch_stride_d = ops.batch_stride_d;
  o.alpha = ops.alpha;
  o.beta = ops.beta;
  o.scale_a = static_cast<const float*>(*sa);
  o.scale_b = static_cast<const float*>(*sb);
  return o;
}

/// What a dense request reads: A, B, C unless it aliases D (in-place accumulate: then only
/// written), and the scales.
template <class TA, class TB, class TD>
runtime::Reads dense_reads(const DenseGemmOperands<TA, TB, TD>& ops) {
  runtime::Reads reads{ops.a, ops.b};
  if (!ops.c.empty() && ops.c.allocation() != ops.d.allocation()) reads.add(ops.c);
  if (!ops.scale_a.empty()) reads.add(ops.scale_a);
  if (!ops.scale_b.empty()) reads.add(ops.scale_b);
  return reads;
}

}  // namespace detail

/// Enqueues D = alpha * [scale_a * scale_b] * A B + beta * C on the actor's stream with a cached
/// plan for the actor's device, allocating any workspace in stream order, and replies with the SKU
/// that ran once the work finished. Validation failures ([E2]) reply `invalid_argument` naming the
/// operand; combinations no kernel serves reply `unsupported`.
template <class TA, class TB, class TD, class Token>
auto async_dense_gemm(runtime::DeviceActor& actor, GemmPlanCache& plans, DenseGemmShape shape,
                      DenseGemmOperands<TA, TB, TD> ops, Token&& token) {
  runtime::Reads reads = detail::dense_reads(ops);
  runtime::Writes writes{ops.d};
  return actor.template submit<GemmSku>(
      std::move(reads), std::move(writes),
      [&plans, shape = std::move(shape), ops = std::move(ops)](runtime::OpContext& ctx) -> Result<GemmSku> {
        auto facts = detail::dense_device_facts(ctx.device());
        if (!facts) return fail(facts.error());
        GemmPlanOptions options;
        options.sku_override = shape.sku_override;
        options.sm_count = facts->second;
        options.device = ctx.device();
        auto plan = plans.get(detail::dense_problem<TA, TB, TD>(shape), facts->first, options);
        if (!plan) return fail(plan.error());
        auto operands = detail::dense_operands(ops);
        if (!operands) return fail(operands.error());
        const GemmOperands& o = *operands;
        CUACTOR_TRY(plan->validate(o));
        CUACTOR_TRY(plan->check_buffer_sizes(o, ops.a.size_bytes(), ops.b.size_bytes(), ops.c.size_bytes(),
                                             ops.d.size_bytes()));
        void* workspace = nullptr;
        if (plan->workspace_size() > 0) {
          auto ws = ctx.allocate_bytes(plan->workspace_size());
          if (!ws) return fail(ws.error());
          workspace = (*ws)->data();
          ctx.keep_alive(std::move(*ws));
        }
        CUACTOR_TRY(plan->run(o, workspace, plan->workspace_size(), ctx.stream()));
        return plan->sku();
      },
      std::forward<Token>(token));
}

}  // namespace cuactor::kernels
