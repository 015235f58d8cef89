/// @file
/// UniqueFd: the one owner of a POSIX file descriptor, closed when the owner goes away.
///
/// Contract: move-only; not thread-safe (one owner at a time). -1 means "no descriptor".
#pragma once

#include <unistd.h>

#include <utility>

namespace cuactor::runtime::isolated {

/// Owns one file descriptor (or none) and closes it on destruction.
class UniqueFd {
 public:
  /// Owns no descriptor.
  UniqueFd() noexcept = default;
  /// Takes ownership of `fd` (-1 for none).
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  /// Takes the descriptor of `other`, which is left empty.
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  /// Closes the descriptor held, then takes the one of `other`, which is left empty.
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  /// Closes the descriptor held.
  ~UniqueFd() { reset(); }

  /// The descriptor, still owned (-1 if none).
  [[nodiscard]] int get() const noexcept { return fd_; }
  /// Gives up ownership and returns the descriptor (-1 if none); the caller closes it.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }
  /// Closes the descriptor held and takes ownership of `fd` (-1 for none).
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  /// True if a descriptor is held.
  explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace cuactor::runtime::isolated
