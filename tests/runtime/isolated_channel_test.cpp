/// @file
/// Unit tests (no GPU) of the isolated worker's transport ([R10]): wire format, channel, shared
/// memory and process supervision, against the CPU-only isolated_peer.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "runtime/isolated/channel.hpp"
#include "runtime/isolated/protocol.hpp"
#include "runtime/isolated/shm.hpp"
#include "runtime/isolated/spawn.hpp"
#include "runtime/isolated/unique_fd.hpp"

namespace cuactor::runtime::isolated {
namespace {

using namespace std::chrono_literals;

std::vector<std::byte> bytes_of(std::string_view s) {
  auto b = std::as_bytes(std::span<const char>(s.data(), s.size()));
  return {b.begin(), b.end()};
}

// ---- wire format -------------------------------------------------------------------------------

TEST(IsolatedProtocol, HeaderRoundTrips) {
  const auto h = encode_header(MsgKind::copy_to_device, 0x0102030405060708ull, 4096);
  EXPECT_EQ(h[0], std::byte{'C'});  // little endian magic reads "CUAW" in memory order
  EXPECT_EQ(h[3], std::byte{'W'});
  auto d = decode_header(h, kDefaultMaxPayload);
  ASSERT_TRUE(d.has_value()) << d.error().to_string();
  EXPECT_EQ(d->kind, MsgKind::copy_to_device);
  EXPECT_EQ(d->id, 0x0102030405060708ull);
  EXPECT_EQ(d->payload_bytes, 4096u);
}

void expect_header_rejected(std::array<std::byte, kHeaderBytes> h, std::string_view needle,
                            std::uint32_t max = kDefaultMaxPayload) {
  auto d = decode_header(h, max);
  ASSERT_FALSE(d.has_value());
  EXPECT_TRUE(d.error() == errc::protocol_error);
  EXPECT_NE(d.error().message().find(needle), std::string::npos) << d.error().message();
}

TEST(IsolatedProtocol, RejectsBadMagicVersionKindReservedAndSize) {
  auto h = encode_header(MsgKind::reply, 1, 0);
  h[1] = std::byte{0};
  expect_header_rejected(h, "magic");
  h = encode_header(MsgKind::reply, 1, 0);
  h[4] = std::byte{7};
  expect_header_rejected(h, "protocol version 7 is not the supported version 2");
  h = encode_header(MsgKind::reply, 1, 0);
  h[6] = std::byte{0xe7};
  h[7] = std::byte{0x03};
  expect_header_rejected(h, "kind 999 is not a known message kind");
  h = encode_header(MsgKind::reply, 1, 0);
  h[21] = std::byte{1};
  expect_header_rejected(h, "reserved");
  expect_header_rejected(encode_header(MsgKind::load_module, 1, 1001),
                         "load_module payload of 1001 bytes exceeds the "
                         "limit of 1000 bytes",
                         1000);
}

TEST(IsolatedProtocol, WriterReaderRoundTrip) {
  Writer w;
  w.put(std::uint8_t{7}).put(std::uint16_t{0xbeef}).put(0xdeadbeefu).put(~0ull).put_i32(-5).put_i64(-1ll << 40);
  w.put_f64(-2.5).put_bool(true).put_string("kernel").put_bytes(bytes_of("xyz"));
  auto payload = w.take();
  Reader r(payload, "test");
  EXPECT_EQ(r.get<std::uint8_t>("a"), 7);
  EXPECT_EQ(r.get<std::uint16_t>("b"), 0xbeef);
  EXPECT_EQ(r.get<std::uint32_t>("c"), 0xdeadbeefu);
  EXPECT_EQ(r.get<std::uint64_t>("d"), ~0ull);
  EXPECT_EQ(r.get_i32("e"), -5);
  EXPECT_EQ(r.get_i64("f"), -1ll << 40);
  EXPECT_EQ(r.get_f64("g"), -2.5);
  EXPECT_TRUE(r.get_bool("h"));
  EXPECT_EQ(r.get_string("i"), "kernel");
  EXPECT_EQ(r.get_bytes("j").size(), 3u);
  EXPECT_TRUE(r.finish().has_value());
}

TEST(IsolatedProtocol, ReaderFailsOnTruncationTrailingBytesBadBoolAndCounts) {
  Writer w;
  w.put(std::uint32_t{1000});  // a byte string claiming 1000 bytes, with none following
  auto p = w.take();
  Reader r(p, "load_module request");
  EXPECT_TRUE(r.get_bytes("image").empty());
  auto s = r.finish();
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(s.error() == errc::protocol_error);
  EXPECT_NE(s.error().message().find("load_module request: field 'image' needs 1000 bytes"), std::string::npos)
      << s.error().message();
  EXPECT_EQ(r.get<std::uint64_t>("later"), 0u);  // sticky: no read past a failure

  std::vector<std::byte> extra{std::byte{1}, std::byte{2}};
  Reader r2(extra, "free request");
  (void)r2.get<std::uint8_t>("x");
  EXPECT_NE(r2.finish().error().message().find("1 unexpected bytes"), std::string::npos);

  std::vector<std::byte> two{std::byte{2}};
  Reader r3(two, "flag");
  (void)r3.get_bool("b");
  EXPECT_FALSE(r3.finish().has_value());

  Writer c;
  c.put(std::uint32_t{1u << 30});
  auto cp = c.take();
  Reader r4(cp, "launch request");
  EXPECT_EQ(r4.get_count("args", 4096), 0u);
  EXPECT_NE(r4.finish().error().message().find("more than the limit 4096"), std::string::npos);
}

// ---- channel over an in-process socket pair ----------------------------------------------------

struct Pair {
  std::unique_ptr<Channel> a, b;
};

Pair make_pair_channels(std::uint32_t max = kDefaultMaxPayload) {
  auto fds = make_socket_pair();
  EXPECT_TRUE(fds.has_value());
  auto a = Channel::adopt(fds->first, max);
  auto b = Channel::adopt(fds->second, max);
  return {std::move(*a), std::move(*b)};
}

TEST(IsolatedChannel, SendsAndReceivesMessagesInOrder) {
  auto [a, b] = make_pair_channels();
  ASSERT_TRUE(a->send(MsgKind::echo, 1, bytes_of("one")).has_value());
  ASSERT_TRUE(a->send(MsgKind::echo, 2, {}).has_value());
  auto m1 = b->receive();
  auto m2 = b->receive();
  ASSERT_TRUE(m1 && m2);
  EXPECT_EQ(m1->id, 1u);
  EXPECT_EQ(m1->payload, bytes_of("one"));
  EXPECT_EQ(m2->id, 2u);
  EXPECT_TRUE(m2->payload.empty());
  EXPECT_FALSE(m1->fd);  // ordinary messages carry no descriptor
  EXPECT_FALSE(m2->fd);
}

TEST(IsolatedChannel, LargePayloadCrossesWhileTheOtherSideReads) {
  auto [a, b] = make_pair_channels();
  std::vector<std::byte> big(8u << 20, std::byte{0x11});
  std::thread sender(
      [&, &sender_channel = a] { EXPECT_TRUE(sender_channel->send(MsgKind::load_module, 9, big).has_value()); });
  auto m = b->receive();
  sender.join();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->payload.size(), big.size());
}

TEST(IsolatedChannel, GarbageClosesTheChannelWithProtocolError) {
  auto [a, b] = make_pair_channels();
  const char junk[kHeaderBytes] = "this is not a header!!!";
  ASSERT_EQ(::write(a->native_handle(), junk, sizeof junk), static_cast<ssize_t>(sizeof junk));
  auto m = b->receive();
  ASSERT_FALSE(m.has_value());
  EXPECT_TRUE(m.error() == errc::protocol_error);
  EXPECT_TRUE(b->closed());
  // Every later call answers the same error; the peer sees the channel closed.
  EXPECT_TRUE(b->send(MsgKind::echo, 3, {}).error() == errc::protocol_error);
  EXPECT_TRUE(b->receive().error() == errc::protocol_error);
  EXPECT_TRUE(a->receive().error() == errc::worker_lost);
}

TEST(IsolatedChannel, OversizedMessageIsRejectedBeforeAllocating) {
  auto [a, b] = make_pair_channels(1024);
  ASSERT_TRUE(a->send(MsgKind::echo, 1, std::vector<std::byte>(2048)).has_value());
  auto m = b->receive();
  ASSERT_FALSE(m.has_value());
  EXPECT_TRUE(m.error() == errc::protocol_error);
  EXPECT_NE(m.error().message().find("2048 bytes exceeds the limit of 1024"), std::string::npos);
}

TEST(IsolatedChannel, TruncatedMessageIsProtocolErrorAndCleanCloseIsWorkerLost) {
  {
    auto [a, b] = make_pair_channels();
    auto h = encode_header(MsgKind::echo, 5, 100);
    ASSERT_EQ(::write(a->native_handle(), h.data(), h.size()), static_cast<ssize_t>(h.size()));
    ASSERT_EQ(::write(a->native_handle(), "abc", 3), 3);
    a.reset();
    auto m = b->receive();
    ASSERT_FALSE(m.has_value());
    EXPECT_TRUE(m.error() == errc::protocol_error);
    EXPECT_NE(m.error().message().find("3 of 100 payload bytes"), std::string::npos) << m.error().message();
  }
  {
    auto [a, b] = make_pair_channels();
    a.reset();
    auto m = b->receive();
    ASSERT_FALSE(m.has_value());
    EXPECT_TRUE(m.error() == errc::worker_lost);
  }
}

TEST(IsolatedChannel, CloseWakesABlockedReceive) {
  auto [a, b] = make_pair_channels();
  std::thread closer([&receiver = b] {  // clang 14 cannot capture a structured binding by [&]
    std::this_thread::sleep_for(50ms);
    receiver->close();
  });
  auto m = b->receive();
  closer.join();
  ASSERT_FALSE(m.has_value());
  EXPECT_TRUE(m.error() == errc::worker_lost);
}

// ---- descriptors passed with a message ---------------------------------------------------------

/// A memfd holding `text`.
UniqueFd memfd_with(std::string_view text) {
  UniqueFd fd(::memfd_create("cuactor-channel-test", MFD_CLOEXEC));
  EXPECT_TRUE(fd);
  EXPECT_EQ(::write(fd.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  return fd;
}

/// The number of descriptors this process has open.
std::size_t open_fd_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST(IsolatedUniqueFd, ClosesOnceAndMovesOwnership) {
  UniqueFd a(::memfd_create("cuactor-unique-fd-test", MFD_CLOEXEC));
  ASSERT_TRUE(a);
  const int raw = a.get();
  UniqueFd b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(b.get(), raw);
  b = UniqueFd();
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);  // closed by the assignment
  UniqueFd c(::memfd_create("cuactor-unique-fd-test", MFD_CLOEXEC));
  const int kept = c.release();
  EXPECT_FALSE(c);
  EXPECT_NE(::fcntl(kept, F_GETFD), -1);  // release() does not close
  ::close(kept);
}

TEST(IsolatedChannel, DescriptorCrossesWithItsMessage) {
  auto [a, b] = make_pair_channels();
  const std::string_view text = "bytes of a shared host buffer";
  auto mem = memfd_with(text);
  ASSERT_TRUE(a->send(MsgKind::echo, 4, bytes_of("buffer"), mem.get()).has_value());
  EXPECT_NE(::fcntl(mem.get(), F_GETFD), -1);  // the sender still owns its descriptor
  mem = UniqueFd();                            // and the receiver's copy outlives it
  auto m = b->receive();
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  EXPECT_EQ(m->id, 4u);
  EXPECT_EQ(m->payload, bytes_of("buffer"));
  ASSERT_TRUE(m->fd);
  EXPECT_NE(::fcntl(m->fd.get(), F_GETFD) & FD_CLOEXEC, 0);
  std::string seen(text.size(), '\0');
  ASSERT_EQ(::pread(m->fd.get(), seen.data(), seen.size(), 0), static_cast<ssize_t>(seen.size()));
  EXPECT_EQ(seen, text);
}

TEST(IsolatedChannel, DescriptorMessageKeepsTheFramingOfTheMessagesAfterIt) {
  auto [a, b] = make_pair_channels();
  auto mem = memfd_with("x");
  // A blocking sendmsg returns short only when a signal interrupts it: a payload larger than the
  // socket buffer, and a signal (handler without SA_RESTART) while nobody reads, make it send part
  // of the message with the descriptor and leave the rest to plain writes.
  struct sigaction on_signal {};
  on_signal.sa_handler = [](int) {};
  struct sigaction previous {};
  ASSERT_EQ(::sigaction(SIGUSR1, &on_signal, &previous), 0);
  std::vector<std::byte> big(8u << 20, std::byte{0x22});
  std::thread sender([&, &sender_channel = a] {
    EXPECT_TRUE(sender_channel->send(MsgKind::load_module, 1, big, mem.get()).has_value());
    EXPECT_TRUE(sender_channel->send(MsgKind::echo, 2, bytes_of("two")).has_value());
    EXPECT_TRUE(sender_channel->send(MsgKind::echo, 3, {}).has_value());
  });
  std::this_thread::sleep_for(100ms);
  ::pthread_kill(sender.native_handle(), SIGUSR1);
  auto m1 = b->receive();
  auto m2 = b->receive();
  auto m3 = b->receive();
  sender.join();
  ::sigaction(SIGUSR1, &previous, nullptr);
  ASSERT_TRUE(m1 && m2 && m3);
  EXPECT_EQ(m1->id, 1u);
  EXPECT_EQ(m1->payload, big);
  EXPECT_TRUE(m1->fd);
  EXPECT_EQ(m2->id, 2u);
  EXPECT_EQ(m2->payload, bytes_of("two"));
  EXPECT_FALSE(m2->fd);
  EXPECT_EQ(m3->id, 3u);
  EXPECT_FALSE(m3->fd);
}

TEST(IsolatedChannel, MoreThanOneDescriptorIsProtocolErrorAndNoneLeaks) {
  // 2 fit the receiver's control buffer; 20 overflow it (MSG_CTRUNC).
  for (const std::size_t count : {std::size_t{2}, std::size_t{20}}) {
    SCOPED_TRACE(count);
    auto [a, b] = make_pair_channels();
    std::vector<int> fds;
    for (std::size_t i = 0; i < count; ++i) fds.push_back(::memfd_create("cuactor-channel-test", MFD_CLOEXEC));
    // A hostile peer: one header with all of them attached, sent by hand.
    auto h = encode_header(MsgKind::echo, 1, 0);
    iovec iov{h.data(), h.size()};
    std::vector<char> control(CMSG_SPACE(sizeof(int) * count));
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * count);
    ASSERT_EQ(::sendmsg(a->native_handle(), &msg, MSG_NOSIGNAL), static_cast<ssize_t>(h.size()));
    for (const int fd : fds) ::close(fd);
    const std::size_t before = open_fd_count();
    auto m = b->receive();
    ASSERT_FALSE(m.has_value());
    EXPECT_TRUE(m.error() == errc::protocol_error);
    EXPECT_NE(m.error().message().find("echo #1 arrived with"), std::string::npos) << m.error().message();
    EXPECT_NE(m.error().message().find(count == 2 ? "2 file descriptors" : "MSG_CTRUNC"), std::string::npos)
        << m.error().message();
    EXPECT_EQ(open_fd_count(), before);
    EXPECT_TRUE(b->closed());
  }
}

TEST(IsolatedChannel, SendingAnInvalidDescriptorIsInvalidArgument) {
  auto [a, b] = make_pair_channels();
  auto s = a->send(MsgKind::echo, 1, {}, -1);
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(s.error() == errc::invalid_argument);
  EXPECT_NE(s.error().message().find("fd -1"), std::string::npos) << s.error().message();
  const int closed_fd = memfd_with("").release();
  ::close(closed_fd);
  EXPECT_TRUE(a->send(MsgKind::echo, 2, {}, closed_fd).error() == errc::invalid_argument);
  // The caller's mistake does not close the channel.
  EXPECT_FALSE(a->closed());
  ASSERT_TRUE(a->send(MsgKind::echo, 3, {}).has_value());
  auto m = b->receive();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->id, 3u);
}

