// Runs a child process (the nvcc back end, version probes) with its output captured.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
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
///
/// The command and everything it starts (nvcc's cicc, ptxas, the host compiler) run in a process
/// group of their own under a small supervisor process: a timeout kills the whole group, and when
/// this process dies, even by SIGKILL, the supervisor is told by the kernel (PR_SET_PDEATHSIG) and
/// kills the group, so no compiler outlives its parent. The calling thread must outlive the child
/// (PR_SET_PDEATHSIG follows the thread that forked); run_process waits for it, so it does.
Result<ProcessResult> run_process(const std::vector<std::string>& argv, std::chrono::seconds timeout,
                                  const std::function<void()>& heartbeat = {});

/// A private scratch directory for one compile, `<temp_root>/cuactor-nvcc-<pid>-XXXXXX` (mode 0700,
/// marked by a `.cuactor-scratch` file), removed with everything in it on destruction.
class ScratchDir {
 public:
  /// Creates one; the first call in a process also sweeps the stale ones (sweep_stale_scratch).
  /// `io_error` naming the temp directory when it is missing or unwritable.
  static Result<ScratchDir> create();
  ScratchDir(ScratchDir&& o) noexcept;
  ScratchDir& operator=(ScratchDir&&) = delete;
  ~ScratchDir();
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  explicit ScratchDir(std::filesystem::path p) : path_(std::move(p)) {}
  std::filesystem::path path_;
};

/// Removes scratch directories in `temp_root` left by killed processes: only directories of our
/// exact name form, owned by this user, holding the marker, whose process is gone. Returns how many.
std::size_t sweep_stale_scratch(const std::filesystem::path& temp_root) noexcept;

/// Concurrent compiles allowed for `cores` cores and `mem_available` bytes of free memory: one per
/// core and per 3.3 GiB (what a CUTLASS sm_90a compile needs), at least one.
unsigned compile_slots_for(unsigned cores, std::uint64_t mem_available) noexcept;

/// MemAvailable of /proc/meminfo's text in bytes; nullopt when the line is missing or malformed.
std::optional<std::uint64_t> parse_mem_available(std::string_view meminfo) noexcept;

/// Holds one of the process-wide compile slots (see compile_slots_for; $CUACTOR_JIT_MAX_COMPILES
/// overrides) while alive; waits for a free one.
class CompileSlot {
 public:
  CompileSlot();
  ~CompileSlot();
  CompileSlot(const CompileSlot&) = delete;
  CompileSlot& operator=(const CompileSlot&) = delete;
  /// The process-wide limit, computed once.
  static unsigned limit() noexcept;
};

}  // namespace cuactor::jit::detail
