// Fuzzes the JIT cache's entry decoder (files anyone may have damaged): no crash; a decoded entry
// encodes back to exactly the input bytes; any artifact built from the input round-trips.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include "cuactor/jit/disk_cache.hpp"

using cuactor::jit::Artifact;
using cuactor::jit::ArtifactKind;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  if (auto a = cuactor::jit::decode_entry(bytes)) {
    const auto back = cuactor::jit::encode_entry(*a);
    if (back.size() != size || !std::equal(back.begin(), back.end(), bytes.begin())) std::abort();
  }
  // The valid side, which random bytes never reach through the checksum: encode, then decode.
  if (size == 0) return 0;
  Artifact a;
  a.kind = static_cast<ArtifactKind>(1 + data[0] % 3);
  const std::size_t split = size / 2;
  a.metadata.assign(reinterpret_cast<const char*>(data) + 1, split > 0 ? split - 1 : 0);
  a.payload.assign(bytes.begin() + static_cast<std::ptrdiff_t>(split), bytes.end());
  auto decoded = cuactor::jit::decode_entry(cuactor::jit::encode_entry(a));
  if (!decoded || decoded->kind != a.kind || decoded->metadata != a.metadata || decoded->payload != a.payload)
    std::abort();
  return 0;
}
