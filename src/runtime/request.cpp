// Request plumbing shared by every backend: ids, internal-thread marks, the completion pool, replies.
#include "cuactor/runtime/detail/request.hpp"

#include <fmt/format.h>

#include <atomic>

#include "cuactor/core/log.hpp"
#include "runtime/completion_pool.hpp"
#include "runtime/reply.hpp"

namespace cuactor::runtime::detail {
namespace {

std::atomic<std::uint64_t> g_next_id{1};
thread_local bool t_internal_thread = false;

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
    completion_pool().post([op = std::move(op)]() mutable {
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

void deliver_on_completion_pool(std::shared_ptr<OpRecord> op, std::error_code ec) noexcept {
  auto deliver = [op = std::move(op), ec]() mutable {
    OpRecord* raw = op.get();
    raw->deliver(std::move(op), ec);
  };
  CompletionPool& pool = completion_pool();
  if (pool.on_pool_thread())
    deliver();
  else
    pool.post(std::move(deliver));
}

void finish_error_later(std::shared_ptr<ReplyCounters> counters, std::shared_ptr<OpRecord> op, Error error) noexcept {
  completion_pool().post([counters = std::move(counters), op = std::move(op), error = std::move(error)]() mutable {
    finish_error(*counters, std::move(op), error);
  });
}

}  // namespace cuactor::runtime::detail
