#include "runtime/isolated/shm.hpp"

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace cuactor::runtime::isolated {

Result<SharedRegion> SharedRegion::map_owned(int fd, std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return fail(errc::out_of_memory,
                fmt::format("shared memory: mmap of {} bytes failed: {}", bytes, std::strerror(err)));
  }
  SharedRegion r;
  r.data_ = static_cast<std::byte*>(p);
  r.size_ = bytes;
  r.fd_ = fd;
  return r;
}

Result<SharedRegion> SharedRegion::create(std::string_view name, std::size_t bytes) {
  if (bytes == 0) return fail(errc::invalid_argument, "shared memory: size 0 is not allowed");
  const std::string n(name);
  const int fd = ::memfd_create(n.c_str(), MFD_CLOEXEC);
  if (fd < 0) return fail(errc::internal, fmt::format("memfd_create(\"{}\"): {}", n, std::strerror(errno)));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    return fail(errc::out_of_memory,
                fmt::format("shared memory: ftruncate to {} bytes: {}", bytes, std::strerror(err)));
  }
  return map_owned(fd, bytes);
}

Result<SharedRegion> SharedRegion::map(int fd, std::size_t bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return fail(errc::invalid_argument, fmt::format("shared memory: fd {} is not usable: {}", fd, std::strerror(err)));
  }
  if (bytes == 0 || static_cast<std::size_t>(st.st_size) < bytes) {
    ::close(fd);
    return fail(errc::invalid_argument,
                fmt::format("shared memory: fd {} holds {} bytes, fewer than the {} expected (or 0 requested)", fd,
                            st.st_size, bytes));
  }
  return map_owned(fd, bytes);
}

SharedRegion::SharedRegion(SharedRegion&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), fd_(std::exchange(o.fd_, -1)) {}

SharedRegion& SharedRegion::operator=(SharedRegion&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

SharedRegion::~SharedRegion() {
  reset();
}

void SharedRegion::reset() noexcept {
  if (data_) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

Result<std::span<std::byte>> SharedRegion::slice(std::size_t offset, std::size_t bytes) const {
  if (offset > size_ || bytes > size_ - offset)
    return fail(errc::invalid_argument,
                fmt::format("shared memory: range [{}, +{}) lies outside the {}-byte region", offset, bytes, size_));
  return std::span<std::byte>(data_ + offset, bytes);
}

}  // namespace cuactor::runtime::isolated
