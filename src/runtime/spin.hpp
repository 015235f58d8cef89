/// @file
/// Busy-wait helpers shared by the runtime's spinning threads (internal).
#pragma once

#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace cuactor::runtime::detail {

/// One step of a busy-wait: a pause hint where the CPU has one (cheap, keeps the sibling hyperthread
/// fed), else a yield.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace cuactor::runtime::detail
