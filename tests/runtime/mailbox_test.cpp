// The actor's bounded mailbox ([R5]) and the lock-free queue under it: FIFO, the bound, items put back at
// the head, removal from the middle, and pushes racing with consumers.
#include "runtime/mailbox.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "cuactor/runtime/detail/mpsc_queue.hpp"

namespace cuactor::runtime::detail {
namespace {

struct Item : MpscHook {
  explicit Item(int v) : value(v) {}
  int value;
  std::shared_ptr<Item> queued_self;
};

std::shared_ptr<Item> item(int v) {
  return std::make_shared<Item>(v);
}

std::vector<int> values(const std::vector<std::shared_ptr<Item>>& items) {
  std::vector<int> out;
  for (const auto& i : items) out.push_back(i->value);
  return out;
}

TEST(RuntimeMailbox, BoundedFifo) {
  Mailbox<Item> m(3);
  EXPECT_FALSE(m.maybe_nonempty());
  for (int i = 1; i <= 3; ++i) {
    auto it = item(i);
    EXPECT_TRUE(m.push(it));
    EXPECT_EQ(it, nullptr);  // the mailbox holds it now
  }
  auto extra = item(4);
  EXPECT_FALSE(m.push(extra));
  ASSERT_NE(extra, nullptr);  // a rejected item is left to the caller (who answers it queue_full)
  EXPECT_EQ(m.size(), 3u);
  EXPECT_TRUE(m.maybe_nonempty());
  std::vector<std::shared_ptr<Item>> out;
  m.pop_batch(out, 2);
  EXPECT_EQ(values(out), (std::vector<int>{1, 2}));
  EXPECT_TRUE(m.push(extra));  // room again
  out.clear();
  m.pop_batch(out, 10);
  EXPECT_EQ(values(out), (std::vector<int>{3, 4}));
  EXPECT_FALSE(m.maybe_nonempty());
  EXPECT_EQ(m.size(), 0u);
  for (const auto& i : out) EXPECT_EQ(i.use_count(), 1);  // no self-reference left behind
}

TEST(RuntimeMailbox, PushFrontKeepsOrder) {
  Mailbox<Item> m(4);
  for (int v : {5, 6}) {
    auto it = item(v);
    m.push(it);
  }
  std::vector<std::shared_ptr<Item>> taken;
  m.pop_batch(taken, 1);
  std::vector<std::shared_ptr<Item>> back{item(3), item(4)};
  back.insert(back.end(), taken.begin(), taken.end());  // 3, 4, 5 go back before 6
  m.push_front(back);
  EXPECT_TRUE(back.empty());
  EXPECT_EQ(m.size(), 4u);
  EXPECT_EQ(values(m.take_all()), (std::vector<int>{3, 4, 5, 6}));
  EXPECT_EQ(m.size(), 0u);
}

// Items put back count against the bound again: posts are refused until the depth is below it.
TEST(RuntimeMailbox, ItemsPutBackCountAgainstTheBound) {
  Mailbox<Item> m(4);
  for (int v = 1; v <= 4; ++v) {
    auto it = item(v);
    ASSERT_TRUE(m.push(it));
  }
  std::vector<std::shared_ptr<Item>> taken;
  m.pop_batch(taken, 4);
  auto five = item(5);
  ASSERT_TRUE(m.push(five));
  taken.pop_back();  // the first three go back (4 finished): depth 4 again
  m.push_front(taken);
  EXPECT_EQ(m.size(), 4u);
  auto six = item(6);
  EXPECT_FALSE(m.push(six));
  std::vector<std::shared_ptr<Item>> out;
  m.pop_batch(out, 1);
  EXPECT_TRUE(m.push(six));
  out.clear();
  m.pop_batch(out, 10);
  EXPECT_EQ(values(out), (std::vector<int>{2, 3, 5, 6}));
}

TEST(RuntimeMailbox, RemoveFirst) {
  Mailbox<Item> m(8);
  for (int v : {1, 2, 3, 2}) {
    auto it = item(v);
    m.push(it);
  }
  auto two = m.remove_first([](const std::shared_ptr<Item>& i) { return i->value == 2; });
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->value, 2);
  EXPECT_EQ(m.remove_first([](const std::shared_ptr<Item>& i) { return i->value == 9; }), nullptr);
  EXPECT_EQ(m.size(), 3u);
  std::vector<std::shared_ptr<Item>> out;
  m.pop_batch(out, 1);  // from the backlog the removal left
  auto five = item(5);
  m.push(five);
  m.pop_batch(out, 10);
  EXPECT_EQ(values(out), (std::vector<int>{1, 3, 2, 5}));
  // The backlog's head and tail, and the only item.
  for (int v : {7, 8, 9}) {
    auto it = item(v);
    m.push(it);
  }
  auto is = [](int v) { return [v](const std::shared_ptr<Item>& i) { return i->value == v; }; };
  EXPECT_NE(m.remove_first(is(7)), nullptr);
  EXPECT_NE(m.remove_first(is(9)), nullptr);
  auto ten = item(10);
  m.push(ten);
  EXPECT_EQ(values(m.take_all()), (std::vector<int>{8, 10}));
  auto eleven = item(11);
  m.push(eleven);
  EXPECT_NE(m.remove_first(is(11)), nullptr);
  EXPECT_FALSE(m.maybe_nonempty());
  EXPECT_EQ(m.size(), 0u);
}

TEST(RuntimeMailbox, DestructionReleasesWhatIsQueued) {
  std::weak_ptr<Item> watch;
  {
    Mailbox<Item> m(2);
    auto it = item(1);
    watch = it;
    m.push(it);
    EXPECT_FALSE(watch.expired());  // kept alive by the mailbox alone
  }
  EXPECT_TRUE(watch.expired());
}

// Pushes serialised by a mutex (as the actor's posters are) race with a consumer popping batches and a
// second consumer removing items; every item arrives exactly once and each poster's items stay in order.
TEST(RuntimeMailbox, ConcurrentPostersAndConsumersLoseNothing) {
  constexpr int kPosters = 3;
  constexpr int kPerPoster = 20000;
  Mailbox<Item> m(kPosters * kPerPoster);
  std::mutex post_mutex;
  std::atomic<int> done_posting{0};
  std::vector<std::thread> posters;
  for (int p = 0; p < kPosters; ++p)
    posters.emplace_back([&, p] {
      for (int i = 0; i < kPerPoster; ++i) {
        auto it = item(p * kPerPoster + i);
        std::lock_guard lock(post_mutex);
        ASSERT_TRUE(m.push(it));
      }
      done_posting.fetch_add(1);
    });
  std::atomic<int> removed{0};
  std::thread canceller([&] {
    while (done_posting.load() < kPosters)
      if (m.remove_first([](const std::shared_ptr<Item>& i) { return i->value % 1000 == 7; })) removed.fetch_add(1);
  });
  std::vector<int> last(kPosters, -1);
  int received = 0;
  std::vector<std::shared_ptr<Item>> batch;
  while (done_posting.load() < kPosters || m.maybe_nonempty()) {
    batch.clear();
    m.pop_batch(batch, 64);
    for (const auto& i : batch) {
      const int p = i->value / kPerPoster;
      ASSERT_GT(i->value, last[static_cast<std::size_t>(p)]);
      last[static_cast<std::size_t>(p)] = i->value;
      ++received;
    }
  }
  for (auto& t : posters) t.join();
  canceller.join();
  batch.clear();
  m.pop_batch(batch, kPosters * kPerPoster);
  received += static_cast<int>(batch.size());
  EXPECT_EQ(received + removed.load(), kPosters * kPerPoster);
  EXPECT_EQ(m.size(), 0u);
}

struct Node : MpscHook {
  int producer = 0;
  int seq = 0;
};

// The queue alone, with unserialised producers: every node comes out once, in each producer's order.
TEST(RuntimeMpscQueue, UnserialisedProducersKeepTheirOrder) {
  constexpr int kProducers = 4;
  constexpr int kPerProducer = 50000;
  MpscQueue q;
  EXPECT_FALSE(q.maybe_nonempty());
  std::vector<std::unique_ptr<Node[]>> nodes;
  for (int p = 0; p < kProducers; ++p) nodes.push_back(std::make_unique<Node[]>(kPerProducer));
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i) {
        Node& n = nodes[static_cast<std::size_t>(p)][i];
        n.producer = p;
        n.seq = i;
        q.push(&n);
      }
    });
  std::vector<int> next(kProducers, 0);
  for (int got = 0; got < kProducers * kPerProducer;) {
    MpscHook* h = q.try_pop();
    if (!h) continue;
    auto* n = static_cast<Node*>(h);
    ASSERT_EQ(n->seq, next[static_cast<std::size_t>(n->producer)]++);
    ++got;
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(q.try_pop(), nullptr);
  EXPECT_FALSE(q.maybe_nonempty());
}

}  // namespace
}  // namespace cuactor::runtime::detail
