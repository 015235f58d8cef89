// The dense GEMM anchor shared by `cuactor bench gemm` and `cuactor tune gemm`: cuBLAS on the same
// operands (cublasGemmEx for 16-bit inputs, cuBLASLt with per-tensor scales and fast accumulation for
// fp8), the relative difference of two results, and GemmTimer, which times plans against it on the
// same data.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/kernels/gemm_plan.hpp"

namespace cuactor::cli {

using kernels::GemmProblem;
using kernels::MatrixLayout;

/// The anchor: cuBLAS computing the same row-major D = A * B (B stored as the problem says), seen
/// by cuBLAS as the column-major D^T = B^T A^T.
class CublasAnchor {
 public:
  /// `shared_blas` (optional, 16-bit only): a cuBLAS handle already bound to `stream` and `workspace`,
  /// used instead of creating one (many anchors of one problem family, e.g. one per group size).
  static Result<std::unique_ptr<CublasAnchor>> create(const GemmProblem& p, cudaStream_t stream, void* workspace,
                                                      std::size_t workspace_bytes, const float* scale_a,
                                                      const float* scale_b, cublasHandle_t shared_blas = nullptr) {
    auto a = std::unique_ptr<CublasAnchor>(new CublasAnchor(p, stream, workspace, workspace_bytes));
    if (p.a == DType::e4m3) {
      CUACTOR_TRY(a->init_lt(scale_a, scale_b));
    } else if (shared_blas != nullptr) {
      a->blas_ = shared_blas;
      a->owns_blas_ = false;
    } else {
      CUACTOR_CUDA_TRY(cublasCreate(&a->blas_));
      CUACTOR_CUDA_TRY(cublasSetStream(a->blas_, stream));
      CUACTOR_CUDA_TRY(cublasSetWorkspace(a->blas_, workspace, workspace_bytes));
    }
    return a;
  }
  CublasAnchor(const CublasAnchor&) = delete;
  CublasAnchor& operator=(const CublasAnchor&) = delete;
  ~CublasAnchor() {
    for (auto l : {la_, lb_, lc_}) (void)(l ? cublasLtMatrixLayoutDestroy(l) : CUBLAS_STATUS_SUCCESS);
    if (op_) cublasLtMatmulDescDestroy(op_);
    if (lt_) cublasLtDestroy(lt_);
    if (blas_ && owns_blas_) cublasDestroy(blas_);
  }

  /// "cublasGemmEx" or "cublasLtMatmul".
  [[nodiscard]] const char* name() const noexcept { return lt_ ? "cublasLtMatmul" : "cublasGemmEx"; }

  /// Enqueues D = A B on the stream (fp8: with the scales given to create()).
  Status run(const void* a, const void* b, void* d) {
    const float alpha = 1.0f, beta = 0.0f;
    const int m = static_cast<int>(p_.m), n = static_cast<int>(p_.n), k = static_cast<int>(p_.k);
    const bool b_is_nk = p_.layout_b == MatrixLayout::col;
    if (lt_ == nullptr)
      return gpu::check(cublasGemmEx(blas_, b_is_nk ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b,
                                     cuda_data_type(p_.b), b_is_nk ? k : n, a, cuda_data_type(p_.a), k, &beta, d,
                                     cuda_data_type(p_.d), n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        "cublasGemmEx");
    // The heuristic's first choice can still refuse the call (seen on H200 with CUDA 13.0): move on to
    // its next candidates until one accepts, then keep that one.
    cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;
    for (; chosen_ < algos_.size(); ++chosen_) {
      status = cublasLtMatmul(lt_, op_, &alpha, b, la_, a, lb_, &beta, d, lc_, d, lc_, &algos_[chosen_], workspace_,
                              workspace_bytes_, stream_);
      if (status != CUBLAS_STATUS_NOT_SUPPORTED) break;
    }
    return gpu::check(status, fmt::format("cublasLtMatmul (fp8, {} heuristic candidates)", algos_.size()));
  }

 private:
  CublasAnchor(const GemmProblem& p, cudaStream_t stream, void* workspace, std::size_t workspace_bytes)
      : p_(p), stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes) {}

