/// @file
/// Isolated mode drills on a real device ([R8]-[R10]): the real cuactor-worker behind WorkerLink.
/// Copies through the page-locked shared region, a launch of a registered module, and the faults:
/// illegal address, kill -9 in the middle of a long kernel, a kernel that never ends (deadline), OOM
/// (the request fails, the worker stays).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <iterator>
#include <thread>

#include "runtime/isolated/messages.hpp"
#include "runtime/isolated/worker_link.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::runtime::isolated {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<std::byte>;

/// Posts one request and waits for its answer.
Result<Bytes> call(WorkerLink& link, MsgKind kind, Bytes payload, std::uint64_t generation = 0,
                   std::optional<std::chrono::milliseconds> deadline = std::nullopt) {
  auto promise = std::make_shared<std::promise<Result<Bytes>>>();
  auto future = promise->get_future();
  LinkRequest r;
  r.kind = kind;
  r.payload = std::move(payload);
  r.generation = generation;
  r.deadline = deadline;
  r.name = kind_name(static_cast<std::uint16_t>(kind));
  r.done = [promise](Result<Bytes> o, std::uint64_t) { promise->set_value(std::move(o)); };
  link.post(std::move(r));
  if (future.wait_for(120s) != std::future_status::ready)
    return fail(errc::timeout, "test: no answer within 120 s (a hang)");
  return future.get();
}

template <class M>
Bytes enc(const M& m) {
  return encode_payload(m);
}

class IsolatedGpu : public test_support::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    state_ = std::make_shared<DeviceState>(0);
    LinkOptions o;
    o.executable = CUACTOR_WORKER_EXE;
    o.args = {"--device", "0"};
    o.shm_bytes = 64u << 20;
    o.max_losses = 100;  // the drills lose workers on purpose
    auto link = WorkerLink::start(state_, o);
    ASSERT_TRUE(link.has_value()) << link.error().to_string();
    link_ = std::move(*link);
  }
  void TearDown() override {
    if (link_) link_->shutdown();
  }

  std::uint64_t allocate(std::uint64_t bytes) {
    auto r = call(*link_, MsgKind::allocate, enc(AllocateMsg{bytes}));
    EXPECT_TRUE(r.has_value()) << r.error().to_string();
    if (!r) return 0;
    return BufferReply::decode(*r)->buffer;
  }
  std::uint64_t load_test_module() {
    std::ifstream f(RUNTIME_TEST_PTX, std::ios::binary);
    Bytes image;
    for (std::istreambuf_iterator<char> it(f), end; it != end; ++it) image.push_back(static_cast<std::byte>(*it));
    auto r = call(*link_, MsgKind::load_module, enc(LoadModuleMsg{image}));
    EXPECT_TRUE(r.has_value()) << r.error().to_string();
    return r ? ModuleReply::decode(*r)->module : 0;
  }
  static LaunchArg value_arg(const void* p, std::size_t n) {
    LaunchArg a;
    a.value.resize(n);
    std::memcpy(a.value.data(), p, n);
    return a;
  }
  Result<Bytes> spin(std::uint64_t module, long long cycles, std::optional<std::chrono::milliseconds> deadline = {}) {
    LaunchMsg m;
    m.module = module;
    m.kernel = "cuactor_rt_spin";
    m.args.push_back(value_arg(&cycles, sizeof cycles));
    return call(*link_, MsgKind::launch, enc(m), state_->generation(), deadline);
  }
  /// The device answers again after a loss: a fresh allocation and copy work on the new worker.
  void expect_recovered() {
    const auto b = allocate(4096);
    ASSERT_NE(b, 0u);
    auto r = call(*link_, MsgKind::copy_to_device, enc(CopyMsg{b, 0, 0, 4096}), state_->generation());
    EXPECT_TRUE(r.has_value()) << r.error().to_string();
  }

  std::shared_ptr<DeviceState> state_;
  std::shared_ptr<WorkerLink> link_;
};

TEST_F(IsolatedGpu, CopiesRoundTripThroughPinnedSharedMemory) {
  EXPECT_TRUE(link_->stats().hello.shm_pinned);
  constexpr std::uint64_t n = 1u << 20;
  const auto b = allocate(n);
  auto shm = link_->shm().data();
  for (std::uint64_t i = 0; i < n; ++i) shm[i] = static_cast<std::byte>(i * 7 + 1);
  ASSERT_TRUE(call(*link_, MsgKind::copy_to_device, enc(CopyMsg{b, 0, 0, n}), state_->generation()).has_value());
  ASSERT_TRUE(call(*link_, MsgKind::copy_to_host, enc(CopyMsg{b, 0, n, n}), state_->generation()).has_value());
  EXPECT_EQ(std::memcmp(shm, shm + n, n), 0);
  // Out of range: refused with invalid_argument naming the range, nothing copied, worker stays.
  auto bad = call(*link_, MsgKind::copy_to_device, enc(CopyMsg{b, n - 8, 0, 16}), state_->generation());
  ASSERT_FALSE(bad.has_value());
  EXPECT_TRUE(bad.error() == errc::invalid_argument) << bad.error().to_string();
  EXPECT_EQ(link_->stats().losses, 0u);
}

