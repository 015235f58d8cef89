// `cuactor jit ...`: fill the JIT disk cache offline ([J5]), inspect it, and benchmark the JIT
// paths (cold compile per family, warm disk-cache load, plan-cache hit) in one run.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "cuactor/core/files.hpp"
#include "cuactor/core/paths.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/jit/engine.hpp"
#include "cuactor/jit/gemm.hpp"

namespace cuactor::cli {

jit::ProgressFn compile_progress_printer() {
  auto last = std::make_shared<std::pair<std::mutex, std::map<std::string, std::pair<jit::JitStage, double>>>>();
  return [last](const jit::JitProgress& p) {
    std::lock_guard lock(last->first);
    auto& prev = last->second[p.what];
    const bool changed = prev.first != p.stage || prev.second == 0;
    if (!changed && p.elapsed_seconds - prev.second < 5.0) return;
    prev = {p.stage, std::max(p.elapsed_seconds, 1e-9)};
    std::cerr << fmt::format("[{:6.1f}s] {}: {}\n", p.elapsed_seconds, p.what, jit::name(p.stage));
  };
}

namespace {

using Clock = std::chrono::steady_clock;

struct JitCliOptions {
  std::string cache_dir;
  std::vector<std::string> gemm_skus;
  std::vector<std::string> conv_skus;
  std::vector<std::string> nvrtc_files;
  std::string arch = "sm_90a";
  std::string target;  // warm: the GPU --gemm / --conv SKUs are compiled for (empty: each SKU's own)
  std::vector<std::string> names;
  std::vector<std::string> nvrtc_options;
  unsigned reps = 50;
  bool skip_nvcc = false;
  bool quiet = false;
};

JitCliOptions& cli_options() {
  static JitCliOptions o;
  return o;
}

[[noreturn]] void die(const Error& e) {
  std::cerr << "cuactor jit: " << e.to_string() << "\n";
  std::exit(1);
}

template <class T>
T value_or_die(Result<T> r) {
  if (!r) die(r.error());
  return std::move(*r);
}

std::shared_ptr<jit::JitEngine> make_engine(bool progress) {
  jit::JitOptions o;
  if (!cli_options().cache_dir.empty()) o.disk.directory = cli_options().cache_dir;
  if (progress && !cli_options().quiet) o.progress = compile_progress_printer();
  return value_or_die(jit::JitEngine::create(std::move(o)));
}

GpuArch arch_or_die(const std::string& s, std::string_view option = "--arch") {
  auto a = parse_arch(s);
  if (!a)
    die(Error(errc::invalid_argument, fmt::format("{} '{}' is not an architecture like sm_90a or sm_80", option, s)));
  return *a;
}

jit::NvrtcRequest nvrtc_request_from_file(const std::string& path) {
  // A directory or an unreadable file is a typed error here, not an iostream exception.
  const auto bytes = value_or_die(read_file(path, "NVRTC source"));
  jit::NvrtcRequest r;
  r.source.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  r.program_name = std::filesystem::path(path).filename().string();
  r.arch = arch_or_die(cli_options().arch);
  r.options = cli_options().nvrtc_options;
  r.name_expressions = cli_options().names;
  return r;
}

void print_warm(const std::string& what, const jit::WarmReport& r) {
  std::cout << fmt::format("{} {}  key={}  {:.1f} KiB{}\n", r.already_cached ? "cached " : "warmed ", what, r.key,
                           static_cast<double>(r.bytes) / 1024.0,
                           r.already_cached ? "" : fmt::format("  compiled in {:.1f} s", r.seconds));
}

void run_warm() {
  const auto& o = cli_options();
  if (o.gemm_skus.empty() && o.conv_skus.empty() && o.nvrtc_files.empty())
    die(Error(errc::invalid_argument, "nothing to warm: give --gemm SKU, --conv SKU and/or --nvrtc FILE"));
  // Both kinds of SKU are checked before anything compiles.
  std::vector<std::string> texts;
  std::vector<kernels::GemmSku> skus;
  for (const auto& text : o.gemm_skus) {
    skus.push_back(value_or_die(kernels::GemmSku::parse(text)));
    if (kernels::is_conv(skus.back().family))
      die(Error(errc::invalid_argument,
                fmt::format("--gemm {}: family {} is a convolution (use --conv)", text, name(skus.back().family))));
    texts.push_back(text);
  }
  for (const auto& text : o.conv_skus) {
    skus.push_back(value_or_die(kernels::GemmSku::parse(text)));
    if (!kernels::is_conv(skus.back().family))
      die(Error(errc::invalid_argument,
                fmt::format("--conv {}: family {} is not a convolution (conv_fprop, conv_dgrad or conv_wgrad)", text,
                            name(skus.back().family))));
    texts.push_back(text);
  }
  std::optional<GpuArch> target;
  if (!o.target.empty()) target = arch_or_die(o.target, "--target");
  auto engine = make_engine(true);
  for (const auto& file : o.nvrtc_files) print_warm(file, value_or_die(engine->warm(nvrtc_request_from_file(file))));
  jit::GemmJit gemm(engine);
  bool failed = false;
  const auto results = jit::warm_all(gemm, skus, target);
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (!results[i].report) {
      std::cerr << "cuactor jit warm " << texts[i] << ": " << results[i].report.error().to_string() << "\n";
      failed = true;
    } else {
      print_warm(texts[i], *results[i].report);
    }
  }
  std::cout << "cache: " << engine->disk_cache().directory().string() << "\n";
  if (failed) std::exit(1);
}

void run_cache(const std::string& action) {
  jit::DiskCacheOptions d;
  if (!cli_options().cache_dir.empty()) d.directory = cli_options().cache_dir;
  d.fallback_when_untrusted = false;  // inspect the directory asked for, or say why not
  auto cache = value_or_die(jit::DiskCache::open(d));
  if (action == "clear") {
    if (auto s = cache.clear(); !s) die(s.error());
    std::cout << "cleared " << cache.directory().string() << "\n";
    return;
  }
  const auto entries = value_or_die(cache.list());
  std::uint64_t total = 0;
  int damaged = 0;
  for (const auto& e : entries) {
    total += e.file_bytes;
    const bool bad = !e.problem.empty();
    damaged += bad ? 1 : 0;
    if (action == "list" || bad) {
      std::string first_line = bad ? "DAMAGED: " + e.problem : e.metadata.substr(0, e.metadata.find('\n'));
      std::cout << fmt::format("{}  {:>13}  {:>10.1f} KiB  {}\n", e.key, jit::name(e.kind),
                               static_cast<double>(e.file_bytes) / 1024.0, first_line.substr(0, 100));
    }
  }
  std::cout << fmt::format("{} entries, {:.1f} MiB of {:.0f} MiB cap, {} damaged, in {}\n", entries.size(),
                           static_cast<double>(total) / (1 << 20), static_cast<double>(cache.max_bytes()) / (1 << 20),
                           damaged, cache.directory().string());
  if (action == "verify" && damaged) std::exit(1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

jit::NvrtcRequest bench_nvrtc_request(const std::string& salt, GpuArch arch) {
  jit::NvrtcRequest r;
  r.program_name = "bench_axpy.cu";
  r.arch = arch;
  r.source = "// " + salt + R"(
extern "C" __global__ void axpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";
  return r;
}

void run_bench() {
  const auto& o = cli_options();
  const bool gpu = gpu::device_count() > 0;
  GpuArch arch = arch_or_die(o.arch);
  if (gpu)
    if (auto p = gpu::device_properties(0)) arch = p->arch;
  const std::string salt = fmt::format("bench {}", Clock::now().time_since_epoch().count());
  std::cout << fmt::format("cuactor jit bench: arch {}, {}, reps {}, cache {}\n", arch.name(),
                           gpu ? "GPU present (loads include cuLibraryLoadData)" : "no GPU (loads stop at the bytes)",
                           o.reps, make_engine(false)->disk_cache().directory().string());
  struct Row {
    std::string what, value, target;
  };
  std::vector<Row> rows;

  // NVRTC: cold compile, warm disk load into a fresh engine (empty plan cache), plan-cache hit.
  {
    auto engine = make_engine(false);
    const auto req = bench_nvrtc_request(salt, arch);
    const auto t0 = Clock::now();
    const auto w = value_or_die(engine->warm(req));
    rows.push_back({"cold compile, NVRTC small kernel",
                    fmt::format("{:.1f} ms", std::chrono::duration<double, std::milli>(Clock::now() - t0).count()),
                    ""});
    (void)w;
    std::vector<double> loads;
    for (unsigned i = 0; i < std::max(3u, o.reps / 5); ++i) {
      auto fresh = make_engine(false);
      const auto s = Clock::now();
      if (gpu) {
        const auto& m = fresh->module(req).get();
        if (!m) die(m.error());
        if (!(*m)->from_disk()) die(Error(errc::internal, "bench: warmed NVRTC entry was compiled again"));
      } else {
        auto a = value_or_die(fresh->disk_cache().load(jit::cache_key(req)));
        if (!a) die(Error(errc::internal, "bench: warmed NVRTC entry missing"));
      }
      loads.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
    }
    rows.push_back({"warm disk-cache load, NVRTC cubin (median)", fmt::format("{:.3f} ms", median(loads)), "<= 5 ms"});
    if (gpu) {
      const auto& first = engine->module(req).get();
      if (!first) die(first.error());
      const int n = 200000;
      const auto s = Clock::now();
      for (int i = 0; i < n; ++i) (void)engine->module(req);
      rows.push_back({"plan-cache hit, NVRTC module (key hashes the source)",
                      fmt::format("{:.3f} us", std::chrono::duration<double, std::micro>(Clock::now() - s).count() / n),
                      "<= 1 us"});
    }
  }

  // nvcc: a CUTLASS sm_90a GEMM not in the AOT matrix; cold compile forced by a salt option.
  if (!o.skip_nvcc && jit::find_nvcc()) {
    kernels::GemmSku sku;
    sku.tile = {128, 128, 64};
    sku.cluster = {1, 1, 1};
    if (!o.gemm_skus.empty()) sku = value_or_die(kernels::GemmSku::parse(o.gemm_skus.front()));
    // A salt option makes the identity new, so the compile is cold even with a warm cache.
    const std::string salt_option =
        "-DCUACTOR_JIT_BENCH_SALT=" + std::to_string(Clock::now().time_since_epoch().count());
    auto request = value_or_die(jit::instance_request(sku));
    request.options.push_back(salt_option);
    auto engine = make_engine(true);
    const auto t0 = Clock::now();
    value_or_die(engine->warm(request));
    rows.push_back({fmt::format("cold compile, nvcc CUTLASS {}", sku.to_string()),
                    fmt::format("{:.1f} s", std::chrono::duration<double>(Clock::now() - t0).count()), "25-60 s"});
    std::vector<double> loads;
    for (unsigned i = 0; i < std::max(3u, o.reps / 5); ++i) {
      auto fresh = make_engine(false);
      const auto s = Clock::now();
      const auto& inst = fresh->instance(request).get();  // disk read + memfd + dlopen + ABI check
      if (!inst) die(inst.error());
      if (!(*inst)->from_disk()) die(Error(errc::internal, "bench: warmed instance was compiled again"));
      loads.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
    }
    rows.push_back(
        {"warm disk-cache load, nvcc shared object (median)", fmt::format("{:.3f} ms", median(loads)), "<= 5 ms"});
    // Plan-cache hit by SKU (what a GEMM plan does per request).
    jit::GemmJit gemm(engine, {salt_option});
    const auto& warm = gemm.compile(sku).get();  // the salted entry is on disk: a load, not a compile
    if (!warm) die(warm.error());
    const int n = 1000000;
    const auto s = Clock::now();
    for (int i = 0; i < n; ++i) (void)gemm.compile(sku);
    rows.push_back({"plan-cache hit, GEMM instance by SKU",
                    fmt::format("{:.3f} us", std::chrono::duration<double, std::micro>(Clock::now() - s).count() / n),
                    "<= 1 us"});
  }

  std::size_t w = 0;
  for (const auto& r : rows) w = std::max(w, r.what.size());
  std::cout << fmt::format("{:<{}}  {:>12}  {}\n", "measurement", w, "value", "target");
  for (const auto& r : rows) std::cout << fmt::format("{:<{}}  {:>12}  {}\n", r.what, w, r.value, r.target);
}

}  // namespace

void add_jit_command(CLI::App& app) {
  auto* jit_cmd = app.add_subcommand("jit", "Run-time kernel instantiation: warm and inspect the cache, benchmark");
  jit_cmd->require_subcommand(1);
  auto& o = cli_options();
  const auto root = cache_root();
  const std::string cache_dir_help = fmt::format("JIT disk cache directory (default {})",
                                                 root ? (*root / "jit").string() : "none: " + root.error().message());
  // Accepted before and after the action (`jit --cache-dir X warm` and `jit warm --cache-dir X`).
  auto add_common = [&](CLI::App* c) {
    c->add_option("--cache-dir", o.cache_dir, cache_dir_help);
    c->add_flag("--quiet", o.quiet, "No progress lines");
  };
  add_common(jit_cmd);

  auto* warm = jit_cmd->add_subcommand("warm", "Compile into the disk cache (no GPU needed), e.g. on a build machine");
  warm->add_option(
      "--gemm", o.gemm_skus,
      "GemmSku text, e.g. "
      "dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:128x128x64:1x1x1:s0:cooperative:linear_combination");
  warm->add_option("--conv", o.conv_skus,
                   "Convolution SKU text, e.g. "
                   "conv_fprop:sm_90a:bf16,bf16,bf16,bf16,f32:nhwc,krsc,nhwc:128x128x64:1x1x1:s0:warpspecialized:"
                   "linear_combination");
  warm->add_option("--nvrtc", o.nvrtc_files, "CUDA source file compiled with NVRTC to cubin");
  warm->add_option("--arch", o.arch, "Target of --nvrtc sources (sm_90a, sm_80, ...)");
  warm->add_option("--target", o.target,
                   "GPU the --gemm / --conv SKUs are compiled for, e.g. sm_90 for an sm_80 SKU run on Hopper "
                   "(default: each SKU's own architecture)");
  warm->add_option("--name", o.names, "Kernel name expression whose lowered name is recorded (templated kernels)");
  warm->add_option("--option", o.nvrtc_options, "Extra NVRTC option");
  add_common(warm);
  warm->callback(run_warm);

  for (const char* action : {"list", "verify", "clear"}) {
    auto* c = jit_cmd->add_subcommand(action, std::string(action) + " the disk cache's entries");
    add_common(c);
    c->callback([a = std::string(action)] { run_cache(a); });
  }

  auto* bench = jit_cmd->add_subcommand("bench", "Cold compile per back end, warm disk-cache load, plan-cache hit");
  bench->add_option("--reps", o.reps, "Repetitions of the load measurements (x1/5)");
  bench->add_option("--arch", o.arch, "Architecture without a GPU");
  bench->add_option("--gemm", o.gemm_skus, "SKU for the nvcc measurements (default: a 128x128x64 bf16 one)");
  bench->add_flag("--skip-nvcc", o.skip_nvcc, "Skip the 25-60 s CUTLASS compile");
  add_common(bench);
  bench->callback(run_bench);
}

}  // namespace cuactor::cli
