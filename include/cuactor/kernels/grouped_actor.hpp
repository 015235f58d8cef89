/// @file
/// Grouped GEMM requests on the device actor: the mixture-of-experts layout of torch._grouped_mm —
/// one packed A (the rows of every group stacked), one tensor of group_count expert matrices B, one
/// packed D — as GpuRefs, with plans from a GroupedPlanCache and the actor's write tracking (A, B
/// and the row offsets are read, D is written). Header-only on top of DeviceActor::submit_portable:
/// in-process the request runs as a closure on the actor's thread, on an isolated actor the same body
/// runs in the worker (runtime/worker_op.hpp) with the worker's plan cache. Uses Boost.Asio, so
/// include it from .cpp files only.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuactor/gpu/check.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"
#include "cuactor/kernels/grouped_plan_cache.hpp"
#include "cuactor/runtime/device_actor.hpp"
#include "cuactor/runtime/wire.hpp"
#include "cuactor/runtime/worker_op.hpp"

namespace cuactor::kernels {

using runtime::DeviceActor;
using runtime::GpuRef;
using runtime::OpContext;
using runtime::Reads;
using runtime::Writes;

/// The packed MoE operands: group g multiplies rows [start_g, start_g + rows_g) of A (K columns,
/// leading dimension K) by expert g of B (N x K for layout_b = col, K x N for row, experts
/// contiguous) into the same rows of D (N columns).
template <class TA, class TD>
struct PackedGroupedOperands {
  GpuRef<TA> a;
  GpuRef<TA> b;
  GpuRef<TD> d;
  int n = 0;
  int k = 0;
};

namespace detail {

/// Checks that `rows` rows of the packed operands fit in A, B and D of `a_bytes`, `b_bytes` and
/// `d_bytes` bytes, with the element types of `spec`.
inline Status check_packed_bytes(const GroupedGemmSpec& spec, int n, int k, std::int64_t rows, int groups,
                                 std::size_t a_bytes, std::size_t b_bytes, std::size_t d_bytes) {
  if (n < 0 || k < 0) return fail(errc::invalid_argument, fmt::format("n={}, k={} must not be negative", n, k));
  if (rows < 0) return fail(errc::invalid_argument, fmt::format("{} rows must not be negative", rows));
  const auto need_a = storage_bytes(spec.a, static_cast<std::size_t>(rows) * k);
  const auto need_d = storage_bytes(spec.d, static_cast<std::size_t>(rows) * n);
  const auto need_b = storage_bytes(spec.b, static_cast<std::size_t>(groups) * n * k);
  if (a_bytes < need_a)
    return fail(errc::invalid_argument,
                fmt::format("a has {} bytes, {} rows x k={} of {} need {}", a_bytes, rows, k, name(spec.a), need_a));
  if (b_bytes < need_b)
    return fail(errc::invalid_argument, fmt::format("b has {} bytes, {} experts of n={} x k={} of {} need {}", b_bytes,
                                                    groups, n, k, name(spec.b), need_b));
  if (d_bytes < need_d)
    return fail(errc::invalid_argument,
                fmt::format("d has {} bytes, {} rows x n={} of {} need {}", d_bytes, rows, n, name(spec.d), need_d));
  return ok();
}

/// Checks that the GpuRefs' element sizes match the plan's types.
template <class TA, class TD>
Status check_element_sizes(const GroupedGemmSpec& spec) {
  if (sizeof(TA) * 8 != static_cast<std::size_t>(size_bits(spec.a)) ||
      sizeof(TD) * 8 != static_cast<std::size_t>(size_bits(spec.d)))
    return fail(errc::invalid_argument,
                fmt::format("grouped GEMM request: GpuRef element sizes {} and {} bytes do not match a={} d={}",
                            sizeof(TA), sizeof(TD), name(spec.a), name(spec.d)));
  return ok();
}

/// Actor requests carry A, B and D only: no vectors nor per-group pointers for an epilogue tree, so
/// they take the preset epilogues (`unsupported` naming the tree otherwise; GroupedGemmPlan with
/// DeviceSizedGroups runs trees).
inline Status check_request_epilogue(const GroupedGemmSpec& spec) {
  if (spec.epilogue.is_preset()) return ok();
  return fail(errc::unsupported,
              fmt::format("grouped GEMM request: the epilogue tree '{}' is not supported through the actor, which "
                          "passes A, B and D only; use GroupedGemmPlan with DeviceSizedGroups",
                          spec.epilogue.token()));
}

/// Fills the device fields of `spec` (ordinal, and arch / SM count when left at 0) from the actor's
/// device with cheap attribute queries.
inline Status complete_spec(GroupedGemmSpec& spec, int device) {
  spec.device = device;
  if (spec.sm_count > 0) return ok();
  int sms = 0, major = 0, minor = 0;
  CUACTOR_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUACTOR_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUACTOR_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  spec.sm_count = sms;
  spec.arch = best_target_for(major, minor);
  return ok();
}

/// Keeps a prepared grouped GEMM and its workspace alive until the device finished with them.
template <class T>
std::shared_ptr<const void> hold(T value) {
  return std::make_shared<const T>(std::move(value));
}

/// Prepares `groups` with `plan`, allocates the workspace in stream order on the actor's stream and
/// enqueues the kernel(s). The workspace goes back to the pool right after the launch (its free is
/// ordered after the kernel on the same stream); the prepared metadata, whose pinned upload is
/// enqueued, is kept alive until the work completed.
template <class Groups>
Status run_prepared(OpContext& ctx, const GroupedGemmPlan& plan, const Groups& groups, const GroupedScalars& scalars) {
  auto prepared = plan.prepare(groups, scalars);
  if (!prepared) return fail(prepared.error());
  auto workspace = ctx.allocate_bytes(prepared->workspace_size());
  if (!workspace) return fail(workspace.error());
  CUACTOR_TRY(prepared->run(ctx.stream(), (*workspace)->data(), (*workspace)->bytes()));
  workspace->reset();
  ctx.keep_alive(hold(std::move(*prepared)));
  return ok();
}

/// A grouped request as both its forms run it: the in-process closure, and the isolated worker's
/// handler, which receives it through the wire. Operands are A, B, D (and the device offsets of a
/// device-sized request), with their sizes in bytes.
struct GroupedRequest {
  GroupedGemmSpec spec;
  int n = 0;
  int k = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  bool raw_scales = false;         ///< GroupedScalars carried device pointers (in-process only).
  bool device_sized = false;       ///< Rows come from device offsets, not `rows`.
  std::vector<int> rows;           ///< Host-known rows per group.
  std::int64_t capacity_rows = 0;  ///< Device-sized: rows of the packed buffers.