TEST_F(IsolatedGpu, LaunchesAKernelOfARegisteredModule) {
  const auto module = load_test_module();
  constexpr int n = 1000;
  const auto x = allocate(n * sizeof(float));
  const auto y = allocate(n * sizeof(float));
  auto* f = reinterpret_cast<float*>(link_->shm().data());
  for (int i = 0; i < n; ++i) f[i] = static_cast<float>(i);
  ASSERT_TRUE(call(*link_, MsgKind::copy_to_device, enc(CopyMsg{x, 0, 0, n * 4}), state_->generation()).has_value());
  FillMsg one{y, 0, n, {}};
  const float v = 1.0f;
  one.pattern.resize(4);
  std::memcpy(one.pattern.data(), &v, 4);
  ASSERT_TRUE(call(*link_, MsgKind::fill, enc(one), state_->generation()).has_value());
  LaunchMsg m;
  m.module = module;
  m.kernel = "cuactor_rt_axpy";
  m.grid = {(n + 255) / 256, 1, 1};
  m.block = {256, 1, 1};
  const float a = 2.0f;
  m.args.push_back(value_arg(&a, 4));
  m.args.push_back({LaunchArg::Kind::buffer_ro, {}, x, 0});
  m.args.push_back({LaunchArg::Kind::buffer_rw, {}, y, 0});
  m.args.push_back(value_arg(&n, 4));
  auto r = call(*link_, MsgKind::launch, enc(m), state_->generation());
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  ASSERT_TRUE(call(*link_, MsgKind::copy_to_host, enc(CopyMsg{y, 0, 0, n * 4}), state_->generation()).has_value());
  for (int i = 0; i < n; ++i) ASSERT_EQ(f[i], 2.0f * static_cast<float>(i) + 1.0f) << i;
  // A wrong argument size is refused by the parameter check, not launched.
  m.args.pop_back();
  auto bad = call(*link_, MsgKind::launch, enc(m), state_->generation());
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(classify(bad.error().code()), FailureClass::request);
}

TEST_F(IsolatedGpu, IllegalAddressReplacesTheWorker) {
  const auto module = load_test_module();
  const auto pid = link_->stats().worker_pid;
  const auto gen = state_->generation();
  LaunchMsg m;
  m.module = module;
  m.kernel = "cuactor_rt_fault";
  const int value = 1;
  m.args.push_back(value_arg(&value, 4));
  auto r = call(*link_, MsgKind::launch, enc(m), gen);
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(r.error() == errc::context_poisoned) << r.error().to_string();
  // Old handles are stale; the new worker serves requests.
  auto stale = call(*link_, MsgKind::copy_to_device, enc(CopyMsg{1, 0, 0, 4}), gen);
  ASSERT_FALSE(stale.has_value());
  EXPECT_TRUE(stale.error() == errc::stale_handle) << stale.error().to_string();
  expect_recovered();
  EXPECT_NE(link_->stats().worker_pid, pid);
  EXPECT_GE(state_->generation(), gen + 2);
}

TEST_F(IsolatedGpu, KillDuringALongKernelFailsItOnce) {
  const auto module = load_test_module();
  auto pending = std::async(std::launch::async, [&] { return spin(module, 20'000'000'000ll); });  // ~10 s
  std::this_thread::sleep_for(500ms);
  link_->kill_worker(SIGKILL);
  auto r = pending.get();
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(r.error() == errc::worker_lost) << r.error().to_string();
  expect_recovered();
}

TEST_F(IsolatedGpu, NeverEndingKernelMissesItsDeadline) {
  const auto module = load_test_module();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = spin(module, 1ll << 62, 1000ms);
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(r.error() == errc::worker_lost) << r.error().to_string();
  EXPECT_NE(r.error().message().find("deadline"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  expect_recovered();
}

TEST_F(IsolatedGpu, OutOfMemoryFailsTheRequestAndTheWorkerStays) {
  const auto pid = link_->stats().worker_pid;
  auto r = call(*link_, MsgKind::allocate, enc(AllocateMsg{1ull << 50}));  // 1 PiB
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(classify(r.error().code()), FailureClass::request) << r.error().to_string();
  EXPECT_EQ(link_->stats().worker_pid, pid);
  EXPECT_EQ(link_->stats().losses, 0u);
  expect_recovered();
}

// The client-exit drill runs through the public API: isolated_actor_gpu_test.cpp.

}  // namespace
}  // namespace cuactor::runtime::isolated
