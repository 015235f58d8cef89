// cuBLAS GEMM requests on the device actor (kernels::async_cublas_gemm): every layout, the element
// types cuBLAS takes, batches, padded leading dimensions and in-place accumulate, each checked
// against an fp64 host reference by relative norm error; rejections reply with typed errors.
#include "cuactor/kernels/cublas_gemm.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "support/actor_test.hpp"

namespace cuactor::kernels {
namespace {

namespace asio = boost::asio;
using test_support::wait_reply;

/// Host value of any element type the tests use.
template <class T>
double to_double(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(x);
  else if constexpr (std::is_same_v<T, __half>)
    return __half2float(x);
  else
    return static_cast<double>(x);
}
template <class T>
T from_float(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16(x);
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half(x);
  else
    return static_cast<T>(x);
}
template <class T>
std::vector<T> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<T> v(n);
  for (auto& x : v) x = from_float<T>(d(rng));
  return v;
}

/// Index of element (row, col) of a matrix stored in `layout` with leading dimension `ld`.
std::size_t at(std::int64_t row, std::int64_t col, MatrixLayout layout, std::int64_t ld) {
  return static_cast<std::size_t>(layout == MatrixLayout::row ? row * ld + col : row + col * ld);
}

/// One problem with its host data and explicit leading dimensions / batch strides.
struct Case {
  DenseGemmShape shape;
  std::int64_t lda = 0, ldb = 0, ldd = 0;  // 0 = packed
  float alpha = 1.0f, beta = 0.0f;