  /// fp8 needs cuBLASLt: TN only, fast accumulation as our fp8 kernels use, per-tensor scales set
  /// before the heuristic query (an algorithm chosen without them may reject them later), and the
  /// first of the heuristic's algorithms that accepts the problem.
  Status init_lt(const float* scale_a, const float* scale_b) {
    const auto m = static_cast<std::uint64_t>(p_.m), n = static_cast<std::uint64_t>(p_.n),
               k = static_cast<std::uint64_t>(p_.k);
    CUACTOR_CUDA_TRY(cublasLtCreate(&lt_));
    CUACTOR_CUDA_TRY(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, nop = CUBLAS_OP_N;
    const std::int8_t fast = 1;
    CUACTOR_CUDA_TRY(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    CUACTOR_CUDA_TRY(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &nop, sizeof nop));
    CUACTOR_CUDA_TRY(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    // In cuBLAS's view the matrix it calls A is our B (and the reverse), so the scales swap too.
    CUACTOR_CUDA_TRY(
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_b, sizeof scale_b));
    CUACTOR_CUDA_TRY(
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_a, sizeof scale_a));
    CUACTOR_CUDA_TRY(cublasLtMatrixLayoutCreate(&la_, cuda_data_type(p_.b), k, n, static_cast<std::int64_t>(k)));
    CUACTOR_CUDA_TRY(cublasLtMatrixLayoutCreate(&lb_, cuda_data_type(p_.a), k, m, static_cast<std::int64_t>(k)));
    CUACTOR_CUDA_TRY(cublasLtMatrixLayoutCreate(&lc_, cuda_data_type(p_.d), n, m, static_cast<std::int64_t>(n)));
    cublasLtMatmulPreference_t pref = nullptr;
    CUACTOR_CUDA_TRY(cublasLtMatmulPreferenceCreate(&pref));
    const auto ws = workspace_bytes_;
    auto s =
        gpu::check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                   "cublasLtMatmulPreferenceSetAttribute");
    cublasLtMatmulHeuristicResult_t results[8]{};
    int found = 0;
    if (s)
      s = gpu::check(cublasLtMatmulAlgoGetHeuristic(lt_, op_, la_, lb_, lc_, lc_, pref, 8, results, &found),
                     "cublasLtMatmulAlgoGetHeuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    CUACTOR_TRY(s);
    for (int i = 0; i < found; ++i) {
      cublasLtMatmulHeuristicResult_t checked{};
      if (cublasLtMatmulAlgoCheck(lt_, op_, la_, lb_, lc_, lc_, &results[i].algo, &checked) == CUBLAS_STATUS_SUCCESS)
        algos_.push_back(results[i].algo);
    }
    if (algos_.empty())
      return fail(errc::unsupported, fmt::format("cuBLASLt offers no usable fp8 algorithm ({} candidates)", found));
    return ok();
  }

