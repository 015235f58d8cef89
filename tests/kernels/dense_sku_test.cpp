// GemmSku text round trips, rejections, hashing, and the compiled-in catalog's consistency.
#include <gtest/gtest.h>

#include <unordered_set>

#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/sku.hpp"
#include "kernels/instance_abi.h"
#include "support/gpu_test.hpp"

namespace cuactor::kernels {
namespace {

GemmSku fp8_sku() {
  GemmSku s;
  s.a = DType::e4m3;
  s.b = DType::e4m3;
  s.tile = {256, 128, 128};
  s.cluster = {1, 2, 1};
  s.schedule = GemmSchedule::cooperative_fp8_fast_accum;
  s.epilogue = GemmEpilogue::scaled_linear_combination;
  return s;
}

TEST(DenseSku, TextHasEveryField) {
  EXPECT_EQ(fp8_sku().to_string(),
            "dense:sm_90a:e4m3,e4m3,bf16,bf16,f32:row,col,row:256x128x128:1x2x1:s0:cooperative_fp8_fast_accum:"
            "scaled_linear_combination");
  EXPECT_EQ(fp8_sku().symbol_name(),
            "cuactor_gemm_dense_sm90a_e4m3_e4m3_bf16_bf16_f32_rcr_256x128x128_1x2x1_s0_cooperative_fp8_fast_accum_"
            "scaled_linear_combination");
}

TEST(DenseSku, ParseRoundTrips) {
  GemmSku sm80;
  sm80.arch = GpuArch{8, 0, false};
  sm80.a = sm80.b = sm80.c = sm80.d = DType::f16;
  sm80.layout_b = MatrixLayout::row;
  sm80.tile = {128, 256, 64};
  sm80.stages = 3;
  sm80.schedule = GemmSchedule::multistage;
  GemmSku stream_k;
  stream_k.tile = {128, 128, 64};
  stream_k.schedule = GemmSchedule::cooperative_streamk;
  EXPECT_NE(stream_k.to_string().find(":cooperative_streamk:"), std::string::npos) << stream_k.to_string();
  EXPECT_TRUE(is_stream_k(stream_k.schedule));
  EXPECT_FALSE(is_stream_k(GemmSchedule::cooperative));
  for (const GemmSku& s : {GemmSku{}, fp8_sku(), sm80, stream_k}) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(parsed, GemmSku::parse(s.to_string()));
    EXPECT_EQ(parsed, s) << s.to_string();
    EXPECT_EQ(hash_value(parsed), hash_value(s));
  }
}

TEST(DenseSku, ParseRejectsNamingTheField) {
  const std::string good = GemmSku{}.to_string();
  struct Case {
    std::string text;
    std::string mentions;
  };
  const Case cases[] = {
      {"dense:sm_90a", "9 ':'-separated fields"},
      {"sparse" + good.substr(5), "family 'sparse'"},
      {"dense:sm_91z:bf16,bf16,bf16,bf16,f32:row,col,row:128x256x64:1x1x1:s0:cooperative:linear_combination", "arch"},
      {"dense:sm_90a:bfloat16,bf16,bf16,bf16,f32:row,col,row:128x256x64:1x1x1:s0:cooperative:linear_combination",
       "element A 'bfloat16'"},
      {"dense:sm_90a:bf16,bf16,bf16,f32:row,col,row:128x256x64:1x1x1:s0:cooperative:linear_combination", "types"},
      {"dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,diag,row:128x256x64:1x1x1:s0:cooperative:linear_combination",
       "layout 'diag'"},
      {"dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:128x0x64:1x1x1:s0:cooperative:linear_combination", "tile"},
      {"dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:128x256x64:2x1:s0:cooperative:linear_combination", "cluster"},
      {"dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:128x256x64:1x1x1:3:cooperative:linear_combination", "stages"},
      {"dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:128x256x64:1x1x1:s0:warp:linear_combination",
       "schedule 'warp'"},
      {"dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:128x256x64:1x1x1:s0:cooperative:relu", "epilogue 'relu'"},
  };
  for (const auto& c : cases) {
    auto r = GemmSku::parse(c.text);
    ASSERT_FALSE(r.has_value()) << c.text;
    EXPECT_EQ(r.error(), errc::invalid_argument);
    EXPECT_NE(r.error().message().find(c.mentions), std::string::npos) << r.error().message();
  }
}

TEST(DenseSku, HashSeparatesFields) {
  std::unordered_set<GemmSku> set;
  GemmSku s;
  set.insert(s);
  s.cluster.m = 2;
  set.insert(s);
  s.layout_b = MatrixLayout::row;
  set.insert(s);
  s.d = DType::f32;
  set.insert(s);
  set.insert(GemmSku{});
  EXPECT_EQ(set.size(), 4u);
}

TEST(DenseCatalog, EveryInstanceIsConsistent) {
  // Entries that failed to convert would be missing: count the generated table's entries too.
  for (const auto& e : catalog()) {
    ASSERT_NE(e.instance, nullptr);
    CUACTOR_ASSERT_OK(check_instance_abi(*e.instance, e.sku.family == GemmFamily::dense
                                                          ? static_cast<unsigned>(sizeof(cuactor_dense_args))
                                                          : e.instance->args_size));
    CUACTOR_ASSERT_OK_AND_ASSIGN(again, GemmSku::from_desc(e.instance->sku));
    EXPECT_EQ(again, e.sku);
    EXPECT_EQ(find_in_catalog(e.sku), &e) << e.sku.to_string() << " is listed twice";
    EXPECT_NE(e.instance->can_implement, nullptr);
    EXPECT_NE(e.instance->workspace_size, nullptr);
    EXPECT_NE(e.instance->run, nullptr);
  }
  std::size_t by_family = 0;
  for (GemmFamily f :
       {GemmFamily::dense, GemmFamily::grouped, GemmFamily::conv_fprop, GemmFamily::conv_dgrad, GemmFamily::conv_wgrad})
    by_family += catalog_entries(f).size();
  EXPECT_EQ(by_family, catalog().size());
}

TEST(DenseCatalog, RejectsForeignAbi) {
  cuactor_gemm_instance fake{};
  fake.abi_version = CUACTOR_KERNEL_ABI_VERSION + 1;
  fake.args_size = sizeof(cuactor_dense_args);
  auto s = check_instance_abi(fake, sizeof(cuactor_dense_args));
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error(), errc::unsupported);
  fake.abi_version = CUACTOR_KERNEL_ABI_VERSION;
  fake.args_size = 8;
  EXPECT_FALSE(check_instance_abi(fake, sizeof(cuactor_dense_args)).has_value());
}

}  // namespace
}  // namespace cuactor::kernels