  [[nodiscard]] std::int64_t ld(std::int64_t rows, std::int64_t cols, MatrixLayout l, std::int64_t given) const {
    return given != 0 ? given : (l == MatrixLayout::row ? cols : rows);
  }
  [[nodiscard]] std::int64_t lda_or_packed() const { return ld(shape.m, shape.k, shape.layout_a, lda); }
  [[nodiscard]] std::int64_t ldb_or_packed() const { return ld(shape.k, shape.n, shape.layout_b, ldb); }
  [[nodiscard]] std::int64_t ldd_or_packed() const { return ld(shape.m, shape.n, shape.layout_c, ldd); }
  [[nodiscard]] std::size_t elements_a() const {
    return static_cast<std::size_t>(lda_or_packed() * (shape.layout_a == MatrixLayout::row ? shape.m : shape.k) *
                                    shape.batch);
  }
  [[nodiscard]] std::size_t elements_b() const {
    return static_cast<std::size_t>(ldb_or_packed() * (shape.layout_b == MatrixLayout::row ? shape.k : shape.n) *
                                    shape.batch);
  }
  [[nodiscard]] std::size_t elements_d() const {
    return static_cast<std::size_t>(ldd_or_packed() * (shape.layout_c == MatrixLayout::row ? shape.m : shape.n) *
                                    shape.batch);
  }
};

/// fp64 reference of D = alpha A B + beta C (C laid out like D), batches packed at the leading
/// dimensions; NaN at the padding, which D does not address.
template <class TA, class TB, class TD>
std::vector<double> reference(const Case& c, const std::vector<TA>& a, const std::vector<TB>& b,
                              const std::vector<TD>& cin) {
  const auto& s = c.shape;
  const std::int64_t lda = c.lda_or_packed(), ldb = c.ldb_or_packed(), ldd = c.ldd_or_packed();
  const std::size_t sa = a.size() / s.batch, sb = b.size() / s.batch, sd = cin.size() / s.batch;
  std::vector<double> d(cin.size(), NAN);
  for (std::int64_t q = 0; q < s.batch; ++q)
    for (std::int64_t i = 0; i < s.m; ++i)
      for (std::int64_t j = 0; j < s.n; ++j) {
        double acc = 0;
        for (std::int64_t p = 0; p < s.k; ++p)
          acc += to_double(a[q * sa + at(i, p, s.layout_a, lda)]) * to_double(b[q * sb + at(p, j, s.layout_b, ldb)]);
        const std::size_t o = q * sd + at(i, j, s.layout_c, ldd);
        d[o] = c.alpha * acc + (c.beta != 0.0f ? c.beta * to_double(cin[o]) : 0.0);
      }
  return d;
}

/// ||got - want|| / ||want|| over the positions where `want` is not NaN.
template <class T>
double relative_norm_error(const std::vector<T>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) continue;
    const double d = to_double(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

class CublasGemmGpu : public test_support::ActorGpuTest {
 protected:
  /// Runs `c` through async_cublas_gemm with C distinct from D (when beta != 0) or none, and
  /// returns the relative norm error against the fp64 reference.
  template <class TA, class TB, class TD>
  double run_case(const Case& c, unsigned seed) {
    const auto a = random_values<TA>(c.elements_a(), seed);
    const auto b = random_values<TB>(c.elements_b(), seed + 1);
    const auto cin = c.beta != 0.0f ? random_values<TD>(c.elements_d(), seed + 2)
                                    : std::vector<TD>(c.elements_d(), from_float<TD>(0.0f));
    DenseGemmOperands<TA, TB, TD> ops;
    ops.a = upload(a);
    ops.b = upload(b);
    if (c.beta != 0.0f) ops.c = upload(cin);
    ops.d = upload(std::vector<TD>(c.elements_d(), from_float<TD>(NAN)));  // poisoned: D must be written
    ops.lda = c.lda;
    ops.ldb = c.ldb;
    ops.ldc = ops.ldd = c.ldd;
    ops.alpha = c.alpha;
    ops.beta = c.beta;
    auto [ec, d] = wait_reply(async_cublas_gemm(*actor_, c.shape, ops, asio::use_future));
    EXPECT_FALSE(ec) << ec.message();
    if (ec) return INFINITY;
    EXPECT_EQ(d.allocation(), ops.d.allocation());
    return relative_norm_error(download(d), reference(c, a, b, cin));
  }
};

Case make_case(std::int64_t m, std::int64_t n, std::int64_t k, MatrixLayout la = MatrixLayout::row,
               MatrixLayout lb = MatrixLayout::col, MatrixLayout lc = MatrixLayout::row) {
  Case c;
  c.shape.m = m;
  c.shape.n = n;
  c.shape.k = k;
  c.shape.layout_a = la;
  c.shape.layout_b = lb;
  c.shape.layout_c = lc;
  return c;
}

TEST_F(CublasGemmGpu, F32EveryLayoutMatchesFp64) {
  const MatrixLayout both[] = {MatrixLayout::row, MatrixLayout::col};
  unsigned seed = 10;
  for (MatrixLayout la : both)
    for (MatrixLayout lb : both)
      for (MatrixLayout lc : both) {
        Case c = make_case(97, 75, 61, la, lb, lc);  // odd sizes: cuBLAS needs no alignment
        c.alpha = 0.5f;
        c.beta = -1.0f;
        EXPECT_LT((run_case<float, float, float>(c, seed += 3)), 1e-5)
            << "A " << name(la) << " B " << name(lb) << " C " << name(lc);
      }
}

TEST_F(CublasGemmGpu, SixteenBitInputsAndF64MatchFp64) {
  const Case c = make_case(128, 96, 200);
  EXPECT_LT((run_case<__nv_bfloat16, __nv_bfloat16, float>(c, 1)), 1e-5);  // fp32 accumulate and output
  EXPECT_LT((run_case<__half, __half, __half>(c, 2)), 5e-3);               // rounded to f16 on output
  EXPECT_LT((run_case<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(c, 3)), 1e-2);
  EXPECT_LT((run_case<double, double, double>(c, 4)), 1e-12);
}

TEST_F(CublasGemmGpu, BatchedWithPaddedLeadingDimensions) {
  Case c = make_case(40, 56, 24);
  c.shape.batch = 3;
  c.lda = 32;  // A row-major 40 x 24
  c.ldb = 40;  // B col-major: stored 56 x 24 rows of 40
  c.ldd = 64;  // D row-major 40 x 56
  c.alpha = 2.0f;
  c.beta = 0.25f;
  EXPECT_LT((run_case<float, float, float>(c, 20)), 1e-5);
}

TEST_F(CublasGemmGpu, InPlaceAccumulateWhenCIsD) {
  Case c = make_case(64, 48, 32);
  c.beta = 1.0f;
  const auto a = random_values<float>(c.elements_a(), 30), b = random_values<float>(c.elements_b(), 31);
  const auto cin = random_values<float>(c.elements_d(), 32);
  DenseGemmOperands<float, float, float> ops;
  ops.a = upload(a);
  ops.b = upload(b);
  ops.d = ops.c = upload(cin);
  auto [ec, d] = wait_reply(async_cublas_gemm(*actor_, c.shape, ops, asio::use_future));
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_LT(relative_norm_error(download(d), reference(c, a, b, cin)), 1e-5);
}

TEST_F(CublasGemmGpu, RejectionsReplyWithTypedErrors) {
  const Case c = make_case(64, 48, 32);
  DenseGemmOperands<float, float, float> ops;
  ops.a = upload(random_values<float>(c.elements_a(), 40));
  ops.b = upload(random_values<float>(c.elements_b(), 41));
  ops.d = upload(std::vector<float>(c.elements_d()));
  const auto invalid = make_error_code(errc::invalid_argument);
  auto bad = ops;
  bad.lda = 16;  // < k = 32 for row-major A
  EXPECT_EQ(wait_reply(async_cublas_gemm(*actor_, c.shape, bad, asio::use_future)).first, invalid);
  bad = ops;
  bad.d = upload(std::vector<float>(10));  // too small for 64 x 48
  EXPECT_EQ(wait_reply(async_cublas_gemm(*actor_, c.shape, bad, asio::use_future)).first, invalid);
  bad = ops;
  bad.beta = 1.0f;  // without C
  EXPECT_EQ(wait_reply(async_cublas_gemm(*actor_, c.shape, bad, asio::use_future)).first, invalid);
  DenseGemmShape override_shape = c.shape;
  override_shape.sku_override = GemmSku{};
  EXPECT_EQ(wait_reply(async_cublas_gemm(*actor_, override_shape, ops, asio::use_future)).first,
            make_error_code(errc::unsupported));
  DenseGemmOperands<__nv_fp8_e4m3, __nv_fp8_e4m3, float> fp8;
  fp8.a = upload(std::vector<__nv_fp8_e4m3>(c.elements_a()));
  fp8.b = upload(std::vector<__nv_fp8_e4m3>(c.elements_b()));
  fp8.d = ops.d;
  EXPECT_EQ(wait_reply(async_cublas_gemm(*actor_, c.shape, fp8, asio::use_future)).first,
            make_error_code(errc::unsupported));
  // Nothing was written by the rejected requests, and a good one still runs.
  EXPECT_FALSE(wait_reply(async_cublas_gemm(*actor_, c.shape, ops, asio::use_future)).first);
}

}  // namespace
}  // namespace cuactor::kernels
