#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/module.hpp"

namespace cuactor::gpu {
namespace {

TEST(DeviceOrdinal, NonexistentOrdinalIsNoDeviceNamingIt) {
  auto p = device_properties(4096);
  ASSERT_FALSE(p);
  EXPECT_TRUE(p.error() == errc::no_device);
  EXPECT_NE(p.error().message().find("4096"), std::string::npos) << p.error().message();
  EXPECT_FALSE(device_properties(-1));
  EXPECT_FALSE(MemPool::create(4096));
  EXPECT_FALSE(ScopedDevice::make(-3));
}

TEST(CudaVersion, Formats) {
  EXPECT_EQ(format_cuda_version(13000), "13.0");
  EXPECT_EQ(format_cuda_version(12080), "12.8");
}

TEST(Library, RejectsNullImage) {
  auto l = Library::load_data(nullptr);
  ASSERT_FALSE(l);
  EXPECT_TRUE(l.error() == errc::invalid_argument);
}

TEST(Launch, RejectsEmptyKernel) {
  Kernel k;
  auto s = launch(k, LaunchConfig{}, 1.0f);
  ASSERT_FALSE(s);
  EXPECT_TRUE(s.error() == errc::invalid_argument);
}

// Containers of argument pointers and sizes go to the type-erased overload; the typed overload never
// takes them as two by-value arguments (the worker's launch once did exactly that).
template <class... Args>
concept TypedLaunchAccepts = requires(const Kernel& k, const LaunchConfig& c, const Args&... a) {
  launch<Args...>(k, c, a...);
};
static_assert(!TypedLaunchAccepts<std::vector<void*>, std::vector<std::size_t>>);
static_assert(TypedLaunchAccepts<float*, int, float>);

TEST(Launch, ContainersSelectTheTypeErasedOverload) {
  std::vector<void*> args(3);
  std::vector<std::size_t> sizes(3);
  auto s = launch(Kernel{}, LaunchConfig{}, args, sizes);
  ASSERT_FALSE(s);
  EXPECT_TRUE(s.error() == errc::invalid_argument);
}

}  // namespace
}  // namespace cuactor::gpu
