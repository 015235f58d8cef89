/// @file
/// The isolated backend ([R10]) against the CPU stand-in worker (isolated_peer sim; no GPU, CI):
/// commands become worker messages, copies larger than the shared region are chunked, host closures
/// answer `unsupported`, handles of a lost worker are stale, and every request is answered exactly
/// once when the worker dies with requests in flight and queued.
#include "runtime/isolated/isolated_backend.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "cuactor/graph/worker_capture.hpp"
#include "cuactor/runtime/device_actor.hpp"
#include "cuactor/runtime/worker_op.hpp"
#include "runtime/isolated/host_copy.hpp"
#include "runtime/isolated/shm_ring.hpp"

namespace cuactor::runtime::isolated {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;

template <class R>
std::tuple<std::error_code, R> wait(std::future<std::tuple<std::error_code, R>> f) {
  if (f.wait_for(20s) != std::future_status::ready) {
    ADD_FAILURE() << "no answer within 20 s";
    return {make_error_code(errc::timeout), R{}};
  }
  return f.get();
}

ActorOptions sim_options() {
  ActorOptions o;
  o.isolation = Isolation::worker;
  o.worker_path = ISOLATED_PEER;
  o.shared_bytes = 256u << 10;  // small: copies of a few MiB take many chunks
  o.worker_start_timeout = 10s;
  o.breaker.max_poisonings = 100;
  return o;
}

DeviceActor sim_actor(ActorOptions o = sim_options()) {
  auto b = IsolatedBackend::start(0, o, {"sim"});
  EXPECT_TRUE(b.has_value()) << b.error().to_string();
  return DeviceActor(b ? std::shared_ptr<detail::ActorBackend>(*b) : nullptr);
}

/// Waits until the actor runs a worker at a generation above `above`.
bool wait_new_worker(const DeviceActor& actor, std::uint64_t above) {
  for (int i = 0; i < 200; ++i) {
    const auto s = actor.stats();
    if (s.worker_pid > 0 && s.generation > above && s.circuit == CircuitState::closed) return true;
    std::this_thread::sleep_for(25ms);
  }
  return false;
}

std::shared_ptr<const ModuleImage> sim_module() {
  return ModuleImage::from_ptx("// the stand-in runs kernels by name\n");
}

TEST(IsolatedShmRing, HandsOutRangesInOrderAndTakesThemBackInAnyOrder) {
  ShmRing ring(100);
  EXPECT_EQ(ring.take(40), 0u);
  EXPECT_EQ(ring.take(40), 40u);
  EXPECT_FALSE(ring.take(40).has_value());  // 20 left at the end, none at the front
  ring.release(40);                         // out of order: the oldest range still bounds the space
  EXPECT_FALSE(ring.take(40).has_value());
  ring.release(0);
  EXPECT_EQ(ring.used(), 0u);
  EXPECT_EQ(ring.take(100), 0u);
  EXPECT_FALSE(ring.take(1).has_value());
  ring.release(0);
  EXPECT_EQ(ring.take(60), 0u);
  EXPECT_EQ(ring.take(30), 60u);
  ring.release(0);
  EXPECT_EQ(ring.take(50), 0u);  // wraps: [90, 100) is too small, [0, 60) is free
  EXPECT_FALSE(ring.take(20).has_value());
  EXPECT_FALSE(ring.take(0).has_value());
  EXPECT_FALSE(ring.take(101).has_value());
}

TEST(IsolatedHostCopy, CopiesEveryByteWhetherSplitOrNot) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4097}, (std::size_t{20} << 20) + 13}) {
    std::vector<std::byte> from(n), to(n);
    for (std::size_t i = 0; i < n; ++i) from[i] = static_cast<std::byte>(i * 131 + 7);
    host_copy(to.data(), from.data(), n);
    EXPECT_TRUE(to == from) << n << " bytes";
  }
}

