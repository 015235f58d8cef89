#include "cuactor/jit/engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include "cuactor/core/log.hpp"
#include "cuactor/core/no_throw.hpp"
#include "cuactor/core/nvtx.hpp"
#include "cuactor/gpu/check.hpp"
#include "kernels/instance_abi.h"

namespace cuactor::jit {
namespace fs = std::filesystem;
namespace {

// dlopen's words for an object that needs a newer C or C++ runtime than this process has ("version
// `GLIBCXX_3.4.32' not found (required by ...)", "undefined symbol: ..."), as one built by another
// machine's toolchain may. Other refusals (a missing driver library, no memory) would refuse a
// build made here alike.
bool needs_another_runtime(const Error& e) {
  const std::string& m = e.message();
  return m.find("not found (required by") != std::string::npos || m.find("undefined symbol") != std::string::npos;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// What the rendered source pulls in besides itself: the project's kernel headers and the CUTLASS
// release. Their contents are hashed so that editing a .cuh or upgrading CUTLASS changes every key.
std::string compute_include_identity() {
  Hasher h;
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kernels_dir(), ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const auto ext = f.extension().string();
    if (ext == ".cuh" || ext == ".h" || ext == ".hpp" || ext == ".in") h.field(f.filename().string(), read_text(f));
  }
  h.field("cutlass/version.h", read_text(cutlass_dir() / "include" / "cutlass" / "version.h"));
  return h.digest().hex();
}

}  // namespace

// A fixed pool of compile threads with a FIFO queue.
struct JitEngine::Workers {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  std::vector<std::thread> threads;

  explicit Workers(unsigned n) {
    for (unsigned i = 0; i < std::max(1u, n); ++i)
      threads.emplace_back([this] {
        for (;;) {
          std::function<void()> job;
          {
            std::unique_lock lock(mutex);
            cv.wait(lock, [&] { return stopping || !queue.empty(); });
            if (queue.empty()) return;  // stopping and drained
            job = std::move(queue.front());
            queue.pop_front();
          }
          // Jobs catch their own exceptions (result_or_error); this is the last line of defence so
          // that none ends the host process through std::terminate.
          try {
            job();
          } catch (const std::exception& e) {
            log(LogLevel::error, fmt::format("JIT worker: unexpected exception escaped a job: {}", e.what()));
          } catch (...) {
            log(LogLevel::error, "JIT worker: unexpected exception escaped a job");
          }
        }
      });
  }
  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mutex);
      queue.push_back(std::move(job));
    }
    cv.notify_one();
  }
  ~Workers() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    cv.notify_all();
    for (auto& t : threads) t.join();
  }
};

std::string InstanceRequest::identity() const {
  std::string s = template_name;
  s += '|';
  s += arch.name();
  s += '|';
  s += symbol;
  for (const auto& [k, v] : values) {
    s += '|';
    s += k;
    s += '=';
    s += v;
  }
  for (const auto& o : options) {
    s += "|opt=";
    s += o;
  }
  return s;
}

Result<gpu::Kernel> JitModule::kernel(const std::string& name) const {
  // gpu::Library::kernel makes the context current itself, whichever thread loaded the module.
  for (const auto& [expr, lowered] : lowered_)
    if (expr == name) return library_.kernel(lowered);
  return library_.kernel(name);
}

JitEngine::JitEngine(JitOptions options, DiskCache disk)
    : options_(std::move(options)),
      disk_(std::move(disk)),
      include_identity_(compute_include_identity()),
      modules_(options_.plan_cache_capacity),
      instances_(options_.plan_cache_capacity),
      workers_(std::make_unique<Workers>(options_.workers)) {}

JitEngine::~JitEngine() = default;

Result<std::shared_ptr<JitEngine>> JitEngine::create(JitOptions options) {
  return result_or_error("JitEngine::create", [&] { return create_engine(std::move(options)); });
}

Result<std::shared_ptr<JitEngine>> JitEngine::create_engine(JitOptions options) {
  auto disk = DiskCache::open(options.disk);
  if (!disk) return fail(disk.error());
  return std::shared_ptr<JitEngine>(new JitEngine(std::move(options), std::move(*disk)));
}

void JitEngine::report(const std::string& what, JitStage stage, std::chrono::steady_clock::time_point start) const {
  if (!options_.progress) return;
  // Progress is advisory: a throwing sink must neither fail the compile nor leave a future unset.
  try {
    options_.progress({what, stage, seconds_since(start)});
  } catch (const std::exception& e) {
    log(LogLevel::warn, fmt::format("JIT progress callback threw (ignored): {}", e.what()));
  } catch (...) {
    log(LogLevel::warn, "JIT progress callback threw (ignored)");
  }
}

