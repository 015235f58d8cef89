// Completion tokens ([R5]) driven by a fake completion source standing in for CUDA's host-function
// thread: callback, use_future, use_awaitable and deferred, delivery on the handler's executor, and
// the error path (no GPU needed).
#include <gtest/gtest.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <future>
#include <thread>

#include "cuactor/runtime/device_actor.hpp"

namespace cuactor::runtime {
namespace {

namespace asio = boost::asio;

/// Completes every request it is given from its own thread, like cudaLaunchHostFunc's thread.
class FakeCompletionSource {
 public:
  ~FakeCompletionSource() {
    for (auto& t : threads_) t.join();
  }
  /// A `start` function for detail::initiate_op that answers with `value` or `ec`.
  template <class R>
  auto answer(R value, std::error_code ec = {}) {
    return [this, value, ec](auto op) {
      ++started;
      threads_.emplace_back([op = std::move(op), value, ec]() mutable {
        if (!ec) op->set_value(value);
        detail::OpRecord* raw = op.get();
        raw->complete(std::move(op), ec);
      });
    };
  }
  std::atomic<int> started{0};

 private:
  std::vector<std::thread> threads_;
};

template <class R, class Token, class Start>
auto fake_request(Token&& token, Start start) {
  return detail::initiate_op<R>(
      detail::OpKind::stream, "fake", {}, {}, [](OpContext&) -> Result<R> { return R{}; }, std::forward<Token>(token),
      std::move(start));
}

TEST(RuntimeTokens, Callback) {
  FakeCompletionSource source;
  std::promise<std::pair<std::error_code, int>> got;
  const auto caller = std::this_thread::get_id();
  std::promise<std::thread::id> ran_on;
  fake_request<int>(
      [&](std::error_code ec, int v) {
        ran_on.set_value(std::this_thread::get_id());
        got.set_value({ec, v});
      },
      source.answer(42));
  auto [ec, v] = got.get_future().get();
  EXPECT_FALSE(ec);
  EXPECT_EQ(v, 42);
  EXPECT_NE(ran_on.get_future().get(), caller);
}

TEST(RuntimeTokens, UseFutureValueAndError) {
  // std::error_code is not an Asio exception type: the future carries (error_code, value).
  FakeCompletionSource source;
  auto ok_future = fake_request<std::string>(asio::use_future, source.answer(std::string("gpu")));
  auto [ec1, v1] = ok_future.get();
  EXPECT_FALSE(ec1);
  EXPECT_EQ(v1, "gpu");
  auto err_future = fake_request<std::string>(asio::use_future,
                                              source.answer(std::string("unused"), make_error_code(errc::queue_full)));
  auto [ec2, v2] = err_future.get();
  EXPECT_EQ(ec2, make_error_code(errc::queue_full));
  EXPECT_TRUE(v2.empty());
}

TEST(RuntimeTokens, UseAwaitable) {
  FakeCompletionSource source;
  asio::io_context io;
  int value = 0;
  std::error_code error;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto [ec, v] = co_await fake_request<int>(asio::use_awaitable, source.answer(7));
        value = ec ? -1 : v;
        auto [ec2, v2] =
            co_await fake_request<int>(asio::use_awaitable, source.answer(0, make_error_code(errc::stale_handle)));
        error = ec2;
      },
      asio::detached);
  io.run();
  EXPECT_EQ(value, 7);
  EXPECT_EQ(error, make_error_code(errc::stale_handle));
}

TEST(RuntimeTokens, DeferredStartsOnlyWhenInvoked) {
  FakeCompletionSource source;
  auto op = fake_request<int>(asio::deferred, source.answer(5));
  EXPECT_EQ(source.started.load(), 0);
  auto f = std::move(op)(asio::use_future);
  EXPECT_EQ(std::get<1>(f.get()), 5);
  EXPECT_EQ(source.started.load(), 1);
}

TEST(RuntimeTokens, HandlerRunsOnItsExecutor) {
  FakeCompletionSource source;
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  std::thread::id io_thread;
  std::thread runner([&] {
    io_thread = std::this_thread::get_id();
    io.run();
  });
  std::promise<std::thread::id> ran_on;
  fake_request<int>(
      asio::bind_executor(io, [&](std::error_code, int) { ran_on.set_value(std::this_thread::get_id()); }),
      source.answer(1));
  const auto id = ran_on.get_future().get();
  guard.reset();
  runner.join();
  EXPECT_EQ(id, io_thread);
}

