// Fuzzes the isolated worker channel's parsers of outside bytes (issue 10, issue 16 item 5): the
// 24-byte frame header and every message payload, as either side of the channel would decode them.
// Bad bytes must give typed errors; nothing may crash, overrun or allocate without bound.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "runtime/isolated/messages.hpp"
#include "runtime/isolated/protocol.hpp"

namespace iso = cuactor::runtime::isolated;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  if (bytes.size() >= iso::kHeaderBytes) {
    std::array<std::byte, iso::kHeaderBytes> header{};
    std::memcpy(header.data(), bytes.data(), header.size());
    (void)iso::decode_header(header, iso::kDefaultMaxPayload);
    (void)iso::decode_header(header, 1024);
  }
  (void)iso::HelloMsg::decode(bytes);
  (void)iso::ReplyMsg::decode(bytes);
  (void)iso::PoisonedMsg::decode(bytes);
  (void)iso::AllocateMsg::decode(bytes);
  (void)iso::BufferReply::decode(bytes);
  (void)iso::FreeMsg::decode(bytes);
  (void)iso::CopyMsg::decode(bytes);
  (void)iso::FillMsg::decode(bytes);
  (void)iso::LoadModuleMsg::decode(bytes);
  (void)iso::ModuleReply::decode(bytes);
  (void)iso::LaunchMsg::decode(bytes);
  (void)iso::WorkerOpMsg::decode(bytes);
  (void)iso::RegisterHostMsg::decode(bytes);
  (void)iso::HostReply::decode(bytes);
  (void)iso::CopyHostMsg::decode(bytes);
  (void)iso::StatsReply::decode(bytes);
  return 0;
}
