// Runs a child process (the nvcc back end, version probes) with its output captured.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "cuactor/core/expected.hpp"

namespace cuactor::jit::detail {

/// Exit status and combined stdout+stderr of a finished child.
struct ProcessResult {
  int exit_code = 0;
  std::string output;
};

/// Runs argv[0] (searched in PATH) with `argv`, waits up to `timeout`, calling `heartbeat` about
/// every second while it runs. `timeout` kills the child; spawn failures are `unsupported`.
Result<ProcessResult> run_process(const std::vector<std::string>& argv, std::chrono::seconds timeout,
                                  const std::function<void()>& heartbeat = {});

}  // namespace cuactor::jit::detail
