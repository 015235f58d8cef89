#include "cuactor/jit/nvcc.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <utility>

#include "cuactor/core/files.hpp"
#include "cuactor/core/paths.hpp"
#include "process.hpp"

namespace cuactor::jit {
namespace fs = std::filesystem;
namespace {

std::string gencode(GpuArch a) {
  const std::string v = fmt::format("{}{}", a.sm(), a.arch_specific ? "a" : "");
  return fmt::format("arch=compute_{},code=sm_{}", v, v);
}

}  // namespace

std::optional<fs::path> find_nvcc() {
  std::vector<fs::path> candidates;
  for (const char* var : {"CUACTOR_NVCC", "CUDACXX"})
    if (const char* p = std::getenv(var); p && *p) candidates.emplace_back(p);
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* p = std::getenv(var); p && *p) candidates.push_back(fs::path(p) / "bin" / "nvcc");
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string dir; std::getline(ss, dir, ':');)
      if (!dir.empty()) candidates.push_back(fs::path(dir) / "nvcc");
  }
  candidates.emplace_back("/usr/local/cuda/bin/nvcc");
  std::error_code ec;
  for (const auto& c : candidates)
    if (fs::is_regular_file(c, ec)) return c;
  return std::nullopt;
}

Result<std::string> nvcc_identity() {
  // Probing runs a process (~25 ms): do it once per process. Only nvcc's banner (release and build)
  // names the compiler: not its path, and not the host compiler, since the object's interface is C
  // (another host compiler, which also preprocesses the device pass, may change machine code, not
  // results). So a cache warmed on a machine without a GPU is loaded as it is on a GPU machine with
  // the same CUDA release but another GCC; an object that needs a newer C++ runtime than the loading
  // process has is compiled again there (JitEngine::load_instance).
  static std::once_flag once;
  static Result<std::string> identity = fail(errc::internal, "unset");
  std::call_once(once, [] {
    const auto nvcc = find_nvcc();
    if (!nvcc) {
      identity = fail(errc::unsupported, "nvcc was not found (set CUACTOR_NVCC or CUDA_HOME)");
      return;
    }
    auto v = detail::run_process({nvcc->string(), "--version"}, std::chrono::seconds(60));
    if (!v || v->exit_code != 0) {
      identity = fail(errc::unsupported, fmt::format("'{} --version' failed", nvcc->string()));
      return;
    }
    identity = v->output;
  });
  return identity;
}

Result<Digest> cache_key(const NvccRequest& req, std::string_view include_identity) {
  auto id = nvcc_identity();
  if (!id) return fail(id.error());
  Hasher h;
  h.field("backend", "nvcc").field("compiler", *id).field("arch", req.arch.name()).field("source", req.source);
  h.field("includes", include_identity);
  for (const auto& o : req.options) h.field("option", o);
  return h.digest();
}

Result<std::vector<std::byte>> nvcc_compile(const NvccRequest& req, const ProgressFn& progress) {
  const auto nvcc = find_nvcc();
  if (!nvcc) return fail(errc::unsupported, "nvcc was not found (set CUACTOR_NVCC or CUDA_HOME)");
  auto scratch = detail::ScratchDir::create();
  if (!scratch) return fail(scratch.error());
  const fs::path src = scratch->path() / "instance.cu";
  const fs::path obj = scratch->path() / "instance.so";
  CUACTOR_TRY(write_new_private_file(src, std::as_bytes(std::span(req.source.data(), req.source.size()))));
  std::vector<std::string> argv = {
      nvcc->string(), "-std=c++20", "--expt-relaxed-constexpr", "-O3",      "-DNDEBUG",       "-shared",
      "-Xcompiler",   "-fPIC",      "-cudart=shared",           "-gencode", gencode(req.arch)};
  for (const auto& d : req.include_dirs) argv.push_back("-I" + d.string());
  // Where `-lcuda` finds the driver's link stub (the loaded object binds to the installed driver).
  argv.push_back("-L" + (nvcc->parent_path().parent_path() / "lib64" / "stubs").string());
  argv.insert(argv.end(), req.options.begin(), req.options.end());
  argv.insert(argv.end(), {"-o", obj.string(), src.string()});
  const auto start = std::chrono::steady_clock::now();
  auto beat = [&] {
    if (progress)
      progress({req.description, JitStage::compiling,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
  };
  beat();
  // Each CUTLASS compile takes a core and ~3.3 GB: more at once than the machine has would swap
  // or be killed for memory, so compiles beyond the process-wide limit wait for a slot.
  const detail::CompileSlot slot;
  auto r = detail::run_process(argv, req.timeout, beat);
  if (!r) return fail(r.error());
  if (r->exit_code != 0)
    return fail(errc::compile_failed, fmt::format("nvcc could not compile '{}' for {} (exit {}):\n{}", req.description,
                                                  req.arch.name(), r->exit_code, r->output.substr(0, 4000)));
  auto bytes = read_file(obj, "nvcc output");
  if (!bytes || bytes->empty())
    return fail(errc::compile_failed, fmt::format("nvcc produced no object for '{}'{}", req.description,
                                                  bytes ? std::string() : ": " + bytes.error().message()));
  return bytes;
}

namespace {

Status write_all(int fd, std::span<const std::byte> bytes, const std::string& name) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return fail(errc::internal, fmt::format("writing shared object '{}' failed: {}", name, std::strerror(errno)));
    done += static_cast<std::size_t>(n);
  }
  return ok();
}

// An anonymous in-memory file that may be mapped executable (MFD_EXEC where the kernel knows it:
// with vm.memfd_noexec set, memfds are otherwise not executable).
int executable_memfd(const std::string& name) {
#ifdef MFD_EXEC
  const int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_EXEC);
  if (fd >= 0 || errno != EINVAL) return fd;
#endif
  return ::memfd_create(name.c_str(), MFD_CLOEXEC);
}

}  // namespace

