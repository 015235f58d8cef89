/// @file
/// The JIT engine ([J1]–[J5]): renders instantiation templates, compiles them with NVRTC or nvcc on
/// its own worker threads (never on a device actor's thread), stores machine code in the disk cache,
/// and keeps loaded modules in the in-process plan cache with single-flight.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/gpu/module.hpp"
#include "cuactor/jit/disk_cache.hpp"
#include "cuactor/jit/nvcc.hpp"
#include "cuactor/jit/nvrtc.hpp"
#include "cuactor/jit/plan_cache.hpp"
#include "cuactor/jit/progress.hpp"
#include "cuactor/jit/render.hpp"

struct cuactor_gemm_instance;

namespace cuactor::jit {

/// Settings of a JitEngine.
struct JitOptions {
  /// Disk cache location and size cap (directory default: cuactor::cache_root() / "jit").
  DiskCacheOptions disk;
  /// Entries of each in-process plan cache.
  std::size_t plan_cache_capacity = 64;
  /// Compile worker threads.
  unsigned workers = 2;
  /// Receives progress reports (on worker threads).
  ProgressFn progress;
  /// Kill a compiler that runs longer than this.
  std::chrono::seconds compile_timeout{900};
};

/// A request to instantiate one kernel template with nvcc into a shared object.
struct InstanceRequest {
  /// Template file name inside kernels_dir() (e.g. "dense_sm90_instance.cu.in").
  std::string template_name;
  /// Values of its placeholders (the symbol placeholder included).
  Placeholders values;
  /// Name of the exported `cuactor_gemm_instance` object (the value given to @SYMBOL@).
  std::string symbol;
  GpuArch arch{9, 0, true};
  /// Extra nvcc options (part of the identity).
  std::vector<std::string> options;

  /// Full identity used as the plan-cache key: template, every placeholder, arch and options.
  [[nodiscard]] std::string identity() const;
};

/// A kernel module compiled by NVRTC and loaded with gpu::Library.
class JitModule {
 public:
  /// The loaded library.
  [[nodiscard]] const gpu::Library& library() const noexcept { return library_; }
  /// A kernel by extern "C" name or by a name expression given in the request.
  Result<gpu::Kernel> kernel(const std::string& name_or_expression) const;
  /// Hex key of the disk-cache entry.
  [[nodiscard]] const std::string& key() const noexcept { return key_; }
  /// True if the code came from the disk cache rather than a fresh compile.
  [[nodiscard]] bool from_disk() const noexcept { return from_disk_; }

 private:
  friend class JitEngine;
  gpu::Library library_;
  std::vector<std::pair<std::string, std::string>> lowered_;
  std::string key_;
  bool from_disk_ = false;
};

/// A CUTLASS instance compiled by nvcc and loaded from a shared object.
class JitInstance {
 public:
  /// The instance's C ABI (valid while this object lives).
  [[nodiscard]] const cuactor_gemm_instance& abi() const noexcept { return *abi_; }
  [[nodiscard]] const std::string& key() const noexcept { return key_; }
  [[nodiscard]] bool from_disk() const noexcept { return from_disk_; }

 private:
  friend class JitEngine;
  std::shared_ptr<SharedObject> object_;
  const cuactor_gemm_instance* abi_ = nullptr;
  std::string key_;
  bool from_disk_ = false;
};

/// Outcome of warming one entry.
struct WarmReport {
  std::string key;
  bool already_cached = false;
  double seconds = 0;
  std::uint64_t bytes = 0;
};

/// Counters of an engine.
struct JitStats {
  DiskCacheStats disk;
  PlanCacheStats nvrtc_plans;
  PlanCacheStats instance_plans;
};

/// Run-time instantiation with disk and plan caches. Create one per process and share it.
class JitEngine {
 public:
  /// Opens the disk cache and starts the workers.
  static Result<std::shared_ptr<JitEngine>> create(JitOptions options = {});
  ~JitEngine();
  JitEngine(const JitEngine&) = delete;
  JitEngine& operator=(const JitEngine&) = delete;

  /// Compiles (or finds) and loads an NVRTC module on a worker; needs a GPU to load.
  JitFuture<JitModule> module(NvrtcRequest request);
  /// Renders, compiles (or finds) and loads a template instance on a worker; needs a GPU to run it.
  JitFuture<JitInstance> instance(InstanceRequest request);

  /// Fills the disk cache for an NVRTC request on the calling thread; needs no GPU ([J5]).
  Result<WarmReport> warm(const NvrtcRequest& request);
  /// Fills the disk cache for a template instance on the calling thread; needs no GPU ([J5]).
  Result<WarmReport> warm(const InstanceRequest& request);

  /// Disk key and nvcc request of an instance (rendered source included), for tools and tests.
  Result<std::pair<Digest, NvccRequest>> prepare(const InstanceRequest& request) const;

  [[nodiscard]] DiskCache& disk_cache() noexcept { return disk_; }
  [[nodiscard]] JitStats stats() const;
  [[nodiscard]] const JitOptions& options() const noexcept { return options_; }

 private:
  struct Workers;
  explicit JitEngine(JitOptions options, DiskCache disk);
  static Result<std::shared_ptr<JitEngine>> create_engine(JitOptions options);
  Result<std::shared_ptr<const JitModule>> load_module(const NvrtcRequest& request, const std::string& what,
                                                       std::chrono::steady_clock::time_point start);
  Result<std::shared_ptr<const JitInstance>> load_instance(const InstanceRequest& request, const std::string& what,
                                                           std::chrono::steady_clock::time_point start);
  Result<WarmReport> warm_nvrtc(const NvrtcRequest& request);
  Result<WarmReport> warm_instance(const InstanceRequest& request);
  Result<CacheLookup> compile_nvrtc(const NvrtcRequest& request, const std::string& what);
  /// The request's object from the disk cache or nvcc; with `replace_unless`, the disk entry (refused
  /// by it) replaced (DiskCache::replace_unusable).
  Result<CacheLookup> compile_instance(const InstanceRequest& request, const std::string& what,
                                       const std::function<Status(const Artifact&)>* replace_unless = nullptr);
  void report(const std::string& what, JitStage stage, std::chrono::steady_clock::time_point start) const;

  JitOptions options_;
  DiskCache disk_;
  std::string include_identity_;
  PlanCache<std::string, JitModule> modules_;
  PlanCache<std::string, JitInstance> instances_;
  std::unique_ptr<Workers> workers_;
};

}  // namespace cuactor::jit
