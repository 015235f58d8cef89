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
#include <optional>
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
#include "cuactor/jit/engine.hpp"
#include "cuactor/jit/gemm.hpp"
#include "cuactor/jit/tuning.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "gemm_anchor.hpp"
#include "tune_candidates.hpp"

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
  int max_swizzle = 0;              ///< sm_90a tile swizzle (0 with raster 0: the plan's default).
  int raster_order = 0;             ///< sm_90a raster order (0 heuristic, 1 along M, 2 along N).
  std::string only;                 ///< Run only cases whose label contains this text.
  std::string db;                   ///< Tuning database file (empty: the default under the cache root).
  std::vector<std::string> shapes;  ///< "MxNxK": these shapes (A row-major, B as N x K) instead of the list.
  std::string dtype = "bf16";       ///< A and B of the --shape rows: bf16, f16 or e4m3 (e4m3 writes bf16).
  int split_k = 0;                  ///< GemmPlanOptions::split_k of every plan (0: the plan decides).
  int swap_ab = 0;                  ///< GemmPlanOptions::swap_ab of every plan (0: the plan decides).
  std::optional<std::string> sku;   ///< GemmPlanOptions::sku_override of every plan.
};

/// One row of the table.
struct GemmCase {
  std::string label;
  GemmProblem problem;
  bool decode = false;  ///< The decode class (M <= 64): also report bandwidth over the weight (B) bytes.
  bool narrow = false;  ///< The narrow class (N <= 32, M > 64): router logits, low-rank projections.
};

/// The plan options every row takes: rasterisation and the forced split, swap and kernel, checked
/// before any device is touched (each row's plan checks the rest).
Result<kernels::GemmPlanOptions> plan_options(const GemmBenchOptions& opt) {
  if (opt.split_k < 0)
    return fail(errc::invalid_argument,
                fmt::format("--split-k={} must be 0 (the plan decides), 1 (never) or a slice count", opt.split_k));
  if (opt.swap_ab < 0 || opt.swap_ab > 2)
    return fail(errc::invalid_argument,
                fmt::format("--swap-ab={} must be 0 (the plan decides), 1 (never) or 2 (always)", opt.swap_ab));
  kernels::GemmPlanOptions po;
  po.max_swizzle = opt.max_swizzle;
  po.raster_order = opt.raster_order;
  po.split_k = opt.split_k;
  po.swap_ab = opt.swap_ab;
  if (opt.sku) {
    auto sku = kernels::GemmSku::parse(*opt.sku);
    if (!sku) return fail(sku.error());
    po.sku_override = *sku;
  }
  return po;
}

