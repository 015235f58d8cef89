/// @file
/// Unit tests (no GPU) of the isolated worker's message payloads and of WorkerLink's supervision
/// ([R9], [R10]) against isolated_peer in `serve` mode: exactly-once answers across kills, poisoning
/// and deadlines, replay of queued requests, stale handles, the breaker, shutdown.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/isolated/messages.hpp"
#include "runtime/isolated/worker_link.hpp"

namespace cuactor::runtime::isolated {
namespace {

using namespace std::chrono_literals;
using Outcome = Result<std::vector<std::byte>>;

// ---- payloads ----------------------------------------------------------------------------------

TEST(IsolatedMessages, LaunchRoundTripsAndRejectsBadArguments) {
  LaunchMsg m;
  m.module = 3;
  m.kernel = "saxpy";
  m.grid = {4, 1, 1};
  m.block = {128, 1, 1};
  m.args.push_back({LaunchArg::Kind::buffer_rw, {}, 11, 64});
  m.args.push_back({LaunchArg::Kind::value, {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}}, 0, 0});
  auto p = encode_payload(m);
  auto d = LaunchMsg::decode(p);
  ASSERT_TRUE(d.has_value()) << d.error().to_string();
  EXPECT_EQ(d->kernel, "saxpy");
  EXPECT_EQ(d->grid[0], 4u);
  ASSERT_EQ(d->args.size(), 2u);
  EXPECT_EQ(d->args[0].buffer, 11u);
  EXPECT_EQ(d->args[0].buffer_offset, 64u);
  EXPECT_EQ(d->args[1].value.size(), 4u);

  m.args[1].value.clear();  // an empty value argument
  auto bad = LaunchMsg::decode(encode_payload(m));
  ASSERT_FALSE(bad.has_value());
  EXPECT_TRUE(bad.error() == errc::protocol_error);
  EXPECT_NE(bad.error().message().find("argument 1 has 0 bytes"), std::string::npos) << bad.error().message();

  for (std::size_t cut = 0; cut < p.size(); ++cut) {  // every truncation is an error, never a crash
    auto t = LaunchMsg::decode(std::span<const std::byte>(p.data(), cut));
    EXPECT_FALSE(t.has_value()) << "cut at " << cut;
  }
}

TEST(IsolatedMessages, ErrorsKeepTheirCategoryAcrossTheWire) {
  ReplyMsg r;
  r.error = Error(std::error_code(700, cuda_runtime_category()), "illegal address in kernel k");
  auto d = ReplyMsg::decode(encode_payload(r));
  ASSERT_TRUE(d.has_value());
  ASSERT_TRUE(d->error.has_value());
  EXPECT_EQ(d->error->code(), std::error_code(700, cuda_runtime_category()));
  EXPECT_EQ(d->error->message(), "illegal address in kernel k");

  r.error = Error(std::make_error_code(std::errc::io_error), "disk");
  d = ReplyMsg::decode(encode_payload(r));
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(*d->error == errc::internal);  // foreign categories arrive as internal, named in the message
  EXPECT_NE(d->error->message().find("generic"), std::string::npos);

  Writer w;
  w.put_bool(true).put(std::uint8_t{9}).put_i32(1).put_string("x");  // unknown category id
  EXPECT_FALSE(ReplyMsg::decode(w.take()).has_value());
  FillMsg f;
  f.pattern.resize(3);
  EXPECT_FALSE(FillMsg::decode(encode_payload(f)).has_value());
}

// ---- supervision -------------------------------------------------------------------------------

/// Records each handler call per request tag so that tests can check exactly-once.
class Answers {
 public:
  ReplyHandler handler(int tag) {
    return [this, tag](Outcome o, std::uint64_t) {
      std::lock_guard lock(mutex_);
      calls_[tag].push_back(std::move(o));
      cv_.notify_all();
    };
  }
  /// Waits until `tag` was answered and returns its (first) outcome.
  Outcome wait(int tag, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [&] { return !calls_[tag].empty(); }))
      return cuda::std::unexpected<Error>(Error(errc::timeout, "test: no answer for tag " + std::to_string(tag)));
    return calls_[tag].front();
  }
  std::size_t count(int tag) {
    std::lock_guard lock(mutex_);
    return calls_[tag].size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<int, std::vector<Outcome>> calls_;
};

