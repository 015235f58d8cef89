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
    case MsgKind::stats:
      return "stats";
    case MsgKind::echo:
      return "echo";
    case MsgKind::worker_op:
      return "worker_op";
    case MsgKind::register_host:
      return "register_host";
    case MsgKind::copy_host_to_device:
      return "copy_host_to_device";
    case MsgKind::copy_device_to_host:
      return "copy_device_to_host";
    case MsgKind::unregister_host:
      return "unregister_host";
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

}  // namespace cuactor::runtime::isolated
