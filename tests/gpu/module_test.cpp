#include "cuactor/gpu/module.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::gpu {
namespace {

using ModuleTest = cuactor::test_support::GpuTest;

TEST_F(ModuleTest, LoadsPtxAndLaunchesWithCheckedArguments) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(lib, Library::load_file(CUACTOR_TEST_PTX));
  CUACTOR_ASSERT_OK_AND_ASSIGN(axpy, lib.kernel("cuactor_test_axpy"));
  ASSERT_EQ(axpy.params().size(), 4u);
  EXPECT_EQ(axpy.params()[0].size, sizeof(float));
  EXPECT_EQ(axpy.params()[1].size, sizeof(void*));
  CUACTOR_ASSERT_OK_AND_ASSIGN(regs, axpy.num_registers(0));
  EXPECT_GT(regs, 0);

  CUACTOR_ASSERT_OK_AND_ASSIGN(stream, Stream::create(0));
  CUACTOR_ASSERT_OK_AND_ASSIGN(pool, MemPool::device_default(0));
  const int n = 10'007;
  std::vector<float> x(n), y(n), out(n, -1.0f);
  for (int i = 0; i < n; ++i) {
    x[static_cast<std::size_t>(i)] = static_cast<float>(i % 97) * 0.5f;
    y[static_cast<std::size_t>(i)] = 1.0f + static_cast<float>(i % 13);
  }
  const std::size_t bytes = n * sizeof(float);
  CUACTOR_ASSERT_OK_AND_ASSIGN(dx, DeviceBuffer::allocate(pool, bytes, stream.get()));
  CUACTOR_ASSERT_OK_AND_ASSIGN(dy, DeviceBuffer::allocate(pool, bytes, stream.get()));
  CUACTOR_ASSERT_OK(copy_async(dx.data(), x.data(), bytes, stream.get()));
  CUACTOR_ASSERT_OK(copy_async(dy.data(), y.data(), bytes, stream.get()));
  const float a = 3.0f;
  const float* px = dx.data_as<float>();
  float* py = dy.data_as<float>();
  LaunchConfig cfg{dim3((n + 255) / 256), dim3(256), 0, stream.get()};
  CUACTOR_ASSERT_OK(launch(axpy, cfg, a, px, py, n));
  CUACTOR_ASSERT_OK(copy_async(out.data(), dy.data(), bytes, stream.get()));
  CUACTOR_ASSERT_OK(stream.synchronize());
  for (int i = 0; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    ASSERT_FLOAT_EQ(out[u], a * x[u] + y[u]) << "at " << i;
  }

  // Wrong argument count and wrong argument size are rejected before reaching the driver.
  auto too_few = launch(axpy, cfg, a, px, py);
  ASSERT_FALSE(too_few);
  EXPECT_TRUE(too_few.error() == errc::invalid_argument);
  EXPECT_NE(too_few.error().message().find("3 argument(s) given, the kernel takes 4"), std::string::npos);
  const double wrong = 3.0;
  auto bad_size = launch(axpy, cfg, wrong, px, py, n);
  ASSERT_FALSE(bad_size);
  EXPECT_NE(bad_size.error().message().find("argument 0 has 8 bytes"), std::string::npos);
}

TEST_F(ModuleTest, MissingKernelIsNamed) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(lib, Library::load_file(CUACTOR_TEST_PTX));
  auto k = lib.kernel("no_such_kernel");
  ASSERT_FALSE(k);
  EXPECT_TRUE(k.error() == errc::invalid_argument);
  EXPECT_NE(k.error().message().find("no_such_kernel"), std::string::npos);
}

}  // namespace
}  // namespace cuactor::gpu
