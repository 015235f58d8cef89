// `cuactor bench grouped`: cuactor's grouped GEMM against a loop of cuBLAS GEMMs and
// cublasGemmGroupedBatchedEx, measured in the same run on the same data, on mixture-of-experts
// shapes. CUDA-event timing after warm-up; every side (cuactor with group sizes from the host and
// from the device, the cuBLAS loop, cuBLAS grouped) in the same interleaved rounds; medians.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench_util.hpp"
#include "commands.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/event.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/jit/tuning.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"
#include "cuactor/kernels/grouped_plan_cache.hpp"
#include "json_output.hpp"

namespace cuactor::cli {
namespace {

using kernels::GroupedGemmPlan;
using kernels::GroupedGemmSpec;
using kernels::GroupedProblem;

/// One benchmark row's problem: its name, the rows of each group (ragged allowed), and N, K shared by
/// the experts (a GroupedSize with its rows spread).
struct BenchProblem {
  std::string name;
  std::vector<int> rows;
  int n = 0;
  int k = 0;
};

std::vector<BenchProblem> moe_shapes() {
  return {
      {"8x2048 N14336 K4096", std::vector<int>(8, 2048), 14336, 4096},
      {"32 ragged~8192 N4096 K7168", ragged_rows(32, 8192, 0.6, 0, 32), 4096, 7168},
      {"64 ragged~1000 N4096 K7168", ragged_rows(64, 1000, 0.9, 8, 64), 4096, 7168},
      {"128x16 N2048 K2048", std::vector<int>(128, 16), 2048, 2048},
      // Many experts, short K, a few hundred rows each with skewed routing (Qwen3-MoE-like layers).
      {"128 skewed~200 N1536 K2048", ragged_rows(128, 128 * 200, 0.7, 4, 128), 1536, 2048},
      {"160 skewed~150 N2048 K1536", ragged_rows(160, 160 * 150, 0.8, 6, 160), 2048, 1536},
      // Decode: many experts with a handful of rows each.
      {"64x4 N2048 K2048 (decode)", std::vector<int>(64, 4), 2048, 2048},
      {"128 ragged~6 N1536 K2048 (decode)", ragged_rows(128, 128 * 6, 0.9, 16, 6), 1536, 2048},
  };
}

struct CublasHandle {
  cublasHandle_t h = nullptr;
  ~CublasHandle() {
    if (h) cublasDestroy(h);
  }
};

struct Options {
  int reps = 10;   ///< Timed repetitions per side and round.
  int rounds = 3;  ///< Interleaved rounds (every side in turn).
  int warmup = 5;  ///< Untimed launches per side first.
  bool json = false;
  bool fp8 = true;
  bool all_skus = false;            ///< Also time every other grouped SKU that computes the row (as "alt" rows).
  std::vector<std::string> shapes;  ///< "GxRxNxK": these problems instead of the list.
  std::string dtype = "bf16";       ///< A and B of the --shape rows: bf16 or e4m3 (D bf16).
  double skew = 0.5;                ///< Rows per group of the --shape rows jittered by +-skew.
};

/// The rows the options name: `opt.shapes` (of `opt.dtype`, rows jittered by `opt.skew`) where given,
/// else the built-in list. Checked before any device is touched: `invalid_argument` naming the value.
Result<std::vector<std::pair<BenchProblem, DType>>> bench_cases(const Options& opt) {
  std::vector<std::pair<BenchProblem, DType>> cases;
  if (!opt.shapes.empty()) {
    const auto dtype = parse_dtype(opt.dtype);
    if (!dtype || (*dtype != DType::bf16 && *dtype != DType::e4m3))
      return fail(errc::invalid_argument,
                  fmt::format("--dtype '{}': the grouped benchmark covers bf16 and e4m3 (D bf16)", opt.dtype));
    CUACTOR_TRY(check_skew(opt.skew));
    for (const auto& text : opt.shapes) {
      auto size = parse_grouped_size(text, *dtype);
      if (!size) return fail(size.error());
      // Another seed than `tune grouped`'s: a benchmark row is never the very problem a sweep tuned.
      cases.push_back({{fmt::format("{} skew {:g}", size->to_string(), opt.skew + 0.0),  // -0 reads 0
                        size->rows_per_group(opt.skew, 11u), size->n, size->k},
                       *dtype});
    }
    return cases;
  }
  for (const auto& sh : moe_shapes()) cases.push_back({sh, DType::bf16});
  if (opt.fp8) {
    cases.push_back({{"32x2048 N4096 K7168 (ex57)", std::vector<int>(32, 2048), 4096, 7168}, DType::e4m3});
    for (const auto& sh : moe_shapes()) cases.push_back({sh, DType::e4m3});
  }
  return cases;
}

struct Row {
  std::string shape, dtype, sku;
  std::string source;  ///< Where the plan's choice came from: heuristic, tuned or override.
  double flops = 0, weight_bytes = 0, io_bytes = 0;
  double ours_ms = 0, loop_ms = 0, grouped_ms = 0;
  double ours_device_sized_ms = 0;  ///< The same groups sized on the device (offs; what Python runs).
  std::vector<int> rows;
  int n = 0, k = 0;
  bool alt = false;  ///< A SKU the plan did not choose, timed through an override.
};

class GroupedBench {
 public:
  GroupedBench(gpu::DeviceProperties props, gpu::Stream stream, gpu::MemPool pool, Options opt)
      : props_(std::move(props)), stream_(std::move(stream)), pool_(std::move(pool)), opt_(opt) {}

