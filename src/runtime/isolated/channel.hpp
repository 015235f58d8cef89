/// @file
/// The private control channel between a client and its worker process ([R10]): one end of a
/// `socketpair(AF_UNIX, SOCK_STREAM)` driven by a Boost.Asio local stream socket, carrying framed
/// messages (protocol.hpp).
///
/// Contracts: send() may be called from any thread (sends are serialised); receive() from one thread
/// at a time; close() from any thread, and it wakes a blocked receive(). The first failure of either
/// direction — peer gone, malformed/truncated/oversized/wrong-version message — closes the channel
/// and every later call returns that same error: `worker_lost` when the peer went away,
/// `protocol_error` when it spoke badly.
///
/// Descriptors: a message may carry one file descriptor (SCM_RIGHTS), attached to the first byte of
/// its header. The sender keeps its own descriptor; the receiver gets a new, close-on-exec one in
/// Message::fd. More than one descriptor with a message, or truncated control data, is
/// `protocol_error`, and every descriptor that did arrive is closed. Only the header is read with
/// control data: the kernel discards a descriptor attached to payload bytes (this sender never
/// attaches one there).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "cuactor/core/expected.hpp"
#include "runtime/isolated/protocol.hpp"

namespace cuactor::runtime::isolated {

/// A connected pair of stream sockets, both close-on-exec (nothing in the file system, no listener).
/// Returns the two file descriptors; the caller owns them.
Result<std::pair<int, int>> make_socket_pair();

/// One end of the channel. Move-only through std::unique_ptr (the socket is not movable while used).
class Channel {
 public:
  /// Takes ownership of the connected stream socket `fd`. `max_payload` bounds received payloads.
  static Result<std::unique_ptr<Channel>> adopt(int fd, std::uint32_t max_payload = kDefaultMaxPayload);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  /// Sends one message (header and payload in one gather write). Fails with the channel's error
  /// once it is closed; a payload above 4 GiB - 1 is `invalid_argument`.
  Status send(MsgKind kind, std::uint64_t id, std::span<const std::byte> payload);
  /// Sends one message with the file descriptor `fd` attached; `fd` stays owned by the caller (the
  /// peer receives its own copy). A negative or closed `fd` is `invalid_argument`, and the channel
  /// stays open.
  Status send(MsgKind kind, std::uint64_t id, std::span<const std::byte> payload, int fd);
  /// Sends `m`, with its descriptor if it holds one (which stays owned by `m`).
  Status send(const Message& m) {
    return m.fd ? send(m.kind, m.id, m.payload, m.fd.get()) : send(m.kind, m.id, m.payload);
  }
  /// Blocks until one whole message arrived and was validated; a descriptor that came with it is in
  /// Message::fd.
  Result<Message> receive();
  /// Closes both directions (wakes a blocked receive() with `worker_lost`); idempotent.
  void close() noexcept;
  /// True once closed (by close() or by an error).
  [[nodiscard]] bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }
  /// The error the channel closed with (nullopt while open or after a plain close()).
  [[nodiscard]] std::optional<Error> error() const;
  /// The socket's file descriptor (for tests and poll()).
  [[nodiscard]] int native_handle() const noexcept;

 private:
  struct Impl;
  explicit Channel(std::unique_ptr<Impl> impl) noexcept;
  /// Sends one message; `fd` travels with its first byte unless it is -1.
  Status send_frame(MsgKind kind, std::uint64_t id, std::span<const std::byte> payload, int fd);
  /// Records `e` as the channel's error (first wins), closes, and returns the recorded error.
  Error fail_with(Error e);

  std::unique_ptr<Impl> impl_;
  std::atomic<bool> closed_{false};
  mutable std::mutex error_mutex_;
  std::optional<Error> error_;
  std::mutex send_mutex_;
};

}  // namespace cuactor::runtime::isolated
