#include <gtest/gtest.h>

#include "cuactor/gpu/event.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::gpu {
namespace {

using StreamTest = cuactor::test_support::GpuTest;

TEST_F(StreamTest, CreatesWithPriorities) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(range, stream_priority_range());
  EXPECT_LE(range.greatest, range.least);
  CUACTOR_ASSERT_OK_AND_ASSIGN(low, Stream::create(0, range.least));
  CUACTOR_ASSERT_OK_AND_ASSIGN(high, Stream::create(0, range.greatest));
  EXPECT_EQ(low.priority(), range.least);
  EXPECT_EQ(high.priority(), range.greatest);
  EXPECT_NE(low.get(), high.get());
  EXPECT_EQ(low.device(), 0);
  CUACTOR_ASSERT_OK(low.synchronize());
  CUACTOR_ASSERT_OK_AND_ASSIGN(done, low.query());
  EXPECT_TRUE(done);
  CUACTOR_ASSERT_OK_AND_ASSIGN(capturing, low.is_capturing());
  EXPECT_FALSE(capturing);
}

TEST_F(StreamTest, MoveTransfersOwnership) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(a, Stream::create(0));
  cudaStream_t raw = a.get();
  Stream b = std::move(a);
  EXPECT_EQ(b.get(), raw);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  Stream c;
  c = std::move(b);
  EXPECT_EQ(c.get(), raw);
}

TEST_F(StreamTest, EventsOrderStreamsAndTime) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(s1, Stream::create(0));
  CUACTOR_ASSERT_OK_AND_ASSIGN(s2, Stream::create(0));
  CUACTOR_ASSERT_OK_AND_ASSIGN(pool, MemPool::device_default(0));
  constexpr std::size_t n = 1 << 24;
  CUACTOR_ASSERT_OK_AND_ASSIGN(buf, DeviceBuffer::allocate(pool, n, s1.get()));
  CUACTOR_ASSERT_OK_AND_ASSIGN(start, Event::create(Event::Kind::timing));
  CUACTOR_ASSERT_OK_AND_ASSIGN(stop, Event::create(Event::Kind::timing));
  CUACTOR_ASSERT_OK_AND_ASSIGN(written, Event::create());
  CUACTOR_ASSERT_OK(start.record(s1.get()));
  CUACTOR_ASSERT_OK(memset_async(buf.data(), 0x5a, n, s1.get()));
  CUACTOR_ASSERT_OK(written.record(s1.get()));
  CUACTOR_ASSERT_OK(stop.record(s1.get()));
  // s2 reads the buffer only after the device-side wait: no host synchronisation in between.
  CUACTOR_ASSERT_OK(written.wait_on(s2.get()));
  CUACTOR_ASSERT_OK_AND_ASSIGN(host, PinnedBuffer::allocate(n));
  std::memset(host.data(), 0, n);
  CUACTOR_ASSERT_OK(copy_async(host.data(), buf.data(), n, s2.get()));
  buf.set_free_stream(s2.get());
  CUACTOR_ASSERT_OK(s2.synchronize());
  auto bytes = host.as_span<unsigned char>();
  EXPECT_EQ(bytes.front(), 0x5a);
  EXPECT_EQ(bytes.back(), 0x5a);
  CUACTOR_ASSERT_OK(stop.synchronize());
  CUACTOR_ASSERT_OK_AND_ASSIGN(done, stop.query());
  EXPECT_TRUE(done);
  CUACTOR_ASSERT_OK_AND_ASSIGN(ms, Event::elapsed_ms(start, stop));
  EXPECT_GT(ms, 0.0f);
  auto bad = Event::elapsed_ms(written, stop);  // a sync-only event cannot time
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.error() == errc::invalid_argument);
}

}  // namespace
}  // namespace cuactor::gpu
