/// @file
/// Wire format of the isolated worker's channel ([R10]): a fixed 24-byte little-endian header
/// followed by a bounded payload, and a bounds-checked little-endian writer/reader for payloads.
///
///     offset  size  field
///     0       4     magic 0x57415543 ("CUAW" read as bytes C U A W in memory order)
///     4       2     version (kProtocolVersion)
///     6       2     kind (MsgKind)
///     8       8     request id (0 for messages that answer nothing)
///     16      4     payload length in bytes (<= the receiver's limit)
///     20      4     reserved, must be 0
///
/// Contract: decoding never reads outside the bytes it was given and never allocates more than the
/// receiver's limit; every violation is an `errc::protocol_error` naming the field and its value.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "cuactor/runtime/wire.hpp"
#include "runtime/isolated/unique_fd.hpp"

namespace cuactor::runtime::isolated {

/// "CUAW": the first four bytes of every message.
inline constexpr std::uint32_t kMagic = 0x57415543u;
/// Version of the wire format; a peer speaking another one is refused.
inline constexpr std::uint16_t kProtocolVersion = 2;
/// Bytes of the fixed header.
inline constexpr std::size_t kHeaderBytes = 24;
/// Default bound of one payload (module images are the largest control payloads; bulk data goes
/// through shared memory).
inline constexpr std::uint32_t kDefaultMaxPayload = 64u << 20;

/// Kind of a message. Values are part of the wire format: append, never renumber.
enum class MsgKind : std::uint16_t {
  hello = 1,      ///< Worker -> client after start: device ordinal, pid, capabilities.
  reply = 2,      ///< Worker -> client: the answer to request `id` (status + payload).
  poisoned = 3,   ///< Worker -> client: the context is poisoned; the worker stops taking work.
  shutdown = 4,   ///< Client -> worker: finish in-flight work and exit.
  allocate = 16,  ///< Client -> worker requests from here on.
  free = 17,
  copy_to_device = 18,
  copy_to_host = 19,
  fill = 20,
  load_module = 21,
  launch = 22,
  // 23-28 were reserved for GEMM and capture in version 1 and never used: those travel as worker_op.
  stats = 29,
  echo = 30,                 ///< Test and health check: the worker replies with the payload unchanged.
  worker_op = 31,            ///< A request for a handler registered in the worker (runtime/worker_op.hpp).
  register_host = 32,        ///< A host buffer's memfd (attached descriptor) for the worker to map and pin.
  copy_host_to_device = 33,  ///< A copy from a registered host buffer, no staging.
  copy_device_to_host = 34,  ///< A copy into a registered host buffer, no staging.
  unregister_host = 35,      ///< Release a registered host buffer (no reply).
};
/// Name of a kind for messages, e.g. "copy_to_device"; "kind 999" for unknown values.
std::string kind_name(std::uint16_t kind);
/// True if `kind` is a value of MsgKind.
bool is_known_kind(std::uint16_t kind) noexcept;

/// A decoded header.
struct Header {
  MsgKind kind = MsgKind::echo;
  std::uint64_t id = 0;
  std::uint32_t payload_bytes = 0;
};

/// One message: header fields, payload bytes, and the descriptor that came with it. Move-only.
struct Message {
  MsgKind kind = MsgKind::echo;
  std::uint64_t id = 0;
  std::vector<std::byte> payload;
  /// The file descriptor that travelled with the message (SCM_RIGHTS); empty for ordinary messages.
  UniqueFd fd;
};

/// Encodes the header of a message with `payload_bytes` bytes of payload.
std::array<std::byte, kHeaderBytes> encode_header(MsgKind kind, std::uint64_t id, std::uint32_t payload_bytes) noexcept;
/// Decodes and validates a header (magic, version, known kind, reserved = 0, payload length within
/// `max_payload`).
Result<Header> decode_header(std::span<const std::byte, kHeaderBytes> bytes, std::uint32_t max_payload);

/// The payload codec (cuactor/runtime/wire.hpp) under the names the channel's code uses.
using wire::Reader;
using wire::Writer;

}  // namespace cuactor::runtime::isolated
