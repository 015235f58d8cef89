// The actor's bounded mailbox and the in-flight registry ([R5], [R7]).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "runtime/inflight_registry.hpp"
#include "runtime/mailbox.hpp"

namespace cuactor::runtime::detail {
namespace {

TEST(RuntimeMailbox, BoundedFifo) {
  Mailbox<int> m(3);
  for (int i = 1; i <= 3; ++i) EXPECT_TRUE(m.push(i));
  int extra = 4;
  EXPECT_FALSE(m.push(extra));
  EXPECT_EQ(extra, 4);  // a rejected item is left to the caller (who answers it queue_full)
  EXPECT_EQ(m.size(), 3u);
  std::vector<int> out;
  m.pop_batch(out, 2);
  EXPECT_EQ(out, (std::vector<int>{1, 2}));
  EXPECT_TRUE(m.push(extra));
  out.clear();
  m.pop_batch(out, 10);
  EXPECT_EQ(out, (std::vector<int>{3, 4}));
  EXPECT_TRUE(m.empty());
}

TEST(RuntimeMailbox, PushFrontKeepsOrder) {
  Mailbox<int> m(4);
  int a = 5, b = 6;
  m.push(a);
  m.push(b);
  std::vector<int> back{3, 4};
  m.push_front(back);
  EXPECT_TRUE(back.empty());
  EXPECT_EQ(m.take_all(), (std::vector<int>{3, 4, 5, 6}));
}

TEST(RuntimeMailbox, RemoveFirst) {
  Mailbox<int> m(8);
  for (int i : {1, 2, 3, 2}) {
    int v = i;
    m.push(v);
  }
  EXPECT_EQ(m.remove_first([](int v) { return v == 2; }), 2);
  EXPECT_EQ(m.remove_first([](int v) { return v == 9; }), std::nullopt);
  EXPECT_EQ(m.take_all(), (std::vector<int>{1, 3, 2}));
}

TEST(RuntimeRegistry, TakeIsExactlyOnce) {
  InFlightRegistry<std::string> r;
  int owner_a = 0, owner_b = 0;
  EXPECT_TRUE(r.add(1, &owner_a, "a1"));
  EXPECT_FALSE(r.add(1, &owner_a, "dup"));
  EXPECT_TRUE(r.add(3, &owner_a, "a3"));
  EXPECT_TRUE(r.add(2, &owner_b, "b2"));
  EXPECT_EQ(r.count(&owner_a), 2u);
  EXPECT_EQ(r.take(1), "a1");
  EXPECT_EQ(r.take(1), std::nullopt);
  EXPECT_EQ(r.take_owner(&owner_a), (std::vector<std::string>{"a3"}));
  EXPECT_EQ(r.count(&owner_a), 0u);
  EXPECT_EQ(r.count(&owner_b), 1u);
}

TEST(RuntimeRegistry, RacingTakersGetEachEntryOnce) {
  // A completion host function and the poisoning supervisor race for the same entries.
  InFlightRegistry<int> r;
  int owner = 0;
  constexpr int n = 20000;
  for (int i = 0; i < n; ++i) r.add(static_cast<std::uint64_t>(i), &owner, i);
  std::atomic<int> by_id{0}, by_owner{0};
  std::thread completer([&] {
    for (int i = 0; i < n; ++i)
      if (r.take(static_cast<std::uint64_t>(i))) by_id.fetch_add(1);
  });
  std::thread supervisor([&] {
    for (int k = 0; k < 50; ++k) by_owner.fetch_add(static_cast<int>(r.take_owner(&owner).size()));
  });
  completer.join();
  supervisor.join();
  by_owner.fetch_add(static_cast<int>(r.take_owner(&owner).size()));
  EXPECT_EQ(by_id.load() + by_owner.load(), n);
}

}  // namespace
}  // namespace cuactor::runtime::detail
