/// @file
/// Frees what graphs kept alive once CUDA says they are done with it. CUDA runs user-object
/// destructors on an internal thread that must not call CUDA, and the memory they release may still
/// need stream-ordered frees, so they only hand their payload to this process-wide thread, which
/// drops it with CUDA calls allowed (in relaxed capture mode, so that it never disturbs another
/// thread's capture).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cuactor/core/expected.hpp"

namespace cuactor::graph::detail {

/// True while any CaptureSession is capturing (defined with the session registry). The reclaimer waits
/// for none to be: a stream-ordered free that lands on a capturing stream (e.g. a GpuRef freed on its
/// actor's stream) would be recorded into that graph instead of running.
bool any_capture_session_active() noexcept;

/// The process-wide reclaimer (never destroyed, so that late CUDA callbacks always find it).
class Reclaimer {
 public:
  static Reclaimer& instance();

  /// Hands `items` to the reclaimer thread, which drops them in order.
  void retire(std::vector<std::shared_ptr<void>> items);
  /// A graph now holds a token (a CUDA user object) that will be released later.
  void token_created() noexcept;
  /// CUDA released a token: `payload` is dropped on the reclaimer thread. Safe on CUDA's thread.
  void token_released(std::shared_ptr<void> payload);
  /// Number of tokens CUDA has not released yet.
  [[nodiscard]] std::size_t live_tokens() const;

  /// Waits until nothing retired is left to drop.
  Status wait_drained(std::chrono::milliseconds timeout);
  /// Waits until every token was released and everything retired was dropped.
  Status wait_idle(std::chrono::milliseconds timeout);

 private:
  Reclaimer();
  void run();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::vector<std::shared_ptr<void>> queue_;
  std::size_t tokens_ = 0;
  bool busy_ = false;
};

}  // namespace cuactor::graph::detail
