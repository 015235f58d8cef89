/// @file
/// The payloads of the isolated worker's messages ([R10]): one plain struct per request kind and per
/// reply, each with an `encode` into a Writer and a `decode` from a payload that checks every field
/// and every count against a bound (`protocol_error` naming the field otherwise). Buffers are named
/// by worker-side ids; bulk bytes travel through the shared region, named by (offset, bytes).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "runtime/isolated/protocol.hpp"

namespace cuactor::runtime::isolated {

/// Most arguments of one kernel launch.
inline constexpr std::uint32_t kMaxLaunchArgs = 1024;
/// Most bytes of one value argument of a launch (CUDA's kernel parameter limit is 32 KiB in all).
inline constexpr std::uint32_t kMaxArgBytes = 32768;

/// Worker -> client, first message: who the worker is.
struct HelloMsg {
  std::int32_t device = -1;       ///< Device ordinal the worker owns.
  std::uint64_t pid = 0;          ///< Worker process id.
  std::uint64_t shm_bytes = 0;    ///< Size of the shared region it mapped.
  bool shm_pinned = false;        ///< True if the region is page-locked (cudaHostRegister).
  std::uint64_t total_bytes = 0;  ///< Device memory.
  void encode(Writer& w) const;
  static Result<HelloMsg> decode(std::span<const std::byte> payload);
};

/// An error as it crosses the channel: the category by a stable id, the value and the message.
/// Categories outside cuactor's arrive as `internal` with the original named in the message.
void encode_error(Writer& w, const Error& e);
/// Reads an error written by encode_error().
Error decode_error(Reader& r);

/// Worker -> client: the answer to request `id` of the header: an error, or the request's result
/// bytes (layout per request kind: see the *Reply structs).
struct ReplyMsg {
  std::optional<Error> error;     ///< Set when the request failed.
  std::vector<std::byte> result;  ///< The encoded result on success.
  void encode(Writer& w) const;
  static Result<ReplyMsg> decode(std::span<const std::byte> payload);
};

/// Worker -> client when its context is poisoned: the cause. The worker answers every in-flight
/// request with it (context_poisoned) and then exits; the client replaces it.
struct PoisonedMsg {
  Error cause;
  void encode(Writer& w) const;
  static Result<PoisonedMsg> decode(std::span<const std::byte> payload);
};

/// allocate: `bytes` of device memory. Reply: BufferReply.
struct AllocateMsg {
  std::uint64_t bytes = 0;
  void encode(Writer& w) const;
  static Result<AllocateMsg> decode(std::span<const std::byte> payload);
};
/// Result of allocate: the worker's id of the new buffer and its size.
struct BufferReply {
  std::uint64_t buffer = 0;
  std::uint64_t bytes = 0;
  void encode(Writer& w) const;
  static Result<BufferReply> decode(std::span<const std::byte> payload);
};

/// free: drops the worker's reference to `buffer` (memory returns in stream order). No reply when
/// sent with request id 0.
struct FreeMsg {
  std::uint64_t buffer = 0;
  void encode(Writer& w) const;
  static Result<FreeMsg> decode(std::span<const std::byte> payload);
};

/// copy_to_device / copy_to_host: `bytes` between buffer `buffer` at `buffer_offset` and the shared
/// region at `shm_offset`. The reply (empty result) comes when the device copy finished, so the
/// region's range may be reused from then on.
struct CopyMsg {
  std::uint64_t buffer = 0;
  std::uint64_t buffer_offset = 0;
  std::uint64_t shm_offset = 0;
  std::uint64_t bytes = 0;
  void encode(Writer& w) const;
  static Result<CopyMsg> decode(std::span<const std::byte> payload);
};

/// fill: `count` elements of `pattern.size()` bytes (1, 2, 4, 8 or 16) starting at `buffer_offset`.
struct FillMsg {
  std::uint64_t buffer = 0;
  std::uint64_t buffer_offset = 0;
  std::uint64_t count = 0;
  std::vector<std::byte> pattern;
  void encode(Writer& w) const;
  static Result<FillMsg> decode(std::span<const std::byte> payload);
};

/// load_module: a cubin, fatbin or PTX image (NUL-terminated text for PTX). Reply: ModuleReply.
struct LoadModuleMsg {
  std::vector<std::byte> image;
  void encode(Writer& w) const;
  static Result<LoadModuleMsg> decode(std::span<const std::byte> payload);
};
/// Result of load_module: the worker's module id.
struct ModuleReply {
  std::uint64_t module = 0;
  void encode(Writer& w) const;
  static Result<ModuleReply> decode(std::span<const std::byte> payload);
};

/// One argument of a launch.
struct LaunchArg {
  enum class Kind : std::uint8_t { value = 0, buffer_rw = 1, buffer_ro = 2 };
  Kind kind = Kind::value;
  std::vector<std::byte> value;     ///< Bytes of a value argument.
  std::uint64_t buffer = 0;         ///< Buffer id of a buffer argument (passed as its device address).
  std::uint64_t buffer_offset = 0;  ///< Byte offset added to that address.
};

/// launch: kernel `kernel` of module `module` with grid, block, dynamic shared memory and arguments.
struct LaunchMsg {
  std::uint64_t module = 0;
  std::string kernel;
  std::array<std::uint32_t, 3> grid{1, 1, 1};
  std::array<std::uint32_t, 3> block{1, 1, 1};
  std::uint32_t shared_bytes = 0;
  std::vector<LaunchArg> args;
  void encode(Writer& w) const;
  static Result<LaunchMsg> decode(std::span<const std::byte> payload);
};

/// register_host: `bytes` of the memfd attached to the message, for the worker to map and page-lock.
/// Reply: HostReply. unregister_host (request id 0, no reply) names the host id in `host`.
struct RegisterHostMsg {
  std::uint64_t bytes = 0;
  std::uint64_t host = 0;  ///< unregister_host: the id to release.
  void encode(Writer& w) const;
  static Result<RegisterHostMsg> decode(std::span<const std::byte> payload);
};
/// Result of register_host: the worker's id of the mapping.
struct HostReply {
  std::uint64_t host = 0;
  void encode(Writer& w) const;
  static Result<HostReply> decode(std::span<const std::byte> payload);
};
/// copy_host_to_device / copy_device_to_host: `bytes` between buffer `buffer` at `buffer_offset` and
/// registered host buffer `host` at `host_offset`, as one DMA transfer.
struct CopyHostMsg {
  std::uint64_t buffer = 0;
  std::uint64_t buffer_offset = 0;
  std::uint64_t host = 0;
  std::uint64_t host_offset = 0;
  std::uint64_t bytes = 0;
  void encode(Writer& w) const;
  static Result<CopyHostMsg> decode(std::span<const std::byte> payload);
};

/// Most buffer operands of one worker operation.
inline constexpr std::uint32_t kMaxWorkerOpBuffers = 64;

/// worker_op: a request for the handler registered as `op` in the worker (runtime/worker_op.hpp),
/// with its encoded arguments and its buffer operands (worker ids; `written` ones are write-tracked).
/// Reply: the handler's bytes.
struct WorkerOpMsg {
  struct Buffer {
    std::uint64_t buffer = 0;
    bool written = false;
  };
  std::uint16_t op = 0;
  std::vector<std::byte> payload;
  std::vector<Buffer> buffers;
  void encode(Writer& w) const;
  static Result<WorkerOpMsg> decode(std::span<const std::byte> payload);
};

/// Result of stats.
struct StatsReply {
  std::uint64_t free_bytes = 0;
  std::uint64_t total_bytes = 0;
  std::uint64_t buffers = 0;       ///< Live buffers in the worker's table.
  std::uint64_t buffer_bytes = 0;  ///< Their bytes.
  std::uint64_t modules = 0;
  std::uint64_t graphs = 0;
  std::uint64_t host_buffers = 0;  ///< Registered host buffers.
  std::uint64_t in_flight = 0;
  std::uint64_t completed = 0;
  std::uint64_t failed = 0;
  void encode(Writer& w) const;
  static Result<StatsReply> decode(std::span<const std::byte> payload);
};

/// Encodes any message struct into a fresh payload.
template <class M>
std::vector<std::byte> encode_payload(const M& m) {
  Writer w;
  m.encode(w);
  return w.take();
}

}  // namespace cuactor::runtime::isolated