JitStats JitEngine::stats() const {
  return {disk_.stats(), modules_.stats(), instances_.stats()};
}

Result<CacheLookup> JitEngine::compile_nvrtc(const NvrtcRequest& request, const std::string& what) {
  const nvtx::Range range([&] { return "jit.compile " + what; });
  const auto start = std::chrono::steady_clock::now();
  report(what, JitStage::disk_lookup, start);
  return disk_.get_or_build(cache_key(request), [&]() -> Result<Artifact> {
    report(what, JitStage::compiling, start);
    auto out = nvrtc_compile(request);
    if (!out) return fail(out.error());
    report(what, JitStage::stored, start);
    return Artifact{ArtifactKind::cubin, what + "\n" + encode_lowered_names(out->lowered_names), std::move(out->cubin)};
  });
}

Result<std::pair<Digest, NvccRequest>> JitEngine::prepare(const InstanceRequest& request) const {
  if (request.symbol.empty())
    return fail(errc::invalid_argument, "instance request: the exported symbol name is empty");
  auto source = render_template_file(kernels_dir() / request.template_name, request.values);
  if (!source) return fail(source.error());
  NvccRequest n;
  n.source = std::move(*source);
  n.description = request.symbol;
  n.arch = request.arch;
  n.include_dirs = {kernels_dir().parent_path(), cutlass_dir() / "include",
                    cutlass_dir() / "tools" / "util" / "include"};
  n.options = request.options;
  n.timeout = options_.compile_timeout;
  auto key = cache_key(n, include_identity_);
  if (!key) return fail(key.error());
  return std::pair{*key, std::move(n)};
}

Result<CacheLookup> JitEngine::compile_instance(const InstanceRequest& request, const std::string& what,
                                                const std::function<Status(const Artifact&)>* replace_unless) {
  const nvtx::Range range([&] { return "jit.compile " + what; });
  const auto start = std::chrono::steady_clock::now();
  auto prepared = prepare(request);
  if (!prepared) return fail(prepared.error());
  report(what, JitStage::disk_lookup, start);
  const auto build = [&]() -> Result<Artifact> {
    auto so = nvcc_compile(prepared->second, [&](const JitProgress& p) { report(what, p.stage, start); });
    if (!so) return fail(so.error());
    report(what, JitStage::stored, start);
    return Artifact{ArtifactKind::shared_object, request.identity(), std::move(*so)};
  };
  if (replace_unless != nullptr) return disk_.replace_unusable(prepared->first, build, *replace_unless);
  return disk_.get_or_build(prepared->first, build);
}

JitFuture<JitModule> JitEngine::module(NvrtcRequest request) {
  const std::string key = cache_key(request).hex();
  return modules_.get_or_start(key, [&](JitFuture<JitModule> future) {
    const auto start = std::chrono::steady_clock::now();
    const std::string what = fmt::format("nvrtc {} ({})", request.program_name, request.arch.name());
    report(what, JitStage::queued, start);
    workers_->post([this, future, what, start, request = std::move(request)] {
      auto r = result_or_error(what, [&] { return load_module(request, what, start); });
      report(what, r ? JitStage::ready : JitStage::failed, start);
      future.set(std::move(r));
    });
  });
}

Result<std::shared_ptr<const JitModule>> JitEngine::load_module(const NvrtcRequest& request, const std::string& what,
                                                                std::chrono::steady_clock::time_point start) {
  auto found = compile_nvrtc(request, what);
  if (!found) return fail(found.error());
  if (found->artifact.kind != ArtifactKind::cubin)
    return fail(errc::cache_corrupt,
                fmt::format("{}: cache entry holds a {}, not a cubin", what, name(found->artifact.kind)));
  report(what, JitStage::loading, start);
  auto lib = gpu::Library::load_data(found->artifact.payload.data());
  if (!lib) return fail(lib.error());
  auto m = std::make_shared<JitModule>();
  m->library_ = std::move(*lib);
  m->lowered_ = decode_lowered_names(found->artifact.metadata);
  m->key_ = cache_key(request).hex();
  m->from_disk_ = found->from_disk;
  return std::shared_ptr<const JitModule>(std::move(m));
}

