/// @file
/// The one host copy of an isolated copy ([R10]): between the caller's memory and the shared region,
/// split over a few threads when it is large, so that it runs near memory bandwidth rather than at
/// one core's speed (a single core copies about a third of what the DMA engines move).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>

namespace cuactor::runtime::isolated {

/// Copies `n` bytes from `from` to `to` (no overlap); parts of at least 4 MiB go to up to three helper
/// threads. Never throws: when a helper cannot be started, this thread copies its part.
inline void host_copy(std::byte* to, const std::byte* from, std::size_t n) noexcept {
  if (n == 0) return;  // `to` and `from` may be null then, which memcpy does not allow
  constexpr std::size_t kMinPart = std::size_t{4} << 20;
  const std::size_t parts = std::min<std::size_t>(4, n / kMinPart);
  if (parts <= 1) {
    std::memcpy(to, from, n);
    return;
  }
  const std::size_t part = (n / parts + 63) / 64 * 64;
  std::vector<std::thread> helpers;
  try {
    helpers.reserve(parts - 1);
    for (std::size_t i = 1; i < parts && i * part < n; ++i) {
      const std::size_t offset = i * part;
      const std::size_t bytes = std::min(part, n - offset);
      helpers.emplace_back([=] { std::memcpy(to + offset, from + offset, bytes); });
    }
  } catch (...) {
    // Fewer helpers: the parts they did not take are copied below.
  }
  std::memcpy(to, from, std::min(part, n));
  const std::size_t covered = (helpers.size() + 1) * part;
  if (covered < n) std::memcpy(to + covered, from + covered, n - covered);
  for (auto& t : helpers) t.join();
}

}  // namespace cuactor::runtime::isolated
