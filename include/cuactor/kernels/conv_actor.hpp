/// @file
/// Convolution requests on the device actor ([K7] through [R5]): fprop, dgrad and wgrad of a
/// ConvPlan on GpuRefs, with plans from a ConvPlanCache and the actor's write tracking (the tensors
/// the operation reads, and its source unless that aliases the output, are read; the output is
/// written). Like the dense GEMM request (dense_gemm_actor.hpp) it is header-only on top of
/// DeviceActor::submit_portable: in-process the request runs as a closure on the actor's thread and
/// is recorded like any operation while the actor's stream captures (graph/actor_capture.hpp); on an
/// isolated actor the same body runs in the worker (runtime::worker_ops::conv). Uses Boost.Asio, so
/// include it from .cpp files only.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuactor/kernels/conv_plan.hpp"
#include "cuactor/kernels/conv_plan_cache.hpp"
#include "cuactor/kernels/dense_gemm_actor.hpp"
#include "cuactor/runtime/device_actor.hpp"
#include "cuactor/runtime/wire.hpp"
#include "cuactor/runtime/worker_op.hpp"

namespace cuactor::kernels {

/// The tensors and scalars of a convolution request: `T` is the element type of the tensors the
/// operation reads, `TOut` the type of the one it writes. Only the operation's inputs are used
/// (fprop x and w, dgrad dy and w, wgrad dy and x); the others are ignored and not tracked, as in
/// ConvTensors. An empty `source` means none (beta must then be 0); it may be the same buffer as
/// `out` (in-place accumulate: then only written).
template <class T, class TOut>
struct ConvOperands {
  runtime::GpuRef<T> x;                 ///< Activation, N x H x W x C: read by fprop and wgrad.
  runtime::GpuRef<T> w;                 ///< Filter, K x R x S x C: read by fprop and dgrad.
  runtime::GpuRef<T> dy;                ///< Output gradient, N x P x Q x K: read by dgrad and wgrad.
  runtime::GpuRef<TOut> out;            ///< Written: y (N x P x Q x K), dx (N x H x W x C) or dw (K x R x S x C).
  runtime::GpuRef<TOut> source;         ///< Read when beta != 0: same shape as `out`.
  float alpha = 1.0f;                   ///< Scales the convolution.
  float beta = 0.0f;                    ///< Scales `source`.
  std::optional<GemmSku> sku_override;  ///< Run exactly this catalog kernel.
};

namespace detail {

/// The spec, scalars and buffer layout of a convolution request, as both its forms use them: the
/// in-process closure and the isolated worker's handler (which receives this through the wire).
/// Buffer operands travel in the order x, w, dy, out, source, each only when its flag is set.
struct ConvRequest {
  ConvSpec spec;                        ///< With the element types of the typed request.
  std::optional<GemmSku> sku_override;  ///< Run exactly this catalog kernel.
  float alpha = 1.0f;
  float beta = 0.0f;
  bool has_x = false;  ///< x is an operand (the operation reads it and the request gave one).
  bool has_w = false;
  bool has_dy = false;
  bool has_out = false;
  bool has_source = false;     ///< source is a separate operand.
  bool source_is_out = false;  ///< source aliases out (in-place accumulate).