// ---- shared memory -----------------------------------------------------------------------------

TEST(IsolatedShm, SliceChecksBoundsWithoutOverflow) {
  auto r = SharedRegion::create("test", 4096);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_TRUE(r->slice(0, 4096).has_value());
  EXPECT_TRUE(r->slice(4096, 0).has_value());
  EXPECT_FALSE(r->slice(4000, 97).has_value());
  EXPECT_FALSE(r->slice(1, SIZE_MAX).has_value());
  EXPECT_FALSE(r->slice(SIZE_MAX, 2).has_value());
  EXPECT_FALSE(SharedRegion::create("test", 0).has_value());
}

// ---- processes ---------------------------------------------------------------------------------

std::unique_ptr<WorkerProcess> spawn_peer(std::vector<std::string> args, const SharedRegion* shm = nullptr) {
  SpawnOptions o;
  o.executable = ISOLATED_PEER;
  o.args = std::move(args);
  o.shm = shm;
  auto w = WorkerProcess::spawn(o);
  EXPECT_TRUE(w.has_value()) << w.error().to_string();
  return w ? std::move(*w) : nullptr;
}

std::uint64_t hello_value(WorkerProcess& w) {
  auto m = w.channel().receive();
  EXPECT_TRUE(m.has_value()) << m.error().to_string();
  if (!m) return 0;
  EXPECT_EQ(m->kind, MsgKind::hello);
  Reader r(m->payload, "hello");
  auto v = r.get<std::uint64_t>("value");
  EXPECT_TRUE(r.finish().has_value());
  return v;
}