Result<std::shared_ptr<SharedObject>> SharedObject::load(std::span<const std::byte> elf, const std::string& name) {
  std::shared_ptr<SharedObject> so(new SharedObject());
  so->name_ = name;
  std::string memfd_error;
  // First choice: a memfd, so the cache entry stays the only copy on disk.
  if (const int fd = executable_memfd("cuactor-" + name.substr(0, 200)); fd >= 0) {
    so->fd_ = fd;
    CUACTOR_TRY(write_all(fd, elf, name));
    so->path_ = fmt::format("/proc/self/fd/{}", fd);
    so->handle_ = ::dlopen(so->path_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (so->handle_) return so;
    const char* err = ::dlerror();
    memfd_error = err ? err : "unknown";
  } else {
    memfd_error = std::strerror(errno);
  }
  // Fallback (memfd refused or not executable): a temp file, unlinked once mapped.
  auto tmp = temp_root();
  if (!tmp) return fail(tmp.error());
  std::string path = (*tmp / "cuactor-jit-XXXXXX.so").string();
  const int tfd = ::mkstemps(path.data(), 3);
  if (tfd < 0) return fail(errc::internal, fmt::format("mkstemps('{}') failed: {}", path, std::strerror(errno)));
  if (so->fd_ >= 0) ::close(so->fd_);
  so->fd_ = tfd;  // held open like the memfd: see ~SharedObject
  auto written = write_all(tfd, elf, name);
  so->path_ = path;
  if (written) so->handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  const char* err = so->handle_ ? nullptr : ::dlerror();
  ::unlink(path.c_str());
  if (!written) return fail(written.error());
  if (!so->handle_)
    return fail(errc::invalid_argument, fmt::format("dlopen of JIT object '{}' failed: {} (memfd: {})", name,
                                                    err ? err : "unknown", memfd_error));
  return so;
}

SharedObject::~SharedObject() {
  const bool loaded = handle_ != nullptr;
  if (loaded) ::dlclose(handle_);
  // An object with GNU unique symbols (C++ template statics, as CUTLASS has) stays resident after
  // dlclose. Its file must then stay open: a closed memfd frees its descriptor number and inode,
  // and a later dlopen of "/proc/self/fd/<same number>" or of a file with the same inode would be
  // answered with this old object instead of the new one.
  if (fd_ >= 0) {
    // An object dlopen refused left nothing mapped: its file goes (load() retries may refuse several).
    if (!loaded) {
      ::close(fd_);
      return;
    }
    // The temp-file fallback was unlinked, so residency cannot be asked by path: always keep it.
    if (!path_.starts_with("/proc/self/fd/")) return;
    void* resident = ::dlopen(path_.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (resident) {
      ::dlclose(resident);
      return;  // deliberately keeps fd_ open for the life of the process
    }
    ::close(fd_);
  }
}

Result<void*> SharedObject::symbol(const std::string& sym) const {
  ::dlerror();
  void* p = ::dlsym(handle_, sym.c_str());
  if (!p) return fail(errc::invalid_argument, fmt::format("JIT object '{}' does not export '{}'", name_, sym));
  return p;
}

}  // namespace cuactor::jit
