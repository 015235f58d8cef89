// How the commands read "MxNxK" and "GxRxNxK" and spread grouped rows (tools/cuactor/shape_text.hpp).
#include "shape_text.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <numeric>
#include <string>

namespace cuactor::cli {
namespace {

// Both spellings, each field read whole.
TEST(GroupedSize, ReadsFourFieldsBetweenXsOrSpaces) {
  for (const std::string text : {"128x200x1536x2048", "128 200 1536 2048", "  128  200\t1536 2048 ",
                                 " 128x200x1536x2048\r", "128x200x1536x2048 ", "128 x 200 x 1536 x 2048"}) {
    SCOPED_TRACE(text);
    auto s = parse_grouped_size(text, DType::bf16);
    ASSERT_TRUE(s.has_value()) << s.error().to_string();
    EXPECT_EQ(s->groups, 128);
    EXPECT_EQ(s->rows, 200);
    EXPECT_EQ(s->n, 1536);
    EXPECT_EQ(s->k, 2048);
    EXPECT_EQ(s->to_string(), "128x200x1536x2048");
  }
}

// Anything but four fields of decimal digits is refused, quoting the text as given.
TEST(GroupedSize, RefusesMalformedTextQuotingIt) {
  for (const std::string text : {"", "128x200x1536", "128x200x1536x2048x", "x128x200x1536x2048", "128xx200x1536x2048",
                                 "+128x200x1536x2048", "128x-200x1536x2048", "128x2 00x1536x2048", "128X200X1536X2048",
                                 "128x2e2x1536x2048", "128 200x1536 2048", "128 200 1536 2048 8"}) {
    SCOPED_TRACE(text);
    auto s = parse_grouped_size(text, DType::bf16);
    ASSERT_FALSE(s.has_value());
    EXPECT_EQ(s.error().code(), errc::invalid_argument);
    EXPECT_NE(s.error().message().find("shape '" + text + "' is not GxRxNxK"), std::string::npos)
        << s.error().message();
  }
}

// Each field's range, the rows in all, and whole 16-byte rows of N and K, each named with its value.
TEST(GroupedSize, NamesTheValueAndTheRuleItBreaks) {
  const auto message = [](const std::string& text, DType t = DType::bf16) {
    auto s = parse_grouped_size(text, t);
    return s ? std::string("accepted") : s.error().message();
  };
  EXPECT_NE(message("0x8x64x64").find("groups=0 must be in [1, 16384]"), std::string::npos);
  EXPECT_NE(message("16385x8x64x64").find("groups=16385 must be in [1, 16384]"), std::string::npos);
  EXPECT_NE(message("8x0x64x64").find("rows per group=0 must be in [1, 1048576]"), std::string::npos);
  EXPECT_NE(message("8x8x99999999999999999999x64").find("N=99999999999999999999 must be in [1, 1048576]"),
            std::string::npos);
  EXPECT_EQ(message("16384x1024x64x64"), "accepted") << "2^24 rows in all is the limit";
  EXPECT_NE(message("16384x1025x64x64").find("groups x rows per group = 16793600 must be at most 16777216"),
            std::string::npos);
  EXPECT_NE(message("8x8x1535x64").find("N=1535 must be a multiple of 8 for bf16"), std::string::npos);
  EXPECT_NE(message("8x8x64x2056", DType::e4m3).find("K=2056 must be a multiple of 16 for e4m3"), std::string::npos);
  EXPECT_EQ(message("8x8x64x2056", DType::bf16), "accepted");
}

// Rows are even without skew, and jittered around the mean with it: reproducibly, within the
// skew, and about groups x rows in all (each group is rounded on its own).
TEST(GroupedSize, SpreadsRowsReproduciblyWithinTheSkew) {
  const GroupedSize s{64, 200, 1536, 2048};
  EXPECT_EQ(s.rows_per_group(0.0, 11u), std::vector<int>(64, 200));
  const auto a = s.rows_per_group(0.6, 11u), b = s.rows_per_group(0.6, 11u), c = s.rows_per_group(0.6, 7u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c) << "another seed, other rows";
  ASSERT_EQ(a.size(), 64u);
  for (int r : a) {
    EXPECT_GE(r, static_cast<int>(200 * 0.4) - 20);
    EXPECT_LE(r, static_cast<int>(200 * 1.6) + 20);
  }
  const int total = std::accumulate(a.begin(), a.end(), 0);
  EXPECT_NEAR(total, 64 * 200, 64);
}

// Dense shapes follow the same field rules: three positive integers, quoted when refused.
TEST(GemmShape, ReadsThreePositiveIntegersStrictly) {
  for (const std::string text :
       {"16x8192x8192", "16 8192 8192", "16 x 8192 x 8192", "16x8192x8192\r", " 16\t8192 8192 "}) {
    auto v = parse_gemm_shape(text);
    ASSERT_TRUE(v.has_value()) << text;
    EXPECT_EQ(*v, (std::array<std::int64_t, 3>{16, 8192, 8192}));
  }
  for (const std::string text : {"16x8192", "0x8x8", "16x8192x8192x", "16xx8192x8192", "+16x8192x8192", "16x8192x-1",
                                 "16x8192x99999999999999999999", "16x8192x8192 1", "16 8192x8192"}) {
    SCOPED_TRACE(text);
    auto v = parse_gemm_shape(text);
    ASSERT_FALSE(v.has_value());
    EXPECT_NE(v.error().message().find("shape '" + text + "' is not MxNxK (or M N K) with three positive integers"),
              std::string::npos)
        << v.error().message();
  }
}

}  // namespace
}  // namespace cuactor::cli
