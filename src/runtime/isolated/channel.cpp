#include "runtime/isolated/channel.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace cuactor::runtime::isolated {
namespace {

/// Descriptors one header read has room for: a peer sending more is refused either way, but up to
/// here the error can say how many came.
constexpr std::size_t kMaxFdsPerRead = 16;

/// Sends the first bytes of `buffers` with `fd` attached (SCM_RIGHTS) and advances `buffers` past
/// what was sent; the caller writes the rest.
boost::system::error_code send_with_fd(int socket, std::array<boost::asio::const_buffer, 2>& buffers, int fd) {
  std::array<iovec, 2> iov{};
  for (std::size_t i = 0; i < buffers.size(); ++i)
    iov[i] = iovec{const_cast<void*>(buffers[i].data()), buffers[i].size()};
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> control{};
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = iov.size();
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t n = 0;
  while ((n = ::sendmsg(socket, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  if (n < 0) return {errno, boost::system::system_category()};
  auto sent = static_cast<std::size_t>(n);
  for (auto& b : buffers) {
    const std::size_t k = std::min(sent, b.size());
    b += k;
    sent -= k;
  }
  return {};
}

/// What reading one header brought.
struct HeaderRead {
  std::size_t got = 0;             ///< Header bytes read.
  std::string failure;             ///< Why fewer than kHeaderBytes came ("End of file" or the errno text).
  std::vector<UniqueFd> fds;       ///< Every descriptor that came with those bytes.
  bool control_truncated = false;  ///< MSG_CTRUNC: more control data came than fit.
};

/// Reads the `header.size()` bytes of a header with recvmsg, capturing every descriptor that comes
/// with them (close-on-exec).
HeaderRead read_header(int socket, std::span<std::byte, kHeaderBytes> header) {
  HeaderRead r;
  while (r.got < header.size()) {
    iovec iov{header.data() + r.got, header.size() - r.got};
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * kMaxFdsPerRead)> control{};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    const ssize_t n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      r.failure = n == 0 ? "End of file" : std::strerror(errno);
      break;
    }
    r.got += static_cast<std::size_t>(n);
    if ((msg.msg_flags & MSG_CTRUNC) != 0) r.control_truncated = true;
    // AF_UNIX delivers no other kind of control data unless SO_PASSCRED/SO_PASSSEC is set.
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        r.fds.emplace_back(fd);
      }
    }
  }
  return r;
}

}  // namespace

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
  return send_frame(kind, id, payload, -1);
}

Status Channel::send(MsgKind kind, std::uint64_t id, std::span<const std::byte> payload, int fd) {
  // Checked here, not left to sendmsg's EBADF, so that a caller's bad descriptor does not close the
  // channel.
  if (fd < 0 || ::fcntl(fd, F_GETFD) < 0) {
    const char* why = fd < 0 ? "not a descriptor" : std::strerror(errno);
    return fail(errc::invalid_argument, fmt::format("channel: {} #{} cannot carry fd {}: {}",
                                                    kind_name(static_cast<std::uint16_t>(kind)), id, fd, why));
  }
  return send_frame(kind, id, payload, fd);
}

Status Channel::send_frame(MsgKind kind, std::uint64_t id, std::span<const std::byte> payload, int fd) {
  if (payload.size() > std::numeric_limits<std::uint32_t>::max())
    return fail(errc::invalid_argument, fmt::format("channel: {} payload of {} bytes exceeds the 32-bit length field",
                                                    kind_name(static_cast<std::uint16_t>(kind)), payload.size()));
  std::lock_guard lock(send_mutex_);
  if (closed()) {
    if (auto e = error()) return fail(*e);
    return fail(errc::worker_lost, "channel: send on a closed channel");
  }
  const auto header = encode_header(kind, id, static_cast<std::uint32_t>(payload.size()));
  std::array<boost::asio::const_buffer, 2> buffers{boost::asio::buffer(header),
                                                   boost::asio::buffer(payload.data(), payload.size())};
  boost::system::error_code ec;
  if (fd >= 0) ec = send_with_fd(impl_->socket.native_handle(), buffers, fd);
  if (!ec) boost::asio::write(impl_->socket, buffers, ec);
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
  auto arrived = read_header(impl_->socket.native_handle(), header);  // closes its descriptors
  if (arrived.got < kHeaderBytes) {
    if (arrived.got == 0)
      return fail(
          fail_with(Error(errc::worker_lost, fmt::format("channel: closed by the peer ({})", arrived.failure))));
    return fail(fail_with(Error(errc::protocol_error, fmt::format("channel: truncated message: {} of {} header "
                                                                  "bytes before {}",
                                                                  arrived.got, kHeaderBytes, arrived.failure))));
  }
  auto h = decode_header(header, impl_->max_payload);
  if (!h) return fail(fail_with(h.error()));
  if (arrived.fds.size() > 1 || arrived.control_truncated)
    return fail(
        fail_with(Error(errc::protocol_error,
                        fmt::format("channel: {} #{} arrived with {} file descriptors{}; a message carries at most one",
                                    kind_name(static_cast<std::uint16_t>(h->kind)), h->id, arrived.fds.size(),
                                    arrived.control_truncated ? " and truncated control data (MSG_CTRUNC)" : ""))));
  Message m;
  m.kind = h->kind;
  m.id = h->id;
  if (!arrived.fds.empty()) m.fd = std::move(arrived.fds.front());
  m.payload.resize(h->payload_bytes);
  if (h->payload_bytes > 0) {
    boost::system::error_code ec;
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
