#include "cuactor/jit/hash.hpp"

#include <fmt/format.h>

#include <cstring>

namespace cuactor::jit {
namespace {

constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;
// A second odd multiplier so that the two lanes are independent.
constexpr std::uint64_t kSecondPrime = 0x9e3779b97f4a7c15ULL;

// splitmix64's finaliser: spreads every input bit over the whole word.
constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

std::string Digest::hex() const {
  return fmt::format("{:016x}{:016x}", words[0], words[1]);
}

Hasher& Hasher::bytes(std::span<const std::byte> data) noexcept {
  const std::byte* p = data.data();
  std::size_t n = data.size();
  // Eight bytes per step (plan-cache keys hash whole sources on every request); the xor-shifts
  // carry high bits down, which the multiplications alone never do.
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    a_ = (a_ ^ w) * kFnvPrime;
    a_ ^= a_ >> 29;
    b_ = (b_ ^ w) * kSecondPrime + 1;
    b_ ^= b_ >> 31;
  }
  for (; n > 0; ++p, --n) {
    const auto v = static_cast<std::uint64_t>(*p);
    a_ = (a_ ^ v) * kFnvPrime;
    b_ = (b_ ^ v) * kSecondPrime + 1;
  }
  length_ += data.size();
  return *this;
}

Hasher& Hasher::text(std::string_view s) noexcept {
  return bytes(std::as_bytes(std::span(s.data(), s.size())));
}

Hasher& Hasher::u64(std::uint64_t v) noexcept {
  std::byte b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
  return bytes(b);
}

Hasher& Hasher::field(std::string_view name, std::string_view value) noexcept {
  u64(name.size());
  text(name);
  u64(value.size());
  return text(value);
}

Digest Hasher::digest() const noexcept {
  const std::uint64_t a = mix(a_ ^ length_);
  const std::uint64_t b = mix(b_ + a);
  return Digest{{a, mix(b ^ (length_ * kFnvPrime))}};
}

Digest digest_of(std::span<const std::byte> data) noexcept {
  return Hasher().bytes(data).digest();
}

}  // namespace cuactor::jit