/// The table's rows: `opt.shapes` where given (at most 64 rows count as decode, else at most 32 columns
/// as narrow), else the built-in list (`opt.quick`: only 4096^3 and the decode shapes).
Result<std::vector<GemmCase>> gemm_cases(const GemmBenchOptions& opt) {
  const bool quick = opt.quick;
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
    return GemmCase{std::move(label), p, decode, !decode && n <= 32};
  };
  std::vector<GemmCase> cases;
  if (!opt.shapes.empty()) {  // the user's shapes, checked before any device is touched
    const auto in = parse_dtype(opt.dtype);
    if (!in || (*in != DType::bf16 && *in != DType::f16 && *in != DType::e4m3))
      return fail(errc::invalid_argument, fmt::format("--dtype '{}' is not bf16, f16 or e4m3", opt.dtype));
    for (const auto& text : opt.shapes) {
      auto v = parse_gemm_shape(text);
      if (!v) return fail(v.error());
      const auto [m, n, k] = *v;
      cases.push_back(make(fmt::format("{} TN", opt.dtype), *in, *in == DType::e4m3 ? DType::bf16 : *in,
                           MatrixLayout::col, m, n, k, m <= 64));
    }
    return cases;
  }
  for (std::int64_t s : quick ? std::vector<std::int64_t>{4096} : std::vector<std::int64_t>{4096, 8192}) {
    cases.push_back(make("bf16 TN", DType::bf16, DType::bf16, MatrixLayout::col, s, s, s, false));
    cases.push_back(make("bf16 NN", DType::bf16, DType::bf16, MatrixLayout::row, s, s, s, false));
    cases.push_back(make("f16 TN", DType::f16, DType::f16, MatrixLayout::col, s, s, s, false));
    cases.push_back(make("e4m3 TN", DType::e4m3, DType::bf16, MatrixLayout::col, s, s, s, false));
  }
  cases.push_back(make("bf16 TN decode", DType::bf16, DType::bf16, MatrixLayout::col, 16, 8192, 8192, true));
  cases.push_back(make("f16 TN decode", DType::f16, DType::f16, MatrixLayout::col, 16, 8192, 8192, true));
  cases.push_back(make("e4m3 TN decode", DType::e4m3, DType::bf16, MatrixLayout::col, 16, 8192, 8192, true));
  // LLM projections (Llama-3-70B-like FFN up / decode, Mistral-7B-like FFN, a thin down projection).
  cases.push_back(make("bf16 TN llm-up", DType::bf16, DType::bf16, MatrixLayout::col, 4096, 14336, 4096, false));
  cases.push_back(make("bf16 TN llm-dn128", DType::bf16, DType::bf16, MatrixLayout::col, 128, 4096, 14336, false));
  cases.push_back(make("bf16 TN llm-dec", DType::bf16, DType::bf16, MatrixLayout::col, 16, 28672, 8192, true));
  // Decode on a grid of few tiles (a narrow projection: 32 tiles of 64x64).
  cases.push_back(make("bf16 TN dec-thin", DType::bf16, DType::bf16, MatrixLayout::col, 16, 2048, 8192, true));
  // The rest of the decode class, 1 to 64 rows over grids of 16 to 80 weight tiles (its geometric mean
  // is the class's figure): one token, small batches, a down projection, a grid that splits K.
  for (const auto& [label, m, n, k] : {std::tuple{"bf16 TN dec-m1", 1, 4096, 4096},
                                       {"bf16 TN dec-m4", 4, 2816, 4096},
                                       {"bf16 TN dec-m8", 8, 5120, 5120},
                                       {"bf16 TN dec-m8n1k", 8, 1024, 4096},
                                       {"bf16 TN dec-m24", 24, 1024, 11264},
                                       {"bf16 TN dec-m32", 32, 4096, 14336},
                                       {"bf16 TN dec-m64", 64, 2048, 8192}})
    cases.push_back(make(label, DType::bf16, DType::bf16, MatrixLayout::col, m, n, k, true));
  // The narrow class: many rows over at most 32 columns (a router's logits over 8 experts, low-rank
  // projections of rank 16 and 32), memory-bound on A.
  if (!quick)
    for (const auto& [label, m, n, k] : {std::tuple{"bf16 TN router", 8192, 8, 4096},
                                         {"bf16 TN lora-r16", 4096, 16, 4096},
                                         {"bf16 TN lora-r32", 2048, 32, 8192}})
      cases.push_back(make(label, DType::bf16, DType::bf16, MatrixLayout::col, m, n, k, false));
  // e4m3 weights in the decode class beyond the square row: one token, and a wide down projection.
  cases.push_back(make("e4m3 TN dec-m1", DType::e4m3, DType::bf16, MatrixLayout::col, 1, 4096, 4096, true));
  cases.push_back(make("e4m3 TN dec-m32", DType::e4m3, DType::bf16, MatrixLayout::col, 32, 4096, 14336, true));
  if (!quick)
    cases.push_back(make("bf16 TN llm-70b", DType::bf16, DType::bf16, MatrixLayout::col, 8192, 28672, 8192, false));
  return cases;
}

/// Decode rows also time chains of this many GEMMs back to back (a decode step's projections).
constexpr int kDecodeChain = 16;

struct GemmRow {
  std::string label, sku, source, anchor;
  double flops = 0, weight_bytes = 0, ours_ms = 0, anchor_ms = 0, difference = 0;
  int copies = 1;
  /// Decode rows: milliseconds per GEMM in a chain, with programmatic launches, plain, and the anchor's.
  double chain_ms = 0, chain_plain_ms = 0, chain_anchor_ms = 0;
};