TEST(IsolatedBackend, MapsCommandsToWorkerMessagesAndChunksLargeCopies) {
  auto actor = sim_actor();
  auto [ec, ref] = wait(actor.allocate<std::uint32_t>(1u << 20, asio::use_future));  // 4 MiB: 64 chunks
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(ref.size(), 1u << 20);
  EXPECT_EQ(ref.generation(), actor.state()->generation());
  ASSERT_TRUE(ref.access().has_value());
  EXPECT_NE(ref.allocation()->remote_id(), 0u);
  EXPECT_EQ(ref.raw_device_ptr().error().code(), make_error_code(errc::unsupported));

  std::vector<std::uint32_t> data(ref.size());
  std::iota(data.begin(), data.end(), 7u);
  auto [ec2, same] = wait(actor.copy_to_device(ref, data, asio::use_future));
  ASSERT_FALSE(ec2) << ec2.message();
  auto [ec3, back] = wait(actor.copy_to_host(ref, asio::use_future));
  ASSERT_FALSE(ec3) << ec3.message();
  EXPECT_EQ(back, data);

  // The shared-vector overload: no staging copy at the call.
  auto shared = std::make_shared<const std::vector<std::uint32_t>>(ref.size(), 0x5au);
  ASSERT_FALSE(std::get<0>(wait(actor.copy_to_device(ref, shared, asio::use_future))));
  EXPECT_EQ(std::get<1>(wait(actor.copy_to_host(ref, asio::use_future))), *shared);

  auto [ec4, filled] = wait(actor.fill(ref, 0xabcdu, asio::use_future));
  ASSERT_FALSE(ec4) << ec4.message();
  auto [ec5, back2] = wait(actor.copy_to_host(ref, asio::use_future));
  ASSERT_FALSE(ec5);
  EXPECT_EQ(back2, std::vector<std::uint32_t>(ref.size(), 0xabcdu));

  // A launch from a module image: loaded once into the worker, then run by name ("add" in the stand-in).
  auto module = sim_module();
  for (int i = 0; i < 3; ++i) {
    auto [ecl, none] = wait(actor.launch(module, "add", {}, KernelArgs::make(ref, 5u), asio::use_future));
    ASSERT_FALSE(ecl) << ecl.message();
  }
  auto [ec6, back3] = wait(actor.copy_to_host(ref, asio::use_future));
  ASSERT_FALSE(ec6);
  EXPECT_EQ(back3[0], 0xabcdu + 15u);

  // Bad input is refused before it reaches the worker, naming the rule.
  std::vector<std::uint32_t> too_big(ref.size() + 1);
  auto [ec7, r7] = wait(actor.copy_to_device(ref, too_big, asio::use_future));
  EXPECT_EQ(ec7, make_error_code(errc::invalid_argument));

  const auto s = actor.stats();
  EXPECT_TRUE(s.isolated);
  EXPECT_EQ(s.generation, 1u);
  EXPECT_GT(s.worker_pid, 0);
  EXPECT_TRUE(s.memory_known);
  EXPECT_EQ(s.total_bytes, 1ull << 30);
  EXPECT_EQ(s.total_bytes - s.free_bytes, 4u << 20);  // the one live buffer
  EXPECT_EQ(s.worker_buffers, 1u);
  EXPECT_EQ(s.worker_buffer_bytes, 4u << 20);
  EXPECT_EQ(s.failed, 1u);
  EXPECT_EQ(s.circuit, CircuitState::closed);

  // The last reference frees the buffer in the worker.
  ref = {};
  same = {};
  filled = {};
  for (int i = 0; i < 100 && actor.stats().free_bytes != s.total_bytes; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(actor.stats().free_bytes, s.total_bytes);
  EXPECT_EQ(actor.stats().worker_buffers, 0u);
}

TEST(IsolatedBackend, HostClosuresAndLocalKernelsAnswerUnsupported) {
  auto actor = sim_actor();
  auto [ec, v] = wait(actor.submit<int>(
      {}, {}, [](OpContext&) -> Result<int> { return 1; }, asio::use_future));
  EXPECT_EQ(ec, make_error_code(errc::unsupported));
  auto [ec2, v2] = wait(actor.execute<int>([](OpContext&) -> Result<int> { return 1; }, asio::use_future));
  EXPECT_EQ(ec2, make_error_code(errc::unsupported));
  auto [ec3, v3] = wait(actor.launch(nullptr, gpu::Kernel{}, {}, KernelArgs{}, asio::use_future));
  EXPECT_EQ(ec3, make_error_code(errc::unsupported));
  // The device goes on.
  auto [ec4, ref] = wait(actor.allocate<float>(16, asio::use_future));
  EXPECT_FALSE(ec4);
}

TEST(IsolatedBackend, WorkerOpsCarryTheirPayloadAndBufferIdsAndReplyTheHandlersBytes) {
  auto actor = sim_actor();
  auto [ea, a] = wait(actor.allocate<float>(64, asio::use_future));
  auto [eb, b] = wait(actor.allocate<float>(64, asio::use_future));
  ASSERT_FALSE(ea || eb);
  WorkerOpCmd cmd;
  cmd.op = 0x7abc;
  cmd.payload = {std::byte{1}, std::byte{2}, std::byte{3}};
  cmd.buffers = {{a.allocation(), false}, {b.allocation(), true}};
  bool closure_ran = false;
  auto [ec, bytes] = wait(actor.submit_portable<std::vector<std::byte>>(
      "custom",
      [&](OpContext&) -> Result<std::vector<std::byte>> {
        closure_ran = true;  // the in-process form; never on an isolated actor
        return std::vector<std::byte>{};
      },
      cmd, [](std::vector<std::byte>&& out) -> Result<std::vector<std::byte>> { return out; }, asio::use_future));
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_FALSE(closure_ran);
  auto seen = WorkerOpMsg::decode(bytes);  // the stand-in answers with the request it received
  ASSERT_TRUE(seen.has_value()) << seen.error().to_string();
  EXPECT_EQ(seen->op, 0x7abc);
  EXPECT_EQ(seen->payload, cmd.payload);
  ASSERT_EQ(seen->buffers.size(), 2u);
  EXPECT_EQ(seen->buffers[0].buffer, a.allocation()->remote_id());
  EXPECT_FALSE(seen->buffers[0].written);
  EXPECT_EQ(seen->buffers[1].buffer, b.allocation()->remote_id());
  EXPECT_TRUE(seen->buffers[1].written);
  // A conversion that fails answers the request with its error.
  auto [ec2, v2] = wait(actor.submit_portable<int>(
      "custom", [](OpContext&) -> Result<int> { return 1; }, cmd,
      [](std::vector<std::byte>&&) -> Result<int> { return fail(errc::protocol_error, "bad reply"); },
      asio::use_future));
  EXPECT_EQ(ec2, make_error_code(errc::protocol_error));
  // Too many operands are refused before anything is sent.
  cmd.buffers.assign(kMaxWorkerOpBuffers + 1, {a.allocation(), false});
  auto [ec3, v3] = wait(actor.submit_portable<int>(
      "custom", [](OpContext&) -> Result<int> { return 1; }, cmd,
      [](std::vector<std::byte>&&) -> Result<int> { return 1; }, asio::use_future));
  EXPECT_EQ(ec3, make_error_code(errc::invalid_argument));
}

TEST(IsolatedBackend, HostBuffersCopyWithoutStagingAndOutliveTheirWorker) {
  auto actor = sim_actor();  // a 256 KiB staging region: the 1 MiB copies below would be chunked
  constexpr std::size_t n = 1u << 18;
  auto [eh, in] = wait(actor.allocate_host(n * sizeof(std::uint32_t), asio::use_future));
  ASSERT_FALSE(eh) << eh.message();
  ASSERT_TRUE(in);
  EXPECT_GE(in->shared_fd(), 0);
  std::iota(in->as<std::uint32_t>().begin(), in->as<std::uint32_t>().end(), 7u);
  auto [eo, out] = wait(actor.allocate_host(n * sizeof(std::uint32_t), asio::use_future));
  ASSERT_FALSE(eo) << eo.message();
  auto [ea, dev] = wait(actor.allocate<std::uint32_t>(n, asio::use_future));
  ASSERT_FALSE(ea);
  auto [e1, d1] = wait(actor.copy_to_device(dev, std::shared_ptr<const HostBuffer>(in), asio::use_future));
  ASSERT_FALSE(e1) << e1.message();
  auto [e2, back] = wait(actor.copy_to_host(dev, out, asio::use_future));
  ASSERT_FALSE(e2) << e2.message();
  EXPECT_EQ(back, out);
  EXPECT_TRUE(
      std::equal(in->as<std::uint32_t>().begin(), in->as<std::uint32_t>().end(), out->as<std::uint32_t>().begin()));
  EXPECT_EQ(actor.stats().worker_buffers, 1u);
  // The worker is lost: the host buffers are the client's and serve the next worker after one
  // registration there.
  const auto gen = actor.state()->generation();
  auto [ep, p] = wait(actor.launch(sim_module(), "poison", {}, KernelArgs{}, asio::use_future));
  EXPECT_EQ(ep, make_error_code(errc::context_poisoned));
  ASSERT_TRUE(wait_new_worker(actor, gen));
  auto [ea2, dev2] = wait(actor.allocate<std::uint32_t>(n, asio::use_future));
  ASSERT_FALSE(ea2);
  in->as<std::uint32_t>()[5] = 12345u;
  auto [e3, d3] = wait(actor.copy_to_device(dev2, std::shared_ptr<const HostBuffer>(in), asio::use_future));
  ASSERT_FALSE(e3) << e3.message();
  std::fill(out->as<std::uint32_t>().begin(), out->as<std::uint32_t>().end(), 0u);
  auto [e4, b4] = wait(actor.copy_to_host(dev2, out, asio::use_future));
  ASSERT_FALSE(e4) << e4.message();
  EXPECT_EQ(out->as<std::uint32_t>()[5], 12345u);
  EXPECT_EQ(out->as<std::uint32_t>()[n - 1], 7u + n - 1);
  // Dropping a host buffer releases its mapping in the worker.
  EXPECT_EQ(actor.stats().worker_host_buffers, 2u);
  in.reset();
  for (int i = 0; i < 100 && actor.stats().worker_host_buffers != 1u; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(actor.stats().worker_host_buffers, 1u);
  // Rejected before sending: zero bytes.
  auto [ez, z] = wait(actor.allocate_host(0, asio::use_future));
  EXPECT_EQ(ez, make_error_code(errc::invalid_argument));
}

TEST(IsolatedBackend, WorkerGraphsReplayAndGoStaleWithTheirWorker) {
  auto actor = sim_actor();
  EXPECT_EQ(actor.isolation(), Isolation::worker);
  auto capture = graph::WorkerCapture::begin(actor);
  ASSERT_TRUE(capture.has_value()) << capture.error().to_string();
  EXPECT_TRUE(capture->active());
  auto g = capture->end_capture();
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  EXPECT_FALSE(capture->active());
  EXPECT_EQ((*g)->id(), 7u);
  std::shared_ptr<const graph::WorkerGraph> graph = *g;
  auto [ec, v] = wait(graph::replay(actor, graph, asio::use_future));
  EXPECT_FALSE(ec) << ec.message();
  auto [ecn, vn] = wait(graph::replay(actor, std::shared_ptr<const graph::WorkerGraph>(), asio::use_future));
  EXPECT_EQ(ecn, make_error_code(errc::invalid_argument));
  // The worker that holds the graph is lost: the graph is stale, a capture begun there too.
  auto again = graph::WorkerCapture::begin(actor);
  ASSERT_TRUE(again.has_value());
  const auto gen = actor.state()->generation();
  auto [ecp, n] = wait(actor.launch(sim_module(), "poison", {}, KernelArgs{}, asio::use_future));
  EXPECT_EQ(ecp, make_error_code(errc::context_poisoned));
  ASSERT_TRUE(wait_new_worker(actor, gen));
  auto [ec2, v2] = wait(graph::replay(actor, graph, asio::use_future));
  EXPECT_EQ(ec2, make_error_code(errc::stale_handle));
  auto ended = again->end_capture();
  ASSERT_FALSE(ended.has_value());
  EXPECT_EQ(ended.error().code(), make_error_code(errc::stale_handle));
}

TEST(IsolatedBackend, HandlesOfALostWorkerAreStaleAndTheNextRequestRunsOnANewWorker) {
  auto actor = sim_actor();
  auto [ec, old] = wait(actor.allocate<float>(256, asio::use_future));
  ASSERT_FALSE(ec);
  const auto gen = actor.state()->generation();
  const auto pid = actor.stats().worker_pid;
  auto [ecp, n] = wait(actor.launch(sim_module(), "poison", {}, KernelArgs::make(old), asio::use_future));
  EXPECT_EQ(ecp, make_error_code(errc::context_poisoned));
  auto [ec2, fresh] = wait(actor.allocate<float>(256, asio::use_future));  // queued or sent after the loss
  ASSERT_FALSE(ec2) << ec2.message();
  EXPECT_GT(fresh.generation(), gen);
  EXPECT_TRUE(fresh.access().has_value());
  EXPECT_EQ(old.access().error().code(), make_error_code(errc::stale_handle));
  auto [ec3, r3] = wait(actor.fill(old, 1.0f, asio::use_future));
  EXPECT_EQ(ec3, make_error_code(errc::stale_handle));
  auto [ec4, r4] = wait(actor.fill(fresh, 1.0f, asio::use_future));
  EXPECT_FALSE(ec4);
  const auto s = actor.stats();
  EXPECT_EQ(s.worker_restarts, 1u);
  EXPECT_EQ(s.poisonings, 1u);
  EXPECT_NE(s.worker_pid, pid);
  old = {};  // its worker is gone: nothing is sent
}

TEST(IsolatedBackend, DeadlineKillsAHungWorker) {
  auto o = sim_options();
  o.request_deadline = 300ms;
  auto actor = sim_actor(o);
  const auto gen = actor.state()->generation();
  const auto t0 = std::chrono::steady_clock::now();
  auto [ec, n] = wait(actor.launch(sim_module(), "hang", {}, {}, asio::use_future));
  EXPECT_EQ(ec, make_error_code(errc::worker_lost));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  ASSERT_TRUE(wait_new_worker(actor, gen));
  auto [ec2, ref] = wait(actor.allocate<float>(16, asio::use_future));
  EXPECT_FALSE(ec2);
}

TEST(IsolatedBackend, EveryRequestIsAnsweredExactlyOnceWhenTheWorkerIsKilled) {
  auto actor = sim_actor();
  auto [ec, ref] = wait(actor.allocate<std::uint32_t>(1u << 18, asio::use_future));  // 1 MiB: 16 chunks
  ASSERT_FALSE(ec);
  auto module = sim_module();
  std::mutex mutex;
  std::map<std::uint64_t, std::vector<std::error_code>> answers;
  std::atomic<int> sent{0};
  auto record = [&](std::uint64_t tag) {
    return [&, tag](std::error_code e, auto&&...) {
      std::lock_guard lock(mutex);
      answers[tag].push_back(e);
    };
  };
  std::vector<std::uint32_t> data(ref.size(), 3u);
  // One slow launch in flight, then a mix of requests behind it (in flight and queued).
  std::uint32_t slow_ms = 400;
  actor.launch(module, "slow", {}, KernelArgs::make(slow_ms), record(0));
  ++sent;
  for (std::uint64_t tag = 1; tag <= 60; ++tag, ++sent) {
    switch (tag % 4) {
      case 0:
        actor.fill(ref, static_cast<std::uint32_t>(tag), record(tag));
        break;
      case 1:
        actor.copy_to_device(ref, data, record(tag));
        break;
      case 2:
        actor.copy_to_host(ref, record(tag));
        break;
      default:
        actor.allocate<float>(64, record(tag));
    }
  }
  std::this_thread::sleep_for(100ms);
  const auto gen = actor.state()->generation();
  ASSERT_EQ(::kill(static_cast<pid_t>(actor.stats().worker_pid), SIGKILL), 0);
  ASSERT_TRUE(wait_new_worker(actor, gen));
  // Everything is answered, once; what failed failed with a loss code or as stale.
  for (int i = 0; i < 400; ++i) {
    {
      std::lock_guard lock(mutex);
      if (static_cast<int>(answers.size()) == sent.load()) break;
    }
    std::this_thread::sleep_for(25ms);
  }
  std::this_thread::sleep_for(200ms);  // a second answer would arrive now
  std::lock_guard lock(mutex);
  ASSERT_EQ(static_cast<int>(answers.size()), sent.load());
  int failed = 0;
  for (const auto& [tag, codes] : answers) {
    ASSERT_EQ(codes.size(), 1u) << "request " << tag;
    if (!codes[0]) continue;
    ++failed;
    EXPECT_TRUE(codes[0] == make_error_code(errc::worker_lost) || codes[0] == make_error_code(errc::stale_handle) ||
                codes[0] == make_error_code(errc::context_poisoned))
        << "request " << tag << ": " << codes[0].message();
  }
  EXPECT_GE(failed, 1);  // at least the slow launch
  auto [ec2, fresh] = wait(actor.allocate<float>(16, asio::use_future));
  EXPECT_FALSE(ec2);
}

TEST(IsolatedBackend, ShutdownAnswersEverythingAndRefusesNewWork) {
  auto actor = sim_actor();
  std::atomic<int> answered{0};
  std::uint32_t slow_ms = 200;
  auto module = sim_module();
  for (int i = 0; i < 20; ++i)
    actor.launch(module, "slow", {}, KernelArgs::make(slow_ms), [&](std::error_code, auto&&...) { ++answered; });
  actor.shutdown();
  for (int i = 0; i < 200 && answered < 20; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(answered.load(), 20);
  auto [ec, r] = wait(actor.allocate<float>(1, asio::use_future));
  EXPECT_EQ(ec, make_error_code(errc::device_shutting_down));
}

TEST(IsolatedBackend, BadOptionsAreTypedErrors) {
  auto o = sim_options();
  o.shared_bytes = 1000;
  auto b = IsolatedBackend::start(0, o, {"sim"});
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error().code(), make_error_code(errc::invalid_argument));
  EXPECT_NE(b.error().message().find("shared_bytes=1000"), std::string::npos);
  o = sim_options();
  o.worker_path = "/nonexistent/cuactor-worker";
  b = IsolatedBackend::start(0, o, {"sim"});
  ASSERT_FALSE(b.has_value());
}

}  // namespace
}  // namespace cuactor::runtime::isolated
