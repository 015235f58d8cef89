/// @file
/// Test support: the JIT engine GPU tests compile through. CUTLASS compiles take 25-60 s, so every
/// GPU test process shares one disk cache (ctest runs them in parallel, the sanitizers run them
/// again); the per-key file lock keeps it consistent, and GPU runs may pre-fill it.
#pragma once

#include <filesystem>
#include <memory>

#include "cuactor/core/expected.hpp"
#include "cuactor/jit/engine.hpp"

namespace cuactor::test_support {

/// A JIT engine with `workers` compile threads on the GPU tests' shared disk cache.
inline Result<std::shared_ptr<jit::JitEngine>> gpu_test_jit_engine(unsigned workers) {
  jit::JitOptions options;
  options.disk.directory = std::filesystem::temp_directory_path() / "cuactor-jit-gpu-test-cache";
  options.workers = workers;
  return jit::JitEngine::create(options);
}

}  // namespace cuactor::test_support
