#include "runtime/isolated/protocol.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstring>

namespace cuactor::runtime::isolated {
namespace {

std::uint64_t load_le(std::span<const std::byte> b, std::size_t offset, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(b[offset + i]) << (8 * i);
  return v;
}

void store_le(std::span<std::byte> b, std::size_t offset, std::size_t n, std::uint64_t v) noexcept {
  for (std::size_t i = 0; i < n; ++i) b[offset + i] = static_cast<std::byte>((v >> (8 * i)) & 0xffu);
}

}  // namespace

std::string kind_name(std::uint16_t kind) {
  switch (static_cast<MsgKind>(kind)) {
    case MsgKind::hello:
      return "hello";
    case MsgKind::reply:
      return "reply";
    case MsgKind::poisoned:
      return "poisoned";
    case MsgKind::shutdown:
      return "shutdown";
    case MsgKind::allocate:
      return "allocate";
    case MsgKind::free:
      return "free";
    case MsgKind::copy_to_device:
      return "copy_to_device";
    case MsgKind::copy_to_host:
      return "copy_to_host";
    case MsgKind::fill:
      return "fill";
    case MsgKind::load_module:
      return "load_module";
    case MsgKind::launch:
      return "launch";
    case MsgKind::dense_gemm:
      return "dense_gemm";
    case MsgKind::grouped_gemm:
      return "grouped_gemm";
    case MsgKind::begin_capture:
      return "begin_capture";
    case MsgKind::end_capture:
      return "end_capture";
    case MsgKind::replay:
      return "replay";
    case MsgKind::drop_graph:
      return "drop_graph";
    case MsgKind::stats:
      return "stats";
    case MsgKind::echo:
      return "echo";
  }
  return fmt::format("kind {}", kind);
}

bool is_known_kind(std::uint16_t kind) noexcept {
  return kind_name(kind).rfind("kind ", 0) != 0;
}

std::array<std::byte, kHeaderBytes> encode_header(MsgKind kind, std::uint64_t id,
                                                  std::uint32_t payload_bytes) noexcept {
  std::array<std::byte, kHeaderBytes> h{};
  store_le(h, 0, 4, kMagic);
  store_le(h, 4, 2, kProtocolVersion);
  store_le(h, 6, 2, static_cast<std::uint16_t>(kind));
  store_le(h, 8, 8, id);
  store_le(h, 16, 4, payload_bytes);
  store_le(h, 20, 4, 0);
  return h;
}

Result<Header> decode_header(std::span<const std::byte, kHeaderBytes> bytes, std::uint32_t max_payload) {
  const auto magic = static_cast<std::uint32_t>(load_le(bytes, 0, 4));
  if (magic != kMagic)
    return fail(errc::protocol_error,
                fmt::format("message header: magic 0x{:08x} is not 0x{:08x} (\"CUAW\")", magic, kMagic));
  const auto version = static_cast<std::uint16_t>(load_le(bytes, 4, 2));
  if (version != kProtocolVersion)
    return fail(errc::protocol_error, fmt::format("message header: protocol version {} is not the supported version {}",
                                                  version, kProtocolVersion));
  const auto kind = static_cast<std::uint16_t>(load_le(bytes, 6, 2));
  if (!is_known_kind(kind))
    return fail(errc::protocol_error, fmt::format("message header: kind {} is not a known message kind", kind));
  const auto reserved = static_cast<std::uint32_t>(load_le(bytes, 20, 4));
  if (reserved != 0)
    return fail(errc::protocol_error, fmt::format("message header: reserved field 0x{:x} is not 0", reserved));
  Header h;
  h.kind = static_cast<MsgKind>(kind);
  h.id = load_le(bytes, 8, 8);
  h.payload_bytes = static_cast<std::uint32_t>(load_le(bytes, 16, 4));
  if (h.payload_bytes > max_payload)
    return fail(errc::protocol_error,
                fmt::format("message header: {} payload of {} bytes exceeds the limit of {} bytes", kind_name(kind),
                            h.payload_bytes, max_payload));
  return h;
}

Writer& Writer::put_f64(double v) {
  return put(std::bit_cast<std::uint64_t>(v));
}

Writer& Writer::put_bytes(std::span<const std::byte> bytes) {
  put(static_cast<std::uint32_t>(bytes.size()));
  out_.insert(out_.end(), bytes.begin(), bytes.end());
  return *this;
}

Writer& Writer::put_string(std::string_view s) {
  return put_bytes(std::as_bytes(std::span<const char>(s.data(), s.size())));
}

bool Reader::need(std::size_t n, std::string_view field) {
  if (!good()) return false;
  if (remaining() >= n) return true;
  reject(
      fmt::format("{}: field '{}' needs {} bytes at offset {} but only {} remain", what_, field, n, pos_, remaining()));
  return false;
}

double Reader::get_f64(std::string_view field) {
  return std::bit_cast<double>(get<std::uint64_t>(field));
}

bool Reader::get_bool(std::string_view field) {
  const auto v = get<std::uint8_t>(field);
  if (v > 1) reject(fmt::format("{}: field '{}' is {}, not a boolean (0 or 1)", what_, field, v));
  return v == 1;
}

std::span<const std::byte> Reader::get_bytes(std::string_view field) {
  const auto n = get<std::uint32_t>(field);
  if (!need(n, field)) return {};
  auto s = in_.subspan(pos_, n);
  pos_ += n;
  return s;
}

std::string Reader::get_string(std::string_view field) {
  auto b = get_bytes(field);
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

std::uint32_t Reader::get_count(std::string_view field, std::uint32_t max) {
  const auto n = get<std::uint32_t>(field);
  if (n > max) {
    reject(fmt::format("{}: field '{}' is {}, more than the limit {}", what_, field, n, max));
    return 0;
  }
  return n;
}

void Reader::reject(std::string message) {
  if (good()) error_ = std::move(message);
}

Status Reader::finish() const {
  if (!good()) return fail(errc::protocol_error, error_);
  if (remaining() != 0)
    return fail(errc::protocol_error,
                fmt::format("{}: {} unexpected bytes after the last field at offset {}", what_, remaining(), pos_));
  return ok();
}

}  // namespace cuactor::runtime::isolated