Result<GemmRow> bench_case(const GemmCase& c, const gpu::DeviceProperties& props, const gpu::Stream& stream,
                           const gpu::MemPool& pool, const GemmBenchOptions& opt, kernels::GemmPlanOptions po,
                           const jit::TuningDevice& device, const jit::TuningDb& db, jit::GemmJit* gemm_jit) {
  const GemmProblem& p = c.problem;
  po.sm_count = props.multiprocessors;
  auto plan = jit::plan_dense_gemm(p, device, po, &db, gemm_jit);
  if (!plan) return fail(plan.error());
  auto timer = GemmTimer::create(p, props, stream, pool);
  if (!timer) return fail(timer.error());
  auto timing = (*timer)->time(*plan, pool, opt.warmup, opt.rounds, opt.reps);
  if (!timing) return fail(timing.error());

  GemmRow row;
  row.label = c.label;
  const auto& s = plan->sku();
  row.sku =
      fmt::format("{} {}{}", s.arch.name(), short_sku_name(s), decode_schedule_name(plan->swap_ab(), plan->split_k()));
  row.source = std::string(kernels::name(plan->source()));
  row.anchor = (*timer)->anchor_name();
  row.flops = plan->flops();
  row.weight_bytes = c.decode ? static_cast<double>((*timer)->b_bytes()) : 0.0;
  row.ours_ms = timing->ours_ms;
  row.anchor_ms = timing->anchor_ms;
  row.difference = timing->difference;
  row.copies = (*timer)->copies();
  if (c.decode) {
    // The same plan launched plainly: what the programmatic launches gain between back-to-back GEMMs.
    po.programmatic_launch = false;
    auto plain = jit::plan_dense_gemm(p, device, po, &db, gemm_jit);
    if (!plain) return fail(plain.error());
    const kernels::GemmPlan* plans[] = {&*plan, &*plain};
    auto chain = (*timer)->time_chain(plans, pool, kDecodeChain, opt.warmup, opt.rounds, opt.reps);
    if (!chain) return fail(chain.error());
    row.chain_ms = (*chain)[0];
    row.chain_plain_ms = (*chain)[1];
    row.chain_anchor_ms = (*chain)[2];
  }
  return row;
}

/// Bytes per second a device-to-device copy of 1 GiB moves, reads plus writes (median of `reps`
/// event-timed copies): the device's achievable DRAM bandwidth.
Result<double> copy_bandwidth(const gpu::Stream& stream, const gpu::MemPool& pool, int warmup, int reps) {
  constexpr std::size_t kBytes = std::size_t{1} << 30;
  auto src = gpu::DeviceBuffer::allocate(pool, kBytes, stream.get());
  auto dst = gpu::DeviceBuffer::allocate(pool, kBytes, stream.get());
  if (!src) return fail(src.error());
  if (!dst) return fail(dst.error());
  CUACTOR_TRY(fill_random(src->data(), kBytes, DType::bf16, 7u, stream.get()));
  const auto copy = [&](int) {
    return gpu::check(cudaMemcpyAsync(dst->data(), src->data(), kBytes, cudaMemcpyDeviceToDevice, stream.get()),
                      "cudaMemcpyAsync (device to device)");
  };
  int counter = 0;
  std::vector<double> ms, discard;
  CUACTOR_TRY(time_into(discard, stream.get(), std::max(1, warmup), counter, copy));  // at least one warm-up copy
  CUACTOR_TRY(time_into(ms, stream.get(), reps, counter, copy));
  return 2.0 * static_cast<double>(kBytes) / (median(ms) * 1e-3);
}