  /// Appends the request to a worker payload.
  void encode(runtime::wire::Writer& wr) const {
    wr.put_string(name(spec.operation)).put_string(name(spec.element)).put_string(name(spec.output));
    for (std::int64_t v : {spec.n, spec.h, spec.w, spec.c, spec.k, spec.r, spec.s, spec.pad_h, spec.pad_w,
                           spec.stride_h, spec.stride_w, spec.dilation_h, spec.dilation_w, spec.groups})
      wr.put_i64(v);
    wr.put_string(sku_override ? sku_override->to_string() : std::string());
    wr.put_f64(alpha).put_f64(beta);
    for (bool b : {has_x, has_w, has_dy, has_out, has_source, source_is_out}) wr.put_bool(b);
  }
  /// Reads what encode() wrote; `protocol_error` naming the field for a malformed payload.
  static Result<ConvRequest> decode(std::span<const std::byte> payload) {
    runtime::wire::Reader r(payload, "conv worker operation");
    ConvRequest q;
    ConvSpec& s = q.spec;
    s.operation = r.get_parsed("operation", parse_conv_operation).value_or(ConvOperation::fprop);
    s.element = r.get_parsed("element dtype", parse_dtype).value_or(DType::bf16);
    s.output = r.get_parsed("output dtype", parse_dtype).value_or(DType::bf16);
    std::int64_t* fields[] = {&s.n,     &s.h,     &s.w,        &s.c,        &s.k,          &s.r,          &s.s,
                              &s.pad_h, &s.pad_w, &s.stride_h, &s.stride_w, &s.dilation_h, &s.dilation_w, &s.groups};
    for (std::int64_t* f : fields) *f = r.get_i64("conv extent");
    if (const std::string sku = r.get_string("sku_override"); r.good() && !sku.empty()) {
      auto parsed = GemmSku::parse(sku);
      if (!parsed) return fail(parsed.error());
      q.sku_override = *parsed;
    }
    q.alpha = static_cast<float>(r.get_f64("alpha"));
    q.beta = static_cast<float>(r.get_f64("beta"));
    bool* flags[] = {&q.has_x, &q.has_w, &q.has_dy, &q.has_out, &q.has_source, &q.source_is_out};
    for (bool* f : flags) *f = r.get_bool("operand flag");
    if (Status st = r.finish(); !st) return fail(st.error());
    return q;
  }
  /// Buffer operands in wire order.
  [[nodiscard]] std::size_t buffer_count() const noexcept {
    return std::size_t{has_x} + has_w + has_dy + has_out + has_source;
  }
};

/// The request of typed operands: the spec with the element types of T and TOut, and which buffers
/// travel (the operation's non-empty inputs, out, and source unless it aliases out).
template <class T, class TOut>
ConvRequest conv_request(ConvSpec spec, const ConvOperands<T, TOut>& ops) {
  ConvRequest q;
  spec.element = dtype_of<T>::value;
  spec.output = dtype_of<TOut>::value;
  q.spec = spec;
  q.sku_override = ops.sku_override;
  q.alpha = ops.alpha;
  q.beta = ops.beta;
  const ConvReads in = reads_of(spec.operation);
  q.has_x = in.x && !ops.x.empty();
  q.has_w = in.w && !ops.w.empty();
  q.has_dy = in.dy && !ops.dy.empty();
  q.has_out = !ops.out.empty();
  q.source_is_out = q.has_out && !ops.source.empty() && ops.source.allocation() == ops.out.allocation();
  q.has_source = !ops.source.empty() && !q.source_is_out;
  return q;
}

/// Runs a convolution request whose tensor pointers are set in `t` (`bytes` = sizes of x, w, dy,
/// out and source, 0 for what is absent) on ctx's stream with a plan from `plans`, allocating any
/// workspace in stream order: the one body of both forms of the request. Returns the SKU that ran.
inline Result<GemmSku> run_conv(runtime::OpContext& ctx, ConvPlanCache& plans, const ConvRequest& q,
                                const ConvTensors& t, std::array<std::size_t, 5> bytes) {
  ConvPlanOptions options;
  options.sku_override = q.sku_override;
  options.sm_count = ctx.sm_count();
  options.device = ctx.device();
  auto plan = plans.get(q.spec, ctx.arch(), options);
  if (!plan) return fail(plan.error());
  CUACTOR_TRY(plan->validate(t));
  for (const auto& [what, input] : {std::pair{"x", t.x}, std::pair{"w", t.w}, std::pair{"dy", t.dy}})
    if (input != nullptr && input == t.out)
      return fail(errc::invalid_argument, fmt::format("conv {}: out is the same buffer as the input {} (an "
                                                      "in-place convolution races with itself)",
                                                      name(q.spec.operation), what));
  CUACTOR_TRY(plan->check_buffer_sizes(bytes[0], bytes[1], bytes[2], bytes[3], bytes[4]));
  auto workspace = stream_workspace(ctx, plan->workspace_size());
  if (!workspace) return fail(workspace.error());
  CUACTOR_TRY(plan->run(t, *workspace, plan->workspace_size(), ctx.stream()));
  return plan->sku();
}

/// The isolated worker's handler of runtime::worker_ops::conv: decodes the request, takes the
/// tensor pointers from `buffers` and runs it like the in-process closure; replies the SKU's string.
inline Result<std::vector<std::byte>> handle_conv_worker_op(runtime::OpContext& ctx, ConvPlanCache& plans,
                                                            std::span<const std::byte> payload,
                                                            std::span<const runtime::WorkerOpBuffer> buffers) {
  auto q = ConvRequest::decode(payload);
  if (!q) return fail(q.error());
  if (buffers.size() != q->buffer_count())
    return fail(errc::protocol_error, fmt::format("conv worker operation: {} buffer operands, the request names {}",
                                                  buffers.size(), q->buffer_count()));
  ConvTensors t;
  t.alpha = q->alpha;
  t.beta = q->beta;
  std::array<std::size_t, 5> bytes{};
  std::size_t i = 0;
  if (q->has_x) t.x = buffers[i].data, bytes[0] = buffers[i++].bytes;
  if (q->has_w) t.w = buffers[i].data, bytes[1] = buffers[i++].bytes;
  if (q->has_dy) t.dy = buffers[i].data, bytes[2] = buffers[i++].bytes;
  if (q->has_out) t.out = buffers[i].data, bytes[3] = buffers[i++].bytes;
  if (q->has_source) t.source = buffers[i].data, bytes[4] = buffers[i++].bytes;
  if (q->source_is_out) t.source = t.out, bytes[4] = bytes[3];
  auto sku = run_conv(ctx, plans, *q, t, bytes);
  if (!sku) return fail(sku.error());
  runtime::wire::Writer w;
  w.put_string(sku->to_string());
  return w.take();
}

}  // namespace detail

/// Enqueues the convolution `spec` describes (its `element` and `output` types are taken from T and
/// TOut) on the actor's stream with a cached plan for the actor's device, allocating any workspace in
/// stream order, and replies with the SKU that ran once the work finished; while the actor's stream
/// captures, the request is recorded into the graph instead. Validation failures ([E2]) reply
/// `invalid_argument` naming the tensor (a missing input, a buffer too small, a malformed spec);
/// stale handles `stale_handle`; what no kernel computes `unsupported`. On an isolated actor the
/// request runs in the worker, with the worker's own plan cache (`plans` is then not used).
template <class T, class TOut, class Token>
auto async_conv(runtime::DeviceActor& actor, ConvPlanCache& plans, ConvSpec spec, ConvOperands<T, TOut> ops,
                Token&& token) {
  const detail::ConvRequest q = detail::conv_request(spec, ops);
  // What does not travel is neither tracked nor kept: the inputs the operation ignores, and a source
  // that is out.
  if (!q.has_x) ops.x = {};
  if (!q.has_w) ops.w = {};
  if (!q.has_dy) ops.dy = {};
  if (!q.has_source) ops.source = {};
  runtime::WorkerOpCmd worker;
  worker.op = runtime::worker_ops::conv;
  runtime::wire::Writer wr;
  q.encode(wr);
  worker.payload = wr.take();
  if (q.has_x) worker.buffers.emplace_back(ops.x.allocation(), false);
  if (q.has_w) worker.buffers.emplace_back(ops.w.allocation(), false);
  if (q.has_dy) worker.buffers.emplace_back(ops.dy.allocation(), false);
  if (q.has_out) worker.buffers.emplace_back(ops.out.allocation(), true);
  if (q.has_source) worker.buffers.emplace_back(ops.source.allocation(), false);
  return actor.template submit_portable<GemmSku>(
      "conv",
      [&plans, q, ops = std::move(ops)](runtime::OpContext& ctx) -> Result<GemmSku> {
        auto x = detail::optional_ptr(ops.x);
        auto w = detail::optional_ptr(ops.w);
        auto dy = detail::optional_ptr(ops.dy);
        auto source = detail::optional_ptr(ops.source);
        for (const auto* r : {&x, &w, &dy, &source})
          if (!*r) return fail(r->error());
        ConvTensors t;
        if (q.has_out) {
          auto out = ops.out.raw_device_ptr();
          if (!out) return fail(out.error());
          t.out = *out;
        }
        t.x = *x;
        t.w = *w;
        t.dy = *dy;
        t.source = q.source_is_out ? t.out : *source;
        t.alpha = q.alpha;
        t.beta = q.beta;
        return detail::run_conv(ctx, plans, q, t,
                                {ops.x.size_bytes(), ops.w.size_bytes(), ops.dy.size_bytes(), ops.out.size_bytes(),
                                 q.source_is_out ? ops.out.size_bytes() : ops.source.size_bytes()});
      },
      std::move(worker), &detail::decode_sku_reply, std::forward<Token>(token));
}

}  // namespace cuactor::kernels
