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
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuactor/gpu/check.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "cuactor/runtime/device_actor.hpp"
#include "cuactor/runtime/wire.hpp"
#include "cuactor/runtime/worker_op.hpp"

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

/// The leading dimensions, batch strides and scalars of a typed request (no pointers: those are
/// known only where the work runs).
template <class TA, class TB, class TD>
GemmOperands dense_scalars(const DenseGemmOperands<TA, TB, TD>& ops) {
  GemmOperands o;
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
  return o;
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
  GemmOperands o = dense_scalars(ops);
  o.a = *a;
  o.b = *b;
  o.c = *c;
  o.d = *d;
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

/// The element types, layouts and scalars of a dense request, as both its forms use them: the
/// in-process closure and the isolated worker's handler (which receives this through the wire).
struct DenseRequest {
  GemmProblem problem;
  std::optional<GemmSku> sku_override;
  GemmOperands operands;  ///< Scalars and strides; pointers are filled in where the work runs.
  bool has_c = false;     ///< C is a separate operand.
  bool c_is_d = false;    ///< C aliases D (in-place accumulate).
  bool has_scale_a = false;
  bool has_scale_b = false;

  void encode(runtime::wire::Writer& w) const {
    w.put_i64(problem.m).put_i64(problem.n).put_i64(problem.k).put_i64(problem.batch);
    for (DType t : {problem.a, problem.b, problem.c, problem.d}) w.put_string(name(t));
    for (MatrixLayout l : {problem.layout_a, problem.layout_b, problem.layout_c}) w.put_string(name(l));
    w.put_string(sku_override ? sku_override->to_string() : std::string());
    const GemmOperands& o = operands;
    for (std::int64_t v :
         {o.lda, o.ldb, o.ldc, o.ldd, o.batch_stride_a, o.batch_stride_b, o.batch_stride_c, o.batch_stride_d})
      w.put_i64(v);
    w.put_f64(o.alpha).put_f64(o.beta);
    w.put_bool(has_c).put_bool(c_is_d).put_bool(has_scale_a).put_bool(has_scale_b);
  }
  static Result<DenseRequest> decode(std::span<const std::byte> payload) {
    runtime::wire::Reader r(payload, "dense_gemm worker operation");
    DenseRequest q;
    GemmProblem& p = q.problem;
    p.m = r.get_i64("m");
    p.n = r.get_i64("n");
    p.k = r.get_i64("k");
    p.batch = r.get_i64("batch");
    DType* types[] = {&p.a, &p.b, &p.c, &p.d};
    for (DType* t : types) *t = r.get_parsed("dtype", parse_dtype).value_or(DType::bf16);
    MatrixLayout* layouts[] = {&p.layout_a, &p.layout_b, &p.layout_c};
    for (MatrixLayout* l : layouts) *l = r.get_parsed("layout", parse_layout).value_or(MatrixLayout::row);
    p.epilogue =
        is_low_precision_float(p.a) ? GemmEpilogue::scaled_linear_combination : GemmEpilogue::linear_combination;
    if (const std::string sku = r.get_string("sku_override"); r.good() && !sku.empty()) {
      auto parsed = GemmSku::parse(sku);
      if (!parsed) return fail(parsed.error());
      q.sku_override = *parsed;
    }
    GemmOperands& o = q.operands;
    std::int64_t* fields[] = {
        &o.lda, &o.ldb, &o.ldc, &o.ldd, &o.batch_stride_a, &o.batch_stride_b, &o.batch_stride_c, &o.batch_stride_d};
    for (std::int64_t* f : fields) *f = r.get_i64("leading dimension or batch stride");
    o.alpha = static_cast<float>(r.get_f64("alpha"));
    o.beta = static_cast<float>(r.get_f64("beta"));
    q.has_c = r.get_bool("has_c");
    q.c_is_d = r.get_bool("c_is_d");
    q.has_scale_a = r.get_bool("has_scale_a");
    q.has_scale_b = r.get_bool("has_scale_b");
    if (Status s = r.finish(); !s) return fail(s.error());
    return q;
  }
  /// Buffer operands in wire order: a, b, [c], d, [scale_a], [scale_b].
  [[nodiscard]] std::size_t buffer_count() const noexcept {
    return 3 + (has_c ? 1 : 0) + (has_scale_a ? 1 : 0) + (has_scale_b ? 1 : 0);
  }
};

/// Scratch of `bytes` (null for 0) for work about to be enqueued on ctx's stream: allocated in
/// stream order from the device's pool and kept alive until that work finished (under capture it
/// belongs to the graph).
inline Result<void*> stream_workspace(runtime::OpContext& ctx, std::size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  auto ws = ctx.allocate_bytes(bytes);
  if (!ws) return fail(ws.error());
  void* data = (*ws)->data();
  ctx.keep_alive(std::move(*ws));
  return data;
}

/// Runs a dense request whose operand pointers are set in `o` (`bytes` = sizes of A, B, C, D) on
/// ctx's stream with a plan from `plans`, allocating any workspace in stream order: the one body of
/// both forms of the request. Returns the SKU that ran.
inline Result<GemmSku> run_dense(runtime::OpContext& ctx, GemmPlanCache& plans, const DenseRequest& q,
                                 const GemmOperands& o, std::array<std::size_t, 4> bytes) {
  auto facts = dense_device_facts(ctx.device());
  if (!facts) return fail(facts.error());
  GemmPlanOptions options;
  options.sku_override = q.sku_override;
  options.sm_count = facts->second;
  options.device = ctx.device();
  auto plan = plans.get(q.problem, facts->first, options);
  if (!plan) return fail(plan.error());
  CUACTOR_TRY(plan->validate(o));
  CUACTOR_TRY(plan->check_buffer_sizes(o, bytes[0], bytes[1], bytes[2], bytes[3]));
  auto workspace = stream_workspace(ctx, plan->workspace_size());
  if (!workspace) return fail(workspace.error());
  CUACTOR_TRY(plan->run(o, *workspace, plan->workspace_size(), ctx.stream()));
  return plan->sku();
}

/// The isolated worker's handler of runtime::worker_ops::dense_gemm: decodes the request, takes the
/// operand pointers from `buffers` and runs it like the in-process closure; replies the SKU's string.
inline Result<std::vector<std::byte>> handle_dense_worker_op(runtime::OpContext& ctx, GemmPlanCache& plans,
                                                             std::span<const std::byte> payload,
                                                             std::span<const runtime::WorkerOpBuffer> buffers) {
  auto q = DenseRequest::decode(payload);
  if (!q) return fail(q.error());
  if (buffers.size() != q->buffer_count())
    return fail(errc::protocol_error, fmt::format("dense_gemm worker operation: {} buffer operands, the request "
                                                  "names {}",
                                                  buffers.size(), q->buffer_count()));
  std::size_t i = 0;
  GemmOperands o = q->operands;
  std::array<std::size_t, 4> bytes{};
  o.a = buffers[i].data, bytes[0] = buffers[i++].bytes;
  o.b = buffers[i].data, bytes[1] = buffers[i++].bytes;
  if (q->has_c) o.c = buffers[i].data, bytes[2] = buffers[i++].bytes;
  o.d = buffers[i].data, bytes[3] = buffers[i++].bytes;
  if (q->c_is_d) o.c = o.d, bytes[2] = bytes[3];
  if (q->has_scale_a) o.scale_a = static_cast<const float*>(buffers[i++].data);
  if (q->has_scale_b) o.scale_b = static_cast<const float*>(buffers[i++].data);
  auto sku = run_dense(ctx, plans, *q, o, bytes);
  if (!sku) return fail(sku.error());
  runtime::wire::Writer w;
  w.put_string(sku->to_string());
  return w.take();
}

/// Reads the SKU a worker's dense or grouped GEMM replied.
inline Result<GemmSku> decode_sku_reply(std::vector<std::byte>&& bytes) {
  runtime::wire::Reader r(bytes, "GEMM worker reply");
  const std::string sku = r.get_string("sku");
  if (Status s = r.finish(); !s) return fail(s.error());
  return GemmSku::parse(sku);
}

}  // namespace detail

