// Recycled memory of request records: blocks of every size class and beyond come back usable, a
// block freed on another thread is handed out again, many threads trading blocks keep their contents
// intact, and a thread that frees while it exits does not touch its destroyed cache.
#include "cuactor/runtime/detail/record_memory.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace cuactor::runtime::detail {
namespace {

template <std::size_t Bytes>
struct Payload {
  explicit Payload(std::atomic<int>& counter) : live(&counter) {
    bytes.fill(std::byte{0x5a});
    ++*live;
  }
  ~Payload() { --*live; }
  std::atomic<int>* live;
  std::array<std::byte, Bytes> bytes;
};

template <std::size_t Bytes>
void make_and_drop(std::atomic<int>& live) {
  auto p = std::allocate_shared<Payload<Bytes>>(RecordAllocator<Payload<Bytes>>{}, live);
  EXPECT_EQ(live.load(), 1);
  EXPECT_EQ(p->bytes[Bytes - 1], std::byte{0x5a});
  p.reset();
  EXPECT_EQ(live.load(), 0);
}

TEST(RecordMemory, AllocateSharedWorksForEverySizeClassAndBeyond) {
  std::atomic<int> live{0};
  make_and_drop<8>(live);
  make_and_drop<240>(live);
  make_and_drop<500>(live);
  make_and_drop<1000>(live);
  make_and_drop<2000>(live);
  make_and_drop<5000>(live);  // larger than every class: the system allocator
}

TEST(RecordMemory, ABlockFreedOnTheSameThreadIsReusedAtOnce) {
  if (!record_recycling_enabled()) GTEST_SKIP() << "record recycling is off in sanitizer builds";
  void* a = allocate_record(300);
  deallocate_record(a, 300);
  void* b = allocate_record(280);  // the same 512-byte class
  EXPECT_EQ(a, b);
  deallocate_record(b, 400);
}

TEST(RecordMemory, BlocksFreedOnAnotherThreadAreHandedOutAgain) {
  if (!record_recycling_enabled()) GTEST_SKIP() << "record recycling is off in sanitizer builds";
  constexpr std::size_t kBytes = 1500;  // the 2048-byte class, used by no other test here
  std::vector<void*> blocks;
  std::thread([&] {
    for (int i = 0; i < 128; ++i) blocks.push_back(allocate_record(kBytes));
  }).join();
  const std::set<void*> made(blocks.begin(), blocks.end());
  // The freeing thread spills full batches to the shared depot, the last ones when it exits.
  std::thread([&] {
    for (void* b : blocks) deallocate_record(b, kBytes);
  }).join();
  std::vector<void*> again;
  std::thread([&] {
    for (int i = 0; i < 32; ++i) again.push_back(allocate_record(kBytes));
    for (void* b : again) deallocate_record(b, kBytes);
  }).join();
  for (void* b : again) EXPECT_TRUE(made.count(b)) << "a block not recycled from the freeing thread";
}

TEST(RecordMemory, ThreadsTradingBlocksKeepTheirContents) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  std::mutex m;
  std::deque<std::pair<unsigned char*, std::size_t>> exchange;
  std::atomic<int> corrupt{0};
  auto check_and_free = [&](unsigned char* p, std::size_t bytes) {
    const auto tag = static_cast<unsigned char>(bytes & 0xff);
    if (p[0] != tag || p[bytes - 1] != tag) ++corrupt;
    deallocate_record(p, bytes);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::size_t bytes = 64 + static_cast<std::size_t>((i * 131 + t * 17) % 2500);
        auto* p = static_cast<unsigned char*>(allocate_record(bytes));
        std::memset(p, static_cast<int>(bytes & 0xff), bytes);
        std::pair<unsigned char*, std::size_t> other{nullptr, 0};
        {
          std::lock_guard lock(m);
          exchange.emplace_back(p, bytes);
          if (exchange.size() > 64) {
            other = exchange.front();
            exchange.pop_front();
          }
        }
        if (other.first) check_and_free(other.first, other.second);
      }
    });
  for (auto& th : threads) th.join();
  for (auto& [p, bytes] : exchange) check_and_free(p, bytes);
  EXPECT_EQ(corrupt.load(), 0);
}

TEST(RecordMemory, AThreadMayFreeWhileItExits) {
  std::atomic<int> live{0};
  std::thread([&] {
    // Constructed before the thread's record cache, so destroyed after it.
    thread_local std::shared_ptr<Payload<300>> held;
    held = std::allocate_shared<Payload<300>>(RecordAllocator<Payload<300>>{}, live);
  }).join();
  EXPECT_EQ(live.load(), 0);
}

}  // namespace
}  // namespace cuactor::runtime::detail
