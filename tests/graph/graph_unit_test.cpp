// CPU-only tests of the graph layer: pool bookkeeping, generation stamps and argument rejections.
#include <gtest/gtest.h>

#include <memory>

#include "cuactor/graph/capture.hpp"
#include "cuactor/graph/capture_pool.hpp"
#include "cuactor/graph/device_scalar.hpp"
#include "cuactor/graph/keep_alive.hpp"

namespace cuactor::graph {
namespace {

TEST(GraphKeepAliveSet, CountsEachOwnerOnceAndSumsBytes) {
  KeepAliveSet set;
  auto a = std::make_shared<int>(1);
  auto b = std::make_shared<int>(2);
  auto added = set.add(a, reinterpret_cast<const void*>(0x1000), 256);
  ASSERT_TRUE(added.has_value());
  EXPECT_TRUE(*added);
  added = set.add(a, reinterpret_cast<const void*>(0x1000), 256);  // same buffer used by a second op
  ASSERT_TRUE(added.has_value());
  EXPECT_FALSE(*added);
  ASSERT_TRUE(set.add(b, reinterpret_cast<const void*>(0x2000), 64).has_value());
  EXPECT_EQ(set.size(), 2u);
  EXPECT_EQ(set.bytes(), 320u);
  EXPECT_TRUE(set.contains(a));
  EXPECT_FALSE(set.contains(std::make_shared<int>(3)));
}

TEST(GraphKeepAliveSet, RejectsNullOwnerNamingTheBuffer) {
  KeepAliveSet set;
  auto r = set.add(nullptr, reinterpret_cast<const void*>(0xabc0), 16);
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(r.error() == errc::invalid_argument);
  EXPECT_NE(r.error().message().find("0xabc0"), std::string::npos) << r.error().message();
  EXPECT_EQ(set.size(), 0u);
}

TEST(GraphKeepAliveSet, KeepsOwnersAliveUntilReleasedInInsertionOrder) {
  KeepAliveSet set;
  std::weak_ptr<int> wa, wb;
  {
    auto a = std::make_shared<int>(1);
    auto b = std::make_shared<int>(2);
    wa = a;
    wb = b;
    ASSERT_TRUE(set.add(a, nullptr, 4).has_value());
    ASSERT_TRUE(set.add(b, nullptr, 4).has_value());
  }
  EXPECT_FALSE(wa.expired());
  EXPECT_FALSE(wb.expired());
  auto owners = set.release_all();
  EXPECT_EQ(set.size(), 0u);
  EXPECT_EQ(set.bytes(), 0u);
  ASSERT_EQ(owners.size(), 2u);
  EXPECT_EQ(owners[0].get(), wa.lock().get());
  EXPECT_EQ(owners[1].get(), wb.lock().get());
  owners.clear();
  EXPECT_TRUE(wa.expired());
  EXPECT_TRUE(wb.expired());
}

TEST(GraphKeepAliveSet, MergeMovesOnlyNewOwners) {
  KeepAliveSet shared, session;
  auto common = std::make_shared<int>(1);
  auto fresh = std::make_shared<int>(2);
  ASSERT_TRUE(shared.add(common, nullptr, 100).has_value());
  ASSERT_TRUE(session.add(common, nullptr, 100).has_value());
  ASSERT_TRUE(session.add(fresh, nullptr, 10).has_value());
  EXPECT_EQ(shared.merge_from(std::move(session)), 1u);
  EXPECT_EQ(shared.size(), 2u);
  EXPECT_EQ(shared.bytes(), 110u);
  EXPECT_EQ(session.size(), 0u);  // NOLINT(bugprone-use-after-move): merge_from empties it by contract
  EXPECT_EQ(session.bytes(), 0u);
  EXPECT_TRUE(shared.contains(fresh));
}

TEST(GraphGenerationStamp, UnboundIsAlwaysCurrent) {
  GenerationStamp stamp;
  EXPECT_TRUE(stamp.check("graph").has_value());
}

TEST(GraphGenerationStamp, StaleWhenRebuiltShuttingDownOrGone) {
  auto state = std::make_shared<runtime::DeviceState>(0);
  state->advance_generation();
  state->set_accepting_ops(true);
  GenerationStamp stamp{state, state->generation(), 0, true};
  EXPECT_TRUE(stamp.check("graph").has_value());

  state->advance_generation();  // context rebuilt
  auto s = stamp.check("graph");
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(s.error() == errc::stale_handle);
  EXPECT_NE(s.error().message().find("context rebuilt"), std::string::npos) << s.error().message();
  EXPECT_NE(s.error().message().find("generation 1"), std::string::npos) << s.error().message();
  EXPECT_NE(s.error().message().find("generation 2"), std::string::npos) << s.error().message();

  stamp.generation = state->generation();
  state->set_accepting_ops(false);
  s = stamp.check("graph");
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(s.error() == errc::stale_handle);
  EXPECT_NE(s.error().message().find("shutting down"), std::string::npos) << s.error().message();

  state.reset();
  s = stamp.check("graph");
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(s.error() == errc::stale_handle);
  EXPECT_NE(s.error().message().find("state gone"), std::string::npos) << s.error().message();
}

TEST(GraphRejections, NullStreamCannotCapture) {
  auto s = begin_capture(nullptr, CaptureMode::global);
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(s.error() == errc::invalid_argument);
  auto raw = gpu::begin_stream_capture(nullptr, CaptureMode::relaxed);
  ASSERT_FALSE(raw.has_value());
  EXPECT_TRUE(raw.error() == errc::invalid_argument);
}

TEST(GraphRejections, PoolOfMissingDeviceIsNoDevice) {
  auto p = CapturePool::create(4096);
  ASSERT_FALSE(p.has_value());
  EXPECT_TRUE(p.error() == errc::no_device);
}

TEST(GraphRejections, ScalarSizeOutOfRange) {
  auto zero = DeviceScalarStorage::create(0, 0);
  ASSERT_FALSE(zero.has_value());
  EXPECT_TRUE(zero.error() == errc::invalid_argument);
  auto huge = DeviceScalarStorage::create(0, 4096);
  ASSERT_FALSE(huge.has_value());
  EXPECT_TRUE(huge.error() == errc::invalid_argument);
  EXPECT_NE(huge.error().message().find("4096"), std::string::npos) << huge.error().message();
}

TEST(GraphRejections, CaptureModeNames) {
  EXPECT_STREQ(gpu::to_string(CaptureMode::global), "global");
  EXPECT_STREQ(gpu::to_string(CaptureMode::per_thread), "thread-local");
  EXPECT_STREQ(gpu::to_string(CaptureMode::relaxed), "relaxed");
  EXPECT_EQ(gpu::to_cuda(CaptureMode::per_thread), cudaStreamCaptureModeThreadLocal);
  EXPECT_STREQ(gpu::to_string(cudaGraphExecUpdateErrorTopologyChanged), "topology changed");
}

}  // namespace
}  // namespace cuactor::graph
