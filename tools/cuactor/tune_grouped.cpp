// `cuactor tune grouped`: the grouped GEMM sweep behind the tuning database ([K9]). For each problem
// (groups x rows per group x N x K, rows jittered like real routing), candidate sm_90a grouped
// configurations (tile, cluster, cooperative or pingpong schedule) are compiled through the JIT in
// parallel (cache reused; possible on a machine without a GPU). On a GPU each one runs the groups sized
// on the device (offsets, as cuactor.grouped_mm does), timed with CUDA events after warm-up and
// interleaved with a cuBLAS per-group loop on the same data, and its result is checked against that
// loop's. The fastest correct one is timed again (confirm_winner) and recorded for this device and the
// problem's class if it still beats the heuristic's choice by more than kRecordMargin, else the class
// is left to the heuristic; grouped plans (jit::default_tuned_grouped_planner: Python, the worker,
// `cuactor bench grouped`) consult it first.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "commands.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/jit/engine.hpp"
#include "cuactor/jit/gemm.hpp"
#include "cuactor/jit/tuning.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"
#include "gemm_anchor.hpp"
#include "tune_candidates.hpp"
#include "tune_common.hpp"

namespace cuactor::cli {
namespace {

using kernels::GemmSchedule;
using kernels::GemmSku;
using kernels::GroupedGemmPlan;
using kernels::GroupedGemmSpec;

struct Options {
  std::vector<std::string> shapes;  ///< "GxRxNxK": groups, rows per group, N, K.
  std::string from;                 ///< File of shapes, one per line, '#' comments.
  std::string dtype = "bf16";
  double skew = 0.5;      ///< Rows per group jittered uniformly by +-skew (routing is never even).
  std::string db;         ///< Database file (empty: the default under the cache root).
  std::string cache_dir;  ///< JIT cache directory (empty: the default).
  bool warm_only = false;
  bool quick = false;
  int reps = 20;
  int rounds = 3;
  int warmup = 5;
  double tolerance = 2e-2;  ///< Largest relative difference to cuBLAS a candidate may have.
};

/// The spec a caller of this shape would plan with (hints as cuactor.grouped_mm sets them).
GroupedGemmSpec spec_of(const GroupedSize& s, DType in, const gpu::DeviceProperties& props, int device) {
  GroupedGemmSpec spec;
  spec.a = spec.b = in;
  spec.d = in == DType::e4m3 ? DType::bf16 : in;
  spec.arch = props.arch;
  spec.sm_count = props.multiprocessors;
  spec.device = device;
  spec.rows_per_group_hint = s.rows;
  spec.group_count_hint = s.groups;
  spec.n_hint = s.n;
  spec.k_hint = s.k;
  return spec;
}

/// The data of one problem on the device, the cuBLAS per-group loop that checks and anchors every
/// candidate, and the timing of a plan against it.
class GroupedTimer {
 public:
  using Timing = GemmTimer::Timing;

