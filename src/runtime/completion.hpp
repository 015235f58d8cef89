/// @file
/// Completion of an actor's submitted work ([R5], [R7]) (internal): one poller thread per device
/// watches a sequence number that the stream writes into pinned mapped memory after each batch
/// (cuStreamWriteValue32, wrap-safe), or queries an event per batch where stream memory operations are
/// missing, and hands each finished operation to its handler's executor. It spins while work is in
/// flight, backs off with growing sleeps, and blocks when the device is idle. A batch that is late by
/// the watchdog interval makes it query the stream: a poisoned context is reported to the actor, which
/// fails everything in flight exactly once (take_all()).
///
/// Early delivery: a lone batch submitted while a completion-pool thread idles is also handed to that
/// thread at once, which watches the word itself for a while and answers the batch the moment it
/// completes. The reply then skips the poller-to-pool hand-off (0.7 µs of a 10-12 µs round trip measured
/// on an H100 VM). Whoever claims the batch first (that thread, the poller, or take_all()) answers it.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "cuactor/runtime/device_actor.hpp"
#include "runtime/reply.hpp"
#include "runtime/spin.hpp"

namespace cuactor::runtime::detail {

class Incarnation;

/// The completion poller of one device actor. submit/attach/detach/take_all are called by the
/// actor's thread; the poller thread answers finished operations.
class Completion {
 public:
  /// Called on the poller thread; must not block on the actor.
  struct Hooks {
    std::function<void(Error)> on_poisoned;  ///< The stream reported a sticky error.
    std::function<void()> on_progress;       ///< Some operations finished (slots were freed).
  };

  Completion(int ordinal, const PollerOptions& options, std::chrono::microseconds watchdog,
             std::shared_ptr<ReplyCounters> counters, Hooks hooks);
  ~Completion();
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  /// Starts watching `inc`'s stream (a fresh sequence word; the mode falls back to event queries when
  /// the stream cannot write memory values). Nothing may be in flight.
  Status attach(std::shared_ptr<Incarnation> inc);
  /// Stops watching (the context was lost): its sequence word and events are abandoned, not freed.
  void detach() noexcept;
  /// Enqueues the completion marker after the work of `ops`, then runs `after_marker` (work that must
  /// be enqueued before any of `ops` is answered but need not delay the marker, such as write events),
  /// then registers them. On success `ops` is emptied; on failure it is left to the caller, and the
  /// error says why (possibly a poisoning).
  Status submit(std::vector<std::shared_ptr<OpRecord>>& ops, const std::function<Status()>& after_marker = {});
  /// Takes every registered operation, in submission order (each is handed out exactly once).
  std::vector<std::shared_ptr<OpRecord>> take_all();
  /// Operations registered and not yet answered.
  [[nodiscard]] std::size_t in_flight() const noexcept { return in_flight_.load(std::memory_order_seq_cst); }
  /// How completion is detected for the current incarnation.
  [[nodiscard]] CompletionMode mode() const noexcept { return mode_.load(std::memory_order_acquire); }

 private:
  /// The pinned mapped word of one incarnation. Shared with early deliveries, which may outlive both the
  /// incarnation and this object; unregistered (on `ordinal`) only while its context lives.
  struct WordBlock {
    WordBlock(int device, std::uint32_t* host_word) noexcept : ordinal(device), word(host_word) {}
    ~WordBlock();
    WordBlock(const WordBlock&) = delete;
    WordBlock& operator=(const WordBlock&) = delete;
    const int ordinal;
    std::uint32_t* const word;
    std::atomic<bool> registered{true};  // false once its context was lost: the reset took the registration
  };
  /// A lone batch also watched by a completion-pool thread (see the file comment).
  struct EarlyDelivery {
    /// True for the one caller that takes `ops`.
    bool claim() noexcept { return !claimed.exchange(true, std::memory_order_acq_rel); }
    std::atomic<bool> claimed{false};
    std::atomic<bool> watching{false};  // the pool thread spins on the word now: the poller leaves it the batch
    std::uint32_t seq = 0;
    std::shared_ptr<WordBlock> word;
    std::shared_ptr<ReplyCounters> counters;
    std::vector<std::shared_ptr<OpRecord>> ops;
  };
  struct Batch {
    std::uint32_t seq = 0;
    cudaEvent_t event = nullptr;  // event_query mode
    std::chrono::steady_clock::time_point submitted;
    std::size_t op_count = 0;
    std::vector<std::shared_ptr<OpRecord>> ops;  // empty when `early` holds them
    std::shared_ptr<EarlyDelivery> early;
  };

  void run() noexcept;
  /// Pops the batches that finished (lock held); the poller answers them after unlocking.
  void collect_finished_locked(std::vector<Batch>& done);
  /// Hands `batch` (registered, lock held) to an idle completion-pool thread when it is alone in flight;
  /// leaves it to the poller if that fails.
  void deliver_early_locked(Batch& batch) noexcept;
  /// Queries the stream for a sticky error when the oldest batch is late; true if it reported one.
  bool check_poisoned(std::chrono::steady_clock::time_point now);
  [[nodiscard]] static std::uint32_t observed(std::uint32_t* word) noexcept;
  void recycle_event(cudaEvent_t e) noexcept;

  const int ordinal_;
  const PollerOptions options_;
  const std::chrono::microseconds watchdog_;
  const std::shared_ptr<ReplyCounters> counters_;
  const Hooks hooks_;

  std::mutex query_mutex_;  // held across the poller's stream query
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool halted_ = true;  // not attached, or the context was lost
  bool sleeping_ = false;
  std::shared_ptr<Incarnation> inc_;
  std::deque<Batch> batches_;
  std::vector<cudaEvent_t> free_events_;
  std::uint32_t next_seq_ = 0;
  std::shared_ptr<WordBlock> word_block_;                  // the current incarnation's
  std::vector<std::shared_ptr<WordBlock>> retired_words_;  // of lost contexts: the poller may still read them
  std::uint32_t* word_ = nullptr;  // word_block_'s word: pinned mapped host memory written by the stream
  CUdeviceptr word_device_ = 0;
  std::chrono::steady_clock::time_point last_watchdog_{};
  std::atomic<CompletionMode> mode_{CompletionMode::sequence_word};
  std::atomic<std::size_t> in_flight_{0};
  alignas(kCacheLine) std::atomic<std::uint32_t> batches_pending_{0};  // spun on by the idle poller
  alignas(kCacheLine) std::thread thread_;
};

}  // namespace cuactor::runtime::detail
