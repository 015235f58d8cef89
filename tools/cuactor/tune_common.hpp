// What `cuactor tune gemm` and `cuactor tune grouped` share: compiling the candidates the catalog
// lacks (printing each outcome), and the device, stream, pool and tuning database a sweep times on.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <span>
#include <string>

#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/jit/gemm.hpp"
#include "cuactor/jit/tuning.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "gemm_anchor.hpp"
#include "tune_candidates.hpp"
#include "tune_choice.hpp"

namespace cuactor::cli {

/// Compiles `skus` the catalog lacks through `jit`, all at once (the library caps parallel nvcc runs),
/// printing one line per kernel; returns the SKU strings that failed to compile.
inline std::set<std::string> compile_candidates(jit::GemmJit& jit, std::span<const kernels::GemmSku> to_compile) {
  std::set<std::string> unusable;
  for (const auto& r : jit::warm_all(jit, to_compile)) {
    if (r.report) {
      std::cout << fmt::format("  {} {}{}\n", r.report->already_cached ? "cached  " : "compiled", r.sku.to_string(),
                               r.report->already_cached ? "" : fmt::format(" in {:.0f} s", r.report->seconds));
    } else {
      std::cout << fmt::format("  FAILED   {}: {}\n", r.sku.to_string(), r.report.error().to_string());
      unusable.insert(r.sku.to_string());
    }
  }
  return unusable;
}

/// Device 0 and what a sweep times and records on it.
struct TuneSession {
  gpu::DeviceProperties props;
  jit::TuningDevice device;
  gpu::Stream stream;
  gpu::MemPool pool;
  std::filesystem::path db_path;
  jit::TuningDb db;
  std::set<std::string> recorded;  ///< The classes this sweep recorded (a later shape of one keeps it).

  /// Opens device 0 and loads the database at `db_path`; `no_device` when no GPU is visible (the
  /// candidates are compiled by then).
  static Result<TuneSession> open(std::filesystem::path db_path) {
    auto dev = BenchDevice::open("the candidates are compiled, but timing them needs a CUDA device (none is visible)");
    if (!dev) return fail(dev.error());
    auto device = jit::TuningDevice::of(0);
    if (!device) return fail(device.error());
    jit::TuningDb db = jit::TuningDb::load(db_path);
    return TuneSession{std::move(dev->props),
                       std::move(*device),
                       std::move(dev->stream),
                       std::move(dev->pool),
                       std::move(db_path),
                       std::move(db),
                       {}};
  }

  /// Records `choice` for `problem_class` (a later shape of the same class in this sweep replaces it).
  template <class ProblemClass>
  void record(const ProblemClass& problem_class, jit::TunedGemm choice) {
    db.record(device, problem_class, std::move(choice));
    recorded.insert(problem_class.to_string());
  }

