/// @file
/// 128-bit content digests for JIT cache keys and cache-entry checksums.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cuactor/core/cxx20.hpp"

namespace cuactor::jit {

/// A 128-bit digest; its hex form names disk-cache entries.
struct Digest {
  std::array<std::uint64_t, 2> words{};

  /// 32 lower-case hex digits.
  [[nodiscard]] std::string hex() const;
  friend bool operator==(const Digest&, const Digest&) = default;
};

/// Incremental 128-bit hash (two independent FNV-1a lanes with a final avalanche). Not
/// cryptographic: it guards against accidental collisions and corruption, not against attackers.
class Hasher {
 public:
  /// Feeds raw bytes.
  Hasher& bytes(std::span<const std::byte> data) noexcept;
  /// Feeds a string's bytes.
  Hasher& text(std::string_view s) noexcept;
  /// Feeds a named field as (name length, name, value length, value) so that no two different
  /// field sequences produce the same byte stream.
  Hasher& field(std::string_view name, std::string_view value) noexcept;
  /// The digest of everything fed so far (the hasher stays usable).
  [[nodiscard]] Digest digest() const noexcept;

 private:
  Hasher& u64(std::uint64_t v) noexcept;
  std::uint64_t a_ = 0xcbf29ce484222325ULL;
  std::uint64_t b_ = 0x84222325cbf29ce4ULL;
  std::uint64_t length_ = 0;
};

/// Digest of one byte range.
Digest digest_of(std::span<const std::byte> data) noexcept;

}  // namespace cuactor::jit

/// Hash support so that Digest can key unordered containers.
template <>
struct std::hash<cuactor::jit::Digest> {
  std::size_t operator()(const cuactor::jit::Digest& d) const noexcept {
    return static_cast<std::size_t>(d.words[0] ^ (d.words[1] * 0x9e3779b97f4a7c15ULL));
  }
};