TEST(IsolatedProcess, EchoThenCleanShutdownIsReaped) {
  auto w = spawn_peer({"echo"});
  ASSERT_TRUE(w);
  EXPECT_EQ(hello_value(*w), static_cast<std::uint64_t>(w->pid()));
  ASSERT_TRUE(w->channel().send(MsgKind::echo, 42, bytes_of("ping")).has_value());
  auto m = w->channel().receive();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->kind, MsgKind::reply);
  EXPECT_EQ(m->id, 42u);
  EXPECT_EQ(m->payload, bytes_of("ping"));
  ASSERT_TRUE(w->channel().send(MsgKind::shutdown, 0, {}).has_value());
  auto st = w->wait_exit(5s);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << describe_wait_status(*st);
  EXPECT_EQ(::kill(w->pid(), 0), -1);  // reaped: no zombie left behind
}

TEST(IsolatedProcess, WorkerExitsWhenTheChannelCloses) {
  auto w = spawn_peer({"echo"});
  ASSERT_TRUE(w);
  hello_value(*w);
  w->channel().close();
  auto st = w->wait_exit(5s);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << describe_wait_status(*st);
}

TEST(IsolatedProcess, KilledPeerIsWorkerLost) {
  auto w = spawn_peer({"echo"});
  ASSERT_TRUE(w);
  hello_value(*w);
  ASSERT_EQ(::kill(w->pid(), SIGKILL), 0);
  auto m = w->channel().receive();
  ASSERT_FALSE(m.has_value());
  EXPECT_TRUE(m.error() == errc::worker_lost);
  EXPECT_EQ(classify(m.error().code()), FailureClass::context_poisoned);
  auto st = w->wait_exit(5s);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL) << describe_wait_status(*st);
}

