/// @file
/// Shared memory for bulk data between a client and its worker ([R10]): an anonymous `memfd`
/// mapped by both processes (nothing in the file system; the descriptor is inherited at spawn), so a
/// copy costs one host memcpy at most on top of the device copy. The worker page-locks its mapping
/// (cudaHostRegister) so device copies from and to it run at pinned-memory speed.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "cuactor/core/expected.hpp"

namespace cuactor::runtime::isolated {

/// A MAP_SHARED mapping of a memfd. Move-only; unmaps and closes on destruction.
class SharedRegion {
 public:
  /// Creates a close-on-exec memfd named `name` (only visible in /proc) of `bytes` bytes and maps it.
  static Result<SharedRegion> create(std::string_view name, std::size_t bytes);
  /// Maps `bytes` bytes of the inherited memfd `fd` (takes ownership of `fd`); fails when the file is
  /// smaller than `bytes`.
  static Result<SharedRegion> map(int fd, std::size_t bytes);

  SharedRegion() = default;
  SharedRegion(SharedRegion&& o) noexcept;
  SharedRegion& operator=(SharedRegion&& o) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion();

  /// Start of the mapping.
  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  /// Size of the mapping in bytes.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// The memfd (to pass to a child); -1 when empty.
  [[nodiscard]] int fd() const noexcept { return fd_; }
  /// The bytes [offset, offset + bytes), or `invalid_argument` naming the range when it does not lie
  /// inside the mapping (overflow-safe).
  Result<std::span<std::byte>> slice(std::size_t offset, std::size_t bytes) const;

 private:
  /// Maps `fd` (owned: closed on failure) and wraps the mapping.
  static Result<SharedRegion> map_owned(int fd, std::size_t bytes);
  void reset() noexcept;

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  int fd_ = -1;
};

}  // namespace cuactor::runtime::isolated
