#include "runtime/isolated/channel.hpp"

#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <limits>

namespace cuactor::runtime::isolated {

// Only synchronous socket operations are used: a send on one thread and a receive on another are then
// plain send/recv system calls on the descriptor, with no shared reactor state between them.
struct Channel::Impl {
  boost::asio::io_context io;
  boost::asio::local::stream_protocol::socket socket{io};
  std::uint32_t max_payload = kDefaultMaxPayload;
};

Result<std::pair<int, int>> make_socket_pair() {
  int fds[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return fail(errc::internal, fmt::format("socketpair(AF_UNIX, SOCK_STREAM): {}", std::strerror(errno)));
  return std::pair{fds[0], fds[1]};
}

Result<std::unique_ptr<Channel>> Channel::adopt(int fd, std::uint32_t max_payload) {
  auto impl = std::make_unique<Impl>();
  impl->max_payload = max_payload;
  boost::system::error_code ec;
  impl->socket.assign(boost::asio::local::stream_protocol(), fd, ec);
  if (ec) {
    ::close(fd);
    return fail(errc::invalid_argument, fmt::format("channel: cannot adopt fd {}: {}", fd, ec.message()));
  }
  return std::unique_ptr<Channel>(new Channel(std::move(impl)));
}

Channel::Channel(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}

Channel::~Channel() {
  close();
  boost::system::error_code ignored;
  impl_->socket.close(ignored);
}

int Channel::native_handle() const noexcept {
  return impl_->socket.native_handle();
}

std::optional<Error> Channel::error() const {
  std::lock_guard lock(error_mutex_);
  return error_;
}

Error Channel::fail_with(Error e) {
  {
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = std::move(e);
    e = *error_;
  }
  close();
  return e;
}

void Channel::close() noexcept {
  if (closed_.exchange(true, std::memory_order_acq_rel)) return;
  // shutdown() (not close()) wakes a receive() blocked in recv() without freeing the descriptor
  // number while that call may still use it; the destructor closes it.
  ::shutdown(impl_->socket.native_handle(), SHUT_RDWR);
}

Status Channel::send(MsgKind kind, std::uint64_t id, std::span<const std::byte> payload) {
  if (payload.size() > std::numeric_limits<std::uint32_t>::max())
    return fail(errc::invalid_argument, fmt::format("channel: {} payload of {} bytes exceeds the 32-bit length field",
                                                    kind_name(static_cast<std::uint16_t>(kind)), payload.size()));
  std::lock_guard lock(send_mutex_);
  if (closed()) {
    if (auto e = error()) return fail(*e);
    return fail(errc::worker_lost, "channel: send on a closed channel");
  }
  const auto header = encode_header(kind, id, static_cast<std::uint32_t>(payload.size()));
  const std::array<boost::asio::const_buffer, 2> buffers{boost::asio::buffer(header),
                                                         boost::asio::buffer(payload.data(), payload.size())};
  boost::system::error_code ec;
  boost::asio::write(impl_->socket, buffers, ec);
  if (ec)
    return fail(fail_with(
        Error(errc::worker_lost, fmt::format("channel: sending {} #{} failed: {}",
                                             kind_name(static_cast<std::uint16_t>(kind)), id, ec.message()))));
  return ok();
}

Result<Message> Channel::receive() {
  if (closed()) {
    if (auto e = error()) return fail(*e);
    return fail(errc::worker_lost, "channel: receive on a closed channel");
  }
  std::array<std::byte, kHeaderBytes> header{};
  boost::system::error_code ec;
  const std::size_t got = boost::asio::read(impl_->socket, boost::asio::buffer(header), ec);
  if (ec) {
    if (got == 0)
      return fail(fail_with(Error(errc::worker_lost, fmt::format("channel: closed by the peer ({})", ec.message()))));
    return fail(fail_with(Error(errc::protocol_error, fmt::format("channel: truncated message: {} of {} header "
                                                                  "bytes before {}",
                                                                  got, kHeaderBytes, ec.message()))));
  }
  auto h = decode_header(header, impl_->max_payload);
  if (!h) return fail(fail_with(h.error()));
  Message m;
  m.kind = h->kind;
  m.id = h->id;
  m.payload.resize(h->payload_bytes);
  if (h->payload_bytes > 0) {
    const std::size_t body = boost::asio::read(impl_->socket, boost::asio::buffer(m.payload), ec);
    if (ec)
      return fail(fail_with(Error(
          errc::protocol_error,
          fmt::format("channel: truncated {} #{}: {} of {} payload bytes before {}",
                      kind_name(static_cast<std::uint16_t>(m.kind)), m.id, body, h->payload_bytes, ec.message()))));
  }
  return m;
}

}  // namespace cuactor::runtime::isolated
