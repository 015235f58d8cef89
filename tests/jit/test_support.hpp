// Shared helpers of the JIT tests: fresh cache directories and a small NVRTC kernel.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "cuactor/jit/nvrtc.hpp"

namespace cuactor::jit::test_support {

/// A fresh, empty directory removed at scope exit.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> n{0};
    path_ = std::filesystem::temp_directory_path() /
            ("cuactor-jit-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// y[i] = a * x[i] + y[i] as an extern "C" kernel plus a templated one; `salt` makes the source
/// (and so the cache key) unique per test.
inline NvrtcRequest saxpy_request(const std::string& salt, GpuArch arch = {9, 0, true}) {
  NvrtcRequest r;
  r.program_name = "saxpy.cu";
  r.arch = arch;
  r.source = "// " + salt + R"(
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
template <class T> __global__ void scale(int n, T a, T* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * y[i];
}
)";
  r.name_expressions = {"scale<float>"};
  return r;
}

}  // namespace cuactor::jit::test_support
