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
///   sim         a CPU simulation of cuactor-worker for the isolated backend's tests: buffers are host
///               vectors; allocate/free/copies (through the shared region)/fill/load_module/stats work;
///               launch runs kernels by name: "poison" -> poisoned message and exit 4, "hang" -> never
///               answers, "die" -> exit 9, "slow" -> sleeps (first argument, u32 ms) then succeeds,
///               "add" -> adds the u32 value argument to the first u32 of the buffer argument
///   middle      spawns `hang` as its own child, waits for its hello, sends its own hello whose
///               payload is the grandchild's pid, and exits at once
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
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

cuactor::Error sim_error(cuactor::errc code, std::string message) {
  return cuactor::Error(code, "sim: " + std::move(message));
}

int sim(iso::Channel& ch, const iso::SharedRegion& region) {
  constexpr std::uint64_t total = 1ull << 30;
  iso::HelloMsg hello;
  hello.device = 0;
  hello.pid = static_cast<std::uint64_t>(::getpid());
  hello.shm_bytes = region.size();
  hello.total_bytes = total;
  if (!ch.send(iso::MsgKind::hello, 0, iso::encode_payload(hello))) return 2;
  std::map<std::uint64_t, std::vector<std::byte>> buffers;
  std::map<std::uint64_t, iso::SharedRegion> hosts;  // registered host buffers
  std::uint64_t next = 1, modules = 0, used = 0;
  for (;;) {
    auto m = ch.receive();
    if (!m) return m.error() == cuactor::errc::protocol_error ? 3 : 0;
    iso::ReplyMsg r;
    auto find = [&](std::uint64_t id, std::uint64_t offset, std::uint64_t bytes) -> std::vector<std::byte>* {
      auto it = buffers.find(id);
      if (it == buffers.end() || offset > it->second.size() || bytes > it->second.size() - offset) {
        r.error = sim_error(cuactor::errc::invalid_argument, "no buffer " + std::to_string(id) + " with that range");
        return nullptr;
      }
      return &it->second;
    };
    switch (m->kind) {
      case iso::MsgKind::shutdown:
        return 0;
      case iso::MsgKind::free: {
        auto f = iso::FreeMsg::decode(m->payload);
        if (f && buffers.count(f->buffer)) {
          used -= buffers[f->buffer].size();
          buffers.erase(f->buffer);
        }
        continue;
      }
      case iso::MsgKind::allocate: {
        auto a = iso::AllocateMsg::decode(m->payload);
        if (!a) return 3;
        if (a->bytes > total - used) {
          r.error = sim_error(cuactor::errc::out_of_memory, std::to_string(a->bytes) + " bytes");
          break;
        }
        buffers[next].resize(a->bytes);
        used += a->bytes;
        r.result = iso::encode_payload(iso::BufferReply{next++, a->bytes});
        break;
      }
      case iso::MsgKind::copy_to_device:
      case iso::MsgKind::copy_to_host: {
        auto c = iso::CopyMsg::decode(m->payload);
        if (!c) return 3;
        auto* b = find(c->buffer, c->buffer_offset, c->bytes);
        auto range = region.slice(c->shm_offset, c->bytes);
        if (!b) break;
        if (!range) {
          r.error = range.error();
          break;
        }
        if (m->kind == iso::MsgKind::copy_to_device)
          std::copy(range->begin(), range->end(), b->begin() + static_cast<std::ptrdiff_t>(c->buffer_offset));
        else
          std::copy_n(b->begin() + static_cast<std::ptrdiff_t>(c->buffer_offset), c->bytes, range->begin());
        break;
      }
      case iso::MsgKind::fill: {
        auto f = iso::FillMsg::decode(m->payload);
        if (!f) return 3;
        const auto n = f->pattern.size();
        auto* b = find(f->buffer, f->buffer_offset, f->count * n);
        if (!b) break;
        for (std::uint64_t i = 0; i < f->count; ++i)
          std::copy(f->pattern.begin(), f->pattern.end(),
                    b->begin() + static_cast<std::ptrdiff_t>(f->buffer_offset + i * n));
        break;
      }
      case iso::MsgKind::load_module:
        r.result = iso::encode_payload(iso::ModuleReply{++modules});
        break;
      case iso::MsgKind::launch: {
        auto l = iso::LaunchMsg::decode(m->payload);
        if (!l) return 3;
        if (l->kernel == "poison") {
          iso::PoisonedMsg p{cuactor::Error(cuactor::errc::context_poisoned, "sim: illegal address")};
          (void)ch.send(iso::MsgKind::poisoned, 0, iso::encode_payload(p));
          ::_exit(4);
        }
        if (l->kernel == "die") ::_exit(9);
        if (l->kernel == "hang") sleep_forever();
        if (l->module == 0 || l->module > modules) {
          r.error = sim_error(cuactor::errc::invalid_argument, "no module " + std::to_string(l->module));
          break;
        }
        std::uint32_t value = 0;
        std::vector<std::byte>* target = nullptr;
        for (const auto& a : l->args) {
          if (a.kind == iso::LaunchArg::Kind::value && a.value.size() == 4) std::memcpy(&value, a.value.data(), 4);
          if (a.kind != iso::LaunchArg::Kind::value && !(target = find(a.buffer, a.buffer_offset, 0))) break;
        }
        if (r.error) break;
        if (l->kernel == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(value));
        if (l->kernel == "add" && target && target->size() >= 4) {
          std::uint32_t x = 0;
          std::memcpy(&x, target->data(), 4);
          x += value;
          std::memcpy(target->data(), &x, 4);
        }
        break;
      }
      case iso::MsgKind::register_host: {
        auto h = iso::RegisterHostMsg::decode(m->payload);
        if (!h) return 3;
        if (!m->fd) {
          r.error = sim_error(cuactor::errc::protocol_error, "register_host without a descriptor");
          break;
        }
        auto mapped = iso::SharedRegion::map(m->fd.release(), h->bytes);
        if (!mapped) {
          r.error = mapped.error();
          break;
        }
        hosts.emplace(next, std::move(*mapped));
        r.result = iso::encode_payload(iso::HostReply{next++});
        break;
      }
      case iso::MsgKind::unregister_host: {
        auto h = iso::RegisterHostMsg::decode(m->payload);
        if (h) hosts.erase(h->host);
        continue;
      }
      case iso::MsgKind::copy_host_to_device:
      case iso::MsgKind::copy_device_to_host: {
        auto c = iso::CopyHostMsg::decode(m->payload);
        if (!c) return 3;
        auto* b = find(c->buffer, c->buffer_offset, c->bytes);
        if (!b) break;
        auto h = hosts.find(c->host);
        if (h == hosts.end()) {
          r.error = sim_error(cuactor::errc::invalid_argument, "no host buffer " + std::to_string(c->host));
          break;
        }
        auto range = h->second.slice(c->host_offset, c->bytes);
        if (!range) {
          r.error = range.error();
          break;
        }
        if (m->kind == iso::MsgKind::copy_host_to_device)
          std::copy(range->begin(), range->end(), b->begin() + static_cast<std::ptrdiff_t>(c->buffer_offset));
        else
          std::copy_n(b->begin() + static_cast<std::ptrdiff_t>(c->buffer_offset), c->bytes, range->begin());
        break;
      }
      case iso::MsgKind::worker_op: {
        // Graph operations keep one graph (id 7) per capture; any other operation answers with the
        // request it received (re-encoded), so the client's tests can check what crossed.
        auto w = iso::WorkerOpMsg::decode(m->payload);
        if (!w) return 3;
        for (const auto& b : w->buffers)
          if (!find(b.buffer, 0, 0)) break;
        if (r.error) break;
        if (w->op == 0x0101) {  // capture_end
          iso::Writer out;
          out.put(std::uint64_t{7});
          r.result = out.take();
        } else if (w->op < 0x0100 || w->op > 0x0104) {
          r.result = iso::encode_payload(*w);
        }
        break;
      }
      case iso::MsgKind::stats: {
        iso::StatsReply s;
        s.total_bytes = total;
        s.free_bytes = total - used;
        s.buffers = buffers.size();
        s.buffer_bytes = used;
        s.modules = modules;
        s.host_buffers = hosts.size();
        r.result = iso::encode_payload(s);
        break;
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
  if (mode == "sim") return sim(ch, end->shm);
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
    h[4] = std::byte{0x63};  // version 99
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
