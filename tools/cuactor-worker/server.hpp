/// @file
/// The worker side of isolated mode ([R10]): decodes requests from the channel and executes them on
/// an ordinary in-process DeviceActor that owns the device; buffers and modules live in tables keyed
/// by the ids the client holds. Replies go back on the channel from whichever thread completes them.
///
/// A poisoned context is not recovered here: the actor runs with in-process recovery off, its
/// escalation sends `poisoned` and the process exits; the client fails what was in flight and starts a
/// fresh worker ([R8]). Replies that would only say "poisoned" or "circuit open" are not sent, so each
/// such request fails exactly once, on the client, with `context_poisoned`.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>

#include "cuactor/gpu/module.hpp"
#include "cuactor/graph/actor_capture.hpp"
#include "cuactor/runtime/device_actor.hpp"
#include "cuactor/runtime/worker_op.hpp"
#include "runtime/isolated/channel.hpp"
#include "runtime/isolated/messages.hpp"
#include "runtime/isolated/shm.hpp"

namespace cuactor::worker {

/// Executes the requests of one client on one device.
class Server {
 public:
  /// Serves `channel` with `actor`; `shm` is the (page-locked) shared region for bulk data.
  Server(runtime::DeviceActor& actor, runtime::isolated::Channel& channel, const runtime::isolated::SharedRegion& shm);

  /// Registers the handler of worker operation `op` (runtime/worker_op.hpp); call before run().
  void add_handler(std::uint16_t op, runtime::WorkerOpHandler handler);

  /// Receives and dispatches until the channel closes or a shutdown request arrives; returns the
  /// process exit status (0: clean, 3: protocol error from the client).
  int run();

 private:
  using Bytes = std::vector<std::byte>;
  void dispatch(runtime::isolated::Message& m);
  void reply(std::uint64_t id, Result<Bytes> outcome);
  /// The buffer `id` and the byte range [offset, offset + bytes) inside it, checked.
  Result<runtime::GpuRef<std::byte>> buffer(std::uint64_t id, std::uint64_t offset, std::uint64_t bytes,
                                            std::string_view what) const;

  void allocate(std::uint64_t id, const runtime::isolated::AllocateMsg& m);
  void copy(std::uint64_t id, const runtime::isolated::CopyMsg& m, bool to_device);
  void fill(std::uint64_t id, const runtime::isolated::FillMsg& m);
  void load_module(std::uint64_t id, runtime::isolated::LoadModuleMsg& m);
  void launch(std::uint64_t id, const runtime::isolated::LaunchMsg& m);
  void register_host(std::uint64_t id, const runtime::isolated::RegisterHostMsg& m, runtime::isolated::UniqueFd fd);
  void copy_host(std::uint64_t id, const runtime::isolated::CopyHostMsg& m, bool to_device);
  /// Copies between `host` and buffer `ref` at `offset` on the actor's stream and replies; `keep`
  /// (may be null) lives until the copy completed.
  void enqueue_copy(std::uint64_t id, runtime::GpuRef<std::byte> ref, std::uint64_t offset, std::span<std::byte> host,
                    std::shared_ptr<const void> keep, bool to_device);
  void worker_op(std::uint64_t id, runtime::isolated::WorkerOpMsg& m);
  /// Capture and replay of graphs held here (the graph layer's worker operations).
  void graph_op(std::uint64_t id, const runtime::isolated::WorkerOpMsg& m);
  void stats(std::uint64_t id);
  void send_stats(std::uint64_t id);

  runtime::DeviceActor& actor_;
  runtime::isolated::Channel& channel_;
  const runtime::isolated::SharedRegion& shm_;
  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, runtime::GpuRef<std::byte>> buffers_;
  std::unordered_map<std::uint64_t, std::shared_ptr<const gpu::Library>> modules_;
  std::unordered_map<std::uint16_t, runtime::WorkerOpHandler> handlers_;
  /// A client's host buffer mapped here and page-locked; unpinned and unmapped when the last copy
  /// that uses it is done.
  struct HostMapping;
  std::unordered_map<std::uint64_t, std::shared_ptr<HostMapping>> hosts_;
  std::unordered_map<std::uint64_t, std::shared_ptr<graph::CapturedGraph>> graphs_;
  std::optional<graph::ActorCapture> capture_;  ///< The capture in progress (dispatch thread only).
  std::uint64_t next_id_ = 1;
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::uint64_t> failed_{0};
};

}  // namespace cuactor::worker
