// Request plumbing shared by every backend: ids, internal-thread marks, the completion pool, replies.
#include <fmt/format.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "cuactor/core/log.hpp"
#include "cuactor/runtime/detail/request.hpp"
#include "runtime/reply.hpp"

namespace cuactor::runtime::detail {
namespace {

std::atomic<std::uint64_t> g_next_id{1};
thread_local bool t_internal_thread = false;

/// Threads that run handlers without an executor of their own. Each polls for work for a short
/// while after its last handler before it blocks, so that a reply handed over by the completion
/// poller under load costs no futex wake-up (boost::asio::thread_pool would always sleep at once).
class CompletionPool {
 public:
  explicit CompletionPool(int threads) : guard_(context_.get_executor()) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  }
  ~CompletionPool() {
    guard_.reset();
    context_.stop();
    for (auto& t : threads_) t.join();
  }
  boost::asio::io_context::executor_type executor() noexcept { return context_.get_executor(); }

 private:
  void run() noexcept {
    constexpr auto spin = std::chrono::microseconds(50);
    auto last = std::chrono::steady_clock::now();
    while (!context_.stopped()) {
      try {
        if (context_.poll() > 0) {
          last = std::chrono::steady_clock::now();
        } else if (std::chrono::steady_clock::now() - last > spin) {
          context_.run_one();  // blocks until there is work (or the pool stops)
          last = std::chrono::steady_clock::now();
        }
      } catch (const std::exception& e) {
        // A handler threw: it must not take the pool (or the process) down with it.
        log(LogLevel::error, fmt::format("completion handler threw: {}", e.what()));
      } catch (...) {
        log(LogLevel::error, "completion handler threw a non-standard exception");
      }
    }
  }

  boost::asio::io_context context_{2};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::vector<std::thread> threads_;
};

CompletionPool& completion_pool() {
  static CompletionPool pool(2);
  return pool;
}

}  // namespace

bool on_internal_thread() noexcept {
  return t_internal_thread;
}
InternalThreadScope::InternalThreadScope() noexcept : previous_(t_internal_thread) {
  t_internal_thread = true;
}
InternalThreadScope::~InternalThreadScope() {
  t_internal_thread = previous_;
}

boost::asio::any_completion_executor completion_pool_executor() {
  return boost::asio::any_completion_executor(completion_pool().executor());
}

std::uint64_t next_request_id() noexcept {
  return g_next_id.fetch_add(1, std::memory_order_relaxed);
}

void post_request(const std::shared_ptr<ActorBackend>& backend, std::shared_ptr<OpRecord> op) {
  if (!backend) {
    boost::asio::post(completion_pool().executor(), [op = std::move(op)]() mutable {
      OpRecord* raw = op.get();
      raw->complete(std::move(op), make_error_code(errc::device_shutting_down));
    });
    return;
  }
  backend->post(std::move(op));
}

void cancel_request(const std::weak_ptr<ActorBackend>& backend, std::uint64_t id) noexcept {
  if (auto b = backend.lock()) b->cancel(id);
}

void release_leases(OpRecord& op) noexcept {
  for (int i = 0; i < op.leases_held; ++i) op.writes[static_cast<std::size_t>(i)]->release_op_lease();
  op.leases_held = 0;
}

void finish(ReplyCounters& counters, std::shared_ptr<OpRecord> op, std::error_code ec) noexcept {
  release_leases(*op);
  op->span.end();
  (ec ? counters.failed : counters.completed).fetch_add(1, std::memory_order_relaxed);
  auto* raw = op.get();
  raw->complete(std::move(op), ec);
}

void finish_error(ReplyCounters& counters, std::shared_ptr<OpRecord> op, const Error& error) noexcept {
  if (log_enabled(LogLevel::debug))
    log(LogLevel::debug, fmt::format("request '{}' #{} failed: {}", op->name, op->id, error.to_string()));
  finish(counters, std::move(op), error.code());
}

void finish_error_later(std::shared_ptr<ReplyCounters> counters, std::shared_ptr<OpRecord> op, Error error) noexcept {
  boost::asio::post(completion_pool().executor(),
                    [counters = std::move(counters), op = std::move(op), error = std::move(error)]() mutable {
                      finish_error(*counters, std::move(op), error);
                    });
}

}  // namespace cuactor::runtime::detail
