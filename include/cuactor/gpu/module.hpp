/// @file
/// Kernels loaded at run time from cubin, fatbin or PTX (cuLibrary*), and a validated launch helper.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "cuactor/core/expected.hpp"

namespace cuactor::gpu {

/// Offset and size of one kernel parameter as the compiled kernel expects it.
struct ParamInfo {
  std::size_t offset = 0;
  std::size_t size = 0;
};

/// A kernel in a loaded Library. Valid while the Library lives; usable from every context.
class Kernel {
 public:
  Kernel() = default;
  [[nodiscard]] CUkernel get() const noexcept { return kernel_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] explicit operator bool() const noexcept { return kernel_ != nullptr; }
  /// Parameter layout read from the compiled kernel (count, offsets and sizes).
  [[nodiscard]] const std::vector<ParamInfo>& params() const noexcept { return params_; }

  /// Registers per thread on device `ordinal`.
  Result<int> num_registers(int ordinal) const;
  /// Raises the kernel's dynamic shared memory limit on device `ordinal`.
  Status set_max_dynamic_shared_bytes(int ordinal, int bytes) const;

 private:
  friend class Library;
  CUkernel kernel_ = nullptr;
  std::string name_;
  std::vector<ParamInfo> params_;
};

/// Move-only owner of a context-independent loaded image (cuLibraryLoadData).
class Library {
 public:
  /// Loads a cubin, fatbin or NUL-terminated PTX image held in memory.
  static Result<Library> load_data(const void* image);
  /// Loads an image from a file (cubin, fatbin or PTX).
  static Result<Library> load_file(const std::filesystem::path& path);

  Library() = default;
  Library(Library&& o) noexcept : lib_(o.lib_) { o.lib_ = nullptr; }
  Library& operator=(Library&& o) noexcept;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library();

  /// The kernel named `name` (a mangled name or an extern "C" name); `invalid_argument` naming the
  /// kernel when absent.
  Result<Kernel> kernel(const std::string& name) const;
  [[nodiscard]] CUlibrary get() const noexcept { return lib_; }

 private:
  CUlibrary lib_ = nullptr;
};

/// Grid, block, dynamic shared memory and stream of one launch.
struct LaunchConfig {
  dim3 grid{1, 1, 1};
  dim3 block{1, 1, 1};
  unsigned shared_bytes = 0;
  cudaStream_t stream = nullptr;
};

/// Launches `kernel` with `args` (pointers to each argument value) after checking that the number of
/// arguments and each one's size equal the kernel's parameter layout.
Status launch(const Kernel& kernel, const LaunchConfig& config, std::span<void* const> args,
              std::span<const std::size_t> arg_sizes);

/// Typed form: `launch(k, cfg, ptr, n, alpha)`; each argument's sizeof is checked against the kernel.
/// Kernel arguments are trivially copyable: containers (a vector of argument pointers and one of sizes)
/// go to the type-erased overload above instead of being passed as two arguments by value.
template <class... Args>
requires(std::is_trivially_copyable_v<Args>&&...) Status
    launch(const Kernel& kernel, const LaunchConfig& config, const Args&... args) {
  void* ptrs[sizeof...(Args) + 1] = {const_cast<void*>(static_cast<const void*>(&args))..., nullptr};
  const std::size_t sizes[sizeof...(Args) + 1] = {sizeof(Args)..., 0};
  return launch(kernel, config, std::span<void* const>(ptrs, sizeof...(Args)),
                std::span<const std::size_t>(sizes, sizeof...(Args)));
}

}  // namespace cuactor::gpu