TEST(IsolatedProcess, MalformedMessagesFromTheWorkerAreTypedErrors) {
  for (const char* mode : {"bad-magic", "bad-version", "oversized", "truncated"}) {
    SCOPED_TRACE(mode);
    auto w = spawn_peer({mode});
    ASSERT_TRUE(w);
    hello_value(*w);
    auto m = w->channel().receive();
    ASSERT_FALSE(m.has_value());
    EXPECT_TRUE(m.error() == errc::protocol_error) << m.error().to_string();
    EXPECT_TRUE(w->channel().closed());
    const int st = w->terminate(5s);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << describe_wait_status(st);
  }
}

TEST(IsolatedProcess, MalformedMessageToTheWorkerClosesItsChannel) {
  auto w = spawn_peer({"echo"});
  ASSERT_TRUE(w);
  hello_value(*w);
  auto h = encode_header(MsgKind::echo, 1, 0);
  h[4] = std::byte{9};  // version 9
  ASSERT_EQ(::write(w->channel().native_handle(), h.data(), h.size()), static_cast<ssize_t>(h.size()));
  auto st = w->wait_exit(5s);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 3) << describe_wait_status(*st);
  EXPECT_TRUE(w->channel().receive().error() == errc::worker_lost);
}

TEST(IsolatedProcess, HungWorkerIsKilledAfterTheGracePeriod) {
  auto w = spawn_peer({"hang"});
  ASSERT_TRUE(w);
  hello_value(*w);
  const auto t0 = std::chrono::steady_clock::now();
  const int st = w->terminate(200ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << describe_wait_status(st);
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 3s);
  EXPECT_TRUE(w->reaped());
}

