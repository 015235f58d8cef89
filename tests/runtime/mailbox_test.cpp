// The actor's bounded mailbox ([R5]).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

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

}  // namespace
}  // namespace cuactor::runtime::detail