LinkOptions peer_options() {
  LinkOptions o;
  o.executable = ISOLATED_PEER;
  o.args = {"serve"};
  o.shm_bytes = 1 << 20;
  o.start_timeout = 10s;
  o.grace = 2s;
  return o;
}

LinkRequest request(MsgKind kind, std::vector<std::byte> payload, ReplyHandler done, std::uint64_t generation = 0) {
  LinkRequest r;
  r.kind = kind;
  r.payload = std::move(payload);
  r.done = std::move(done);
  r.generation = generation;
  r.name = kind_name(static_cast<std::uint16_t>(kind));
  return r;
}

std::vector<std::byte> sleep_ms(std::uint32_t ms) {
  Writer w;
  w.put(ms);
  return w.take();
}

/// Waits until the link runs a worker of generation >= `gen`.
bool wait_ready(WorkerLink& link, std::uint64_t gen, std::chrono::milliseconds timeout = 10s) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    auto s = link.stats();
    if (s.worker_pid > 0 && s.generation >= gen) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

TEST(IsolatedLink, RoundTripAndRemoteErrors) {
  auto state = std::make_shared<DeviceState>(0);
  auto link = WorkerLink::start(state, peer_options());
  ASSERT_TRUE(link.has_value()) << link.error().to_string();
  EXPECT_EQ(state->generation(), 1u);
  EXPECT_TRUE(state->accepting_ops());
  EXPECT_GT((*link)->stats().worker_pid, 0);
  EXPECT_EQ((*link)->stats().hello.shm_bytes, 1u << 20);
  Answers a;
  (*link)->post(request(MsgKind::echo, {std::byte{42}}, a.handler(1)));
  (*link)->post(request(MsgKind::fill, {}, a.handler(2)));
  auto r1 = a.wait(1);
  ASSERT_TRUE(r1.has_value()) << r1.error().to_string();
  EXPECT_EQ(r1->size(), 1u);
  auto r2 = a.wait(2);
  ASSERT_FALSE(r2.has_value());
  EXPECT_TRUE(r2.error() == errc::invalid_argument);
  EXPECT_NE(r2.error().message().find("peer refuses fill"), std::string::npos);
  (*link)->shutdown();
  EXPECT_FALSE(state->accepting_ops());
  EXPECT_EQ(a.count(1), 1u);
  EXPECT_EQ(a.count(2), 1u);
}

TEST(IsolatedLink, KilledWorkerFailsInFlightOnceAndIsReplaced) {
  auto state = std::make_shared<DeviceState>(0);
  auto link = WorkerLink::start(state, peer_options());
  ASSERT_TRUE(link.has_value()) << link.error().to_string();
  Answers a;
  (*link)->post(request(MsgKind::stats, sleep_ms(5000), a.handler(1)));
  std::this_thread::sleep_for(100ms);
  const auto old_pid = (*link)->stats().worker_pid;
  (*link)->kill_worker(SIGKILL);
  auto r = a.wait(1);
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(r.error() == errc::worker_lost) << r.error().to_string();
  ASSERT_TRUE(wait_ready(**link, 3));
  auto s = (*link)->stats();
  EXPECT_NE(s.worker_pid, old_pid);
  EXPECT_EQ(s.restarts, 1u);
  EXPECT_EQ(s.losses, 1u);
  EXPECT_EQ(state->generation(), 3u);  // +1 at the loss, +1 when the new worker was ready
  (*link)->post(request(MsgKind::echo, {}, a.handler(2)));
  EXPECT_TRUE(a.wait(2).has_value());
  EXPECT_EQ(a.count(1), 1u);
}