TEST(IsolatedProcess, ChildInheritsOnlyItsOwnDescriptors) {
  // A descriptor without close-on-exec would leak; ours all have it.
  auto extra = SharedRegion::create("unrelated", 4096);
  ASSERT_TRUE(extra.has_value());
  auto shm = SharedRegion::create("cuactor-worker-shm", 4096);
  ASSERT_TRUE(shm.has_value());
  auto w = spawn_peer({"fds"}, &*shm);
  ASSERT_TRUE(w);
  ASSERT_TRUE(w->channel().send(MsgKind::echo, 1, {}).has_value());
  auto m = w->channel().receive();
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  Reader r(m->payload, "fds");
  std::map<int, std::string> fds;
  while (r.good() && r.remaining() > 0) {
    const int fd = r.get_i32("fd");
    fds[fd] = r.get_string("target");
  }
  ASSERT_TRUE(r.finish().has_value());
  EXPECT_NE(fds[kChildChannelFd].find("socket:"), std::string::npos);
  EXPECT_NE(fds[kChildShmFd].find("memfd:cuactor-worker-shm"), std::string::npos) << fds[kChildShmFd];
  // Above those, only what the worker opened itself (Asio's epoll/eventfd/timerfd).
  for (const auto& [fd, target] : fds) {
    if (fd <= kChildShmFd) continue;
    EXPECT_EQ(target.rfind("anon_inode:", 0), 0u)
        << "descriptor " << fd << " (" << target << ") leaked into the worker";
  }
}