  void encode(runtime::wire::Writer& w) const {
    w.put_string(name(spec.a)).put_string(name(spec.b)).put_string(name(spec.d)).put_string(name(spec.layout_b));
    w.put_string(spec.epilogue.token());
    w.put_i32(spec.sm_count).put_i32(spec.arch.major).put_i32(spec.arch.minor).put_bool(spec.arch.arch_specific);
    w.put_i32(spec.rows_per_group_hint).put_string(spec.sku_override ? spec.sku_override->to_string() : std::string());
    w.put_i32(n).put_i32(k).put_f64(alpha).put_f64(beta).put_bool(raw_scales).put_bool(device_sized);
    w.put(static_cast<std::uint32_t>(rows.size()));
    for (int r : rows) w.put_i32(r);
    w.put_i64(capacity_rows);
  }
  static Result<GroupedRequest> decode(std::span<const std::byte> payload) {
    constexpr std::uint32_t max_groups = 1u << 20;
    runtime::wire::Reader r(payload, "grouped_gemm worker operation");
    GroupedRequest q;
    q.spec.a = r.get_parsed("a", parse_dtype).value_or(DType::bf16);
    q.spec.b = r.get_parsed("b", parse_dtype).value_or(DType::bf16);
    q.spec.d = r.get_parsed("d", parse_dtype).value_or(DType::bf16);
    q.spec.layout_b = r.get_parsed("layout_b", parse_layout).value_or(MatrixLayout::col);
    if (const std::string epilogue = r.get_string("epilogue"); r.good()) {
      auto parsed = EpilogueSpec::parse(epilogue);
      if (!parsed) return fail(parsed.error());
      q.spec.epilogue = *parsed;
    }
    q.spec.sm_count = r.get_i32("sm_count");
    q.spec.arch.major = r.get_i32("arch major");
    q.spec.arch.minor = r.get_i32("arch minor");
    q.spec.arch.arch_specific = r.get_bool("arch specific");
    q.spec.rows_per_group_hint = r.get_i32("rows_per_group_hint");
    if (const std::string sku = r.get_string("sku_override"); r.good() && !sku.empty()) {
      auto parsed = GemmSku::parse(sku);
      if (!parsed) return fail(parsed.error());
      q.spec.sku_override = *parsed;
    }
    q.n = r.get_i32("n");
    q.k = r.get_i32("k");
    q.alpha = static_cast<float>(r.get_f64("alpha"));
    q.beta = static_cast<float>(r.get_f64("beta"));
    q.raw_scales = r.get_bool("raw_scales");
    q.device_sized = r.get_bool("device_sized");
    const auto groups = r.get_count("group count", max_groups);
    for (std::uint32_t g = 0; g < groups && r.good(); ++g) q.rows.push_back(r.get_i32("rows"));
    q.capacity_rows = r.get_i64("capacity_rows");
    if (Status s = r.finish(); !s) return fail(s.error());
    return q;
  }
};

/// Fills the shape hints the caller left unknown (group count, N, K) from the request itself: the
/// class under which a plan cache's tuning planner looks for a tuned kernel.
inline void fill_shape_hints(GroupedRequest& q, int groups) {
  if (q.spec.group_count_hint == 0) q.spec.group_count_hint = std::max(groups, 0);
  if (q.spec.n_hint == 0) q.spec.n_hint = std::max(q.n, 0);
  if (q.spec.k_hint == 0) q.spec.k_hint = std::max(q.k, 0);
}

/// Runs a host-sized grouped request on A, B, D at `a`, `b`, `d` (`bytes` their sizes): the one body
/// of both forms of async_grouped_gemm.
inline Status run_grouped_host_sized(OpContext& ctx, GroupedPlanCache& plans, GroupedRequest q, const void* a,
                                     const void* b, void* d, std::array<std::size_t, 3> bytes,
                                     const GroupedScalars& scalars) {
  if (ctx.capturing())
    return fail(errc::unsupported,
                "grouped GEMM request with host-known rows cannot be prepared while the actor's stream captures; "
                "use async_grouped_gemm_device_sized");
  CUACTOR_TRY(check_request_epilogue(q.spec));
  CUACTOR_TRY(complete_spec(q.spec, ctx.device()));
  const std::int64_t total = std::accumulate(q.rows.begin(), q.rows.end(), std::int64_t{0});
  if (q.spec.rows_per_group_hint == 0 && !q.rows.empty())
    q.spec.rows_per_group_hint = static_cast<int>(std::max<std::int64_t>(1, total / std::ssize(q.rows)));
  fill_shape_hints(q, static_cast<int>(q.rows.size()));
  CUACTOR_TRY(
      check_packed_bytes(q.spec, q.n, q.k, total, static_cast<int>(q.rows.size()), bytes[0], bytes[1], bytes[2]));
  auto plan = plans.get(q.spec);
  if (!plan) return fail(plan.error());
  const bool b_col = q.spec.layout_b == MatrixLayout::col;
  const auto a_row = storage_bytes(q.spec.a, static_cast<std::size_t>(q.k));
  const auto b_matrix = storage_bytes(q.spec.b, static_cast<std::size_t>(q.n) * q.k);
  const auto d_row = storage_bytes(q.spec.d, static_cast<std::size_t>(q.n));
  std::vector<GroupedProblem> groups(q.rows.size());
  std::int64_t start = 0;
  for (std::size_t g = 0; g < q.rows.size(); ++g) {
    GroupedProblem& p = groups[g];
    p.m = q.rows[g];
    p.n = q.n;
    p.k = q.k;
    p.a = static_cast<const std::byte*>(a) + start * a_row;
    p.lda = q.k;
    p.b = static_cast<const std::byte*>(b) + g * b_matrix;
    p.ldb = b_col ? q.k : q.n;
    p.d = static_cast<std::byte*>(d) + start * d_row;
    p.ldd = q.n;
    start += q.rows[g];
  }
  return run_prepared(ctx, **plan, groups, scalars);
}

/// Runs a device-sized grouped request on A, B, D and the int32 cumulative `offsets` (`bytes`: sizes
/// of A, B, D and offsets): the one body of both forms of async_grouped_gemm_device_sized.
inline Status run_grouped_device_sized(OpContext& ctx, GroupedPlanCache& plans, GroupedRequest q, const void* a,
                                       const void* b, void* d, const void* offsets, std::array<std::size_t, 4> bytes,
                                       const GroupedScalars& scalars) {
  CUACTOR_TRY(check_request_epilogue(q.spec));
  CUACTOR_TRY(complete_spec(q.spec, ctx.device()));
  const int groups = static_cast<int>(bytes[3] / sizeof(std::int32_t));
  CUACTOR_TRY(check_packed_bytes(q.spec, q.n, q.k, q.capacity_rows, groups, bytes[0], bytes[1], bytes[2]));
  fill_shape_hints(q, groups);
  auto plan = plans.get(q.spec);
  if (!plan) return fail(plan.error());
  DeviceSizedGroups g;
  g.group_count = groups;
  g.offsets = static_cast<const std::int32_t*>(offsets);
  g.capacity_rows = q.capacity_rows;
  g.n = q.n;
  g.k = q.k;
  g.a = a;
  g.lda = q.k;
  g.b = b;
  g.ldb = q.spec.layout_b == MatrixLayout::col ? q.k : q.n;
  g.b_group_stride = static_cast<std::int64_t>(q.n) * q.k;
  g.d = d;
  g.ldd = q.n;
  return run_prepared(ctx, **plan, g, scalars);
}

/// The isolated worker's handler of runtime::worker_ops::grouped_gemm and grouped_gemm_device_sized:
/// operands A, B, D (and offsets); replies nothing (the client replies with its own d).
inline Result<std::vector<std::byte>> handle_grouped_worker_op(OpContext& ctx, GroupedPlanCache& plans,
                                                               std::span<const std::byte> payload,
                                                               std::span<const runtime::WorkerOpBuffer> buffers) {
  auto q = GroupedRequest::decode(payload);
  if (!q) return fail(q.error());
  if (q->raw_scales)
    return fail(errc::unsupported,
                "grouped GEMM with fp8 scales given as device pointers (GroupedScalars::scale_a/scale_b) runs only "
                "in-process: a pointer of the client's process means nothing in the isolated worker");
  const std::size_t want = q->device_sized ? 4 : 3;
  if (buffers.size() != want)
    return fail(errc::protocol_error,
                fmt::format("grouped_gemm worker operation: {} buffer operands, expected {}", buffers.size(), want));
  GroupedScalars scalars;
  scalars.alpha = q->alpha;
  scalars.beta = q->beta;
  Status s = q->device_sized
                 ? run_grouped_device_sized(
                       ctx, plans, std::move(*q), buffers[0].data, buffers[1].data, buffers[2].data, buffers[3].data,
                       {buffers[0].bytes, buffers[1].bytes, buffers[2].bytes, buffers[3].bytes}, scalars)
                 : run_grouped_host_sized(ctx, plans, std::move(*q), buffers[0].data, buffers[1].data, buffers[2].data,
                                          {buffers[0].bytes, buffers[1].bytes, buffers[2].bytes}, scalars);
  if (!s) return fail(s.error());
  return std::vector<std::byte>{};
}

/// The request of `spec` on `ops` with `scalars` (rows or device sizing are set by the caller).
template <class TA, class TD>
GroupedRequest grouped_request(const GroupedGemmSpec& spec, const PackedGroupedOperands<TA, TD>& ops,
                               const GroupedScalars& scalars) {
  GroupedRequest q;
  q.spec = spec;
  q.n = ops.n;
  q.k = ops.k;
  q.alpha = scalars.alpha;
  q.beta = scalars.beta;
  q.raw_scales = scalars.scale_a || scalars.scale_b;
  return q;
}

/// The worker form of a grouped request on `ops` (and `offsets` when device-sized).
template <class TA, class TD>
runtime::WorkerOpCmd grouped_worker_op(const GroupedRequest& q, const PackedGroupedOperands<TA, TD>& ops,
                                       const GpuRef<std::int32_t>* offsets) {
  runtime::WorkerOpCmd worker;
  worker.op = q.device_sized ? runtime::worker_ops::grouped_gemm_device_sized : runtime::worker_ops::grouped_gemm;
  runtime::wire::Writer w;
  q.encode(w);
  worker.payload = w.take();
  worker.buffers.emplace_back(ops.a.allocation(), false);
  worker.buffers.emplace_back(ops.b.allocation(), false);
  worker.buffers.emplace_back(ops.d.allocation(), true);
  if (offsets) worker.buffers.emplace_back(offsets->allocation(), false);
  return worker;
}

}  // namespace detail

/// Grouped GEMM with host-known rows per group (`rows[g]`, zeros allowed). `spec.sm_count` = 0 takes
/// the arch and SM count from the actor's device. Prepares (pinned metadata) on the actor's
/// thread (so not while its stream captures: use async_grouped_gemm_device_sized there), allocates
/// the workspace in stream order and replies with d once the work finished.
template <class TA, class TD, class Token>
auto async_grouped_gemm(DeviceActor& actor, GroupedPlanCache& plans, GroupedGemmSpec spec,
                        PackedGroupedOperands<TA, TD> ops, std::vector<int> rows, GroupedScalars scalars,
                        Token&& token) {
  detail::GroupedRequest q = detail::grouped_request(spec, ops, scalars);
  q.rows = std::move(rows);
  auto worker = detail::grouped_worker_op(q, ops, nullptr);
  return actor.template submit_portable<GpuRef<TD>>(
      "grouped_gemm",
      [&plans, q = std::move(q), ops, scalars](OpContext& ctx) -> Result<GpuRef<TD>> {
        CUACTOR_TRY((detail::check_element_sizes<TA, TD>(q.spec)));
        CUACTOR_TRY(detail::run_grouped_host_sized(
            ctx, plans, q, ops.a.allocation()->data(), ops.b.allocation()->data(), ops.d.allocation()->data(),
            {ops.a.size_bytes(), ops.b.size_bytes(), ops.d.size_bytes()}, scalars));
        return ops.d;
      },
      std::move(worker), [d = ops.d](std::vector<std::byte>&&) -> Result<GpuRef<TD>> { return d; },
      std::forward<Token>(token));
}

/// Grouped GEMM whose per-group cumulative end rows (`offsets`, int32, group_count values, as
/// torch._grouped_mm's `offs`) are read from device memory when the work runs ([K6]); a captured
/// recording of this request serves every routing. Rows outside `capacity_rows` are skipped.
template <class TA, class TD, class Token>
auto async_grouped_gemm_device_sized(DeviceActor& actor, GroupedPlanCache& plans, GroupedGemmSpec spec,
                                     PackedGroupedOperands<TA, TD> ops, GpuRef<std::int32_t> offsets,
                                     std::int64_t capacity_rows, GroupedScalars scalars, Token&& token) {
  detail::GroupedRequest q = detail::grouped_request(spec, ops, scalars);
  q.device_sized = true;
  q.capacity_rows = capacity_rows;
  auto worker = detail::grouped_worker_op(q, ops, &offsets);
  return actor.template submit_portable<GpuRef<TD>>(
      "grouped_gemm_device_sized",
      [&plans, q = std::move(q), ops, offsets, scalars](OpContext& ctx) -> Result<GpuRef<TD>> {
        CUACTOR_TRY((detail::check_element_sizes<TA, TD>(q.spec)));
        CUACTOR_TRY(detail::run_grouped_device_sized(
            ctx, plans, q, ops.a.allocation()->data(), ops.b.allocation()->data(), ops.d.allocation()->data(),
            offsets.allocation()->data(),
            {ops.a.size_bytes(), ops.b.size_bytes(), ops.d.size_bytes(), offsets.size_bytes()}, scalars));
        return ops.d;
      },
      std::move(worker), [d = ops.d](std::vector<std::byte>&&) -> Result<GpuRef<TD>> { return d; },
      std::forward<Token>(token));
}

}  // namespace cuactor::kernels