Status run_bench_gemm(const GemmBenchOptions& opt) {
  CUACTOR_TRY(check_timing_options(opt.warmup, opt.rounds, opt.reps));
  const auto options = plan_options(opt);
  if (!options) return fail(options.error());
  const auto cases = gemm_cases(opt);
  if (!cases) return fail(cases.error());
  auto dev = BenchDevice::open("cuactor bench gemm needs a CUDA device (none is visible)");
  if (!dev) return fail(dev.error());
  const gpu::DeviceProperties& props = dev->props;
  auto device = jit::TuningDevice::of(0);
  if (!device) return fail(device.error());
  // Plans consult the tuning database (`cuactor tune gemm`) first; its kernels outside the catalog
  // come from the JIT's disk cache (compiled there by the tuning run).
  jit::TuningDb db;
  std::string db_text = "none";
  if (auto path = opt.db.empty() ? jit::TuningDb::default_path() : Result<std::filesystem::path>(opt.db)) {
    db = jit::TuningDb::load(*path);
    db_text = fmt::format("{} ({} entries)", path->string(), db.size());
  }
  std::unique_ptr<jit::GemmJit> gemm_jit;
  if (db.size() > 0) {
    if (auto engine = jit::JitEngine::create({})) gemm_jit = std::make_unique<jit::GemmJit>(std::move(*engine));
  }
  // The decode rows' bandwidth anchor: the DRAM traffic (reads + writes) of a device-to-device copy.
  auto copy_traffic = copy_bandwidth(dev->stream, dev->pool, opt.warmup, opt.reps);
  if (!copy_traffic) return fail(copy_traffic.error());
  std::cout << fmt::format(
      "cuactor bench gemm: {} ({}, {} SMs, L2 {} MiB); median of {}x{} event-timed launches per side "
      "after {} warm-up, interleaved; {}; tuning database {}\n",
      props.name, props.arch.name(), props.multiprocessors, props.l2_cache_bytes >> 20, opt.rounds, opt.reps,
      opt.warmup,
      opt.max_swizzle == 0 && opt.raster_order == 0
          ? std::string("swizzle and raster order: the plans' defaults")
          : fmt::format("swizzle {} raster {}", opt.max_swizzle, opt.raster_order),
      db_text);
  std::cout << fmt::format(
      "device-to-device copy of 1 GiB moves {:.0f} GB/s (reads + writes; decode rows report their weight "
      "reads against it)\n",
      *copy_traffic / 1e9);
  std::cout << fmt::format("{:<17} {:>5} {:>5} {:>5}  {:>9} {:>9} {:>7}  {:>8}  {:<9} {:<40} {}\n", "case", "M", "N",
                           "K", "cuactor", "cuBLAS", "ratio", "rel.diff", "plan", "cuactor kernel", "anchor");
  std::cout << fmt::format("{:<17} {:>5} {:>5} {:>5}  {:>9} {:>9} {:>7}\n", "", "", "", "", "TFLOP/s", "TFLOP/s", "");
  int failures = 0;
  std::vector<double> decode_ratios, narrow_ratios, other_ratios;  // cuBLAS time / cuactor time, per class
  std::vector<double> chain_ratios, programmatic_gains;            // decode chains: over cuBLAS, over plain launches
  for (const auto& c : *cases) {
    if (!opt.only.empty() && c.label.find(opt.only) == std::string::npos) continue;
    auto row = bench_case(c, props, dev->stream, dev->pool, opt, *options, *device, db, gemm_jit.get());
    if (!row) {
      ++failures;
      std::cout << fmt::format("{:<17} {:>5} {:>5} {:>5}  error: {}\n", c.label, c.problem.m, c.problem.n, c.problem.k,
                               row.error().to_string());
      continue;
    }
    const double ours_tf = row->flops / (row->ours_ms * 1e-3) / 1e12;
    const double anchor_tf = row->flops / (row->anchor_ms * 1e-3) / 1e12;
    std::string extra = row->anchor;
    if (row->weight_bytes > 0)
      extra += fmt::format("; weights {:.0f} GB/s ({:.0f}% of copy) vs {:.0f} GB/s",
                           row->weight_bytes / (row->ours_ms * 1e-3) / 1e9,
                           100.0 * row->weight_bytes / (row->ours_ms * 1e-3) / *copy_traffic,
                           row->weight_bytes / (row->anchor_ms * 1e-3) / 1e9);
    if (row->copies > 1) extra += fmt::format("; {} rotated operand sets", row->copies);
    if (row->chain_ms > 0) {
      extra += fmt::format("; chain of {}: {:.1f} us per GEMM ({:.1f} launched plainly), cuBLAS {:.1f}", kDecodeChain,
                           row->chain_ms * 1e3, row->chain_plain_ms * 1e3, row->chain_anchor_ms * 1e3);
      chain_ratios.push_back(row->chain_anchor_ms / row->chain_ms);
      programmatic_gains.push_back(row->chain_plain_ms / row->chain_ms);
    }
    std::cout << fmt::format("{:<17} {:>5} {:>5} {:>5}  {:>9.1f} {:>9.1f} {:>6.3f}x  {:>8.1e}  {:<9} {:<40} {}\n",
                             row->label, c.problem.m, c.problem.n, c.problem.k, ours_tf, anchor_tf,
                             row->anchor_ms / row->ours_ms, row->difference, row->source, row->sku, extra);
    (c.decode ? decode_ratios : c.narrow ? narrow_ratios : other_ratios).push_back(row->anchor_ms / row->ours_ms);
  }
  // The targets are geometric means over a class of shapes.
  const auto summary = [](const std::string& name, const std::vector<double>& ratios, const char* over) {
    if (ratios.empty()) return;
    double log_sum = 0;
    for (double r : ratios) log_sum += std::log(r);
    std::cout << fmt::format("{}: {:.3f}x {} in the geometric mean over {} rows (min {:.3f}x)\n", name,
                             std::exp(log_sum / static_cast<double>(ratios.size())), over, ratios.size(),
                             *std::min_element(ratios.begin(), ratios.end()));
  };
  summary("decode (M <= 64)", decode_ratios, "cuBLAS");
  summary("narrow (N <= 32)", narrow_ratios, "cuBLAS");
  summary("the other rows", other_ratios, "cuBLAS");
  summary(fmt::format("decode chains of {} GEMMs", kDecodeChain), chain_ratios, "cuBLAS");
  summary("decode chains, programmatic launches", programmatic_gains, "plain launches");
  if (failures > 0) return fail(errc::internal, fmt::format("{} benchmark case(s) failed", failures));
  return ok();
}

}  // namespace

