/// @file
/// The client's supervised connection to its worker process ([R9], [R10]), independent of what the
/// requests mean: it sends encoded requests, matches replies by request id and replaces the worker
/// when it is lost.
///
/// Contracts:
/// - Every posted request's handler runs exactly once: with the reply's result, the reply's error,
///   or `worker_lost` / `context_poisoned` (in flight when the worker was lost), `stale_handle`
///   (it names handles of an older worker), `queue_full`, `circuit_open`, `device_shutting_down`.
/// - A request is *in flight* once written to the channel; at most `max_in_flight` are, the rest wait
///   in a bounded FIFO queue. Queued requests survive a worker loss and are sent, in order, to the
///   next worker; those whose `generation` is older than the new worker's fail with `stale_handle`.
/// - A loss is: the channel fails (worker exited, was killed, spoke badly), the worker reports
///   poisoning, or an in-flight request outlives its deadline (the worker is then killed). The old
///   worker is killed and reaped *before* its in-flight requests fail, so it can no longer touch the
///   shared region their bytes live in. The DeviceState generation rises at once (outstanding handles
///   become stale) and again when the new worker is ready; the breaker counts the loss, and once it
///   trips every request is answered `circuit_open` and the escalation hook fires.
/// - Workers are spawned on the link's supervisor thread (their parent-death signal is tied to it).
/// - Handlers run on the link's threads (marked internal: see detail::on_internal_thread()) or the
///   posting thread, never under a lock: they must not block.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "cuactor/runtime/circuit_breaker.hpp"
#include "cuactor/runtime/device_state.hpp"
#include "runtime/isolated/messages.hpp"
#include "runtime/isolated/protocol.hpp"
#include "runtime/isolated/shm.hpp"
#include "runtime/isolated/spawn.hpp"

namespace cuactor::runtime::isolated {

/// Called with a request's outcome (the reply's result bytes, or the error) and the generation of the
/// worker that answered (0 when the link decided the outcome): handles minted from a reply carry that
/// generation, never a newer one.
using ReplyHandler = std::function<void(Result<std::vector<std::byte>>, std::uint64_t worker_generation)>;

/// One request to the worker.
struct LinkRequest {
  MsgKind kind = MsgKind::echo;
  std::vector<std::byte> payload;                     ///< Encoded message struct.
  std::uint64_t generation = 0;                       ///< Generation of the handles it names (0: none).
  std::optional<std::chrono::milliseconds> deadline;  ///< Overrides LinkOptions::deadline.
  ReplyHandler done;                                  ///< Runs exactly once (null: fire and forget).
  std::string name;                                   ///< For messages, e.g. "copy_to_device".
  int fd = -1;                                        ///< A descriptor sent with the message (register_host), or -1.
  std::shared_ptr<const void> fd_owner;               ///< Keeps `fd` open until the message was sent.
};

/// Configuration of a WorkerLink.
struct LinkOptions {
  std::string executable;                          ///< Worker executable (default_worker_path()).
  std::vector<std::string> args;                   ///< Extra worker arguments (e.g. "--device", "0").
  std::size_t shm_bytes = 64u << 20;               ///< Shared region for bulk data (0: none).
  std::uint32_t max_payload = kDefaultMaxPayload;  ///< Bound of a received payload.
  std::size_t queue_capacity = 1024;               ///< Waiting requests beyond this get `queue_full`.
  std::size_t max_in_flight = 256;                 ///< Requests written to the channel at once.
  std::chrono::milliseconds deadline{120000};      ///< Default per-request deadline (generous).
  std::chrono::milliseconds start_timeout{60000};  ///< A new worker must say hello within this.
  std::chrono::milliseconds grace{2000};           ///< shutdown(): wait this long, then SIGKILL.
  int max_losses = 3;                              ///< More losses than this within `window` ...
  std::chrono::steady_clock::duration window = std::chrono::seconds(60);  ///< ... open the circuit.
  std::function<void(const Error&)> on_escalation;                        ///< Fired once when the circuit opens.
};

/// Counters of a link.
struct LinkStats {
  std::uint64_t generation = 0;  ///< DeviceState generation.
  std::uint64_t restarts = 0;    ///< Workers started after the first.
  std::uint64_t losses = 0;      ///< Workers lost (any cause).
  std::size_t queued = 0;        ///< Requests waiting to be sent.
  std::size_t in_flight = 0;     ///< Requests sent, not answered.
  bool circuit_open = false;     ///< The breaker tripped.
  std::int64_t worker_pid = -1;  ///< Current worker, -1 while none runs.
  HelloMsg hello;                ///< What the current worker said at start.
};

/// The supervised connection. Create with start(); shut down explicitly or by destruction.
class WorkerLink {
 public:
  /// Creates the shared region, starts the supervisor and the first worker, and waits for its hello
  /// (`worker_lost` naming the cause when it does not come within start_timeout).
  static Result<std::shared_ptr<WorkerLink>> start(std::shared_ptr<DeviceState> state, LinkOptions options);
  ~WorkerLink();
  WorkerLink(const WorkerLink&) = delete;
  WorkerLink& operator=(const WorkerLink&) = delete;

  /// Queues or sends `request`; answers it at once when it cannot be taken (see the file comment).
  void post(LinkRequest request);
  /// Stops accepting (accepting_ops=false first), answers queued requests `device_shutting_down`,
  /// waits up to `grace` for in-flight replies, then ends the worker (in-flight left: `timeout`).
  /// Idempotent.
  void shutdown();
  /// Snapshot of the counters.
  [[nodiscard]] LinkStats stats() const;
  /// The shared region for bulk data (same region for every worker incarnation).
  [[nodiscard]] const SharedRegion& shm() const noexcept;
  /// Sends `signal` to the current worker (drills and tests; racy by nature: the worker may be being
  /// replaced at that moment); the link notices a death and replaces the worker.
  void kill_worker(int signal);

  struct Impl;

 private:
  explicit WorkerLink(std::shared_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace cuactor::runtime::isolated