JitFuture<JitInstance> JitEngine::instance(InstanceRequest request) {
  const std::string key = request.identity();
  return instances_.get_or_start(key, [&](JitFuture<JitInstance> future) {
    const auto start = std::chrono::steady_clock::now();
    const std::string what = fmt::format("nvcc {} ({})", request.symbol, request.arch.name());
    report(what, JitStage::queued, start);
    workers_->post([this, future, what, start, request = std::move(request)] {
      auto r = result_or_error(what, [&] { return load_instance(request, what, start); });
      report(what, r ? JitStage::ready : JitStage::failed, start);
      future.set(std::move(r));
    });
  });
}

Result<std::shared_ptr<const JitInstance>> JitEngine::load_instance(const InstanceRequest& request,
                                                                    const std::string& what,
                                                                    std::chrono::steady_clock::time_point start) {
  auto found = compile_instance(request, what);
  if (!found) return fail(found.error());
  if (found->artifact.kind != ArtifactKind::shared_object)
    return fail(errc::cache_corrupt,
                fmt::format("{}: cache entry holds a {}, not a shared object", what, name(found->artifact.kind)));
  report(what, JitStage::loading, start);
  auto so = SharedObject::load(found->artifact.payload, request.symbol);
  if (!so && found->from_disk && needs_another_runtime(so.error())) {
    // An entry warmed by another machine's toolchain (the key leaves the host compiler out,
    // nvcc_identity): built here, it replaces the entry if this process can load it.
    log(LogLevel::warn,
        fmt::format("{}: the cached object does not load here ({}); compiling it again", what, so.error().message()));
    std::shared_ptr<SharedObject> loaded;
    const std::function<Status(const Artifact&)> loads = [&](const Artifact& a) -> Status {
      auto o = SharedObject::load(a.payload, request.symbol);
      if (!o) return fail(o.error());
      loaded = std::move(*o);
      return ok();
    };
    found = compile_instance(request, what, &loads);
    if (!found)
      return fail(Error(found.error().code(),
                        fmt::format("{}: the cached object did not load, and a rebuild here failed too ({}); every "
                                    "process that asks for it compiles it again",
                                    what, found.error().message())));
    so = std::move(loaded);
  }
  if (!so) return fail(so.error());
  auto sym = (*so)->symbol(request.symbol);
  if (!sym) return fail(sym.error());
  const auto* abi = static_cast<const cuactor_gemm_instance*>(*sym);
  if (abi->abi_version != CUACTOR_KERNEL_ABI_VERSION)
    return fail(errc::unsupported, fmt::format("{}: instance ABI version {} is not this build's {}", what,
                                               abi->abi_version, CUACTOR_KERNEL_ABI_VERSION));
  auto inst = std::make_shared<JitInstance>();
  inst->object_ = std::move(*so);
  inst->abi_ = abi;
  inst->from_disk_ = found->from_disk;
  return std::shared_ptr<const JitInstance>(std::move(inst));
}

Result<WarmReport> JitEngine::warm(const NvrtcRequest& request) {
  return result_or_error("JIT warm", [&] { return warm_nvrtc(request); });
}

Result<WarmReport> JitEngine::warm(const InstanceRequest& request) {
  return result_or_error("JIT warm", [&] { return warm_instance(request); });
}

Result<WarmReport> JitEngine::warm_nvrtc(const NvrtcRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  auto found = compile_nvrtc(request, fmt::format("nvrtc {} ({})", request.program_name, request.arch.name()));
  if (!found) return fail(found.error());
  return WarmReport{cache_key(request).hex(), found->from_disk, seconds_since(start), found->artifact.payload.size()};
}

Result<WarmReport> JitEngine::warm_instance(const InstanceRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  auto prepared = prepare(request);
  if (!prepared) return fail(prepared.error());
  auto found = compile_instance(request, fmt::format("nvcc {} ({})", request.symbol, request.arch.name()));
  if (!found) return fail(found.error());
  return WarmReport{prepared->first.hex(), found->from_disk, seconds_since(start), found->artifact.payload.size()};
}

const char* name(JitStage s) noexcept {
  switch (s) {
    case JitStage::queued:
      return "queued";
    case JitStage::disk_lookup:
      return "disk_lookup";
    case JitStage::compiling:
      return "compiling";
    case JitStage::stored:
      return "stored";
    case JitStage::loading:
      return "loading";
    case JitStage::ready:
      return "ready";
    case JitStage::failed:
      return "failed";
  }
  return "unknown";
}

}  // namespace cuactor::jit
