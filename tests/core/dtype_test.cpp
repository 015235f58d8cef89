#include "cuactor/core/dtype.hpp"

#include <gtest/gtest.h>

namespace cuactor {
namespace {

TEST(DType, SizesInBitsAndBytes) {
  EXPECT_EQ(size_bits(DType::f32), 32);
  EXPECT_EQ(size_bits(DType::bf16), 16);
  EXPECT_EQ(size_bits(DType::e4m3), 8);
  EXPECT_EQ(size_bits(DType::e2m1), 4);
  EXPECT_EQ(storage_bytes(DType::e2m1, 3), 2u);
  EXPECT_EQ(storage_bytes(DType::f16, 10), 20u);
  static_assert(dtype_of<float>::value == DType::f32);
  static_assert(dtype_of<__nv_bfloat16>::value == DType::bf16);
  static_assert(dtype_of<__nv_fp8_e4m3>::value == DType::e4m3);
}

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::f64, DType::f32, DType::tf32, DType::f16, DType::bf16, DType::e4m3, DType::e5m2, DType::e2m1,
                  DType::i64, DType::i32, DType::i8, DType::u8}) {
    auto parsed = parse_dtype(name(t));
    ASSERT_TRUE(parsed) << name(t);
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::e4m3);
  EXPECT_FALSE(parse_dtype("f17"));
}

TEST(DType, LowPrecisionFloats) {
  EXPECT_TRUE(is_low_precision_float(DType::e4m3));
  EXPECT_TRUE(is_low_precision_float(DType::e2m1));
  EXPECT_FALSE(is_low_precision_float(DType::bf16));
}

}  // namespace
}  // namespace cuactor
