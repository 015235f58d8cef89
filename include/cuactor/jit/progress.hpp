/// @file
/// Progress reports of run-time compilation ([J4]: long compiles report progress).
#pragma once

#include <functional>
#include <string>

#include "cuactor/core/cxx20.hpp"

namespace cuactor::jit {

/// Stage of one JIT request.
enum class JitStage {
  queued,       ///< Waiting for a compile worker.
  disk_lookup,  ///< Looking in the disk cache.
  compiling,    ///< The compiler is running (reported again every second or so).
  stored,       ///< Compiled and written to the disk cache.
  loading,      ///< Loading the machine code into the process.
  ready,        ///< Usable.
  failed,       ///< Finished with an error.
};

/// Lower-case name of a stage.
const char* name(JitStage s) noexcept;

/// One progress report: what is being built, its stage and the seconds since the request began.
struct JitProgress {
  std::string what;
  JitStage stage = JitStage::queued;
  double elapsed_seconds = 0;
};

/// Receives progress reports on compile worker threads; must be thread-safe and quick.
using ProgressFn = std::function<void(const JitProgress&)>;

}  // namespace cuactor::jit
