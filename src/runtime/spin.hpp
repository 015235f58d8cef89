/// @file
/// Busy-wait helpers shared by the runtime's spinning threads (internal).
#pragma once

#include <chrono>
#include <cstddef>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace cuactor::runtime::detail {

/// Alignment that gives a spun-on atomic its own cache line: writes to its neighbours would otherwise
/// pull the line from under the spinning reader and back (std::hardware_destructive_interference_size
/// is not ABI-stable across compiler flags, so the usual x86 / Arm value is spelled out).
inline constexpr std::size_t kCacheLine = 64;

/// One step of a busy-wait: a pause hint where the CPU has one (cheap, keeps the sibling hyperthread
/// fed), else a yield.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

/// Busy-waits until `ready()` holds or `deadline` passed, and returns `ready()`. The clock is read only
/// every 32 pauses: a clock read costs about as much as a pause (39-46 ns on the H100 VMs measured,
/// more where the clock is a system call), and a wait's end need not be precise.
template <class Ready>
bool spin_until(Ready ready, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

/// Locks `lock`, trying a few times with pauses before it blocks. The spinning threads lock right after
/// they saw a counter move, and the thread that moved it publishes under the same mutex: it usually
/// still holds it, for nanoseconds, and a blocking lock would sleep in the kernel and make that thread's
/// unlock a wake-up system call.
template <class Lock>
void lock_spinning(Lock& lock) {
  for (int i = 0; i < 64; ++i) {
    if (lock.try_lock()) return;
    cpu_relax();
  }
  lock.lock();
}

}  // namespace cuactor::runtime::detail