  static Result<std::unique_ptr<GroupedTimer>> create(const GroupedSize& shape, DType in, double skew,
                                                      const gpu::Stream& stream, const gpu::MemPool& pool) {
    auto t = std::unique_ptr<GroupedTimer>(new GroupedTimer(stream.get()));
    t->in_ = in;
    t->out_ = in == DType::e4m3 ? DType::bf16 : in;
    t->shape_ = shape;
    t->rows_ = shape.rows_per_group(skew, 7u);
    t->total_ = std::accumulate(t->rows_.begin(), t->rows_.end(), std::int64_t{0});
    const cudaStream_t s = stream.get();
    const auto ei = storage_bytes(in, 1), eo = storage_bytes(t->out_, 1);
    const auto total = static_cast<std::size_t>(std::max<std::int64_t>(t->total_, 1));
    const auto n = static_cast<std::size_t>(shape.n), k = static_cast<std::size_t>(shape.k);
    std::vector<gpu::DeviceBuffer*> buffers = {&t->a_, &t->b_, &t->d_, &t->ref_, &t->offsets_, &t->scales_};
    const std::size_t sizes[] = {total * k * ei,
                                 static_cast<std::size_t>(shape.groups) * n * k * ei,
                                 total * n * eo,
                                 total * n * eo,
                                 static_cast<std::size_t>(shape.groups) * sizeof(std::int32_t),
                                 (static_cast<std::size_t>(shape.groups) + 4) * sizeof(float)};
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      auto b = gpu::DeviceBuffer::allocate(pool, sizes[i], s);
      if (!b) return fail(b.error());
      *buffers[i] = std::move(*b);
    }
    CUACTOR_TRY(fill_random(t->a_.data(), t->a_.size(), in, 31, s));
    CUACTOR_TRY(fill_random(t->b_.data(), t->b_.size(), in, 47, s));
    std::vector<std::int32_t> offsets;
    std::int32_t end = 0;
    for (int m : t->rows_) offsets.push_back(end += m);
    // scale_a (0.5) then one scale_b per group (0.25), from a 16-byte aligned slot.
    std::vector<float> scales(static_cast<std::size_t>(shape.groups) + 4, 0.25f);
    scales[0] = 0.5f;
    CUACTOR_TRY(gpu::copy_async(t->offsets_.data(), offsets.data(), offsets.size() * sizeof(std::int32_t), s));
    CUACTOR_TRY(gpu::copy_async(t->scales_.data(), scales.data(), scales.size() * sizeof(float), s));
    CUACTOR_CUDA_TRY(cudaStreamSynchronize(s));  // the host vectors leave scope
    if (in == DType::e4m3) {
      t->scale_a_ = t->scales_.data_as<const float>();
      t->scale_b_ = t->scales_.data_as<const float>() + 4;
    }
    auto ws = gpu::DeviceBuffer::allocate(pool, kAnchorWorkspace, s);
    if (!ws) return fail(ws.error());
    t->anchor_ws_ = std::move(*ws);
    if (in != DType::e4m3) {
      CUACTOR_CUDA_TRY(cublasCreate(&t->blas_.h));
      CUACTOR_CUDA_TRY(cublasSetStream(t->blas_.h, s));
      CUACTOR_CUDA_TRY(cublasSetWorkspace(t->blas_.h, t->anchor_ws_.data(), t->anchor_ws_.size()));
    }
    // One cuBLAS anchor per distinct row count (a cuBLASLt fp8 matmul is described per shape; 16-bit
    // ones share the handle above).
    for (int m : t->rows_) {
      if (m == 0 || t->anchors_.count(m) != 0) continue;
      kernels::GemmProblem p;
      p.m = m;
      p.n = shape.n;
      p.k = shape.k;
      p.a = p.b = in;
      p.c = p.d = t->out_;
      if (in == DType::e4m3) p.epilogue = kernels::GemmEpilogue::scaled_linear_combination;
      auto anchor =
          CublasAnchor::create(p, s, t->anchor_ws_.data(), t->anchor_ws_.size(), t->scale_a_, t->scale_b_, t->blas_.h);
      if (!anchor) return fail(anchor.error());
      t->anchors_.emplace(m, std::move(*anchor));
    }
    return t;
  }

  /// Times `plan` on the device-sized groups and the cuBLAS loop, interleaved; then checks the plan's
  /// D (poisoned first) against the loop's.
  Result<Timing> time(const GroupedGemmPlan& plan, const gpu::MemPool& pool, int warmup, int rounds, int reps) {
    const auto n = shape_.n, k = shape_.k;
    const kernels::DeviceSizedGroups g =
        kernels::packed_device_groups(shape_.groups, offsets_.data_as<const std::int32_t>(),
                                      std::max<std::int64_t>(total_, 1), n, k, a_.data(), b_.data(), d_.data(), n);
    kernels::GroupedScalars scalars;
    scalars.scale_a = scale_a_;
    scalars.scale_b = scale_b_;
    auto prepared = plan.prepare(g, scalars);
    if (!prepared) return fail(prepared.error());
    auto ws = gpu::DeviceBuffer::allocate(pool, prepared->workspace_size(), stream_);
    if (!ws) return fail(ws.error());
    const auto run_ours = [&](int) { return prepared->run(stream_, ws->data(), ws->size()); };
    const auto run_anchor = [&](int) { return run_reference(); };
    auto ms = time_interleaved(stream_, warmup, rounds, reps, run_ours, run_anchor);
    if (!ms) return fail(ms.error());
    CUACTOR_CUDA_TRY(cudaMemsetAsync(d_.data(), 0xff, d_.size(), stream_));  // NaN in bf16 and f16
    CUACTOR_TRY(run_ours(0));
    auto diff = relative_difference(d_.data(), ref_.data(), static_cast<std::size_t>(total_) * n, out_, stream_);
    if (!diff) return fail(diff.error());
    return Timing{ms->first, ms->second, *diff};
  }

  [[nodiscard]] double flops() const {
    return 2.0 * static_cast<double>(total_) * static_cast<double>(shape_.n) * static_cast<double>(shape_.k);
  }

