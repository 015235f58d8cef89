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
#include "runtime/isolated/unique_fd.hpp"

namespace cuactor::runtime::isolated {

/// "CUAW": the first four bytes of every message.
inline constexpr std::uint32_t kMagic = 0x57415543u;
/// Version of the wire format; a peer speaking another one is refused.
inline constexpr std::uint16_t kProtocolVersion = 1;
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
  dense_gemm = 23,
  grouped_gemm = 24,
  begin_capture = 25,
  end_capture = 26,
  replay = 27,
  drop_graph = 28,
  stats = 29,
  echo = 30,  ///< Test and health check: the worker replies with the payload unchanged.
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

/// Appends little-endian fields to a byte vector.
class Writer {
 public:
  /// Appends an unsigned integer of 1, 2, 4 or 8 bytes.
  template <class U>
  requires(std::is_unsigned_v<U>) Writer& put(U v) {
    for (std::size_t i = 0; i < sizeof(U); ++i) out_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xffu));
    return *this;
  }
  /// Appends a signed 32-bit integer (two's complement).
  Writer& put_i32(std::int32_t v) { return put(static_cast<std::uint32_t>(v)); }
  /// Appends a signed 64-bit integer (two's complement).
  Writer& put_i64(std::int64_t v) { return put(static_cast<std::uint64_t>(v)); }
  /// Appends an IEEE-754 double by its bit pattern.
  Writer& put_f64(double v);
  /// Appends a boolean as one byte (0 or 1).
  Writer& put_bool(bool v) { return put(static_cast<std::uint8_t>(v ? 1 : 0)); }
  /// Appends a u32 length followed by the bytes.
  Writer& put_bytes(std::span<const std::byte> bytes);
  /// Appends a u32 length followed by the characters.
  Writer& put_string(std::string_view s);
  /// The bytes written so far.
  [[nodiscard]] std::vector<std::byte>& bytes() noexcept { return out_; }
  /// Moves the bytes out.
  std::vector<std::byte> take() noexcept { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

/// Reads little-endian fields from a payload with bounds checks. The first failure is sticky: later
/// reads return zero values and finish() reports the first error, naming `what` and the field.
class Reader {
 public:
  /// Reads `bytes` (not owned); `what` names the message in errors, e.g. "copy_to_device request".
  Reader(std::span<const std::byte> bytes, std::string_view what) noexcept : in_(bytes), what_(what) {}

  /// Reads an unsigned integer; `field` names it in the error when the payload is too short.
  template <class U>
  requires(std::is_unsigned_v<U>) U get(std::string_view field) {
    if (!need(sizeof(U), field)) return 0;
    U v = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i) v |= static_cast<U>(static_cast<U>(in_[pos_ + i]) << (8 * i));
    pos_ += sizeof(U);
    return v;
  }
  /// Reads a signed 32-bit integer.
  std::int32_t get_i32(std::string_view field) { return static_cast<std::int32_t>(get<std::uint32_t>(field)); }
  /// Reads a signed 64-bit integer.
  std::int64_t get_i64(std::string_view field) { return static_cast<std::int64_t>(get<std::uint64_t>(field)); }
  /// Reads a double.
  double get_f64(std::string_view field);
  /// Reads a boolean; a byte other than 0 or 1 is an error.
  bool get_bool(std::string_view field);
  /// Reads a u32 length and that many bytes (a view into the payload).
  std::span<const std::byte> get_bytes(std::string_view field);
  /// Reads a u32 length and that many characters.
  std::string get_string(std::string_view field);
  /// Reads a u32 count that must not exceed `max` (guards later allocations).
  std::uint32_t get_count(std::string_view field, std::uint32_t max);
  /// Records an error found by the caller's own check (first error wins).
  void reject(std::string message);

  /// True while no read failed.
  [[nodiscard]] bool good() const noexcept { return error_.empty(); }
  /// Bytes not read yet.
  [[nodiscard]] std::size_t remaining() const noexcept { return in_.size() - pos_; }
  /// OK if every read succeeded and the payload was consumed entirely; otherwise `protocol_error`.
  Status finish() const;

 private:
  bool need(std::size_t n, std::string_view field);

  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
  std::string_view what_;
  std::string error_;
};

}  // namespace cuactor::runtime::isolated
