/// @file
/// The activations every cuactor kernel computes (kernels/activations.cuh: epilogue trees' silu and
/// sigmoid nodes, the SwiGLU gate) element by element against fp64, over [-40, 40] in steps
/// of 2^-10 and the values where their hardware exponent and reciprocal could break: 0, subnormals,
/// the exponent's overflow and underflow, infinities and NaN.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

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

/// Device buffers of the inputs and the two outputs.
struct Buffers {
  float* x = nullptr;
  float* out[2] = {};
  ~Buffers() {
    cudaFree(x);
    for (float* p : out) cudaFree(p);
  }
};

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
  Buffers b;
  ASSERT_EQ(cudaMalloc(&b.x, n * sizeof(float)), cudaSuccess);
  for (float*& p : b.out) ASSERT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b.x, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  for (float* p : b.out) ASSERT_EQ(cudaMemset(p, 0xff, n * sizeof(float)), cudaSuccess);  // NaN poison
  ASSERT_EQ(test_support::evaluate_activations(b.x, n, b.out[0], b.out[1], nullptr), cudaSuccess);
  std::vector<float> got[2];
  for (int f = 0; f < 2; ++f) {
    got[f].resize(n);
    ASSERT_EQ(cudaMemcpy(got[f].data(), b.out[f], n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  // The hardware exponent's error grows with its argument (2 + 1.16|x| ulp): 2e-5 relative covers
  // |x| <= 100, far below the 16-bit outputs' rounding; below 1e-30 a result may flush to zero.
  const char* names[2] = {"silu", "sigmoid"};
  double (*refs[2])(double) = {silu, sigmoid};
  for (int f = 0; f < 2; ++f) {
    int bad = 0;
    double worst = 0;
    for (std::size_t i = 0; i < finite; ++i) {
      const double want = refs[f](x[i]);
      const double error = std::abs(got[f][i] - want);
      const double bound = 2e-5 * std::abs(want) + 1e-30;
      worst = std::max(worst, error / bound);
      if (!(error <= bound) && ++bad <= 5)
        ADD_FAILURE() << names[f] << "(" << x[i] << ") = " << got[f][i] << ", fp64 " << want;
    }
    EXPECT_EQ(bad, 0) << names[f] << ": worst error / bound " << worst;
  }
  const std::size_t pos_inf = finite, neg_inf = finite + 1, nan = finite + 2;
  // As their formulas give them in IEEE arithmetic (torch's too): -inf * 0 is NaN.
  EXPECT_EQ(got[0][pos_inf], kInf);
  EXPECT_TRUE(std::isnan(got[0][neg_inf]));
  EXPECT_EQ(got[1][pos_inf], 1.0f);
  EXPECT_EQ(got[1][neg_inf], 0.0f);
  for (int f = 0; f < 2; ++f) EXPECT_TRUE(std::isnan(got[f][nan])) << names[f] << "(NaN)";
}

}  // namespace
}  // namespace cuactor::kernels
