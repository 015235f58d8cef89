/// @file
/// nvcc back end ([J2]) for CUTLASS 3.x families, whose launch parameters (TMA descriptors, grid,
/// workspace) come from host template code of the kernel's own type: one generated .cu holding the
/// kernel plus a small C ABI of host functions is compiled by nvcc into a shared object, stored in
/// the disk cache, and loaded with dlopen. Compiling needs no GPU.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/jit/hash.hpp"
#include "cuactor/jit/progress.hpp"

namespace cuactor::jit {

/// One nvcc compilation of a translation unit into a shared object.
struct NvccRequest {
  std::string source;
  /// Name for diagnostics and progress reports.
  std::string description = "cuactor_jit.cu";
  GpuArch arch{9, 0, true};
  std::vector<std::filesystem::path> include_dirs;
  /// Extra nvcc options; "-std=c++20 --expt-relaxed-constexpr -O3 -shared -Xcompiler -fPIC
  /// -cudart=shared" and the gencode for `arch` are always passed.
  std::vector<std::string> options;
  /// Kill the compiler after this long (`timeout`).
  std::chrono::seconds timeout{900};
};

/// nvcc to use: $CUACTOR_NVCC, $CUDACXX, $CUDA_HOME/bin/nvcc, PATH, /usr/local/cuda/bin/nvcc.
std::optional<std::filesystem::path> find_nvcc();

/// Identity of the compiler for cache keys: nvcc's version banner (`nvcc --version`), which names
/// the CUDA release and build. Neither nvcc's path nor the host compiler is part of it, so entries
/// warmed with the same CUDA release and another host compiler are reused. `unsupported` when nvcc
/// is not found.
Result<std::string> nvcc_identity();

/// Compiles the request into a shared object and returns its bytes. `compile_failed` with the start
/// of nvcc's output; `timeout`; `unsupported` without nvcc. Reports `compiling` about every second.
Result<std::vector<std::byte>> nvcc_compile(const NvccRequest& request, const ProgressFn& progress = {});

/// Cache key: source, include-file identity (`include_identity`), options, architecture and the
/// compiler identity. As for NVRTC, no driver version (the object holds SASS only).
Result<Digest> cache_key(const NvccRequest& request, std::string_view include_identity);

/// A shared object loaded from memory (memfd + dlopen), unloaded with the last reference.
class SharedObject {
 public:
  /// Loads ELF bytes; `invalid_argument` with dlerror()'s text when the loader refuses them.
  static Result<std::shared_ptr<SharedObject>> load(std::span<const std::byte> elf, const std::string& name);
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;
  ~SharedObject();

  /// Address of an exported symbol; `invalid_argument` naming it when absent.
  Result<void*> symbol(const std::string& name) const;

 private:
  SharedObject() = default;
  void* handle_ = nullptr;
  int fd_ = -1;
  std::string path_;  // what dlopen was given
  std::string name_;
};

}  // namespace cuactor::jit
