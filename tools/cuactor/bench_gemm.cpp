// `cuactor bench gemm`: cuactor's dense GEMM plans against cuBLAS (cublasGemmEx for 16-bit inputs,
// cuBLASLt with per-tensor scales and fast accumulation for fp8) on the same data in the same run.
// CUDA-event timing per repetition after warm-up, medians over interleaved rounds of both sides (so
// clock and thermal drift hit both alike), operands rotated when several copies fit in L2.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "commands.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/event.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/kernels/gemm_plan.hpp"

namespace cuactor::cli {
namespace {

using kernels::GemmEpilogue;
using kernels::GemmOperands;
using kernels::GemmPlan;
using kernels::GemmProblem;
using kernels::MatrixLayout;

struct GemmBenchOptions {
  int reps = 20;    ///< Timed repetitions per side and round.
  int rounds = 3;   ///< Interleaved rounds (cuactor, cuBLAS, cuactor, ...).
  int warmup = 10;  ///< Untimed launches per side first.
  bool quick = false;
  int max_swizzle = 0;   ///< sm_90a tile swizzle (0 = CUTLASS default).
  int raster_order = 0;  ///< sm_90a raster order (0 heuristic, 1 along M, 2 along N).
  std::string only;      ///< Run only cases whose label contains this text.
};

/// One row of the table.
struct GemmCase {
  std::string label;
  GemmProblem problem;
  bool decode = false;  ///< Also report bandwidth over the weight (B) bytes.
};

std::vector<GemmCase> gemm_cases(bool quick) {
  auto make = [](std::string label, DType in, DType out, MatrixLayout lb, std::int64_t m, std::int64_t n,
                 std::int64_t k, bool decode) {
    GemmProblem p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a = p.b = in;
    p.c = p.d = out;
    p.layout_b = lb;
    if (in == DType::e4m3) p.epilogue = GemmEpilogue::scaled_linear_combination;
    return GemmCase{std::move(label), p, decode};
  };
  std::vector<GemmCase> cases;
  for (std::int64_t s : quick ? std::vector<std::int64_t>{4096} : std::vector<std::int64_t>{4096, 8192}) {
    cases.push_back(make("bf16 TN", DType::bf16, DType::bf16, MatrixLayout::col, s, s, s, false));
    cases.push_back(make("bf16 NN", DType::bf16, DType::bf16, MatrixLayout::row, s, s, s, false));
    cases.push_back(make("f16 TN", DType::f16, DType::f16, MatrixLayout::col, s, s, s, false));
    cases.push_back(make("e4m3 TN", DType::e4m3, DType::bf16, MatrixLayout::col, s, s, s, false));
  }
  cases.push_back(make("bf16 TN decode", DType::bf16, DType::bf16, MatrixLayout::col, 16, 8192, 8192, true));
  cases.push_back(make("e4m3 TN decode", DType::e4m3, DType::bf16, MatrixLayout::col, 16, 8192, 8192, true));
  return cases;
}

/// The anchor: cuBLAS computing the same row-major D = A * B (B stored as the problem says), seen
/// by cuBLAS as the column-major D^T = B^T A^T.
class CublasAnchor {
 public:
  static Result<std::unique_ptr<CublasAnchor>> create(const GemmProblem& p, cudaStream_t stream, void* workspace,
                                                      std::size_t workspace_bytes, const float* scale_a,
                                                      const float* scale_b) {
    auto a = std::unique_ptr<CublasAnchor>(new CublasAnchor(p, stream, workspace, workspace_bytes));
    if (p.a == DType::e4m3) {
      CUACTOR_TRY(a->init_lt(scale_a, scale_b));
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
    if (blas_) cublasDestroy(blas_);
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
    auto s = gpu::check(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
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
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos_;
  std::size_t chosen_ = 0;
};

/// Relative Frobenius difference between two device buffers of 16-bit floats of type `t`.
Result<double> relative_difference(const void* x, const void* y, std::size_t count, DType t, cudaStream_t stream) {
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

struct GemmRow {
  std::string label, sku, anchor;
  double flops = 0, weight_bytes = 0, ours_ms = 0, anchor_ms = 0, difference = 0;
  int copies = 1;
};

Result<GemmRow> bench_case(const GemmCase& c, const gpu::DeviceProperties& props, const gpu::Stream& stream,
                           const gpu::MemPool& pool, const GemmBenchOptions& opt) {
  const GemmProblem& p = c.problem;
  kernels::GemmPlanOptions po;
  po.sm_count = props.multiprocessors;
  po.max_swizzle = opt.max_swizzle;
  po.raster_order = opt.raster_order;
  auto plan = GemmPlan::make(p, props.arch, po);
  if (!plan) return fail(plan.error());
  const std::size_t a_bytes = storage_bytes(p.a, static_cast<std::size_t>(p.m * p.k));
  const std::size_t b_bytes = storage_bytes(p.b, static_cast<std::size_t>(p.k * p.n));
  const std::size_t d_elems = static_cast<std::size_t>(p.m * p.n);
  const std::size_t d_bytes = storage_bytes(p.d, d_elems);
  // Rotate through several operand sets when they fit in L2 twice over, so that neither side is
  // timed on inputs already cached by its previous launch.
  const std::size_t set_bytes = a_bytes + b_bytes + d_bytes;
  const int copies = set_bytes * 2 <= props.l2_cache_bytes ? 4 : 1;
  std::vector<gpu::DeviceBuffer> as, bs, ds;
  for (int i = 0; i < copies; ++i) {
    auto a = gpu::DeviceBuffer::allocate(pool, a_bytes, stream.get());
    auto b = gpu::DeviceBuffer::allocate(pool, b_bytes, stream.get());
    auto d = gpu::DeviceBuffer::allocate(pool, d_bytes, stream.get());
    if (!a) return fail(a.error());
    if (!b) return fail(b.error());
    if (!d) return fail(d.error());
    CUACTOR_TRY(fill_random(a->data(), a_bytes, p.a, 11u + static_cast<unsigned>(i), stream.get()));
    CUACTOR_TRY(fill_random(b->data(), b_bytes, p.b, 23u + static_cast<unsigned>(i), stream.get()));
    as.push_back(std::move(*a));
    bs.push_back(std::move(*b));
    ds.push_back(std::move(*d));
  }
  auto anchor_d = gpu::DeviceBuffer::allocate(pool, d_bytes, stream.get());
  // Each scale in its own 16-byte slot: libraries may load them with vector loads.
  auto scales = gpu::DeviceBuffer::allocate(pool, 8 * sizeof(float), stream.get());
  constexpr std::size_t kAnchorWorkspace = std::size_t{32} << 20;
  auto anchor_ws = gpu::DeviceBuffer::allocate(pool, kAnchorWorkspace, stream.get());
  auto ours_ws = gpu::DeviceBuffer::allocate(pool, plan->workspace_size(), stream.get());
  if (!anchor_d) return fail(anchor_d.error());
  if (!scales) return fail(scales.error());
  if (!anchor_ws) return fail(anchor_ws.error());
  if (!ours_ws) return fail(ours_ws.error());
  const float scale_values[8] = {0.5f, 0, 0, 0, 0.25f, 0, 0, 0};
  CUACTOR_TRY(gpu::copy_async(scales->data(), scale_values, sizeof scale_values, stream.get()));
  const bool fp8 = p.epilogue == GemmEpilogue::scaled_linear_combination;
  const float* scale_a = fp8 ? scales->data_as<const float>() : nullptr;
  const float* scale_b = fp8 ? scales->data_as<const float>() + 4 : nullptr;

  auto anchor = CublasAnchor::create(p, stream.get(), anchor_ws->data(), kAnchorWorkspace, scale_a, scale_b);
  if (!anchor) return fail(anchor.error());
  const auto run_ours = [&](int i) {
    const auto s = static_cast<std::size_t>(i % copies);
    GemmOperands o;
    o.a = as[s].data();
    o.b = bs[s].data();
    o.d = ds[s].data();
    o.scale_a = scale_a;
    o.scale_b = scale_b;
    return plan->run(o, ours_ws->data(), ours_ws->size(), stream.get());
  };
  const auto run_anchor = [&](int i) {
    const auto s = static_cast<std::size_t>(i % copies);
    return (*anchor)->run(as[s].data(), bs[s].data(), s == 0 ? anchor_d->data() : ds[s].data());
  };
  int counter = 0;
  std::vector<double> ours, theirs, discard;
  CUACTOR_TRY(time_into(discard, stream.get(), opt.warmup, counter, run_ours));
  CUACTOR_TRY(time_into(discard, stream.get(), opt.warmup, counter, run_anchor));
  for (int r = 0; r < opt.rounds; ++r) {
    CUACTOR_TRY(time_into(ours, stream.get(), opt.reps, counter, run_ours));
    CUACTOR_TRY(time_into(theirs, stream.get(), opt.reps, counter, run_anchor));
  }
  // Same inputs (set 0) on both sides: the results must agree to within rounding.
  CUACTOR_TRY(run_ours(0));
  CUACTOR_TRY(run_anchor(0));
  auto diff = relative_difference(ds[0].data(), anchor_d->data(), d_elems, p.d, stream.get());
  if (!diff) return fail(diff.error());

  GemmRow row;
  row.label = c.label;
  const auto& s = plan->sku();
  row.sku = fmt::format("{}{} {}x{}x{} c{}x{} {}", s.arch.name(), "", s.tile.m, s.tile.n, s.tile.k, s.cluster.m,
                        s.cluster.n, kernels::name(s.schedule));
  row.anchor = (*anchor)->name();
  row.flops = plan->flops();
  row.weight_bytes = c.decode ? static_cast<double>(b_bytes) : 0.0;
  row.ours_ms = median(ours);
  row.anchor_ms = median(theirs);
  row.difference = *diff;
  row.copies = copies;
  return row;
}

Status run_bench_gemm(const GemmBenchOptions& opt) {
  if (gpu::device_count() == 0)
    return fail(errc::no_device, "cuactor bench gemm needs a CUDA device (none is visible)");
  auto props = gpu::device_properties(0);
  if (!props) return fail(props.error());
  auto stream = gpu::Stream::create(0);
  if (!stream) return fail(stream.error());
  auto pool = gpu::MemPool::device_default(0);
  if (!pool) return fail(pool.error());
  std::cout << fmt::format(
      "cuactor bench gemm: {} ({}, {} SMs, L2 {} MiB); median of {}x{} event-timed launches per side "
      "after {} warm-up, interleaved; swizzle {} raster {}\n",
      props->name, props->arch.name(), props->multiprocessors, props->l2_cache_bytes >> 20, opt.rounds, opt.reps,
      opt.warmup, opt.max_swizzle, opt.raster_order);
  std::cout << fmt::format("{:<15} {:>5} {:>5} {:>5}  {:>9} {:>9} {:>7}  {:>8}  {:<40} {}\n", "case", "M", "N", "K",
                           "cuactor", "cuBLAS", "ratio", "rel.diff", "cuactor kernel", "anchor");
  std::cout << fmt::format("{:<15} {:>5} {:>5} {:>5}  {:>9} {:>9} {:>7}\n", "", "", "", "", "TFLOP/s", "TFLOP/s", "");
  int failures = 0;
  for (const auto& c : gemm_cases(opt.quick)) {
    if (!opt.only.empty() && c.label.find(opt.only) == std::string::npos) continue;
    auto row = bench_case(c, *props, *stream, *pool, opt);
    if (!row) {
      ++failures;
      std::cout << fmt::format("{:<15} {:>5} {:>5} {:>5}  error: {}\n", c.label, c.problem.m, c.problem.n, c.problem.k,
                               row.error().to_string());
      continue;
    }
    const double ours_tf = row->flops / (row->ours_ms * 1e-3) / 1e12;
    const double anchor_tf = row->flops / (row->anchor_ms * 1e-3) / 1e12;
    std::string extra = row->anchor;
    if (row->weight_bytes > 0)
      extra += fmt::format("; weights {:.0f} GB/s vs {:.0f} GB/s", row->weight_bytes / (row->ours_ms * 1e-3) / 1e9,
                           row->weight_bytes / (row->anchor_ms * 1e-3) / 1e9);
    if (row->copies > 1) extra += fmt::format("; {} rotated operand sets", row->copies);
    std::cout << fmt::format("{:<15} {:>5} {:>5} {:>5}  {:>9.1f} {:>9.1f} {:>6.3f}x  {:>8.1e}  {:<40} {}\n", row->label,
                             c.problem.m, c.problem.n, c.problem.k, ours_tf, anchor_tf, row->anchor_ms / row->ours_ms,
                             row->difference, row->sku, extra);
  }
  if (failures > 0) return fail(errc::internal, fmt::format("{} benchmark case(s) failed", failures));
  return ok();
}

}  // namespace

void add_bench_gemm_command(CLI::App& app) {
  // `bench` is shared by every benchmark file: whichever registers first creates it.
  CLI::App* bench = nullptr;
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    if (sub->get_name() == "bench") bench = sub;
  if (bench == nullptr) {
    bench = app.add_subcommand("bench", "Benchmarks of cuactor's kernels against their anchors, in one run");
    bench->require_subcommand(1);
  }
  auto* cmd = bench->add_subcommand("gemm", "Dense GEMM vs cuBLAS (cublasGemmEx / cuBLASLt) at 4096^3 and 8192^3");
  auto opt = std::make_shared<GemmBenchOptions>();
  cmd->add_option("--reps", opt->reps, "Timed repetitions per side and round (median reported)");
  cmd->add_option("--rounds", opt->rounds, "Interleaved rounds of both sides");
  cmd->add_option("--warmup", opt->warmup, "Untimed warm-up launches per side");
  cmd->add_flag("--quick", opt->quick, "Only 4096^3 and the decode shapes");
  cmd->add_option("--swizzle", opt->max_swizzle, "sm_90a tile swizzle 1, 2, 4, 8 (0: CUTLASS default)");
  cmd->add_option("--raster", opt->raster_order, "sm_90a raster order: 0 heuristic, 1 along M, 2 along N");
  cmd->add_option("--only", opt->only, "Run only the cases whose label contains this text (e.g. \"bf16 TN\")");
  cmd->callback([opt] {
    if (auto s = run_bench_gemm(*opt); !s) {
      std::cerr << "cuactor bench gemm: " << s.error().to_string() << "\n";
      std::exit(1);
    }
  });
}

}  // namespace cuactor::cli
