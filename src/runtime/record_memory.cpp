// Recycled memory of request records: per-thread magazines of blocks per size class, traded with a
// shared depot in whole batches (one lock per batch, never per record).
#include "cuactor/runtime/detail/record_memory.hpp"

#include <array>
#include <mutex>
#include <vector>

namespace cuactor::runtime::detail {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kRecycle = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool kRecycle = false;
#else
constexpr bool kRecycle = true;
#endif
#else
constexpr bool kRecycle = true;
#endif

// Size classes 64 to 2048 bytes: records are a few hundred bytes (the handler and the command inline),
// completion-pool jobs a few dozen; larger ones are rare and go to the system allocator.
constexpr std::size_t kSmallestClass = 64;
constexpr int kClasses = 6;
constexpr int kBatch = 32;                 // blocks moved between a thread and the depot at once
constexpr int kMagazine = 2 * kBatch;      // blocks a thread keeps per class
constexpr std::size_t kDepotBatches = 32;  // batches the depot keeps per class; more are freed

using Batch = std::array<void*, kBatch>;

int size_class(std::size_t bytes) noexcept {
  std::size_t size = kSmallestClass;
  for (int c = 0; c < kClasses; ++c, size *= 2)
    if (bytes <= size) return c;
  return -1;
}

std::size_t class_bytes(int c) noexcept {
  return kSmallestClass << c;
}

struct Depot {
  Depot() { batches.reserve(kDepotBatches); }  // spilling never allocates
  std::mutex mutex;
  std::vector<Batch> batches;
};

/// Never destroyed: threads may give blocks back during static destruction.
std::array<Depot, kClasses>& depots() {
  static auto* d = new std::array<Depot, kClasses>();
  return *d;
}

enum class CacheState : unsigned char { unborn, alive, dead };
thread_local CacheState t_state = CacheState::unborn;  // trivially destructible: readable while exiting

struct Magazine {
  std::array<void*, kMagazine> blocks{};
  int count = 0;

  /// Takes one batch from the depot; false when it has none.
  bool refill(int c) {
    Depot& depot = depots()[static_cast<std::size_t>(c)];
    std::lock_guard lock(depot.mutex);
    if (depot.batches.empty()) return false;
    const Batch& batch = depot.batches.back();
    for (void* block : batch) blocks[static_cast<std::size_t>(count++)] = block;
    depot.batches.pop_back();
    return true;
  }

  /// Moves `kBatch` blocks to the depot, or frees them when it is full.
  void spill(int c) noexcept {
    Batch batch;
    for (void*& block : batch) block = blocks[static_cast<std::size_t>(--count)];
    Depot& depot = depots()[static_cast<std::size_t>(c)];
    {
      std::lock_guard lock(depot.mutex);
      if (depot.batches.size() < kDepotBatches) {
        depot.batches.push_back(batch);  // within the reserved capacity
        return;
      }
    }
    for (void* block : batch) ::operator delete(block);
  }
};

struct ThreadCache {
  std::array<Magazine, kClasses> magazines;

  ThreadCache() noexcept { t_state = CacheState::alive; }
  ~ThreadCache() {
    t_state = CacheState::dead;
    for (int c = 0; c < kClasses; ++c) {
      Magazine& m = magazines[static_cast<std::size_t>(c)];
      while (m.count >= kBatch) m.spill(c);
      while (m.count > 0) ::operator delete(m.blocks[static_cast<std::size_t>(--m.count)]);
    }
  }
};

/// The calling thread's cache, or null once it was destroyed (the thread is exiting).
ThreadCache* thread_cache() noexcept {
  if (t_state == CacheState::dead) return nullptr;
  thread_local ThreadCache cache;
  return &cache;
}

}  // namespace

bool record_recycling_enabled() noexcept {
  return kRecycle;
}

void* allocate_record(std::size_t bytes) {
  const int c = kRecycle ? size_class(bytes) : -1;
  if (c < 0) return ::operator new(bytes);
  if (ThreadCache* cache = thread_cache()) {
    Magazine& m = cache->magazines[static_cast<std::size_t>(c)];
    if (m.count > 0 || m.refill(c)) return m.blocks[static_cast<std::size_t>(--m.count)];
  }
  return ::operator new(class_bytes(c));
}

void deallocate_record(void* block, std::size_t bytes) noexcept {
  const int c = kRecycle ? size_class(bytes) : -1;
  ThreadCache* cache = c < 0 ? nullptr : thread_cache();
  if (!cache) {
    ::operator delete(block);
    return;
  }
  Magazine& m = cache->magazines[static_cast<std::size_t>(c)];
  if (m.count == kMagazine) m.spill(c);
  m.blocks[static_cast<std::size_t>(m.count++)] = block;
}

}  // namespace cuactor::runtime::detail
