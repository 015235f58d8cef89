#include "cuactor/gpu/memory.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cuactor/gpu/stream.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::gpu {
namespace {

using MemoryTest = cuactor::test_support::GpuTest;

TEST_F(MemoryTest, RoundTripThroughOwnPool) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(stream, Stream::create(0));
  CUACTOR_ASSERT_OK_AND_ASSIGN(pool, MemPool::create(0));
  const std::size_t n = 1'000'003;  // not a multiple of anything convenient
  std::vector<float> src(n), dst(n, -777.0f);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (auto& v : src) v = dist(rng);
  {
    CUACTOR_ASSERT_OK_AND_ASSIGN(buf, DeviceBuffer::allocate(pool, n * sizeof(float), stream.get()));
    EXPECT_EQ(buf.size(), n * sizeof(float));
    EXPECT_EQ(buf.device(), 0);
    CUACTOR_ASSERT_OK(memset_async(buf.data(), 0xff, buf.size(), stream.get()));  // poison
    CUACTOR_ASSERT_OK(copy_async(buf.data(), src.data(), buf.size(), stream.get()));
    CUACTOR_ASSERT_OK(copy_async(dst.data(), buf.data(), buf.size(), stream.get()));
    CUACTOR_ASSERT_OK(stream.synchronize());
    CUACTOR_ASSERT_OK_AND_ASSIGN(used, pool.used_bytes());
    EXPECT_GE(used, buf.size());
  }
  CUACTOR_ASSERT_OK(stream.synchronize());
  EXPECT_EQ(src, dst);
  CUACTOR_ASSERT_OK_AND_ASSIGN(used_after, pool.used_bytes());
  EXPECT_EQ(used_after, 0u);
  CUACTOR_ASSERT_OK_AND_ASSIGN(reserved, pool.reserved_bytes());
  EXPECT_GT(reserved, 0u);  // release threshold keeps memory for reuse
  CUACTOR_ASSERT_OK(pool.trim(0));
}

TEST_F(MemoryTest, ZeroBytesIsANullBuffer) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(stream, Stream::create(0));
  CUACTOR_ASSERT_OK_AND_ASSIGN(pool, MemPool::device_default(0));
  CUACTOR_ASSERT_OK_AND_ASSIGN(buf, DeviceBuffer::allocate(pool, 0, stream.get()));
  EXPECT_EQ(buf.data(), nullptr);
  CUACTOR_ASSERT_OK(buf.reset());
}

TEST_F(MemoryTest, OutOfMemoryFailsTheRequestOnly) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(stream, Stream::create(0));
  CUACTOR_ASSERT_OK_AND_ASSIGN(pool, MemPool::create(0));
  auto huge = DeviceBuffer::allocate(pool, std::size_t{1} << 50, stream.get());
  ASSERT_FALSE(huge);
  EXPECT_TRUE(huge.error() == errc::out_of_memory) << huge.error().to_string();
  EXPECT_EQ(classify(huge.error().code()), FailureClass::request);
  // The device goes on: a normal allocation still works.
  CUACTOR_ASSERT_OK_AND_ASSIGN(small, DeviceBuffer::allocate(pool, 4096, stream.get()));
  CUACTOR_ASSERT_OK(stream.synchronize());
}

TEST_F(MemoryTest, PinnedBufferMovesAndSpans) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(a, PinnedBuffer::allocate(64 * sizeof(int)));
  auto s = a.as_span<int>();
  ASSERT_EQ(s.size(), 64u);
  for (int i = 0; i < 64; ++i) s[static_cast<std::size_t>(i)] = i;
  PinnedBuffer b = std::move(a);
  EXPECT_EQ(b.as_span<int>()[63], 63);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move)
}

}  // namespace
}  // namespace cuactor::gpu
