/// @file
/// Grouped GEMM requests on the device actor: the mixture-of-experts layout of torch._grouped_mm —
/// one packed A (the rows of every group stacked), one tensor of group_count expert matrices B, one
/// packed D — as GpuRefs, with plans from a GroupedPlanCache and the actor's write tracking (A, B
/// and the row offsets are read, D is written). Header-only on top of DeviceActor::submit (the
/// runtime's extension point); uses Boost.Asio, so include it from .cpp files only.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "cuactor/gpu/check.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"
#include "cuactor/kernels/grouped_plan_cache.hpp"
#include "cuactor/runtime/device_actor.hpp"

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

/// Checks that the GpuRefs' element sizes match the plan's types and that `rows` fit in them.
template <class TA, class TD>
Status check_packed(const PackedGroupedOperands<TA, TD>& ops, const GroupedGemmSpec& spec, std::int64_t rows,
                    int groups) {
  if (sizeof(TA) * 8 != static_cast<std::size_t>(size_bits(spec.a)) ||
      sizeof(TD) * 8 != static_cast<std::size_t>(size_bits(spec.d)))
    return fail(errc::invalid_argument,
                fmt::format("grouped GEMM request: GpuRef element sizes {} and {} bytes do not match a={} d={}",
                            sizeof(TA), sizeof(TD), name(spec.a), name(spec.d)));
  if (ops.n < 0 || ops.k < 0)
    return fail(errc::invalid_argument, fmt::format("n={}, k={} must not be negative", ops.n, ops.k));
  const auto need_a = static_cast<std::size_t>(rows) * ops.k, need_d = static_cast<std::size_t>(rows) * ops.n;
  const auto need_b = static_cast<std::size_t>(groups) * ops.n * ops.k;
  if (ops.a.size() < need_a)
    return fail(errc::invalid_argument,
                fmt::format("a has {} elements, {} rows x k={} need {}", ops.a.size(), rows, ops.k, need_a));
  if (ops.b.size() < need_b)
    return fail(errc::invalid_argument, fmt::format("b has {} elements, {} experts of n={} x k={} need {}",
                                                    ops.b.size(), groups, ops.n, ops.k, need_b));
  if (ops.d.size() < need_d)
    return fail(errc::invalid_argument,
                fmt::format("d has {} elements, {} rows x n={} need {}", ops.d.size(), rows, ops.n, need_d));
  return ok();
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

}  // namespace detail

/// Grouped GEMM with host-known rows per group (`rows[g]`, zeros allowed). `spec.sm_count` = 0 takes
/// the arch and SM count from the actor's device. Prepares (pinned metadata) on the actor's
/// thread (so not while its stream captures: use async_grouped_gemm_device_sized there), allocates
/// the workspace in stream order and replies with d once the work finished.
template <class TA, class TD, class Token>
auto async_grouped_gemm(DeviceActor& actor, GroupedPlanCache& plans, GroupedGemmSpec spec,
                        PackedGroupedOperands<TA, TD> ops, std::vector<int> rows, GroupedScalars scalars,
                        Token&& token) {
  Reads reads{ops.a, ops.b};
  Writes writes{ops.d};
  return actor.template submit<GpuRef<TD>>(
      std::move(reads), std::move(writes),
      [&plans, spec, ops, rows = std::move(rows), scalars](OpContext& ctx) mutable -> Result<GpuRef<TD>> {
        if (ctx.capturing())
          return fail(errc::unsupported,
                      "grouped GEMM request with host-known rows cannot be prepared while the actor's stream captures; "
                      "use async_grouped_gemm_device_sized");
        CUACTOR_TRY(detail::complete_spec(spec, ctx.device()));
        const std::int64_t total = std::accumulate(rows.begin(), rows.end(), std::int64_t{0});
        if (spec.rows_per_group_hint == 0 && !rows.empty())
          spec.rows_per_group_hint = static_cast<int>(std::max<std::int64_t>(1, total / std::ssize(rows)));
        CUACTOR_TRY(detail::check_packed(ops, spec, total, static_cast<int>(rows.size())));
        auto plan = plans.get(spec);
        if (!plan) return fail(plan.error());
        const bool b_col = spec.layout_b == MatrixLayout::col;
        std::vector<GroupedProblem> groups(rows.size());
        std::int64_t start = 0;
        for (std::size_t g = 0; g < rows.size(); ++g) {
          GroupedProblem& p = groups[g];
          p.m = rows[g];
          p.n = ops.n;
          p.k = ops.k;
          p.a = static_cast<const TA*>(ops.a.allocation()->data()) + start * ops.k;
          p.lda = ops.k;
          p.b = static_cast<const TA*>(ops.b.allocation()->data()) + g * static_cast<std::size_t>(ops.n) * ops.k;
          p.ldb = b_col ? ops.k : ops.n;
          p.d = static_cast<TD*>(ops.d.allocation()->data()) + start * ops.n;
          p.ldd = ops.n;
          start += rows[g];
        }
        CUACTOR_TRY(detail::run_prepared(ctx, **plan, groups, scalars));
        return ops.d;
      },
      std::forward<Token>(token));
}

/// Grouped GEMM whose per-group cumulative end rows (`offsets`, int32, group_count values, as
/// torch._grouped_mm's `offs`) are read from device memory when the work runs ([K6]); a captured
/// recording of this request serves every routing. Rows outside `capacity_rows` are skipped.
template <class TA, class TD, class Token>
auto async_grouped_gemm_device_sized(DeviceActor& actor, GroupedPlanCache& plans, GroupedGemmSpec spec,
                                     PackedGroupedOperands<TA, TD> ops, GpuRef<std::int32_t> offsets,
                                     std::int64_t capacity_rows, GroupedScalars scalars, Token&& token) {
  Reads reads{ops.a, ops.b, offsets};
  Writes writes{ops.d};
  return actor.template submit<GpuRef<TD>>(
      std::move(reads), std::move(writes),
      [&plans, spec, ops, offsets, capacity_rows, scalars](OpContext& ctx) mutable -> Result<GpuRef<TD>> {
        CUACTOR_TRY(detail::complete_spec(spec, ctx.device()));
        const int groups = static_cast<int>(offsets.size());
        CUACTOR_TRY(detail::check_packed(ops, spec, capacity_rows, groups));
        auto plan = plans.get(spec);
        if (!plan) return fail(plan.error());
        DeviceSizedGroups g;
        g.group_count = groups;
        g.offsets = static_cast<const std::int32_t*>(offsets.allocation()->data());
        g.capacity_rows = capacity_rows;
        g.n = ops.n;
        g.k = ops.k;
        g.a = ops.a.allocation()->data();
        g.lda = ops.k;
        g.b = ops.b.allocation()->data();
        g.ldb = spec.layout_b == MatrixLayout::col ? ops.k : ops.n;
        g.b_group_stride = static_cast<std::int64_t>(ops.n) * ops.k;
        g.d = ops.d.allocation()->data();
        g.ldd = ops.n;
        CUACTOR_TRY(detail::run_prepared(ctx, **plan, g, scalars));
        return ops.d;
      },
      std::forward<Token>(token));
}

}  // namespace cuactor::kernels
