/// @file
/// The little-endian, bounds-checked payload codec of isolated mode ([R10]): the channel's own
/// messages and the payloads of worker operations (runtime/worker_op.hpp) that layers above the
/// runtime (GEMM, grouped GEMM, capture) send to an isolated worker.
///
/// Contract: a Reader never reads outside the bytes it was given; the first failure is sticky and
/// finish() reports it as `protocol_error` naming the message and the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cuactor/core/expected.hpp"

namespace cuactor::runtime::wire {

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
  /// Reads a string token and returns `parse(token)` (an optional); a token `parse` does not know is
  /// an error naming `field` and the token.
  template <class Parse>
  auto get_parsed(std::string_view field, Parse parse) -> decltype(parse(std::string_view{})) {
    const std::string token = get_string(field);
    auto value = parse(token);
    if (good() && !value)
      reject(std::string(what_) + ": field '" + std::string(field) + "' is '" + token + "', not a known value");
    return value;
  }
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

}  // namespace cuactor::runtime::wire
