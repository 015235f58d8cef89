/// @file
/// The isolated forms of the GEMM requests ([R10]): what async_dense_gemm and the grouped requests
/// send to a worker decodes to the same request, and malformed payloads are typed errors (no GPU).
#include <gtest/gtest.h>

#include "cuactor/kernels/dense_gemm_actor.hpp"
#include "cuactor/kernels/grouped_actor.hpp"

namespace cuactor::kernels {
namespace {

std::vector<std::byte> encoded(const auto& request) {
  runtime::wire::Writer w;
  request.encode(w);
  return w.take();
}

TEST(WorkerRequests, DenseRequestRoundTrips) {
  detail::DenseRequest q;
  q.problem.m = 17;
  q.problem.n = 4096;
  q.problem.k = 129;
  q.problem.batch = 3;
  q.problem.a = q.problem.b = DType::e4m3;
  q.problem.c = q.problem.d = DType::bf16;
  q.problem.layout_b = MatrixLayout::row;
  q.problem.epilogue = GemmEpilogue::scaled_linear_combination;
  q.operands.lda = 200;
  q.operands.batch_stride_d = 1 << 20;
  q.operands.alpha = 0.5f;
  q.operands.beta = -2.0f;
  q.has_c = true;
  q.has_scale_a = true;
  auto d = detail::DenseRequest::decode(encoded(q));
  ASSERT_TRUE(d.has_value()) << d.error().to_string();
  EXPECT_EQ(d->problem, q.problem);
  EXPECT_EQ(d->operands.lda, 200);
  EXPECT_EQ(d->operands.batch_stride_d, 1 << 20);
  EXPECT_EQ(d->operands.alpha, 0.5f);
  EXPECT_EQ(d->operands.beta, -2.0f);
  EXPECT_TRUE(d->has_c && d->has_scale_a && !d->has_scale_b && !d->c_is_d);
  EXPECT_EQ(d->buffer_count(), 5u);
  EXPECT_FALSE(d->sku_override.has_value());
}

TEST(WorkerRequests, MalformedDenseAndGroupedPayloadsAreProtocolErrors) {
  detail::DenseRequest q;
  auto bytes = encoded(q);
  bytes.pop_back();
  auto d = detail::DenseRequest::decode(bytes);
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code(), make_error_code(errc::protocol_error));
  // An unknown dtype token names the field.
  runtime::wire::Writer w;
  w.put_i64(1).put_i64(1).put_i64(1).put_i64(1).put_string("bf17");
  auto bad = detail::DenseRequest::decode(w.take());
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("bf17"), std::string::npos) << bad.error().message();
  // A grouped request claiming a million groups and carrying none fails without allocating them.
  detail::GroupedRequest g;
  auto gb = encoded(g);
  runtime::wire::Writer big;
  big.put(std::uint32_t{0xffffffffu});
  auto gd = detail::GroupedRequest::decode(big.take());
  ASSERT_FALSE(gd.has_value());
  EXPECT_EQ(gd.error().code(), make_error_code(errc::protocol_error));
  gb.push_back(std::byte{0});
  EXPECT_FALSE(detail::GroupedRequest::decode(gb).has_value());  // a trailing byte
}

TEST(WorkerRequests, GroupedRequestRoundTripsAndRawScalesAreRefusedByTheWorker) {
  detail::GroupedRequest q;
  q.spec.a = q.spec.b = DType::f16;
  q.spec.d = DType::f32;
  q.spec.layout_b = MatrixLayout::row;
  q.spec.rows_per_group_hint = 48;
  q.n = 256;
  q.k = 512;
  q.alpha = 2.0f;
  q.rows = {0, 5, 300, 0};
  q.raw_scales = true;
  auto d = detail::GroupedRequest::decode(encoded(q));
  ASSERT_TRUE(d.has_value()) << d.error().to_string();
  EXPECT_EQ(d->spec.a, DType::f16);
  EXPECT_EQ(d->spec.d, DType::f32);
  EXPECT_EQ(d->spec.layout_b, MatrixLayout::row);
  EXPECT_EQ(d->spec.rows_per_group_hint, 48);
  EXPECT_EQ(d->rows, q.rows);
  EXPECT_EQ(d->n, 256);
  EXPECT_EQ(d->k, 512);
  EXPECT_EQ(d->alpha, 2.0f);
  EXPECT_FALSE(d->device_sized);
  EXPECT_TRUE(d->raw_scales);
}

TEST(WorkerRequests, PackedOperandSizesAreCheckedInBytes) {
  GroupedGemmSpec spec;  // bf16 in, bf16 out
  EXPECT_TRUE(detail::check_packed_bytes(spec, 64, 32, 10, 2, 10 * 32 * 2, 2 * 64 * 32 * 2, 10 * 64 * 2).has_value());
  auto a = detail::check_packed_bytes(spec, 64, 32, 10, 2, 10 * 32 * 2 - 1, 2 * 64 * 32 * 2, 10 * 64 * 2);
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message().find("a has 639 bytes"), std::string::npos) << a.error().message();
  EXPECT_FALSE(detail::check_packed_bytes(spec, -1, 32, 10, 2, 1 << 20, 1 << 20, 1 << 20).has_value());
}

}  // namespace
}  // namespace cuactor::kernels