  Result<double> measure_bandwidth_gbs() {
    const std::size_t bytes = std::size_t{2} << 30;
    auto src = gpu::DeviceBuffer::allocate(pool_, bytes, stream_.get());
    auto dst = gpu::DeviceBuffer::allocate(pool_, bytes, stream_.get());
    if (!src) return fail(src.error());
    if (!dst) return fail(dst.error());
    auto ms =
        time_ms(stream_.get(), 3, 10, [&] { return gpu::copy_async(dst->data(), src->data(), bytes, stream_.get()); });
    if (!ms) return fail(ms.error());
    return 2.0 * static_cast<double>(bytes) / (*ms * 1e-3) / 1e9;  // read + write
  }

  Result<Row> run(const BenchProblem& shape, DType in, bool with_cublas,
                  std::optional<kernels::GemmSku> sku_override = std::nullopt) {
    const DType out = DType::bf16;
    const std::size_t ei = storage_bytes(in, 1), eo = storage_bytes(out, 1);
    const int groups = static_cast<int>(shape.rows.size());
    const std::int64_t total_rows = std::accumulate(shape.rows.begin(), shape.rows.end(), std::int64_t{0});
    const cudaStream_t s = stream_.get();
    auto a = gpu::DeviceBuffer::allocate(pool_, std::max<std::int64_t>(total_rows, 1) * shape.k * ei, s);
    auto b = gpu::DeviceBuffer::allocate(pool_, std::size_t(groups) * shape.n * shape.k * ei, s);
    auto d = gpu::DeviceBuffer::allocate(pool_, std::max<std::int64_t>(total_rows, 1) * shape.n * eo, s);
    if (!a) return fail(a.error());
    if (!b) return fail(b.error());
    if (!d) return fail(d.error());
    CUACTOR_TRY(fill_random(a->data(), a->size(), in, 1, s));
    CUACTOR_TRY(fill_random(b->data(), b->size(), in, 2, s));

    std::vector<GroupedProblem> problems;
    std::int64_t row = 0;
    for (int g = 0; g < groups; ++g) {
      GroupedProblem p;
      p.m = shape.rows[static_cast<std::size_t>(g)];
      p.n = shape.n;
      p.k = shape.k;
      p.a = a->data_as<std::byte>() + row * shape.k * ei;
      p.lda = shape.k;
      p.b = b->data_as<std::byte>() + std::size_t(g) * shape.n * shape.k * ei;
      p.ldb = shape.k;
      p.d = d->data_as<std::byte>() + row * shape.n * eo;
      p.ldd = shape.n;
      row += p.m;
      problems.push_back(p);
    }
    GroupedGemmSpec spec;
    spec.a = spec.b = in;
    spec.d = out;
    spec.arch = props_.arch;
    spec.sm_count = props_.multiprocessors;
    spec.rows_per_group_hint = static_cast<int>(total_rows / groups);
    spec.group_count_hint = groups;
    spec.n_hint = shape.n;
    spec.k_hint = shape.k;
    spec.sku_override = sku_override;
    // The plan users get: the tuning database first (cuactor tune grouped), then the heuristic.
    auto plan = planner_(spec);
    if (!plan) return fail(plan.error());
    // fp8 runs with per-tensor scales, as cuactor.scaled_grouped_mm always does: one for A, one per group for B.
    kernels::GroupedScalars scalars;
    gpu::DeviceBuffer scales;
    if (in == DType::e4m3) {
      std::vector<float> values(static_cast<std::size_t>(groups) + 4, 0.25f);
      values[0] = 0.5f;
      auto buffer = gpu::DeviceBuffer::allocate(pool_, values.size() * sizeof(float), s);
      if (!buffer) return fail(buffer.error());
      scales = std::move(*buffer);
      CUACTOR_TRY(gpu::copy_async(scales.data(), values.data(), values.size() * sizeof(float), s));
      CUACTOR_CUDA_TRY(cudaStreamSynchronize(s));  // `values` leaves scope
      scalars.scale_a = scales.data_as<const float>();
      scalars.scale_b = scales.data_as<const float>() + 4;
    }
    auto prepared = plan->prepare(problems, scalars);
    if (!prepared) return fail(prepared.error());
    auto ws = gpu::DeviceBuffer::allocate(pool_, prepared->workspace_size(), s);
    if (!ws) return fail(ws.error());

    Row r;
    r.shape = shape.name;
    r.dtype = std::string(name(in));
    r.sku = plan->sku().to_string();
    r.source = std::string(kernels::name(plan->source()));
    r.rows = shape.rows;
    r.alt = sku_override.has_value();
    r.n = shape.n;
    r.k = shape.k;
    int nonempty = 0;
    for (int m : shape.rows) nonempty += m > 0;
    r.flops = 2.0 * static_cast<double>(total_rows) * shape.n * shape.k;
    r.weight_bytes = static_cast<double>(nonempty) * shape.n * shape.k * static_cast<double>(ei);
    r.io_bytes = r.weight_bytes + static_cast<double>(total_rows) * static_cast<double>(shape.k * ei + shape.n * eo);
    // Every side is timed in the same interleaved rounds (time_rounds), so that power and clock drift,
    // large on an H200, hit all of them alike.
    std::vector<std::function<Status(int)>> launches;
    std::vector<double*> medians;  // where each side's median goes
    launches.push_back([&](int) { return prepared->run(s, ws->data(), ws->size()); });
    medians.push_back(&r.ours_ms);
    // The same groups sized on the device, as torch._grouped_mm's offs (what cuactor.grouped_mm runs): an
    // argument kernel reads the offsets and builds the metadata before the GEMM, in the same stream.
    std::optional<kernels::PreparedGroupedGemm> device_sized;
    std::optional<gpu::DeviceBuffer> dws, offs;
    if (total_rows > 0) {
      std::vector<std::int32_t> offsets;
      std::int32_t end = 0;
      for (int m : shape.rows) offsets.push_back(end += m);
      auto offsets_buffer = gpu::DeviceBuffer::allocate(pool_, offsets.size() * sizeof(std::int32_t), s);
      if (!offsets_buffer) return fail(offsets_buffer.error());
      offs = std::move(*offsets_buffer);
      CUACTOR_TRY(gpu::copy_async(offs->data(), offsets.data(), offsets.size() * sizeof(std::int32_t), s));
      CUACTOR_CUDA_TRY(cudaStreamSynchronize(s));  // `offsets` leaves scope
      const kernels::DeviceSizedGroups dg =
          kernels::packed_device_groups(groups, offs->data_as<std::int32_t>(), total_rows, shape.n, shape.k, a->data(),
                                        b->data(), d->data(), shape.n);
      auto prepared_on_device = plan->prepare(dg, scalars);
      if (!prepared_on_device) return fail(prepared_on_device.error());
      device_sized = std::move(*prepared_on_device);
      auto device_workspace = gpu::DeviceBuffer::allocate(pool_, device_sized->workspace_size(), s);
      if (!device_workspace) return fail(device_workspace.error());
      dws = std::move(*device_workspace);
      launches.push_back([&](int) { return device_sized->run(s, dws->data(), dws->size()); });
      medians.push_back(&r.ours_device_sized_ms);
    }
    const auto timed = [&]() -> Result<Row> {
      auto ms = time_rounds(s, opt_.warmup, opt_.rounds, opt_.reps, launches);
      if (!ms) return fail(ms.error());
      for (std::size_t i = 0; i < medians.size(); ++i) *medians[i] = (*ms)[i];
      return r;
    };
    if (!with_cublas) return timed();

    CublasHandle h;
    CUACTOR_CUDA_TRY(cublasCreate(&h.h));
    CUACTOR_CUDA_TRY(cublasSetStream(h.h, s));
    auto cublas_ws = gpu::DeviceBuffer::allocate(pool_, std::size_t{64} << 20, s);
    if (!cublas_ws) return fail(cublas_ws.error());
    CUACTOR_CUDA_TRY(cublasSetWorkspace(h.h, cublas_ws->data(), cublas_ws->size()));
    const float alpha = 1.0f, beta = 0.0f;
    // Row-major D = A B^T with B stored N x K is column-major D^T = B^T(op T) A^T.
    launches.push_back([&](int) -> Status {
      for (const auto& p : problems) {
        if (p.m == 0) continue;
        CUACTOR_CUDA_TRY(cublasGemmEx(h.h, CUBLAS_OP_T, CUBLAS_OP_N, p.n, p.m, p.k, &alpha, p.b, cuda_data_type(in),
                                      static_cast<int>(p.ldb), p.a, cuda_data_type(in), static_cast<int>(p.lda), &beta,
                                      p.d, cuda_data_type(out), static_cast<int>(p.ldd), CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
      }
      return ok();
    });
    medians.push_back(&r.loop_ms);

    // cublasGemmGroupedBatchedEx: one problem per group (group_size 1), pointer arrays on the device.
    std::vector<GroupedProblem> live;
    for (const auto& p : problems)
      if (p.m > 0) live.push_back(p);
    const int count = static_cast<int>(live.size());
    std::vector<cublasOperation_t> ta(live.size(), CUBLAS_OP_T), tb(live.size(), CUBLAS_OP_N);
    std::vector<int> ms, ns, ks, ldas, ldbs, ldds, sizes(live.size(), 1);
    std::vector<float> alphas(live.size(), 1.0f), betas(live.size(), 0.0f);
    std::vector<const void*> host_ptrs;
    for (const auto& p : live) {
      ms.push_back(p.n);
      ns.push_back(p.m);
      ks.push_back(p.k);
      ldas.push_back(static_cast<int>(p.ldb));
      ldbs.push_back(static_cast<int>(p.lda));
      ldds.push_back(static_cast<int>(p.ldd));
    }
    for (const auto& p : live) host_ptrs.push_back(p.b);
    for (const auto& p : live) host_ptrs.push_back(p.a);
    for (const auto& p : live) host_ptrs.push_back(p.d);
    auto ptrs = gpu::DeviceBuffer::allocate(pool_, host_ptrs.size() * sizeof(void*), s);
    if (!ptrs) return fail(ptrs.error());
    CUACTOR_TRY(gpu::copy_async(ptrs->data(), host_ptrs.data(), host_ptrs.size() * sizeof(void*), s));
    CUACTOR_CUDA_TRY(cudaStreamSynchronize(s));
    const auto* dptr = ptrs->data_as<const void*>();
    const auto grouped = [&](int) -> Status {
      CUACTOR_CUDA_TRY(cublasGemmGroupedBatchedEx(h.h, ta.data(), tb.data(), ms.data(), ns.data(), ks.data(),
                                                  alphas.data(), dptr, cuda_data_type(in), ldas.data(), dptr + count,
                                                  cuda_data_type(in), ldbs.data(), betas.data(),
                                                  const_cast<void* const*>(dptr + 2 * count), cuda_data_type(out),
                                                  ldds.data(), count, sizes.data(), CUBLAS_COMPUTE_32F));
      return ok();
    };
    // cuBLAS has no fp8 path here (needs cuBLASLt): report what it says instead of failing the run.
    if (Status probe = grouped(0); probe) {
      launches.push_back(grouped);
      medians.push_back(&r.grouped_ms);
    } else if (in != DType::e4m3) {
      std::cerr << "cublasGemmGroupedBatchedEx: " << probe.error().to_string() << "\n";
    }
    CUACTOR_CUDA_TRY(cudaStreamSynchronize(s));
    return timed();
  }

 private:
  gpu::DeviceProperties props_;
  gpu::Stream stream_;
  gpu::MemPool pool_;
  Options opt_;
  kernels::GroupedPlanCache::Planner planner_ = jit::default_tuned_grouped_planner();
};

double tflops(double flops, double ms) {
  return ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0;
}

std::string ratio(double ours_ms, double other_ms) {
  return other_ms > 0 ? fmt::format("{:.2f}x", other_ms / ours_ms) : std::string("-");
}

Status run_bench(const Options& opt, const std::vector<std::pair<BenchProblem, DType>>& cases) {
  auto props = gpu::device_properties(0);
  if (!props) return fail(props.error());
  auto stream = gpu::Stream::create(0);
  if (!stream) return fail(stream.error());
  auto pool = gpu::MemPool::create(0);
  if (!pool) return fail(pool.error());
  GroupedBench bench(*props, std::move(*stream), std::move(*pool), opt);
  auto bw = bench.measure_bandwidth_gbs();
  if (!bw) return fail(bw.error());
  if (!opt.json) {
    std::cout << fmt::format("device 0: {} ({}, {} SMs); device-to-device copy bandwidth {:.0f} GB/s\n", props->name,
                             props->arch.name(), props->multiprocessors, *bw);
    std::cout << fmt::format(
        "median of {}x{} reps per side after {} warm-up, interleaved; TFLOP/s = 2*sum(M)*N*K / time; ratio = their "
        "time / ours\n",
        opt.rounds, opt.reps, opt.warmup);
    std::cout << fmt::format("{:<28} {:<5} {:>9} {:>10} {:>8} {:>12} {:>8} {:>10}  {}\n", "shape (groups, rows, N, K)",
                             "dtype", "cuactor", "cuBLAS-loop", "ratio", "cuBLAS-grp", "ratio", "GB/s(%bw)",
                             "plan source: cuactor SKU");
  }
  std::vector<std::tuple<BenchProblem, DType, std::optional<kernels::GemmSku>>> runs;
  for (const auto& [shape, dtype] : cases) {
    runs.emplace_back(shape, dtype, std::nullopt);
    if (!opt.all_skus) continue;
    for (const kernels::CatalogEntry* e : kernels::catalog_entries(kernels::GemmFamily::grouped))
      if (e->sku.a == dtype && e->sku.d == DType::bf16 && e->sku.layout_b == kernels::MatrixLayout::col &&
          e->sku.epilogue.is_preset() && kernels::grouped_sku_runs_on(e->sku, props->arch))
        runs.emplace_back(shape, dtype, e->sku);
  }
  std::string json = "[";
  for (const auto& [shape, dtype, sku] : runs) {
    // cuBLAS has no fp8 GemmEx path (the fp8 anchor is CUTLASS example 57); alternatives skip cuBLAS.
    auto r = bench.run(shape, dtype, dtype != DType::e4m3 && !sku, sku);
    if (!r) {
      if (opt.json)
        json += fmt::format("{}{{\"shape\":\"{}\",\"dtype\":\"{}\",\"error\":{}}}", json.size() > 1 ? "," : "",
                            shape.name, name(dtype), dump_json(error_json(r.error())["error"]));
      else
        std::cout << fmt::format("{:<28} {:<5} failed: {}\n", shape.name, name(dtype), r.error().to_string());
      continue;
    }
    const double gbs = r->io_bytes / (r->ours_ms * 1e-3) / 1e9;
    // MoE layers of a few hundred rows per expert read their weights at nearly the copy bandwidth
    // too, so this column says how far each row is from the memory bound.
    const std::string bw_col = fmt::format("{:.0f}({:.0f}%)", gbs, 100.0 * gbs / *bw);
    if (!opt.json)
      std::cout << fmt::format("{:<28} {:<5} {:>9.1f} {:>10.1f} {:>8} {:>12} {:>8} {:>10}  {}: {}\n", r->shape,
                               r->dtype, tflops(r->flops, r->ours_ms), tflops(r->flops, r->loop_ms),
                               ratio(r->ours_ms, r->loop_ms),
                               r->grouped_ms > 0 ? fmt::format("{:.1f}", tflops(r->flops, r->grouped_ms)) : "-",
                               ratio(r->ours_ms, r->grouped_ms), bw_col, r->source, r->sku);
    std::string rows;
    for (int m : r->rows) rows += (rows.empty() ? "" : ",") + std::to_string(m);
    json += fmt::format(
        "{}{{\"shape\":\"{}\",\"dtype\":\"{}\",\"sku\":\"{}\",\"source\":\"{}\",\"rows\":[{}],\"n\":{},\"k\":{},"
        "\"flops\":{},"
        "\"io_bytes\":{},\"cuactor_ms\":{},\"cuactor_device_sized_ms\":{},\"cublas_loop_ms\":{},"
        "\"cublas_grouped_ms\":{},\"bandwidth_gbs\":{},\"alt\":{}}}",
        json.size() > 1 ? "," : "", r->shape, r->dtype, r->sku, r->source, rows, r->n, r->k, r->flops, r->io_bytes,
        r->ours_ms, r->ours_device_sized_ms, r->loop_ms, r->grouped_ms, *bw, r->alt ? "true" : "false");
  }
  json += "]";
  if (opt.json) std::cout << json << "\n";
  return ok();
}

}  // namespace

void add_bench_grouped_command(CLI::App& app) {
  auto* cmd = bench_command(app).add_subcommand(
      "grouped", "Grouped GEMM vs a cuBLAS loop and cublasGemmGroupedBatchedEx (MoE shapes)");
  auto opt = std::make_shared<Options>();
  cmd->add_option("--reps", opt->reps, "Timed repetitions per side and round (median reported)");
  cmd->add_option("--rounds", opt->rounds, "Interleaved rounds (cuactor, cuactor sized on the device, cuBLAS, ...)");
  cmd->add_option("--warmup", opt->warmup, "Untimed warm-up repetitions");
  cmd->add_flag("--json", opt->json, "Print one JSON array instead of the table (for bench/grouped_mm_torch.py)");
  auto* no_fp8 = cmd->add_flag("!--no-fp8", opt->fp8, "Skip the fp8 e4m3 rows of the list");
  cmd->add_flag("--all-skus", opt->all_skus, "Also time every other grouped SKU that fits a row (marked alt)");
  auto* shapes = cmd->add_option(
      "--shape", opt->shapes,
      "Problem GxRxNxK, repeatable: groups, rows per group, N, K instead of the list (A rows x K, experts N x K)");
  cmd->add_option("--dtype", opt->dtype, "Element type of A and B of the --shape rows: bf16 or e4m3 (D bf16)")
      ->needs(shapes);
  cmd->add_option("--skew", opt->skew, "Rows per group of the --shape rows jittered by +-skew (0 to 0.9; default 0.5)")
      ->needs(shapes);
  no_fp8->excludes(shapes);  // --dtype names the --shape rows' type
  cmd->callback([opt] {
    Status s = check_timing_options(opt->warmup, opt->rounds, opt->reps);
    auto cases = bench_cases(*opt);
    if (s && !cases) s = fail(cases.error());
    if (!s) {
      if (opt->json) print_json_error(s.error());
      std::cerr << "cuactor bench grouped: " << s.error().to_string() << "\n";
      std::exit(1);
    }
    if (gpu::device_count() == 0) {
      // --json consumers parse stdout: they get an error object, never a sentence.
      if (opt->json) {
        print_json_error(Error(errc::no_device, "cuactor bench grouped: no CUDA GPU is visible; nothing to measure"));
        std::exit(1);
      }
      std::cout << "cuactor bench grouped: no CUDA GPU is visible; nothing to measure.\n";
      return;
    }
    if (auto run = run_bench(*opt, *cases); !run) {
      if (opt->json) print_json_error(run.error());
      std::cerr << "cuactor bench grouped failed: " << run.error().to_string() << "\n";
      std::exit(1);
    }
  });
}

}  // namespace cuactor::cli