TEST(IsolatedLink, CrashWithoutAMessageIsWorkerLost) {
  auto link = WorkerLink::start(std::make_shared<DeviceState>(0), peer_options());
  ASSERT_TRUE(link.has_value());
  Answers a;
  (*link)->post(request(MsgKind::allocate, {}, a.handler(1)));
  auto r = a.wait(1);
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(r.error() == errc::worker_lost);
}

TEST(IsolatedLink, PoisonedWorkerFailsInFlightWithContextPoisoned) {
  auto opts = peer_options();
  opts.max_in_flight = 8;
  auto link = WorkerLink::start(std::make_shared<DeviceState>(0), opts);
  ASSERT_TRUE(link.has_value());
  Answers a;
  (*link)->post(request(MsgKind::launch, {}, a.handler(1)));
  auto r = a.wait(1);
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(r.error() == errc::context_poisoned) << r.error().to_string();
  EXPECT_NE(r.error().message().find("illegal address"), std::string::npos);
  ASSERT_TRUE(wait_ready(**link, 3));
}

TEST(IsolatedLink, MissedDeadlineKillsTheWorker) {
  auto link = WorkerLink::start(std::make_shared<DeviceState>(0), peer_options());
  ASSERT_TRUE(link.has_value());
  Answers a;
  auto req = request(MsgKind::stats, sleep_ms(60000), a.handler(1));
  req.deadline = 200ms;
  const auto t0 = std::chrono::steady_clock::now();
  (*link)->post(std::move(req));
  auto r = a.wait(1);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(r.error() == errc::worker_lost);
  EXPECT_NE(r.error().message().find("deadline"), std::string::npos) << r.error().message();
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 3s);
  ASSERT_TRUE(wait_ready(**link, 3));
}

TEST(IsolatedLink, QueuedRequestsAreReplayedInOrderAndStaleOnesRefused) {
  auto opts = peer_options();
  opts.max_in_flight = 1;
  auto state = std::make_shared<DeviceState>(0);
  auto link = WorkerLink::start(state, opts);
  ASSERT_TRUE(link.has_value());
  std::mutex order_mutex;
  std::vector<int> order;
  Answers a;
  auto tracked = [&](int tag) {
    return [&, tag, h = a.handler(tag)](Outcome o, std::uint64_t gen) {
      {
        std::lock_guard lock(order_mutex);
        order.push_back(tag);
      }
      h(std::move(o), gen);
    };
  };
  (*link)->post(request(MsgKind::stats, sleep_ms(5000), tracked(1)));                          // in flight
  for (int tag = 2; tag <= 6; ++tag) (*link)->post(request(MsgKind::echo, {}, tracked(tag)));  // queued
  (*link)->post(request(MsgKind::echo, {}, tracked(7), /*generation=*/1));  // names a handle of worker 1
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ((*link)->stats().queued, 6u);
  (*link)->kill_worker(SIGKILL);
  EXPECT_TRUE(a.wait(1).error() == errc::worker_lost);
  for (int tag = 2; tag <= 6; ++tag) EXPECT_TRUE(a.wait(tag).has_value()) << tag;
  auto stale = a.wait(7);
  ASSERT_FALSE(stale.has_value());
  EXPECT_TRUE(stale.error() == errc::stale_handle) << stale.error().to_string();
  std::lock_guard lock(order_mutex);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
}