 private:
  static constexpr std::size_t kAnchorWorkspace = std::size_t{32} << 20;
  explicit GroupedTimer(cudaStream_t stream) : stream_(stream) {}

  /// D = A[g] B[g]^T (times the scales for fp8) group by group through cuBLAS, into the reference.
  Status run_reference() {
    const auto ei = storage_bytes(in_, 1), eo = storage_bytes(out_, 1);
    const auto n = static_cast<std::size_t>(shape_.n), k = static_cast<std::size_t>(shape_.k);
    std::size_t row = 0;
    for (std::size_t g = 0; g < rows_.size(); ++g) {
      const int m = rows_[g];
      if (m > 0)
        CUACTOR_TRY(anchors_.at(m)->run(a_.data_as<std::byte>() + row * k * ei,
                                        b_.data_as<std::byte>() + g * n * k * ei,
                                        ref_.data_as<std::byte>() + row * n * eo));
      row += static_cast<std::size_t>(m);
    }
    return ok();
  }

  cudaStream_t stream_;
  DType in_ = DType::bf16, out_ = DType::bf16;
  GroupedSize shape_;
  std::vector<int> rows_;
  std::int64_t total_ = 0;
  gpu::DeviceBuffer a_, b_, d_, ref_, offsets_, scales_, anchor_ws_;
  const float* scale_a_ = nullptr;
  const float* scale_b_ = nullptr;
  struct Blas {
    cublasHandle_t h = nullptr;
    ~Blas() {
      if (h) cublasDestroy(h);
    }
  };
  Blas blas_;  // destroyed after the anchors that use it (declared before them)
  std::map<int, std::unique_ptr<CublasAnchor>> anchors_;
};

Status run_tune_grouped(const Options& o) {
  CUACTOR_TRY(check_timing_options(o.warmup, o.rounds, o.reps));
  if (!(o.tolerance > 0.0 && o.tolerance < 1.0))
    return fail(errc::invalid_argument,
                fmt::format("--tolerance={} must be in (0, 1): the largest relative difference to cuBLAS accepted",
                            o.tolerance));
  CUACTOR_TRY(check_skew(o.skew));
  const auto dtype = parse_dtype(o.dtype);
  if (!dtype || (*dtype != DType::bf16 && *dtype != DType::f16 && *dtype != DType::e4m3))
    return fail(errc::invalid_argument, fmt::format("--dtype '{}': grouped tuning covers bf16, f16 and e4m3", o.dtype));
  auto texts = shape_texts(o.shapes, o.from);
  if (!texts) return fail(texts.error());
  if (texts->empty()) return fail(errc::invalid_argument, "nothing to tune: give --shape GxRxNxK and/or --from FILE");
  std::vector<GroupedSize> shapes;
  for (const auto& t : *texts) {
    auto s = parse_grouped_size(t, *dtype);
    if (!s) return fail(s.error());
    shapes.push_back(*s);
  }
  jit::JitOptions jo;
  if (!o.cache_dir.empty()) jo.disk.directory = o.cache_dir;
  jo.progress = compile_progress_printer();
  auto engine = jit::JitEngine::create(std::move(jo));
  if (!engine) return fail(engine.error());
  jit::GemmJit gemm_jit(*engine);

  // 1. Compile every candidate the catalog lacks, all at once.
  const std::vector<GemmSku> skus = grouped_tune_candidates(*dtype, o.quick);
  std::vector<GemmSku> to_compile;
  for (const auto& s : skus)
    if (kernels::find_in_catalog(s) == nullptr) to_compile.push_back(s);
  std::cout << fmt::format(
      "cuactor tune grouped: {} problem(s), {} {} candidate kernel(s), {} to compile (others are "
      "in the catalog), JIT cache {}\n",
      shapes.size(), skus.size(), name(*dtype), to_compile.size(), (*engine)->disk_cache().directory().string());
  auto sweep = start_sweep(gemm_jit, to_compile, o.warm_only, o.db);
  if (!sweep) return fail(sweep.error());
  if (!sweep->session) return ok();  // --warm-only

  // 2. Time the candidates per problem.
  TuneSession& session = *sweep->session;
  const std::set<std::string>& unusable = sweep->unusable;
  std::cout << fmt::format(
      "device: {}; groups sized on the device; rows per group jittered by +-{:.0f}%; median of {}x{} "
      "event-timed launches per side after {} warm-up; anchor: cuBLAS, one GEMM per group\n",
      session.device.to_string(), o.skew * 100, o.rounds, o.reps, o.warmup);
  for (const GroupedSize& shape : shapes) {
    const GroupedGemmSpec spec = spec_of(shape, *dtype, session.props, 0);
    std::cout << fmt::format("\n{} {} (class {}):\n", shape.to_string(), name(*dtype),
                             jit::GroupedGemmClass::of(spec).to_string());
    auto timer = GroupedTimer::create(shape, *dtype, o.skew, session.stream, session.pool);
    if (!timer) return fail(timer.error());
    const auto tflops = [&](double ms) { return (*timer)->flops() / (ms * 1e-3) / 1e12; };
    struct Measured {
      GemmSku sku;
      double ms = 0, anchor_ms = 0;
    };
    const auto measure = [&](const GroupedGemmPlan& plan, const std::string& label) -> std::optional<Measured> {
      auto t = (*timer)->time(plan, session.pool, o.warmup, o.rounds, o.reps);
      if (!accepted(label, t, tflops, o.tolerance)) return std::nullopt;
      return Measured{plan.sku(), t->ours_ms, t->anchor_ms};
    };
    const std::optional<Measured> heuristic = measure_heuristic(GroupedGemmPlan::create(spec), measure);
    std::optional<Measured> best;
    for (const auto& sku : skus) {
      if (unusable.count(sku.to_string()) != 0) continue;
      const auto& instance = gemm_jit.resolve(sku).get();  // the catalog's, else the one compiled above
      if (!instance) {
        std::cout << fmt::format("  {:<44} error: {}\n", short_sku_name(sku), instance.error().to_string());
        continue;
      }
      auto plan =
          GroupedGemmPlan::with_instance(spec, sku, *(*instance)->abi, (*instance)->jit, kernels::PlanSource::tuned);
      if (!plan) {
        std::cout << fmt::format("  {:<44} error: {}\n", short_sku_name(sku), plan.error().to_string());
        continue;
      }
      auto m = measure(*plan, short_sku_name(sku));
      if (m && (!best || m->ms < best->ms)) best = m;
    }
    if (!best) {
      std::cout << "  no candidate ran correctly: nothing recorded for this class\n";
      continue;
    }
    const auto retime = [&](const Measured& m) -> std::optional<Measured> {
      const auto& instance = gemm_jit.resolve(m.sku).get();
      if (!instance) return std::nullopt;
      auto plan =
          GroupedGemmPlan::with_instance(spec, m.sku, *(*instance)->abi, (*instance)->jit, kernels::PlanSource::tuned);
      if (!plan) return std::nullopt;
      return measure(*plan, short_sku_name(m.sku) + " again");
    };
    const auto same_config = [](const Measured& a, const Measured& b) { return a.sku == b.sku; };
    const auto confirmed = confirm_winner(*best, heuristic, retime, same_config);
    if (settled_without_recording(session, jit::GroupedGemmClass::of(spec), confirmed)) continue;
    best = confirmed.measured;
    jit::TunedGemm choice{best->sku, 0, 0, shape.to_string(), tflops(best->ms), tflops(best->anchor_ms)};
    std::cout << fmt::format("  => {}: {:.1f} TFLOP/s, {:.3f}x cuBLAS{}\n", short_sku_name(choice.sku), choice.tflops,
                             best->anchor_ms / best->ms,
                             heuristic
                                 ? fmt::format(", {:.3f}x the heuristic's choice (each against its own cuBLAS run)",
                                               relative_time(*heuristic) / relative_time(*best))
                                 : std::string());
    session.record(jit::GroupedGemmClass::of(spec), std::move(choice));
  }
  return session.save();
}

}  // namespace

void add_tune_grouped_command(CLI::App& tune) {
  auto* cmd = tune.add_subcommand("grouped", "Grouped GEMM: candidates compiled through the JIT, timed against cuBLAS");
  auto opt = std::make_shared<Options>();
  cmd->add_option("--shape", opt->shapes, "Problem GxRxNxK: groups, rows per group, N, K (repeatable)");
  cmd->add_option("--from", opt->from, "File of shapes, one GxRxNxK per line ('#' starts a comment)");
  cmd->add_option("--dtype", opt->dtype, "Element type of A and B: bf16, f16 (D the same) or e4m3 (D bf16)");
  cmd->add_option("--skew", opt->skew, "Rows per group jittered uniformly by +-skew (0 to 0.9; default 0.5)");
  add_sweep_options(cmd, *opt, "5 or 6 instead of 11");
  cmd->callback([opt] {
    if (auto s = run_tune_grouped(*opt); !s) {
      std::cerr << "cuactor tune grouped: " << s.error().to_string() << "\n";
      std::exit(1);
    }
  });
}

}  // namespace cuactor::cli