  /// Saves the database and says how many classes this sweep recorded.
  [[nodiscard]] Status save() const {
    CUACTOR_TRY(db.save(db_path));
    std::cout << fmt::format("\nrecorded {} class(es); database {} now holds {} entries\n", recorded.size(),
                             db_path.string(), db.size());
    return ok();
  }
};

/// The options every sweep takes (`Options` has db, cache_dir, warm_only, quick, reps, rounds, warmup and
/// tolerance); `candidates` says how many the full and the quick sweep try, for the help text.
template <class Options>
void add_sweep_options(CLI::App* cmd, Options& opt, const std::string& candidates) {
  cmd->add_option("--db", opt.db, "Tuning database file (default: <cache root>/tuning.json)");
  cmd->add_option("--cache-dir", opt.cache_dir, "JIT disk cache directory (default: <cache root>/jit)");
  cmd->add_flag("--warm-only", opt.warm_only, "Only compile the candidates (no GPU needed)");
  cmd->add_flag("--quick", opt.quick, "Fewer candidates (" + candidates + ")");
  cmd->add_option("--reps", opt.reps, "Timed repetitions per side and round");
  cmd->add_option("--rounds", opt.rounds, "Interleaved rounds");
  cmd->add_option("--warmup", opt.warmup, "Untimed launches per side first");
  cmd->add_option("--tolerance", opt.tolerance, "Largest relative difference to cuBLAS accepted");
}

/// Prints one timed candidate (`timing`: GemmTimer::Timing or an error) next to the cuBLAS anchor, with
/// `tflops(ms)` for its rate; true when it ran and agrees with the anchor within `tolerance`.
template <class Tflops>
bool accepted(const std::string& label, const Result<GemmTimer::Timing>& timing, Tflops&& tflops, double tolerance) {
  if (!timing) {
    std::cout << fmt::format("  {:<44} error: {}\n", label, timing.error().to_string());
    return false;
  }
  const bool correct = timing->difference <= tolerance;
  std::cout << fmt::format("  {:<44} {:7.1f} TFLOP/s  cuBLAS {:7.1f}  ratio {:5.3f}x  rel.diff {:.1e}{}\n", label,
                           tflops(timing->ours_ms), tflops(timing->anchor_ms), timing->anchor_ms / timing->ours_ms,
                           timing->difference, correct ? "" : "  REJECTED (differs from cuBLAS)");
  return correct;
}

/// The heuristic's plan timed by `measure(plan, label)` (its optional timing), or, when there is no such
/// plan (e.g. a build without the catalog's kernels for the problem), none, saying why: the sweep then
/// has nothing to compare its winner with.
template <class Plan, class Measure>
auto measure_heuristic(const Result<Plan>& plan, Measure&& measure) -> decltype(measure(*plan, std::string())) {
  if (!plan) {
    std::cout << fmt::format("  {:<44} none: {}\n", "(heuristic)", plan.error().to_string());
    return std::nullopt;
  }
  std::string label = fmt::format("(heuristic) {}", short_sku_name(plan->sku()));
  if constexpr (requires { plan->swap_ab(); }) label += decode_schedule_name(plan->swap_ab(), plan->split_k());
  return measure(*plan, label);
}

/// Settles a verdict that records nothing, printing it: `heuristic` drops the class's entry from an
/// earlier sweep (plans fall back to the heuristic, which no winner of this sweep beat by more than
/// kRecordMargin) but keeps one that another shape of this sweep recorded; `unconfirmed` leaves the
/// database alone. False for `record`: the caller records the winner.
template <class ProblemClass, class Measured>
bool settled_without_recording(TuneSession& session, const ProblemClass& problem_class,
                               const Confirmed<Measured>& confirmed) {
  switch (confirmed.verdict) {
    case SweepVerdict::record:
      return false;
    case SweepVerdict::heuristic: {
      const bool this_sweep = session.recorded.count(problem_class.to_string()) != 0;
      const bool dropped = !this_sweep && session.db.erase(session.device, problem_class);
      const std::string why =
          confirmed.winner_is_heuristic
              ? std::string("the heuristic's choice is the fastest")
              : fmt::format(
                    "the winner timed twice is not more than {:.0f}% faster than the heuristic's choice, in "
                    "time and against cuBLAS",
                    kRecordMargin * 100);
      std::cout << fmt::format("  => {}: nothing recorded{}\n", why,
                               dropped      ? " (the class's older entry dropped)"
                               : this_sweep ? " (the class keeps what an earlier shape of this sweep recorded)"
                                            : "");
      return true;
    }
    case SweepVerdict::unconfirmed:
      std::cout << "  => the winner failed its second run: nothing recorded\n";
      return true;
  }
  return true;
}

/// The start of a sweep: the candidates that failed to compile, and the session to time the others on
/// (none after `--warm-only`).
struct Sweep {
  std::set<std::string> unusable;
  std::optional<TuneSession> session;
};

/// Checks where database `db_option` (empty: the default under the cache root) will be saved, compiles
/// `to_compile` (compile_candidates), then opens the session on device 0, unless `warm_only`. The
/// location is checked first so that an unusable one fails before minutes of compiling and timing.
inline Result<Sweep> start_sweep(jit::GemmJit& jit, std::span<const kernels::GemmSku> to_compile, bool warm_only,
                                 const std::string& db_option) {
  std::filesystem::path db_path;
  if (!warm_only) {
    auto path = db_option.empty() ? jit::TuningDb::default_path() : Result<std::filesystem::path>(db_option);
    if (!path) return fail(path.error());
    CUACTOR_TRY(jit::TuningDb::prepare_directory(*path));
    db_path = std::move(*path);
  }
  Sweep sweep{compile_candidates(jit, to_compile), std::nullopt};
  if (warm_only) {
    std::cout << "compiled; time the candidates on the GPU machine with the same command without --warm-only\n";
    return sweep;
  }
  auto session = TuneSession::open(std::move(db_path));
  if (!session) return fail(session.error());
  sweep.session = std::move(*session);
  return sweep;
}

}  // namespace cuactor::cli