  GemmProblem p_;
  cudaStream_t stream_;
  void* workspace_;
  std::size_t workspace_bytes_;
  cublasHandle_t blas_ = nullptr;
  bool owns_blas_ = true;
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos_;
  std::size_t chosen_ = 0;
};

/// Relative Frobenius difference between two device buffers of 16-bit floats of type `t`.
inline Result<double> relative_difference(const void* x, const void* y, std::size_t count, DType t,
                                          cudaStream_t stream) {
  if (t != DType::bf16 && t != DType::f16)
    return fail(errc::unsupported, fmt::format("relative_difference compares bf16 or f16 results, not {}", name(t)));
  std::vector<std::uint16_t> hx(count), hy(count);
  CUACTOR_TRY(gpu::copy_async(hx.data(), x, count * 2, stream));
  CUACTOR_TRY(gpu::copy_async(hy.data(), y, count * 2, stream));
  CUACTOR_CUDA_TRY(cudaStreamSynchronize(stream));
  const auto to_double = [t](std::uint16_t bits) {
    if (t == DType::f16) {
      __half_raw h{};
      h.x = bits;
      return static_cast<double>(__half2float(__half(h)));
    }
    __nv_bfloat16_raw b{};
    b.x = bits;
    return static_cast<double>(__bfloat162float(__nv_bfloat16(b)));
  };
  double num = 0, den = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double a = to_double(hx[i]), b = to_double(hy[i]);
    num += (a - b) * (a - b);
    den += b * b;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

/// "128x256x64 c2x1 cooperative": tile, cluster and schedule of a SKU, for benchmark tables.
inline std::string short_sku_name(const kernels::GemmSku& s) {
  return fmt::format("{}x{}x{} c{}x{} {}", s.tile.m, s.tile.n, s.tile.k, s.cluster.m, s.cluster.n,
                     kernels::name(s.schedule));
}

/// One problem's operands (rotated copies, together at least twice the L2, when one set is smaller
/// than that: neither side is timed on inputs an earlier launch left cached, as a decode layer's
/// weights are not), random data, and the cuBLAS anchor with
/// its workspace: times any plan for the problem against the anchor, interleaved, on the same data.
class GemmTimer {
 public:
  /// Medians of one timing, and the plan's relative difference to the anchor.
  struct Timing {
    double ours_ms = 0;
    double anchor_ms = 0;
    double difference = 0;  ///< Relative Frobenius difference of D (plan) to D (anchor) on the same inputs.
  };

  static Result<std::unique_ptr<GemmTimer>> create(const GemmProblem& p, const gpu::DeviceProperties& props,
                                                   const gpu::Stream& stream, const gpu::MemPool& pool) {
    auto t = std::unique_ptr<GemmTimer>(new GemmTimer(p, stream.get()));
    t->a_bytes_ = storage_bytes(p.a, static_cast<std::size_t>(p.m * p.k));
    t->b_bytes_ = storage_bytes(p.b, static_cast<std::size_t>(p.k * p.n));
    t->d_elems_ = static_cast<std::size_t>(p.m * p.n);
    t->d_bytes_ = storage_bytes(p.d, t->d_elems_);
    const std::size_t set_bytes = t->a_bytes_ + t->b_bytes_ + t->d_bytes_, rotation = 2 * props.l2_cache_bytes;
    t->copies_ = set_bytes >= rotation ? 1 : static_cast<int>(std::min<std::size_t>(16, rotation / set_bytes + 1));
    for (int i = 0; i < t->copies_; ++i) {
      auto a = gpu::DeviceBuffer::allocate(pool, t->a_bytes_, stream.get());
      auto b = gpu::DeviceBuffer::allocate(pool, t->b_bytes_, stream.get());
      auto d = gpu::DeviceBuffer::allocate(pool, t->d_bytes_, stream.get());
      if (!a) return fail(a.error());
      if (!b) return fail(b.error());
      if (!d) return fail(d.error());
      CUACTOR_TRY(fill_random(a->data(), t->a_bytes_, p.a, 11u + static_cast<unsigned>(i), stream.get()));
      CUACTOR_TRY(fill_random(b->data(), t->b_bytes_, p.b, 23u + static_cast<unsigned>(i), stream.get()));
      t->as_.push_back(std::move(*a));
      t->bs_.push_back(std::move(*b));
      t->ds_.push_back(std::move(*d));
    }
    auto anchor_d = gpu::DeviceBuffer::allocate(pool, t->d_bytes_, stream.get());
    // Each scale in its own 16-byte slot: libraries may load them with vector loads.
    auto scales = gpu::DeviceBuffer::allocate(pool, 8 * sizeof(float), stream.get());
    auto anchor_ws = gpu::DeviceBuffer::allocate(pool, kAnchorWorkspace, stream.get());
    if (!anchor_d) return fail(anchor_d.error());
    if (!scales) return fail(scales.error());
    if (!anchor_ws) return fail(anchor_ws.error());
    t->anchor_d_ = std::move(*anchor_d);
    t->scales_ = std::move(*scales);
    t->anchor_ws_ = std::move(*anchor_ws);
    const float scale_values[8] = {0.5f, 0, 0, 0, 0.25f, 0, 0, 0};
    CUACTOR_TRY(gpu::copy_async(t->scales_.data(), scale_values, sizeof scale_values, stream.get()));
    if (p.epilogue == kernels::GemmEpilogue::scaled_linear_combination) {
      t->scale_a_ = t->scales_.data_as<const float>();
      t->scale_b_ = t->scales_.data_as<const float>() + 4;
    }
    auto anchor =
        CublasAnchor::create(p, stream.get(), t->anchor_ws_.data(), kAnchorWorkspace, t->scale_a_, t->scale_b_);
    if (!anchor) return fail(anchor.error());
    t->anchor_ = std::move(*anchor);
    return t;
  }

  /// Times `plan` (for this problem) and the anchor: `warmup` untimed launches of each, then `rounds`
  /// interleaved rounds of `reps` event-timed launches per side; medians. Then both run once more on
  /// the same inputs, D poisoned (NaN) first, and their results are compared.
  Result<Timing> time(const kernels::GemmPlan& plan, const gpu::MemPool& pool, int warmup, int rounds, int reps) {
    auto ws = gpu::DeviceBuffer::allocate(pool, plan.workspace_size(), stream_);
    if (!ws) return fail(ws.error());
    const auto run_ours = [&](int i) { return plan.run(operands(i), ws->data(), ws->size(), stream_); };
    const auto run_anchor = [&](int i) { return run_anchor_on(i); };
    auto ms = time_interleaved(stream_, warmup, rounds, reps, run_ours, run_anchor);
    if (!ms) return fail(ms.error());
    CUACTOR_CUDA_TRY(cudaMemsetAsync(ds_[0].data(), 0xff, d_bytes_, stream_));  // NaN in bf16, f16 and f32
    CUACTOR_TRY(run_ours(0));
    CUACTOR_TRY(run_anchor(0));
    auto diff = relative_difference(ds_[0].data(), anchor_d_.data(), d_elems_, problem_.d, stream_);
    if (!diff) return fail(diff.error());
    return Timing{ms->first, ms->second, *diff};
  }

  /// Milliseconds per GEMM of `chain` launches back to back between two events (none between them,
  /// as a decode step's projections run; operands rotated per launch) for each of `plans` and the
  /// anchor (last): medians of `rounds` interleaved rounds of `reps` timed chains per side.
  Result<std::vector<double>> time_chain(std::span<const kernels::GemmPlan* const> plans, const gpu::MemPool& pool,
                                         int chain, int warmup, int rounds, int reps) {
    std::size_t ws_bytes = 0;
    for (const auto* plan : plans) ws_bytes = std::max(ws_bytes, plan->workspace_size());
    auto ws = gpu::DeviceBuffer::allocate(pool, ws_bytes, stream_);
    if (!ws) return fail(ws.error());
    std::vector<std::function<Status(int)>> sides;
    for (const auto* plan : plans)
      sides.emplace_back([&, plan](int i) -> Status {
        for (int j = 0; j < chain; ++j)
          CUACTOR_TRY(plan->run(operands(i * chain + j), ws->data(), ws->size(), stream_));
        return ok();
      });
    sides.emplace_back([&](int i) -> Status {
      for (int j = 0; j < chain; ++j) CUACTOR_TRY(run_anchor_on(i * chain + j));
      return ok();
    });
    auto ms = time_rounds(stream_, warmup, rounds, reps, sides);
    if (!ms) return fail(ms.error());
    for (double& m : *ms) m /= chain;
    return ms;
  }

  [[nodiscard]] int copies() const noexcept { return copies_; }
  [[nodiscard]] const char* anchor_name() const noexcept { return anchor_->name(); }
  [[nodiscard]] std::size_t b_bytes() const noexcept { return b_bytes_; }

 private:
  static constexpr std::size_t kAnchorWorkspace = std::size_t{32} << 20;

  /// Launch `i`'s operand set (copy i mod copies).
  kernels::GemmOperands operands(int i) {
    const auto s = static_cast<std::size_t>(i % copies_);
    kernels::GemmOperands o;
    o.a = as_[s].data();
    o.b = bs_[s].data();
    o.d = ds_[s].data();
    o.scale_a = scale_a_;
    o.scale_b = scale_b_;
    return o;
  }
  /// The anchor on launch `i`'s operand set (copy 0 writes the anchor's own D, compared afterwards).
  Status run_anchor_on(int i) {
    const auto s = static_cast<std::size_t>(i % copies_);
    return anchor_->run(as_[s].data(), bs_[s].data(), s == 0 ? anchor_d_.data() : ds_[s].data());
  }
  GemmTimer(const GemmProblem& p, cudaStream_t stream) : problem_(p), stream_(stream) {}

  GemmProblem problem_;
  cudaStream_t stream_;
  std::size_t a_bytes_ = 0, b_bytes_ = 0, d_elems_ = 0, d_bytes_ = 0;
  int copies_ = 1;
  std::vector<gpu::DeviceBuffer> as_, bs_, ds_;
  gpu::DeviceBuffer anchor_d_, scales_, anchor_ws_;
  const float* scale_a_ = nullptr;
  const float* scale_b_ = nullptr;
  std::unique_ptr<CublasAnchor> anchor_;
};

}  // namespace cuactor::cli
