/// @file
/// The isolated forms of the GEMM and conv requests ([R10]): what async_dense_gemm, the grouped
/// requests and async_conv send to a worker decodes to the same request, and malformed payloads are
/// typed errors (no GPU).
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include "cuactor/kernels/conv_actor.hpp"
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
  EXPECT_TRUE(d->spec.epilogue.is_preset());
  // A tree travels with the request, so the worker refuses it as the in-process form does.
  q.spec.epilogue = epi::apply(EpilogueNode::swiglu, epi::acc());
  auto tree = detail::GroupedRequest::decode(encoded(q));
  ASSERT_TRUE(tree.has_value()) << tree.error().to_string();
  EXPECT_EQ(tree->spec.epilogue, q.spec.epilogue);
  auto refused = detail::check_request_epilogue(tree->spec);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code(), make_error_code(errc::unsupported));
  EXPECT_NE(refused.error().message().find("'swiglu(acc)' is not supported through the actor"), std::string::npos)
      << refused.error().message();
  EXPECT_TRUE(detail::check_request_epilogue(GroupedGemmSpec{}).has_value());
  // A malformed or empty epilogue token in the message is a typed error, not a default.
  for (const char* token : {"swiglu(", "", "relu(swiglu(acc))"}) {
    runtime::wire::Writer w;
    w.put_string("bf16").put_string("bf16").put_string("bf16").put_string("col").put_string(token);
    auto bad = detail::GroupedRequest::decode(w.take());
    ASSERT_FALSE(bad.has_value()) << token;
    EXPECT_EQ(bad.error().code(), make_error_code(errc::invalid_argument)) << token << ": " << bad.error().message();
  }
}

TEST(WorkerRequests, PackedOperandSizesAreCheckedInBytes) {
  GroupedGemmSpec spec;  // bf16 in, bf16 out
  EXPECT_TRUE(detail::check_packed_bytes(spec, 64, 32, 10, 2, 10 * 32 * 2, 2 * 64 * 32 * 2, 10 * 64 * 2).has_value());
  auto a = detail::check_packed_bytes(spec, 64, 32, 10, 2, 10 * 32 * 2 - 1, 2 * 64 * 32 * 2, 10 * 64 * 2);
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message().find("a has 639 bytes"), std::string::npos) << a.error().message();
  EXPECT_FALSE(detail::check_packed_bytes(spec, -1, 32, 10, 2, 1 << 20, 1 << 20, 1 << 20).has_value());
}

TEST(WorkerRequests, ConvRequestRoundTrips) {
  detail::ConvRequest q;
  ConvSpec& s = q.spec;
  s.operation = ConvOperation::wgrad;
  s.element = DType::f16;
  s.output = DType::f32;
  s.n = 3, s.h = 17, s.w = 19, s.c = 64, s.k = 96, s.r = 5, s.s = 3;
  s.pad_h = 2, s.pad_w = 1, s.stride_h = 2, s.stride_w = 3, s.dilation_h = 1, s.dilation_w = 2, s.groups = 1;
  q.alpha = 0.25f;
  q.beta = 1.0f;
  q.has_x = q.has_dy = q.has_out = true;
  q.source_is_out = true;
  auto d = detail::ConvRequest::decode(encoded(q));
  ASSERT_TRUE(d.has_value()) << d.error().to_string();
  EXPECT_EQ(d->spec, q.spec);
  EXPECT_EQ(d->alpha, 0.25f);
  EXPECT_EQ(d->beta, 1.0f);
  EXPECT_TRUE(d->has_x && !d->has_w && d->has_dy && d->has_out && !d->has_source && d->source_is_out);
  EXPECT_EQ(d->buffer_count(), 3u);
  EXPECT_FALSE(d->sku_override.has_value());
  // A truncated payload and an unknown operation are protocol errors naming what is wrong.
  auto bytes = encoded(q);
  bytes.pop_back();
  auto cut = detail::ConvRequest::decode(bytes);
  ASSERT_FALSE(cut.has_value());
  EXPECT_EQ(cut.error().code(), make_error_code(errc::protocol_error));
  runtime::wire::Writer w;
  w.put_string("fgrad");
  auto bad = detail::ConvRequest::decode(w.take());
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("fgrad"), std::string::npos) << bad.error().message();
}

// Which buffers a typed conv request sends: the operation's non-empty inputs (the others are ignored),
// out, and source unless it is out; element types come from the template arguments.
TEST(WorkerRequests, ConvRequestSendsTheOperationsInputsOnly) {
  auto state = std::make_shared<runtime::DeviceState>(0);
  state->advance_generation();
  alignas(16) static std::byte host[4][64];  // stands in for device memory: never dereferenced here
  const auto ref = [&](int i) {
    return runtime::GpuRef<__nv_bfloat16>(std::make_shared<runtime::DeviceAllocation>(host[i], 64, state, nullptr));
  };
  ConvOperands<__nv_bfloat16, __nv_bfloat16> ops;
  ops.x = ref(0);
  ops.w = ref(1);
  ops.dy = ref(2);
  ops.out = ref(3);
  ConvSpec spec;
  spec.operation = ConvOperation::dgrad;
  spec.element = spec.output = DType::f32;  // replaced by T and TOut
  auto q = detail::conv_request(spec, ops);
  EXPECT_EQ(q.spec.element, DType::bf16);
  EXPECT_EQ(q.spec.output, DType::bf16);
  EXPECT_TRUE(!q.has_x && q.has_w && q.has_dy && q.has_out && !q.has_source && !q.source_is_out);
  ops.source = ops.out;
  q = detail::conv_request(spec, ops);
  EXPECT_TRUE(q.source_is_out && !q.has_source);
  EXPECT_EQ(q.buffer_count(), 3u);
  ops.source = ops.x;  // a separate source buffer travels
  spec.operation = ConvOperation::fprop;
  q = detail::conv_request(spec, ops);
  EXPECT_TRUE(q.has_x && q.has_w && !q.has_dy && q.has_source && !q.source_is_out);
  EXPECT_EQ(q.buffer_count(), 4u);
  ops.x = {};  // a missing input does not travel: the worker's plan names it
  q = detail::conv_request(spec, ops);
  EXPECT_FALSE(q.has_x);
}

}  // namespace
}  // namespace cuactor::kernels