TEST(RuntimeTokens, InlineExecutorsNeverRunOnInternalThreads) {
  // use_future's and system_executor's handlers would run inline on the completing thread; from CUDA's
  // host-function thread (simulated here) they must be moved to the completion pool instead.
  std::promise<std::thread::id> ran_on;
  std::thread::id source_thread;
  auto start = [&](auto op) {
    std::thread([&, op = std::move(op)]() mutable {
      const detail::InternalThreadScope internal;
      source_thread = std::this_thread::get_id();
      op->set_value(3);
      detail::OpRecord* raw = op.get();
      raw->complete(std::move(op), {});
    }).join();
  };
  fake_request<int>(asio::bind_executor(asio::system_executor(),
                                        [&](std::error_code, int v) {
                                          EXPECT_EQ(v, 3);
                                          EXPECT_FALSE(detail::on_internal_thread());
                                          ran_on.set_value(std::this_thread::get_id());
                                        }),
                    start);
  EXPECT_NE(ran_on.get_future().get(), source_thread);
  auto f = fake_request<int>(asio::use_future, start);
  EXPECT_EQ(std::get<1>(f.get()), 3);
}

TEST(RuntimeTokens, OutstandingWorkKeepsIoContextRunning) {
  // io.run() must not return before the reply arrives: the pending request counts as work.
  FakeCompletionSource source;
  asio::io_context io;
  bool answered = false;
  fake_request<int>(asio::bind_executor(io, [&](std::error_code, int v) { answered = v == 9; }), source.answer(9));
  io.run();
  EXPECT_TRUE(answered);
}

TEST(RuntimeTokens, ErrorsCarryDefaultValue) {
  FakeCompletionSource source;
  std::promise<std::pair<std::error_code, std::vector<int>>> got;
  fake_request<std::vector<int>>(
      [&](std::error_code ec, std::vector<int> v) {
        got.set_value({ec, std::move(v)});
      },
      source.answer(std::vector<int>{1, 2}, make_error_code(errc::context_poisoned)));
  auto [ec, v] = got.get_future().get();
  EXPECT_EQ(ec, make_error_code(errc::context_poisoned));
  EXPECT_TRUE(v.empty());
}

TEST(RuntimeTokens, NegativeOrdinalIsNoDevice) {
  auto created = DeviceActor::create(-1);
  ASSERT_FALSE(created.has_value());
  EXPECT_EQ(created.error(), errc::no_device);
}

TEST(RuntimeTokens, RejectsBadOptions) {
  ActorOptions o;
  o.mailbox_capacity = 0;
  auto created = DeviceActor::create(0, o);
  ASSERT_FALSE(created.has_value());
  EXPECT_EQ(created.error(), errc::invalid_argument);
  EXPECT_NE(created.error().message().find("mailbox_capacity=0"), std::string::npos);
}

// The actor prefetches the next request of a batch before it runs it. An empty handle among the buffers is
// rejected only when the request runs, so the prefetch must skip it: an offset from a null pointer is
// undefined (UBSan's pointer-overflow check in the sanitizer build).
TEST(RuntimeTokens, PrefetchSkipsEmptyHandles) {
  auto state = std::make_shared<DeviceState>(0);
  auto allocation =
      std::make_shared<DeviceAllocation>(reinterpret_cast<void*>(std::uintptr_t{0x7f0000001000}), 64, state, nullptr);
  Reads reads;
  reads.add(std::shared_ptr<DeviceAllocation>{}).add(allocation);
  Writes writes;
  writes.add(std::shared_ptr<DeviceAllocation>{});
  std::shared_ptr<detail::OpRecord> captured;
  auto answer = detail::initiate_op<int>(
      detail::OpKind::stream, "prefetch", std::move(reads), std::move(writes),
      [](OpContext&) -> Result<int> { return 1; }, asio::use_future, [&](auto op) { captured = std::move(op); });
  ASSERT_TRUE(captured);
  ASSERT_EQ(captured->reads.size(), 2u);
  captured->prefetch();
  detail::OpRecord* raw = captured.get();
  raw->complete(std::move(captured), make_error_code(errc::cancelled));
  auto [ec, value] = answer.get();
  EXPECT_EQ(ec, make_error_code(errc::cancelled));
  EXPECT_EQ(value, 0);
}

}  // namespace
}  // namespace cuactor::runtime