CLI::App& bench_command(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App* s) { return s->get_name() == "bench"; })) return *sub;
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks of cuactor's kernels against their anchors, in one run");
  bench->require_subcommand(1);
  return *bench;
}

void add_bench_gemm_command(CLI::App& app) {
  auto* cmd = bench_command(app).add_subcommand(
      "gemm", "Dense GEMM vs cuBLAS (cublasGemmEx / cuBLASLt): squares, decode and LLM projection shapes");
  auto opt = std::make_shared<GemmBenchOptions>();
  cmd->add_option("--reps", opt->reps, "Timed repetitions per side and round (median reported)");
  cmd->add_option("--rounds", opt->rounds, "Interleaved rounds of both sides");
  cmd->add_option("--warmup", opt->warmup, "Untimed warm-up launches per side");
  cmd->add_flag("--quick", opt->quick, "Only 4096^3 and the decode shapes");
  cmd->add_option("--swizzle", opt->max_swizzle,
                  "sm_90a tile swizzle 1, 2, 4, 8 (0 with --raster 0: the plan's default, up to 8 along N for 16-bit "
                  "128-row tiles)");
  cmd->add_option("--raster", opt->raster_order, "sm_90a raster order: 0 heuristic, 1 along M, 2 along N");
  cmd->add_option("--db", opt->db, "Tuning database file (default: <cache root>/tuning.json)");
  cmd->add_option("--only", opt->only, "Run only the cases whose label contains this text (e.g. \"bf16 TN\")");
  auto* shapes = cmd->add_option(
      "--shape", opt->shapes,
      "Problem MxNxK, repeatable: these shapes instead of the list (TN: A row-major, B as N x K; M <= 64 "
      "counts as decode, else N <= 32 as narrow)");
  cmd->add_option(
         "--dtype", opt->dtype,
         "Element type of A and B of the --shape rows: bf16, f16 or e4m3 (C and D: the same type; bf16 for e4m3)")
      ->needs(shapes);
  cmd->add_option("--split-k", opt->split_k,
                  "Split K into this many slices in every plan (0: the plan decides, 1: never)");
  cmd->add_option("--swap-ab", opt->swap_ab, "Swap A and B in every plan: 0 the plan decides, 1 never, 2 always");
  cmd->add_option("--sku", opt->sku,
                  "Run this catalog kernel in every plan (GemmPlanOptions::sku_override; rows it does not compute "
                  "report an error)");
  cmd->callback([opt] {
    if (auto s = run_bench_gemm(*opt); !s) {
      std::cerr << "cuactor bench gemm: " << s.error().to_string() << "\n";
      std::exit(1);
    }
  });
}

}  // namespace cuactor::cli
