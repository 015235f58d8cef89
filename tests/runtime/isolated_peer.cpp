/// @file
/// A CPU-only stand-in for cuactor-worker used by the channel's unit tests: the same startup
/// (child_startup) and channel, with behaviours chosen by the first extra argument.
///
///   echo        hello, then answers every message with a reply carrying the same payload; exits 0
///               on `shutdown` or when the channel closes, 3 on a protocol error
///   hang        hello, then never reads again (only SIGKILL ends it)
///   bad-magic | bad-version | oversized | truncated
///               hello, then one broken message, then waits for the channel to close
///   fds         replies to the first message with its open descriptors (number, link target)
///   shm         replies to each message (u64 offset, u64 length) with the byte sum of that range and
///               then overwrites the range with 0x5a
///   serve       speaks the worker protocol as WorkerLink expects it: HelloMsg, then ReplyMsg replies:
///               echo -> the payload as result; stats (u32 ms) -> sleeps that long, empty result;
///               fill -> an invalid_argument error; launch -> a poisoned message, then exit 4;
///               allocate -> dies at once (exit 9, no message); free (id 0) -> no reply
///   middle      spawns `hang` as its own child, waits for its hello, sends its own hello whose
///               payload is the grandchild's pid, and exits at once
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "runtime/isolated/messages.hpp"
#include "runtime/isolated/protocol.hpp"
#include "runtime/isolated/spawn.hpp"

namespace iso = cuactor::runtime::isolated;

namespace {

int send_hello(iso::Channel& ch, std::uint64_t value) {
  iso::Writer w;
  w.put(value);
  return ch.send(iso::MsgKind::hello, 0, w.bytes()) ? 0 : 2;
}

void write_raw(iso::Channel& ch, const void* p, std::size_t n) {
  if (::write(ch.native_handle(), p, n) != static_cast<ssize_t>(n)) std::perror("isolated_peer: write");
}

[[noreturn]] void sleep_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

int wait_for_close(iso::Channel& ch) {
  for (;;)
    if (!ch.receive()) return 0;
}

int echo(iso::Channel& ch) {
  for (;;) {
    auto m = ch.receive();
    if (!m) return m.error() == cuactor::errc::protocol_error ? 3 : 0;
    if (m->kind == iso::MsgKind::shutdown) return 0;
    if (!ch.send(iso::MsgKind::reply, m->id, m->payload)) return 0;
  }
}

int list_fds(iso::Channel& ch) {
  auto m = ch.receive();
  if (!m) return 0;
  iso::Writer w;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return 2;
  const int own = ::dirfd(d);
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::stoi(e->d_name);
    if (fd == own) continue;
    char target[256] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    w.put_i32(fd).put_string(std::string_view(target, n > 0 ? static_cast<std::size_t>(n) : 0));
  }
  ::closedir(d);
  (void)ch.send(iso::MsgKind::reply, m->id, w.bytes());
  return wait_for_close(ch);
}

int shm(iso::Channel& ch, iso::SharedRegion& region) {
  for (;;) {
    auto m = ch.receive();
    if (!m) return 0;
    iso::Reader r(m->payload, "shm request");
    const auto offset = r.get<std::uint64_t>("offset");
    const auto length = r.get<std::uint64_t>("length");
    if (!r.finish()) return 3;
    auto range = region.slice(offset, length);
    std::uint64_t sum = 0;
    if (range) {
      for (std::byte b : *range) sum += static_cast<std::uint64_t>(b);
      std::fill(range->begin(), range->end(), std::byte{0x5a});
    }
    iso::Writer w;
    w.put_bool(range.has_value()).put(sum);
    if (!ch.send(iso::MsgKind::reply, m->id, w.bytes())) return 0;
  }
}

int reply(iso::Channel& ch, std::uint64_t id, iso::ReplyMsg r) {
  return ch.send(iso::MsgKind::reply, id, iso::encode_payload(r)) ? 0 : 1;
}

int serve(iso::Channel& ch, const iso::SharedRegion& region) {
  iso::HelloMsg hello;
  hello.device = 0;
  hello.pid = static_cast<std::uint64_t>(::getpid());
  hello.shm_bytes = region.size();
  if (!ch.send(iso::MsgKind::hello, 0, iso::encode_payload(hello))) return 2;
  for (;;) {
    auto m = ch.receive();
    if (!m) return m.error() == cuactor::errc::protocol_error ? 3 : 0;
    iso::ReplyMsg r;
    switch (m->kind) {
      case iso::MsgKind::shutdown:
        return 0;
      case iso::MsgKind::free:
        continue;
      case iso::MsgKind::allocate:
        ::_exit(9);
      case iso::MsgKind::stats: {
        iso::Reader in(m->payload, "sleep");
        const auto ms = in.get<std::uint32_t>("ms");
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        break;
      }
      case iso::MsgKind::fill:
        r.error = cuactor::Error(cuactor::errc::invalid_argument, "peer refuses fill #" + std::to_string(m->id));
        break;
      case iso::MsgKind::launch: {
        iso::PoisonedMsg p{cuactor::Error(cuactor::errc::context_poisoned, "peer pretends an illegal address")};
        (void)ch.send(iso::MsgKind::poisoned, 0, iso::encode_payload(p));
        ::_exit(4);
      }
      default:
        r.result = m->payload;
    }
    if (reply(ch, m->id, std::move(r)) != 0) return 0;
  }
}

int middle(iso::Channel& ch) {
  iso::SpawnOptions o;
  o.executable = "/proc/self/exe";
  o.args = {"hang"};
  auto grandchild = iso::WorkerProcess::spawn(o);
  if (!grandchild) return 2;
  auto hello = (*grandchild)->channel().receive();
  if (!hello) return 2;
  (void)send_hello(ch, static_cast<std::uint64_t>((*grandchild)->pid()));
  // _exit, not return: no destructor may end the grandchild, only its parent-death signal.
  ::_exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  auto end = iso::child_startup(argc, argv);
  if (!end) {
    std::fprintf(stderr, "isolated_peer: %s\n", end.error().to_string().c_str());
    return 2;
  }
  iso::Channel& ch = *end->channel;
  const std::string mode = end->rest.empty() ? "echo" : end->rest.front();
  if (mode == "fds") return list_fds(ch);
  if (mode == "middle") return middle(ch);
  if (mode == "serve") return serve(ch, end->shm);
  if (send_hello(ch, static_cast<std::uint64_t>(::getpid())) != 0) return 2;
  if (mode == "echo") return echo(ch);
  if (mode == "shm") return shm(ch, end->shm);
  if (mode == "hang") sleep_forever();
  if (mode == "bad-magic") {
    auto h = iso::encode_header(iso::MsgKind::reply, 1, 0);
    h[0] = std::byte{0x00};
    write_raw(ch, h.data(), h.size());
  } else if (mode == "bad-version") {
    auto h = iso::encode_header(iso::MsgKind::reply, 1, 0);
    h[4] = std::byte{0x02};
    write_raw(ch, h.data(), h.size());
  } else if (mode == "oversized") {
    auto h = iso::encode_header(iso::MsgKind::reply, 1, 0xffffffffu);
    write_raw(ch, h.data(), h.size());
  } else if (mode == "truncated") {
    auto h = iso::encode_header(iso::MsgKind::reply, 1, 100);
    write_raw(ch, h.data(), h.size());
    write_raw(ch, "abc", 3);
    return 0;  // exits mid-message
  } else {
    std::fprintf(stderr, "isolated_peer: unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  return wait_for_close(ch);
}
