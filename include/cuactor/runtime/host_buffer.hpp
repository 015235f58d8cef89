/// @file
/// Page-locked host memory that an actor's copies use without staging ([R5], [R10]): in-process a
/// pinned allocation (cudaMallocHost); on an isolated device a shared-memory mapping (memfd) that the
/// worker maps too and page-locks, so a copy from or to it is one DMA transfer with no host copy on
/// either side. Allocate one with DeviceActor::allocate_host(); fill or read it through data().
///
/// Contract: the buffer must not change while a copy from it is in flight, nor be read while a copy
/// into it is (the copy's reply says when). It outlives its worker: after a worker loss the next copy
/// registers it with the new worker.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>

namespace cuactor::runtime {

/// Page-locked host memory for copies on one actor (see the file comment).
class HostBuffer {
 public:
  /// `bytes` bytes at `data`, owned by `storage`; `shared_fd` is the memfd behind it on an isolated
  /// device (-1 in-process). `on_destroy(id())` runs when the buffer dies (an isolated backend
  /// releases the worker's mapping there).
  HostBuffer(std::shared_ptr<void> storage, std::byte* data, std::size_t bytes, int shared_fd = -1,
             std::function<void(std::uint64_t)> on_destroy = nullptr)
      : storage_(std::move(storage)),
        data_(data),
        bytes_(bytes),
        shared_fd_(shared_fd),
        on_destroy_(std::move(on_destroy)),
        id_(next_id()) {}
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() {
    if (on_destroy_) on_destroy_(id_);
  }

  /// Start of the memory.
  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  /// Size in bytes.
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  /// The memory as elements of T (size() / sizeof(T) of them).
  template <class T>
  [[nodiscard]] std::span<T> as() const noexcept {
    return {reinterpret_cast<T*>(data_), bytes_ / sizeof(T)};
  }
  /// The memfd an isolated worker maps (-1 in-process).
  [[nodiscard]] int shared_fd() const noexcept { return shared_fd_; }
  /// Process-unique id (isolated backends key their worker registrations by it).
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }

 private:
  static std::uint64_t next_id() noexcept {
    static std::atomic<std::uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }

  std::shared_ptr<void> storage_;
  std::byte* data_;
  std::size_t bytes_;
  int shared_fd_;
  std::function<void(std::uint64_t)> on_destroy_;
  std::uint64_t id_;
};

}  // namespace cuactor::runtime
