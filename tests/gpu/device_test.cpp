#include "cuactor/gpu/device.hpp"

#include <gtest/gtest.h>

#include "support/gpu_test.hpp"

namespace cuactor::gpu {
namespace {

using DeviceTest = cuactor::test_support::GpuTest;

TEST_F(DeviceTest, PropertiesAreReal) {
  ASSERT_GT(device_count(), 0);
  CUACTOR_ASSERT_OK_AND_ASSIGN(p, device_properties(0));
  EXPECT_FALSE(p.name.empty());
  EXPECT_GE(p.cc_major, 7);
  EXPECT_GT(p.multiprocessors, 0);
  EXPECT_GT(p.total_memory, std::size_t{1} << 30);
  EXPECT_GT(p.clock_khz, 0);
  EXPECT_TRUE(p.supports_memory_pools);
  EXPECT_EQ(p.arch, best_target_for(p.cc_major, p.cc_minor));
  if (p.cc_major == 9) {
    EXPECT_EQ(p.arch.name(), "sm_90a");
  }
  EXPECT_GE(driver_version(), 13000);
  EXPECT_GE(runtime_version(), 13000);
}

TEST_F(DeviceTest, MemoryInfoIsConsistent) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(m, memory_info(0));
  EXPECT_GT(m.total, 0u);
  EXPECT_LE(m.free, m.total);
}

TEST_F(DeviceTest, ScopedDeviceRestoresPrevious) {
  int before = -1;
  ASSERT_EQ(cudaGetDevice(&before), cudaSuccess);
  {
    CUACTOR_ASSERT_OK_AND_ASSIGN(scope, ScopedDevice::make(device_count() - 1));
    int now = -1;
    ASSERT_EQ(cudaGetDevice(&now), cudaSuccess);
    EXPECT_EQ(now, device_count() - 1);
  }
  int after = -1;
  ASSERT_EQ(cudaGetDevice(&after), cudaSuccess);
  EXPECT_EQ(after, before);
}

}  // namespace
}  // namespace cuactor::gpu