TEST(IsolatedLink, BreakerOpensAfterTooManyLosses) {
  auto opts = peer_options();
  opts.max_losses = 1;
  std::atomic<int> escalations{0};
  opts.on_escalation = [&](const Error&) { ++escalations; };
  auto state = std::make_shared<DeviceState>(0);
  auto link = WorkerLink::start(state, opts);
  ASSERT_TRUE(link.has_value());
  Answers a;
  (*link)->post(request(MsgKind::allocate, {}, a.handler(1)));  // loss 1
  EXPECT_TRUE(a.wait(1).error() == errc::worker_lost);
  ASSERT_TRUE(wait_ready(**link, 3));
  (*link)->post(request(MsgKind::allocate, {}, a.handler(2)));  // loss 2 > 1: open
  EXPECT_TRUE(a.wait(2).error() == errc::worker_lost);
  const auto until = std::chrono::steady_clock::now() + 5s;
  while ((!(*link)->stats().circuit_open || escalations.load() == 0) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);  // the hook runs after the in-flight answers
  EXPECT_TRUE((*link)->stats().circuit_open);
  (*link)->post(request(MsgKind::echo, {}, a.handler(3)));
  EXPECT_TRUE(a.wait(3).error() == errc::circuit_open);
  EXPECT_EQ(escalations.load(), 1);
}

TEST(IsolatedLink, ShutdownAnswersEverythingAndReapsTheWorker) {
  auto opts = peer_options();
  opts.max_in_flight = 1;
  opts.grace = 300ms;
  auto link = WorkerLink::start(std::make_shared<DeviceState>(0), opts);
  ASSERT_TRUE(link.has_value());
  const auto pid = (*link)->stats().worker_pid;
  Answers a;
  (*link)->post(request(MsgKind::stats, sleep_ms(100), a.handler(1)));
  (*link)->post(request(MsgKind::echo, {}, a.handler(2)));
  (*link)->post(request(MsgKind::stats, sleep_ms(100), a.handler(3)));
  std::this_thread::sleep_for(20ms);
  (*link)->shutdown();
  EXPECT_TRUE(a.wait(1).has_value());  // in flight: finished within the grace period
  // Queued at shutdown: answered device_shutting_down (unless already sent).
  for (int tag : {2, 3}) {
    auto r = a.wait(tag);
    EXPECT_TRUE(r.has_value() || r.error() == errc::device_shutting_down) << r.error().to_string();
  }
  (*link)->post(request(MsgKind::echo, {}, a.handler(4)));
  EXPECT_TRUE(a.wait(4).error() == errc::device_shutting_down);
  EXPECT_EQ(::kill(static_cast<pid_t>(pid), 0), -1);  // reaped
}

TEST(IsolatedLink, StartFailureIsATypedError) {
  auto opts = peer_options();
  opts.executable = "/nonexistent/cuactor-worker";
  auto link = WorkerLink::start(std::make_shared<DeviceState>(0), opts);
  ASSERT_FALSE(link.has_value());
  EXPECT_TRUE(link.error() == errc::worker_lost);
}

TEST(IsolatedLink, ConcurrentRequestsAcrossKillsAreAnsweredExactlyOnce) {
  auto opts = peer_options();
  opts.max_losses = 100;
  auto link = WorkerLink::start(std::make_shared<DeviceState>(0), opts);
  ASSERT_TRUE(link.has_value());
  constexpr int kThreads = 4, kPerThread = 300;
  std::vector<std::atomic<int>> calls(kThreads * kPerThread);
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int tag = t * kPerThread + i;
        (*link)->post(request(MsgKind::echo, {std::byte{1}}, [&, tag](Outcome o, std::uint64_t) {
          ++calls[tag];
          ++(o ? ok : failed);
        }));
        if (i % 50 == 0) std::this_thread::sleep_for(2ms);
      }
    });
  for (int k = 0; k < 3; ++k) {
    std::this_thread::sleep_for(20ms);
    (*link)->kill_worker(SIGKILL);
  }
  for (auto& th : threads) th.join();
  (*link)->shutdown();
  int doubled = 0, lost = 0;
  for (auto& c : calls) {
    if (c.load() == 0) ++lost;
    if (c.load() > 1) ++doubled;
  }
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(doubled, 0);
  EXPECT_EQ(ok.load() + failed.load(), kThreads * kPerThread);
  EXPECT_GT(ok.load(), 0);
}

}  // namespace
}  // namespace cuactor::runtime::isolated