/// Enqueues D = alpha * [scale_a * scale_b] * A B + beta * C on the actor's stream with a cached
/// plan for the actor's device, allocating any workspace in stream order, and replies with the SKU
/// that ran once the work finished. Validation failures ([E2]) reply `invalid_argument` naming the
/// operand; combinations no kernel serves reply `unsupported`. On an isolated actor the request runs
/// in the worker, with the worker's own plan cache (`plans` is then not used).
template <class TA, class TB, class TD, class Token>
auto async_dense_gemm(runtime::DeviceActor& actor, GemmPlanCache& plans, DenseGemmShape shape,
                      DenseGemmOperands<TA, TB, TD> ops, Token&& token) {
  detail::DenseRequest q;
  q.problem = detail::dense_problem<TA, TB, TD>(shape);
  q.sku_override = shape.sku_override;
  q.operands = detail::dense_scalars(ops);
  q.c_is_d = !ops.c.empty() && ops.c.allocation() == ops.d.allocation();
  q.has_c = !ops.c.empty() && !q.c_is_d;
  q.has_scale_a = !ops.scale_a.empty();
  q.has_scale_b = !ops.scale_b.empty();
  runtime::WorkerOpCmd worker;
  worker.op = runtime::worker_ops::dense_gemm;
  runtime::wire::Writer w;
  q.encode(w);
  worker.payload = w.take();
  worker.buffers.emplace_back(ops.a.allocation(), false);
  worker.buffers.emplace_back(ops.b.allocation(), false);
  if (q.has_c) worker.buffers.emplace_back(ops.c.allocation(), false);
  worker.buffers.emplace_back(ops.d.allocation(), true);
  if (q.has_scale_a) worker.buffers.emplace_back(ops.scale_a.allocation(), false);
  if (q.has_scale_b) worker.buffers.emplace_back(ops.scale_b.allocation(), false);
  return actor.template submit_portable<GemmSku>(
      "dense_gemm",
      [&plans, q, ops = std::move(ops)](runtime::OpContext& ctx) -> Result<GemmSku> {
        auto operands = detail::dense_operands(ops);
        if (!operands) return fail(operands.error());
        return detail::run_dense(ctx, plans, q, *operands,
                                 {ops.a.size_bytes(), ops.b.size_bytes(), ops.c.size_bytes(), ops.d.size_bytes()});
      },
      std::move(worker), &detail::decode_sku_reply, std::forward<Token>(token));
}

}  // namespace cuactor::kernels
