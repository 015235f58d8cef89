// `cuactor tune gemm`: the sweep behind the tuning database ([K9]). For each problem, candidate
// sm_90a configurations (tile, cluster, schedule with and without stream-K) are compiled through the
// JIT in parallel (cache reused; possible on a machine without a GPU); for decode problems (M <= 64)
// the catalog's swapped and split-K plans too (decode_tune_schedules). Each is timed with CUDA
// events after warm-up against cuBLAS on the same data, interleaved, and checked against it. The
// fastest correct one, with its best raster order and swizzle, is timed again (confirm_winner): if it
// still beats the heuristic's choice by more than kRecordMargin it is recorded for this device and the
// problem's class, else the class is left to the heuristic. Plans (jit::plan_dense_gemm, `cuactor
// bench gemm`) consult it first.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "cuactor/core/files.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/jit/engine.hpp"
#include "cuactor/jit/gemm.hpp"
#include "cuactor/jit/tuning.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "gemm_anchor.hpp"
#include "tune_candidates.hpp"
#include "tune_common.hpp"

namespace cuactor::cli {
namespace {

using kernels::GemmSku;

struct TuneOptions {
  std::vector<std::string> shapes;  ///< "MxNxK"
  std::string from;                 ///< File of shapes, one "MxNxK" (or "M N K") per line, '#' comments.
  std::string dtype = "bf16";
  std::string layout_b = "col";
  std::string db;         ///< Database file (empty: the default under the cache root).
  std::string cache_dir;  ///< JIT cache directory (empty: the default).
  bool warm_only = false;
  bool quick = false;
  int reps = 20;
  int rounds = 3;
  int warmup = 5;
  double tolerance = 2e-2;  ///< Largest relative difference to cuBLAS a candidate may have.
};

Result<std::vector<kernels::GemmProblem>> problems_of(const TuneOptions& o) {
  const auto dtype = parse_dtype(o.dtype);
  if (!dtype || (*dtype != DType::bf16 && *dtype != DType::f16 && *dtype != DType::e4m3))
    return fail(errc::invalid_argument, fmt::format("--dtype '{}': tuning covers bf16, f16 and e4m3 GEMMs", o.dtype));
  const auto layout_b = kernels::parse_layout(o.layout_b);
  if (!layout_b) return fail(errc::invalid_argument, fmt::format("--layout-b '{}' is not row or col", o.layout_b));
  const bool fp8 = *dtype == DType::e4m3;
  if (fp8 && *layout_b != MatrixLayout::col)
    return fail(errc::invalid_argument,
                fmt::format("--layout-b '{}' with --dtype e4m3: fp8 GEMMs are TN only (B col, N x K), as the "
                            "catalog's fp8 kernels and cuBLASLt's take them",
                            o.layout_b));
  auto lines = shape_texts(o.shapes, o.from);
  if (!lines) return fail(lines.error());
  const std::vector<std::string>& texts = *lines;
  if (texts.empty()) return fail(errc::invalid_argument, "nothing to tune: give --shape MxNxK and/or --from FILE");
  std::vector<kernels::GemmProblem> out;
  for (const auto& t : texts) {
    auto v = parse_gemm_shape(t);
    if (!v) return fail(v.error());
    kernels::GemmProblem p;
    p.m = (*v)[0];
    p.n = (*v)[1];
    p.k = (*v)[2];
    p.a = p.b = p.c = p.d = *dtype;
    if (fp8) {  // as bench gemm and the plans run e4m3: per-tensor scales, bf16 out
      p.c = p.d = DType::bf16;
      p.epilogue = kernels::GemmEpilogue::scaled_linear_combination;
    }
    p.layout_b = *layout_b;
    out.push_back(p);
  }
  return out;
}

/// One timed candidate.
struct Measured {
  GemmSku sku;
  int max_swizzle = 0, raster_order = 0;
  double ms = 0, anchor_ms = 0, difference = 0;
  DecodeSchedule decode;  ///< Swap-AB and split-K (decode problems; neither for the others).
};

Status run_tune_gemm(const TuneOptions& o) {
  CUACTOR_TRY(check_timing_options(o.warmup, o.rounds, o.reps));
  if (!(o.tolerance > 0.0 && o.tolerance < 1.0))
    return fail(errc::invalid_argument,
                fmt::format("--tolerance={} must be in (0, 1): the largest relative difference to cuBLAS accepted",
                            o.tolerance));
  auto problems = problems_of(o);
  if (!problems) return fail(problems.error());
  jit::JitOptions jo;
  if (!o.cache_dir.empty()) jo.disk.directory = o.cache_dir;
  jo.progress = compile_progress_printer();
  auto engine = jit::JitEngine::create(std::move(jo));
  if (!engine) return fail(engine.error());
  jit::GemmJit gemm_jit(*engine);

  // 1. Compile every candidate the catalog lacks, all at once (the library caps parallel nvcc runs).
  std::vector<GemmSku> to_compile;
  std::set<std::string> seen;
  for (const auto& p : *problems)
    for (const auto& s : dense_tune_candidates(p, o.quick))
      if (kernels::find_in_catalog(s) == nullptr && seen.insert(s.to_string()).second) to_compile.push_back(s);
  std::cout << fmt::format(
      "cuactor tune gemm: {} problem(s), {} candidate kernel(s) to compile (others are in the "
      "catalog), JIT cache {}\n",
      problems->size(), to_compile.size(), (*engine)->disk_cache().directory().string());
  auto sweep = start_sweep(gemm_jit, to_compile, o.warm_only, o.db);
  if (!sweep) return fail(sweep.error());
  if (!sweep->session) return ok();  // --warm-only

  // 2. Time the candidates per problem.
  TuneSession& session = *sweep->session;
  const std::set<std::string>& unusable = sweep->unusable;
  std::cout << fmt::format("device: {}; median of {}x{} event-timed launches per side after {} warm-up\n",
                           session.device.to_string(), o.rounds, o.reps, o.warmup);
  for (const auto& p : *problems) {
    const double flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
    const auto tflops = [&](double ms) { return flops / (ms * 1e-3) / 1e12; };
    std::cout << fmt::format("\n{}x{}x{} {} (class {}):\n", p.m, p.n, p.k, name(p.a),
                             jit::DenseGemmClass::of(p).to_string());
    auto timer = GemmTimer::create(p, session.props, session.stream, session.pool);
    if (!timer) return fail(timer.error());
    kernels::GemmPlanOptions base;
    base.sm_count = session.props.multiprocessors;
    base.device = 0;
    const auto measure = [&](const kernels::GemmPlan& plan, const std::string& label) -> std::optional<Measured> {
      auto t = (*timer)->time(plan, session.pool, o.warmup, o.rounds, o.reps);
      if (!accepted(label, t, tflops, o.tolerance)) return std::nullopt;
      return Measured{plan.sku(),
                      plan.max_swizzle(),
                      plan.raster_order(),
                      t->ours_ms,
                      t->anchor_ms,
                      t->difference,
                      {plan.swap_ab(), plan.split_k()}};
    };
    // The plan options of a timed configuration.
    const auto options_of = [&](const DecodeSchedule& decode, int raster, int swizzle) {
      kernels::GemmPlanOptions options = base;
      options.swap_ab = decode.swap_ab ? 2 : 1;
      options.split_k = decode.split_k;
      options.raster_order = raster;
      options.max_swizzle = swizzle;
      return options;
    };
    const std::optional<Measured> heuristic =
        measure_heuristic(kernels::GemmPlan::make(p, session.props.arch, base), measure);
    // A plan running `instance` of `sku` with `options` (the plan keeps a JIT instance loaded).
    const auto plan_for = [&](const GemmSku& sku, const jit::ResolvedInstance& instance,
                              const kernels::GemmPlanOptions& options) {
      return kernels::GemmPlan::with_instance(p, session.props.arch, sku, *instance.abi, instance.jit,
                                              kernels::PlanSource::tuned, options);
    };
    std::optional<Measured> best;
    std::shared_ptr<const jit::ResolvedInstance> best_instance;
    const auto consider = [&](std::optional<Measured> m, std::shared_ptr<const jit::ResolvedInstance> instance) {
      if (m && (!best || m->ms < best->ms)) {
        best = m;
        best_instance = std::move(instance);
      }
    };
    for (const auto& sku : dense_tune_candidates(p, o.quick)) {
      if (unusable.count(sku.to_string()) != 0) continue;
      const auto& instance = gemm_jit.resolve(sku).get();  // the catalog's, else the one compiled above
      if (!instance) {
        std::cout << fmt::format("  {:<44} error: {}\n", short_sku_name(sku), instance.error().to_string());
        continue;
      }
      auto plan = plan_for(sku, **instance, base);
      if (!plan) {
        std::cout << fmt::format("  {:<44} error: {}\n", short_sku_name(sku), plan.error().to_string());
        continue;
      }
      consider(measure(*plan, short_sku_name(sku)), *instance);
    }
    // Decode problems: the catalog's swapped and slice kernels under each swap and split; those whose
    // rule the shape breaks (K not a multiple of the slices' depth) are named on one line.
    std::vector<std::string> broken;
    std::string broken_rule;
    for (const DecodeSchedule& decode : decode_tune_schedules(p, o.quick)) {
      const std::string what = decode_schedule_name(decode.swap_ab, decode.split_k);
      const kernels::GemmPlanOptions options = options_of(decode, 0, 0);
      if (auto rule = kernels::GemmPlan::check_decode_options(p, session.props.arch, options); !rule) {
        broken.push_back(what.substr(1));
        if (broken_rule.empty()) broken_rule = rule.error().message();
        continue;
      }
      auto plan = kernels::GemmPlan::make(p, session.props.arch, options);
      if (!plan) {
        std::cout << fmt::format("  {:<44} not timed: {}\n", what.substr(1), plan.error().message());
        continue;
      }
      const auto& instance = gemm_jit.resolve(plan->sku()).get();  // the catalog's
      if (!instance) {
        std::cout << fmt::format("  {:<44} error: {}\n", what.substr(1), instance.error().to_string());
        continue;
      }
      consider(measure(*plan, short_sku_name(plan->sku()) + what), *instance);
    }
    if (!broken.empty())
      std::cout << fmt::format("  not timed, against their rules: {} (e.g. {})\n", fmt::join(broken, ", "),
                               broken_rule);
    if (!best) {
      std::cout << "  no candidate ran correctly: nothing recorded for this class\n";
      continue;
    }
    // The winner's raster order and swizzle (run-time options of the same kernel; {2, 8} is what
    // heuristic 16-bit plans of 128-row tiles take where it pads their grid by at most 3%).
    const auto name_of = [](const Measured& m) {
      return short_sku_name(m.sku) + decode_schedule_name(m.decode.swap_ab, m.decode.split_k);
    };
    for (auto [raster, swizzle] : {std::pair{1, 0}, {2, 0}, {0, 2}, {0, 4}, {0, 8}, {2, 8}}) {
      auto plan = plan_for(best->sku, *best_instance, options_of(best->decode, raster, swizzle));
      if (!plan) continue;
      auto m = measure(*plan, fmt::format("{} raster {} swizzle {}", name_of(*best), raster, swizzle));
      if (m && m->ms < best->ms * 0.98) {  // only a clear win changes the default options
        m->raster_order = raster;
        m->max_swizzle = swizzle;
        best = m;
      }
    }
    const auto retime = [&](const Measured& m) -> std::optional<Measured> {
      auto plan = plan_for(m.sku, *best_instance, options_of(m.decode, m.raster_order, m.max_swizzle));
      if (!plan) return std::nullopt;
      return measure(*plan, fmt::format("{} raster {} swizzle {} again", name_of(m), m.raster_order, m.max_swizzle));
    };
    const auto same_config = [](const Measured& a, const Measured& b) {
      return a.sku == b.sku && a.raster_order == b.raster_order && a.max_swizzle == b.max_swizzle &&
             a.decode == b.decode;
    };
    const auto confirmed = confirm_winner(*best, heuristic, retime, same_config);
    if (settled_without_recording(session, jit::DenseGemmClass::of(p), confirmed)) continue;
    best = confirmed.measured;
    jit::TunedGemm choice{best->sku,          best->max_swizzle,
                          best->raster_order, fmt::format("{}x{}x{}", p.m, p.n, p.k),
                          tflops(best->ms),   tflops(best->anchor_ms)};
    choice.swap_ab = best->decode.swap_ab;
    choice.split_k = best->decode.split_k;
    std::cout << fmt::format("  => {} raster {} swizzle {}: {:.1f} TFLOP/s, {:.3f}x cuBLAS\n", name_of(*best),
                             choice.raster_order, choice.max_swizzle, choice.tflops,
                             choice.tflops / choice.anchor_tflops);
    session.record(jit::DenseGemmClass::of(p), std::move(choice));
  }
  return session.save();
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto* tune = app.add_subcommand("tune", "Sweep kernel configurations and record the winners in the tuning database");
  tune->require_subcommand(1);
  auto* cmd = tune->add_subcommand("gemm", "Dense GEMM: candidates compiled through the JIT, timed against cuBLAS");
  auto opt = std::make_shared<TuneOptions>();
  cmd->add_option("--shape", opt->shapes, "Problem MxNxK (repeatable)");
  cmd->add_option("--from", opt->from, "File of shapes, one MxNxK per line ('#' starts a comment)");
  cmd->add_option("--dtype", opt->dtype,
                  "Element type of A and B: bf16 or f16 (C and D the same), or e4m3 (per-tensor scales, C and D "
                  "bf16, --layout-b col)");
  cmd->add_option("--layout-b", opt->layout_b, "Layout of B: col (N x K weights, TN) or row (K x N)");
  add_sweep_options(cmd, *opt,
                    "16-bit: 5 instead of 17, 3 instead of 6 for at most 64 columns; e4m3: 5 instead of 12, 2 "
                    "instead of 4; for at most 64 rows, 3 instead of 15 swap-AB and split-K schedules");
  cmd->callback([opt] {
    if (auto s = run_tune_gemm(*opt); !s) {
      std::cerr << "cuactor tune gemm: " << s.error().to_string() << "\n";
      std::exit(1);
    }
  });
  add_tune_grouped_command(*tune);
}

}  // namespace cuactor::cli
