/// @file
/// Starting, watching and ending the worker process ([R10]), and the child's side of the start.
///
/// The parent creates the channel socket pair and the shared memory (both close-on-exec), then
/// posix_spawn()s the worker with exactly two more descriptors: the child's socket end as fd 3 and the
/// memfd as fd 4 (dup2 in the spawn actions clears close-on-exec on those two only, and every
/// descriptor above 4 is closed in the child, so nothing else of the parent leaks, whatever other
/// threads open meanwhile or the parent itself inherited). The child calls
/// child_startup() first: PR_SET_PDEATHSIG(SIGKILL), then a getppid() check against the parent pid it
/// was given (the parent may have died before the prctl), SIGPIPE ignored.
///
/// PR_SET_PDEATHSIG fires when the *thread* that spawned the child exits, not only the process: spawn
/// from a thread that lives as long as the worker should (the client's supervisor thread).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "runtime/isolated/channel.hpp"
#include "runtime/isolated/shm.hpp"

namespace cuactor::runtime::isolated {

/// Descriptor number of the channel socket in the child.
inline constexpr int kChildChannelFd = 3;
/// Descriptor number of the shared memory in the child (when there is one).
inline constexpr int kChildShmFd = 4;

/// What to start.
struct SpawnOptions {
  std::string executable;                          ///< Path of the worker executable.
  std::vector<std::string> args;                   ///< Extra arguments after the standard ones (e.g. "--device", "0").
  const SharedRegion* shm = nullptr;               ///< Shared region to pass (not owned; outlives many workers).
  std::uint32_t max_payload = kDefaultMaxPayload;  ///< Bound of received payloads on the parent's end.
};

/// Default worker executable: $CUACTOR_WORKER if set, else `cuactor-worker` in the directory of the
/// running executable when it is there, else the one in cuactor's install bin directory.
std::string default_worker_path();

/// A spawned worker process, owned by the parent: the channel to it and the pid.
/// Destruction ends it (close channel, grace period, SIGKILL) and reaps it: never a zombie.
class WorkerProcess {
 public:
  /// Spawns `options.executable --channel-fd 3 --parent-pid <pid> [--shm-fd 4 --shm-bytes N] args...`.
  /// Call from a thread that lives as long as the worker should (see the file comment).
  static Result<std::unique_ptr<WorkerProcess>> spawn(const SpawnOptions& options);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  /// Process id.
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  /// The parent's end of the channel.
  [[nodiscard]] Channel& channel() noexcept { return *channel_; }

  /// Reaps the child if it has exited; returns its wait status then, nullopt while it runs.
  std::optional<int> poll_exit() noexcept;
  /// Waits up to `timeout` for the child to exit and reaps it; the wait status, or nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) noexcept;
  /// SIGKILL and reap (blocking: a killed process exits promptly). Returns the wait status.
  int kill_now() noexcept;
  /// Orderly end: closes the channel (the worker exits when it sees that), waits `grace`, then
  /// SIGKILL. Returns the wait status. Idempotent.
  int terminate(std::chrono::milliseconds grace) noexcept;
  /// True once the child was reaped.
  [[nodiscard]] bool reaped() const noexcept { return status_.has_value(); }

 private:
  WorkerProcess() = default;

  pid_t pid_ = -1;
  std::unique_ptr<Channel> channel_;
  std::optional<int> status_;
};

/// "exited with status 3", "killed by signal 9 (Killed)" for a wait status.
std::string describe_wait_status(int status);

/// What the child received from its parent.
struct ChildEnd {
  std::unique_ptr<Channel> channel;  ///< The child's end of the channel.
  SharedRegion shm;                  ///< The shared region (empty if none was passed).
  pid_t parent = -1;                 ///< The parent's pid.
  std::vector<std::string> rest;     ///< Arguments after the standard ones.
};

/// The child's first call: dies with its parent (PR_SET_PDEATHSIG + getppid check), ignores SIGPIPE,
/// parses the standard arguments and adopts the channel and shared memory. `invalid_argument` for
/// bad arguments, `worker_lost` when the parent is already gone.
Result<ChildEnd> child_startup(int argc, char** argv, std::uint32_t max_payload = kDefaultMaxPayload);

}  // namespace cuactor::runtime::isolated
