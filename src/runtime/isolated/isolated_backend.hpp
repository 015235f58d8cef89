/// @file
/// The isolated backend of a DeviceActor ([R10]): the same requests as the in-process actor, run by a
/// supervised `cuactor-worker` process behind a WorkerLink.
///
/// Contracts:
/// - Every posted request is answered exactly once. Host closures (submit, execute) and launches of a
///   kernel loaded in this process answer `unsupported`; built-in commands become worker messages.
/// - Requests leave for the worker in the order they were posted (one drainer), so the worker's FIFO
///   stream sees them in that order. A request that must wait (no room in the shared region for the
///   next chunk of a copy, a module being loaded into a new worker) holds back the ones behind it.
/// - Copies go through the shared region in chunks of at most a quarter of it: one host memcpy per
///   byte (into the region before a copy to the device, out of it after a copy to the host). Copies
///   from and to a HostBuffer of this actor (a memfd the worker maps and pins) need no host copy: one
///   request, one DMA transfer. A host buffer is registered with each worker at its first use there.
/// - Buffers are DeviceAllocations naming the worker's buffer id and minted at the generation of the
///   worker that allocated them; the last reference frees the buffer in that worker, if it still runs.
///   After a worker loss every old handle answers `stale_handle`.
/// - Worker operations (WorkerOpCmd: GEMM, grouped GEMM, capture) go to the worker's registered handler
///   as they are; their reply bytes are the request's result.
/// - Circuit and breaker: the WorkerLink's (it counts worker losses with ActorOptions::breaker and fires
///   ActorOptions::on_escalation when it trips); stats() reports them as circuit state and poisonings.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuactor/runtime/device_actor.hpp"
#include "runtime/isolated/shm_ring.hpp"
#include "runtime/isolated/worker_link.hpp"
#include "runtime/reply.hpp"

namespace cuactor::runtime::isolated {

class IsolatedBackend final : public detail::ActorBackend, public std::enable_shared_from_this<IsolatedBackend> {
 public:
  /// Starts the worker of device `ordinal` as `options` says (isolation fields included) and waits until
  /// it is ready. `worker_args` replaces the worker's arguments (default: "--device <ordinal>"; tests
  /// pass a stand-in's mode).
  static Result<std::shared_ptr<IsolatedBackend>> start(int ordinal, const ActorOptions& options,
                                                        std::vector<std::string> worker_args = {});
  ~IsolatedBackend() override;

  [[nodiscard]] int device() const noexcept override { return ordinal_; }
  [[nodiscard]] const std::shared_ptr<DeviceState>& state() const noexcept override { return state_; }
  void post(std::shared_ptr<detail::OpRecord> op) override;
  void cancel(std::uint64_t id) noexcept override;
  /// The snapshot; device memory comes from the worker (a round trip of at most a second, skipped on
  /// the runtime's internal threads).
  [[nodiscard]] DeviceStats stats() const override;
  void shutdown() noexcept override;
  [[nodiscard]] bool isolated() const noexcept override { return true; }

  struct Job;
  IsolatedBackend(int ordinal, std::shared_ptr<DeviceState> state, std::size_t queue_capacity);

 private:
  /// A request for the link plus the bytes to stage into the shared region before it is sent.
  struct Send {
    LinkRequest request;
    std::byte* stage_to = nullptr;
    const std::byte* stage_from = nullptr;
    std::size_t stage_bytes = 0;
  };
  /// A host buffer's registration with a worker.
  struct HostRegistration {
    std::uint64_t generation = 0;  ///< Of the worker that mapped it.
    std::uint64_t host = 0;        ///< The worker's id.
    bool registering = false;      ///< A register_host request is on its way.
  };
  /// A module image loaded in a worker.
  struct LoadedModule {
    std::uint64_t generation = 0;  ///< Of the worker that loaded it.
    std::uint64_t module = 0;      ///< The worker's id.
    bool loading = false;          ///< A load_module request is on its way.
  };

  /// Sends what can be sent, in order; one drainer at a time (others ask it to go round again).
  void pump();
  /// Moves the head job on: appends its next requests to `sends`. False while it must wait.
  bool advance(const std::shared_ptr<Job>& job, std::vector<Send>& sends, std::vector<std::shared_ptr<Job>>& done);
  bool advance_launch(const std::shared_ptr<Job>& job, const LaunchModuleCmd& cmd, std::vector<Send>& sends);
  /// The worker's id of `host` once it is registered with the current worker; otherwise sends its
  /// registration (once) and returns nullopt: the job waits, pump() runs again at the reply.
  std::optional<std::uint64_t> registered_host(const HostBuffer& host, std::shared_ptr<const void> owner,
                                               std::vector<Send>& sends);
  /// A copy between a host buffer and a device buffer as one worker request.
  bool advance_host_copy(const std::shared_ptr<Job>& job, const HostBuffer& host, std::shared_ptr<const void> owner,
                         const std::byte* at, const DeviceAllocation& device, std::size_t bytes, bool to_device,
                         std::vector<Send>& sends);
  /// Called when a host buffer dies: releases its mapping in the current worker.
  void release_host(std::uint64_t id) noexcept;
  /// One request of `job` (counted as outstanding); `on_ok` runs outside the lock on success.
  LinkRequest request_for(const std::shared_ptr<Job>& job, MsgKind kind, std::vector<std::byte> payload,
                          std::uint64_t generation,
                          std::function<Status(std::vector<std::byte>&, std::uint64_t)> on_ok = nullptr,
                          std::optional<std::size_t> shm_range = std::nullopt);
  /// Answers `job` (once): its error, or success.
  void answer(const std::shared_ptr<Job>& job);
  /// Validates `op` before it is queued; the error it must be answered with otherwise.
  std::optional<Error> check(const detail::OpRecord& op) const;
  std::shared_ptr<AllocationOwner> owner_for(std::uint64_t generation);

  const int ordinal_;
  const std::shared_ptr<DeviceState> state_;
  const std::shared_ptr<detail::ReplyCounters> counters_ = std::make_shared<detail::ReplyCounters>();
  const std::size_t queue_capacity_;
  std::shared_ptr<WorkerLink> link_;
  std::size_t chunk_ = 0;

  mutable std::mutex mutex_;
  std::deque<std::shared_ptr<Job>> queue_;  // not fully sent yet, in order
  ShmRing ring_{0};
  std::unordered_map<std::uint64_t, LoadedModule> modules_;    // by ModuleImage::id()
  std::unordered_map<std::uint64_t, HostRegistration> hosts_;  // by HostBuffer::id()
  std::shared_ptr<AllocationOwner> owner_;                     // of the current worker generation
  bool draining_ = false;
  bool again_ = false;
  bool stopping_ = false;
};

}  // namespace cuactor::runtime::isolated
