/// @file
/// The activations every cuactor kernel computes (kernels/activations.cuh: epilogue trees' silu,
/// sigmoid and gelu nodes, the SwiGLU gate) element by element against fp64, over [-40, 40] in steps
/// of 2^-10 and the values where their hardware exponent and reciprocal could break: 0, subnormals,
/// the exponent's overflow and underflow, infinities and NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "kernels/activations_test_kernels.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double silu(double x) {
  return x / (1.0 + std::exp(-x));
}
double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
double gelu(double x) {  // erfc keeps the negative tail's digits, which 1 + erf cancels
  return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
}

class ActivationsGpuTest : public cuactor::test_support::GpuTest {};

TEST_F(ActivationsGpuTest, MatchFp64ElementByElement) {
  std::vector<float> x;
  for (int i = -40 * 1024; i <= 40 * 1024; ++i) x.push_back(static_cast<float>(i) / 1024.0f);
  for (float v : {1e-30f, 1e-40f, 3e-3f, 87.0f, 88.5f, 89.0f, 100.0f, 1e10f, 3e38f})
    for (float sign : {1.0f, -1.0f}) x.push_back(sign * v);
  const std::size_t finite = x.size();
  for (float v : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    x.push_back(v);
  const std::size_t n = x.size();
  const std::size_t bytes = n * sizeof(float);
  CUACTOR_ASSERT_OK_AND_ASSIGN(stream, gpu::Stream::create(0));
  CUACTOR_ASSERT_OK_AND_ASSIGN(pool, gpu::MemPool::device_default(0));
  CUACTOR_ASSERT_OK_AND_ASSIGN(input, gpu::DeviceBuffer::allocate(pool, bytes, stream.get()));
  CUACTOR_ASSERT_OK_AND_ASSIGN(silu_out, gpu::DeviceBuffer::allocate(pool, bytes, stream.get()));
  CUACTOR_ASSERT_OK_AND_ASSIGN(sigmoid_out, gpu::DeviceBuffer::allocate(pool, bytes, stream.get()));
  CUACTOR_ASSERT_OK_AND_ASSIGN(gelu_out, gpu::DeviceBuffer::allocate(pool, bytes, stream.get()));
  CUACTOR_ASSERT_OK(gpu::copy_async(input.data(), x.data(), bytes, stream.get()));
  constexpr int kFunctions = 3;
  const gpu::DeviceBuffer* outs[kFunctions] = {&silu_out, &sigmoid_out, &gelu_out};
  for (const gpu::DeviceBuffer* out : outs)
    CUACTOR_ASSERT_OK(gpu::memset_async(out->data(), 0xff, bytes, stream.get()));  // NaN poison
  ASSERT_EQ(test_support::evaluate_activations(input.data_as<float>(), n, silu_out.data_as<float>(),
                                               sigmoid_out.data_as<float>(), gelu_out.data_as<float>(), stream.get()),
            cudaSuccess);
  std::vector<float> got[kFunctions];
  for (int f = 0; f < kFunctions; ++f) {
    got[f].resize(n);
    CUACTOR_ASSERT_OK(gpu::copy_async(got[f].data(), outs[f]->data(), bytes, stream.get()));
  }
  CUACTOR_ASSERT_OK(stream.synchronize());
  // The hardware exponent's error grows with its argument (2 + 1.16|x| ulp): 2e-5 relative covers
  // |x| <= 100, and gelu's 1.4e-5, far below the 16-bit outputs' rounding. Below the absolute floors a
  // result may flush to zero: silu and sigmoid below 1e-30; gelu's just above 3.1e-38, where its
  // results flush, so that its far negative tail (x near -13), where its rounding error peaks, is
  // checked relatively.
  const char* names[kFunctions] = {"silu", "sigmoid", "gelu"};
  const double floors[kFunctions] = {1e-30, 1e-30, 4e-38};
  double (*refs[kFunctions])(double) = {silu, sigmoid, gelu};
  for (int f = 0; f < kFunctions; ++f) {
    int bad = 0;
    double worst = 0;
    for (std::size_t i = 0; i < finite; ++i) {
      const double want = refs[f](x[i]);
      const double error = std::abs(got[f][i] - want);
      const double bound = 2e-5 * std::abs(want) + floors[f];
      worst = std::max(worst, error / bound);
      if (!(error <= bound) && ++bad <= 5)
        ADD_FAILURE() << names[f] << "(" << x[i] << ") = " << got[f][i] << ", fp64 " << want;
    }
    EXPECT_EQ(bad, 0) << names[f] << ": worst error / bound " << worst;
  }
  const std::size_t pos_inf = finite, neg_inf = finite + 1, nan = finite + 2;
  // silu as its formula gives it in IEEE arithmetic (torch's too): -inf * 0 is NaN.
  EXPECT_EQ(got[0][pos_inf], kInf);
  EXPECT_TRUE(std::isnan(got[0][neg_inf]));
  EXPECT_EQ(got[1][pos_inf], 1.0f);
  EXPECT_EQ(got[1][neg_inf], 0.0f);
  EXPECT_EQ(got[2][pos_inf], kInf);
  EXPECT_EQ(got[2][neg_inf], 0.0f) << "gelu(-inf) is gelu's limit, 0";
  for (int f = 0; f < kFunctions; ++f) EXPECT_TRUE(std::isnan(got[f][nan])) << names[f] << "(NaN)";
}

}  // namespace
}  // namespace cuactor::kernels