TEST(IsolatedProcess, SharedMemoryIsVisibleBothWays) {
  auto shm = SharedRegion::create("cuactor-worker-shm", 1 << 20);
  ASSERT_TRUE(shm.has_value());
  auto w = spawn_peer({"shm"}, &*shm);
  ASSERT_TRUE(w);
  hello_value(*w);
  auto region = shm->slice(4096, 1000);
  ASSERT_TRUE(region.has_value());
  std::fill(region->begin(), region->end(), std::byte{3});
  Writer q;
  q.put(std::uint64_t{4096}).put(std::uint64_t{1000});
  ASSERT_TRUE(w->channel().send(MsgKind::echo, 7, q.bytes()).has_value());
  auto m = w->channel().receive();
  ASSERT_TRUE(m.has_value());
  Reader r(m->payload, "shm reply");
  EXPECT_TRUE(r.get_bool("in range"));
  EXPECT_EQ(r.get<std::uint64_t>("sum"), 3000u);
  EXPECT_EQ((*region)[0], std::byte{0x5a});  // the worker's write is visible here
  EXPECT_EQ((*region)[999], std::byte{0x5a});
  // A range outside the region is refused by the worker, not read.
  Writer bad;
  bad.put(std::uint64_t{1} << 40).put(std::uint64_t{16});
  ASSERT_TRUE(w->channel().send(MsgKind::echo, 8, bad.bytes()).has_value());
  auto m2 = w->channel().receive();
  ASSERT_TRUE(m2.has_value());
  Reader r2(m2->payload, "shm reply");
  EXPECT_FALSE(r2.get_bool("in range"));
}

TEST(IsolatedProcess, MissingExecutableIsATypedError) {
  SpawnOptions o;
  o.executable = "/nonexistent/cuactor-worker";
  auto w = WorkerProcess::spawn(o);
  ASSERT_FALSE(w.has_value());
  EXPECT_TRUE(w.error() == errc::worker_lost);
  EXPECT_NE(w.error().message().find("/nonexistent/cuactor-worker"), std::string::npos);
}

TEST(IsolatedProcess, WorkerRefusesToStartWithoutItsParent) {
  // A wrong --parent-pid looks exactly like a parent that died before the child's prctl.
  SpawnOptions o;
  o.executable = ISOLATED_PEER;
  o.args = {"--parent-pid", "1", "echo"};  // later flags win
  auto w = WorkerProcess::spawn(o);
  ASSERT_TRUE(w.has_value());
  auto st = (*w)->wait_exit(5s);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 2) << describe_wait_status(*st);
}

TEST(IsolatedProcess, WorkerDiesWithItsParentWithinASecond) {
  // middle spawns a grandchild that never reads its channel, then exits. We are the subreaper, so the
  // orphan is re-parented to us and we can reap it and see how it ended.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  auto mid = spawn_peer({"middle"});
  ASSERT_TRUE(mid);
  const auto grandchild = static_cast<pid_t>(hello_value(*mid));
  ASSERT_GT(grandchild, 0);
  auto mid_status = mid->wait_exit(5s);
  ASSERT_TRUE(mid_status.has_value());
  const auto t0 = std::chrono::steady_clock::now();
  int st = 0;
  pid_t r = 0;
  while ((r = ::waitpid(grandchild, &st, WNOHANG)) == 0 && std::chrono::steady_clock::now() - t0 < 1s)
    std::this_thread::sleep_for(1ms);
  if (r == 0) ::kill(grandchild, SIGKILL), ::waitpid(grandchild, &st, 0);
  ASSERT_EQ(r, grandchild) << "the worker outlived its parent by more than a second";
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << describe_wait_status(st);
}

}  // namespace
}  // namespace cuactor::runtime::isolated
