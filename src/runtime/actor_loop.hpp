/// @file
/// The in-process backend of a DeviceActor (internal): the actor's thread, its bounded mailbox, batching
/// and dispatch. It composes the parts that own the rest of the state: the Incarnation (context
/// resources and capture hooks), the WriteTracker, the Completion poller and the Supervisor.
#pragma once

#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "cuactor/runtime/device_actor.hpp"
#include "runtime/completion.hpp"
#include "runtime/incarnation.hpp"
#include "runtime/mailbox.hpp"
#include "runtime/op_services.hpp"
#include "runtime/reply.hpp"
#include "runtime/spin.hpp"
#include "runtime/supervisor.hpp"
#include "runtime/write_tracker.hpp"

namespace cuactor::runtime::detail {

/// One device's actor running in this process.
class ActorLoop final : public ActorBackend, private OpServices, private RecoveryStrategy {
 public:
  ActorLoop(int ordinal, ActorOptions options);
  ~ActorLoop() override;

  /// Starts the thread and the first incarnation (generation 1).
  Status start();

  // ActorBackend.
  [[nodiscard]] int device() const noexcept override { return ordinal_; }
  [[nodiscard]] const std::shared_ptr<DeviceState>& state() const noexcept override { return state_; }
  void post(std::shared_ptr<OpRecord> op) override;
  void cancel(std::uint64_t id) noexcept override;
  [[nodiscard]] DeviceStats stats() const override;
  void shutdown() noexcept override;

 private:
  // OpServices (actor thread).
  [[nodiscard]] GpuArch arch() const noexcept override { return inc_->arch(); }
  [[nodiscard]] int sm_count() const noexcept override { return inc_->sm_count(); }
  [[nodiscard]] cudaStream_t stream() const noexcept override { return inc_->stream(); }
  [[nodiscard]] cublasHandle_t cublas() const noexcept override { return inc_->blas(); }
  [[nodiscard]] const gpu::MemPool& pool() const noexcept override { return inc_->pool(); }
  [[nodiscard]] bool capturing() const noexcept override { return inc_->capture().capturing(); }
  Result<std::shared_ptr<DeviceAllocation>> allocate_bytes(std::size_t bytes) override;
  void set_capture_listener(CaptureListener listener) override { inc_->capture().set_listener(std::move(listener)); }

  // RecoveryStrategy: reset + canary on a fresh incarnation ([R8]).
  Status recover() override;

  void thread_main(std::promise<Status>& ready);
  Status begin_incarnation();
  /// Waits for requests (or a poisoning report); false when the actor must stop.
  bool next_batch(std::vector<std::shared_ptr<OpRecord>>& batch);
  void process(std::vector<std::shared_ptr<OpRecord>>& batch);
  /// Records pending writes and hands `pending` to the completion poller.
  void flush(std::vector<std::shared_ptr<OpRecord>>& pending);
  /// [R7]: fail everything in flight once, bump the generation, keep the queue, then recover or open.
  void poison(const Error& cause, std::vector<std::shared_ptr<OpRecord>> unsubmitted);
  void open_circuit(const Error& cause);
  void drain_at_shutdown();
  void fail_all(std::vector<std::shared_ptr<OpRecord>> ops, const Error& error);

  const int ordinal_;
  const ActorOptions options_;
  const std::shared_ptr<DeviceState> state_;
  const std::shared_ptr<ReplyCounters> counters_;
  Supervisor supervisor_;
  WriteTracker writes_;

  // Posters push to the mailbox under mutex_ (it orders them with the shutdown and the circuit); the actor
  // takes from it without mutex_, which it locks only to fall asleep or to read a report.
  Mailbox<OpRecord> mailbox_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;               // guarded by mutex_
  bool sleeping_ = false;               // guarded by mutex_
  bool idle_ = false;                   // guarded by mutex_: asleep for want of requests (not of slots on the stream)
  std::optional<Error> poison_report_;  // guarded by mutex_; from the poller
  alignas(kCacheLine) std::atomic<bool> attention_{false};  // stopping_ or poison_report_: the spin checks it
  alignas(kCacheLine) std::atomic<bool> wants_slots_{false};
  std::atomic<std::uint64_t> rejected_full_{0};
  std::atomic<std::uint64_t> dispatch_ns_{0};  // time spent in process()
  std::atomic<std::uint64_t> batches_{0};      // completion markers enqueued

  // Actor thread (stats() reads memory under context_mutex_).
  mutable std::shared_mutex context_mutex_;
  bool context_dead_ = false;
  std::shared_ptr<Incarnation> inc_;
  std::unique_ptr<Completion> completion_;

  std::mutex join_mutex_;
  std::thread thread_;
};

}  // namespace cuactor::runtime::detail
