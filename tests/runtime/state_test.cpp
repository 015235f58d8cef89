// DeviceState and GpuRef state machines ([R1], [R2], [R4]) on unowned fake allocations (no GPU).
#include <gtest/gtest.h>

#include "cuactor/runtime/gpu_ref.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::runtime {
namespace {

// An address that is never dereferenced: these tests only exercise bookkeeping.
void* fake_address() {
  return reinterpret_cast<void*>(std::uintptr_t{0x7f0000001000});
}

std::shared_ptr<DeviceState> usable_state(int ordinal) {
  auto s = std::make_shared<DeviceState>(ordinal);
  s->advance_generation();
  s->set_accepting_ops(true);
  return s;
}

TEST(RuntimeState, GenerationStartsAtZeroAndOnlyGrows) {
  DeviceState s(3);
  EXPECT_EQ(s.generation(), 0u);
  EXPECT_FALSE(s.accepting_ops());
  EXPECT_EQ(s.device_id(), 3);
  EXPECT_EQ(s.advance_generation(), 1u);
  EXPECT_EQ(s.advance_generation(), 2u);
  EXPECT_EQ(s.generation(), 2u);
}

TEST(RuntimeState, CheckHandleOrder) {
  DeviceState s(0);
  s.advance_generation();
  // Not accepting wins over every other reason.
  EXPECT_EQ(s.check_handle(7, 5), StaleReason::shutting_down);
  s.set_accepting_ops(true);
  EXPECT_EQ(s.check_handle(7, 5), StaleReason::context_rebuilt);
  EXPECT_EQ(s.check_handle(1, 5), StaleReason::wrong_device);
  EXPECT_EQ(s.check_handle(1, 0), std::nullopt);
  EXPECT_EQ(s.check_handle(1), std::nullopt);
}

TEST(RuntimeState, GpuRefMetadata) {
  auto state = usable_state(2);
  GpuRef<float> ref(std::make_shared<DeviceAllocation>(fake_address(), 4096, state, nullptr));
  EXPECT_EQ(ref.size(), 1024u);
  EXPECT_EQ(ref.size_bytes(), 4096u);
  EXPECT_EQ(ref.generation(), 1u);
  EXPECT_EQ(ref.device_id(), 2);
  EXPECT_FALSE(ref.last_write_stream().has_value());
  CUACTOR_ASSERT_OK(ref.access());
  CUACTOR_ASSERT_OK(ref.access(2));
  CUACTOR_ASSERT_OK_AND_ASSIGN(ptr, ref.raw_device_ptr());
  EXPECT_EQ(static_cast<void*>(ptr), fake_address());
  GpuRef<float> copy = ref;
  EXPECT_EQ(copy.allocation(), ref.allocation());
}

void expect_stale(const Status& st, std::string_view reason) {
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error(), errc::stale_handle);
  EXPECT_NE(st.error().message().find(reason), std::string::npos) << st.error().message();
}

TEST(RuntimeState, GpuRefStaleReasons) {
  auto state = usable_state(0);
  GpuRef<int> ref(std::make_shared<DeviceAllocation>(fake_address(), 64, state, nullptr));
  expect_stale(ref.access(1), "wrong device");
  state->advance_generation();
  expect_stale(ref.access(), "context rebuilt");
  EXPECT_FALSE(ref.raw_device_ptr().has_value());
  state->set_accepting_ops(false);
  expect_stale(ref.access(), "shutting down");
  state.reset();
  expect_stale(ref.access(), "state gone");
  EXPECT_FALSE(ref.device_id().has_value());
  // The allocation itself is still held: staleness never frees memory.
  EXPECT_EQ(ref.size(), 16u);
}

// The actor checks its requests' handles against the state it holds (no weak-reference lock): the same
// answers, in the same order, as access(); a handle of another state takes access()'s path.
TEST(RuntimeState, AccessAgainstAHeldStateAnswersLikeAccess) {
  auto state = usable_state(0);
  auto allocation = std::make_shared<DeviceAllocation>(fake_address(), 64, state, nullptr);
  CUACTOR_ASSERT_OK(allocation->access(state, 0));
  expect_stale(allocation->access(state, 1), "wrong device");
  state->advance_generation();
  expect_stale(allocation->access(state, 0), "context rebuilt");
  state->set_accepting_ops(false);
  expect_stale(allocation->access(state, 0), "shutting down");

  auto other = usable_state(0);
  expect_stale(allocation->access(other, 0), "shutting down");  // checked against its own state
  auto fresh = std::make_shared<DeviceAllocation>(fake_address(), 64, other, nullptr);
  CUACTOR_ASSERT_OK(fresh->access(other, 0));
  CUACTOR_ASSERT_OK(fresh->access(nullptr, 0));
  other.reset();
  expect_stale(fresh->access(state, 0), "state gone");
}

TEST(RuntimeState, EmptyGpuRefIsRejected) {
  GpuRef<double> ref;
  EXPECT_TRUE(ref.empty());
  EXPECT_EQ(ref.generation(), 0u);
  auto st = ref.access();
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error(), errc::invalid_argument);
}

TEST(RuntimeState, ReinterpretChecksElementSize) {
  auto state = usable_state(0);
  GpuRef<std::uint8_t> bytes(std::make_shared<DeviceAllocation>(fake_address(), 10, state, nullptr));
  auto as_int = bytes.reinterpret<int>();
  ASSERT_FALSE(as_int.has_value());
  EXPECT_EQ(as_int.error(), errc::invalid_argument);
  EXPECT_NE(as_int.error().message().find("10 bytes"), std::string::npos);
  CUACTOR_ASSERT_OK_AND_ASSIGN(as_short, bytes.reinterpret<std::uint16_t>());
  EXPECT_EQ(as_short.size(), 5u);
}

TEST(RuntimeState, LeasesExcludeEachOther) {
  auto state = usable_state(0);
  auto allocation = std::make_shared<DeviceAllocation>(fake_address(), 64, state, nullptr);
  GpuRef<int> ref(allocation);
  CUACTOR_ASSERT_OK(allocation->acquire_op_lease());
  CUACTOR_ASSERT_OK(allocation->acquire_op_lease());  // operations of one actor share a stream: ordered
  EXPECT_EQ(allocation->lease_count(), 2);
  auto blocked = ref.lease_write();
  ASSERT_FALSE(blocked.has_value());
  EXPECT_EQ(blocked.error(), errc::invalid_argument);
  allocation->release_op_lease();
  allocation->release_op_lease();
  {
    CUACTOR_ASSERT_OK_AND_ASSIGN(lease, ref.lease_write());
    EXPECT_EQ(allocation->lease_count(), -1);
    auto second = ref.lease_write();
    ASSERT_FALSE(second.has_value());
    auto op = allocation->acquire_op_lease();
    ASSERT_FALSE(op.has_value());
    EXPECT_EQ(op.error(), errc::invalid_argument);
  }
  EXPECT_EQ(allocation->lease_count(), 0);
  CUACTOR_ASSERT_OK(ref.lease_write());
}

TEST(RuntimeState, StaleErrorNamesGenerations) {
  const Error e = stale_error("GpuRef<float>[8]", StaleReason::context_rebuilt, 3, 5, 1, 1);
  EXPECT_EQ(e, errc::stale_handle);
  EXPECT_NE(e.message().find("generation 3"), std::string::npos);
  EXPECT_NE(e.message().find("generation 5"), std::string::npos);
  EXPECT_EQ(to_string(StaleReason::state_gone), "state gone");
}

}  // namespace
}  // namespace cuactor::runtime
