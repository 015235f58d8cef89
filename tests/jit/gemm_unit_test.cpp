// GEMM requests for the JIT without a GPU: one source of truth with the catalog build ([J1]),
// rejections ([E2]), and one real CUTLASS sm_90a compile into the disk cache ([J5]).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "cuactor/jit/gemm.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/conv_plan.hpp"
#include "jit/test_support.hpp"
#include "kernels/instance_abi.h"
#include "support/gpu_test.hpp"

namespace cuactor::jit {
namespace {

namespace fs = std::filesystem;
using kernels::GemmSku;
using test_support::TempDir;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A configuration the ahead-of-time matrix does not hold (other tile and cluster shape).
GemmSku jit_only_sku() {
  GemmSku s;
  s.tile = {128, 128, 64};
  s.cluster = {1, 1, 1};
  s.schedule = kernels::GemmSchedule::cooperative;
  return s;
}

TEST(JitGemm, RendersEveryCatalogInstanceByteForByte) {
  if (kernels::catalog().empty()) GTEST_SKIP() << "no catalog instances in this build (CUACTOR_KERNEL_ARCHS empty)";
  for (const auto& e : kernels::catalog()) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(request, instance_request(e.sku));
    CUACTOR_ASSERT_OK_AND_ASSIGN(rendered, render_template_file(kernels_dir() / request.template_name, request.values));
    const fs::path generated = fs::path(CUACTOR_KERNELS_BINARY_DIR) / "instances" / (e.sku.symbol_name() + ".cu");
    ASSERT_TRUE(fs::exists(generated)) << generated;
    EXPECT_EQ(rendered, read_text(generated)) << e.sku.to_string();
  }
}

TEST(JitGemm, RendererAgreesWithCMakeConfigureFile) {
  // Render a JIT-only SKU both ways: CMake's configure_file(@ONLY) in script mode and ours.
  TempDir dir;
  CUACTOR_ASSERT_OK_AND_ASSIGN(request, instance_request(jit_only_sku()));
  std::ofstream script(dir.path() / "render.cmake");
  for (const auto& [k, v] : request.values) script << "set(" << k << " \"" << v << "\")\n";
  script << "configure_file(\"" << (kernels_dir() / request.template_name).string() << "\" \""
         << (dir.path() / "out.cu").string() << "\" @ONLY)\n";
  script.close();
  const std::string cmd = std::string(CUACTOR_CMAKE_COMMAND) + " -P " + (dir.path() / "render.cmake").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  CUACTOR_ASSERT_OK_AND_ASSIGN(rendered, render_template_file(kernels_dir() / request.template_name, request.values));
  EXPECT_EQ(rendered, read_text(dir.path() / "out.cu"));
  EXPECT_NE(rendered.find(jit_only_sku().symbol_name()), std::string::npos);
  EXPECT_EQ(rendered.find('@'), std::string::npos) << "every placeholder is substituted";
}

TEST(JitGemm, RejectsWhatNoTemplateExpresses) {
  GemmSku s = jit_only_sku();
  s.arch = GpuArch{10, 0, true};
  auto r = instance_request(s);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::unsupported);
  EXPECT_NE(r.error().message().find("sm_100a"), std::string::npos) << r.error().message();

  s = jit_only_sku();
  s.a = DType::f64;
  r = instance_request(s);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::unsupported);
  EXPECT_NE(r.error().message().find("f64"), std::string::npos) << r.error().message();

  s = jit_only_sku();
  s.arch = GpuArch{8, 0, false};
  s.a = s.b = DType::e4m3;
  r = instance_request(s);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::unsupported);
  EXPECT_NE(r.error().message().find("sm_89"), std::string::npos) << r.error().message();

  s = jit_only_sku();
  s.tile.n = 0;
  r = instance_request(s);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::invalid_argument);
  EXPECT_NE(r.error().message().find("128x0x64"), std::string::npos) << r.error().message();

  s = jit_only_sku();
  s.cluster.m = -1;
  EXPECT_EQ(instance_request(s).error(), errc::invalid_argument);

  // Arch-specific code only for its own architecture; portable code for the same or a later one.
  EXPECT_EQ(instance_request(jit_only_sku(), GpuArch{10, 0, false}).error(), errc::unsupported);
  s = jit_only_sku();
  s.arch = GpuArch{8, 0, false};
  s.schedule = kernels::GemmSchedule::multistage;
  EXPECT_TRUE(instance_request(s, GpuArch{9, 0, false}).has_value());
  EXPECT_EQ(instance_request(s, GpuArch{7, 5, false}).error(), errc::unsupported);

  // Stream-K is a dense sm_90a tile scheduler: grouped (ptr-array) kernels have their own.
  s = jit_only_sku();
  s.schedule = kernels::GemmSchedule::cooperative_streamk;
  EXPECT_TRUE(instance_request(s).has_value());
  s.family = kernels::GemmFamily::grouped;
  auto grouped = instance_request(s);
  ASSERT_FALSE(grouped.has_value());
  EXPECT_EQ(grouped.error(), errc::unsupported);
  EXPECT_NE(grouped.error().message().find("stream-K"), std::string::npos) << grouped.error().message();

  // Side outputs (amax, aux, rowsum) write through one pointer: dense kernels render them, grouped ones cannot.
  s = jit_only_sku();
  auto tree = kernels::EpilogueSpec::parse("rowsum(gelu(aux(acc)))");
  ASSERT_TRUE(tree.has_value()) << tree.error().message();
  s.epilogue = *tree;
  auto dense = instance_request(s);
  ASSERT_TRUE(dense.has_value()) << dense.error().message();
  EXPECT_NE(std::find(dense->options.begin(), dense->options.end(), "-lcuda"), dense->options.end())
      << "the row sums are zeroed through the driver API";
  s.family = kernels::GemmFamily::grouped;
  grouped = instance_request(s);
  ASSERT_FALSE(grouped.has_value());
  EXPECT_EQ(grouped.error(), errc::unsupported);
  EXPECT_NE(grouped.error().message().find("aux is written by dense kernels only"), std::string::npos)
      << grouped.error().message();
  // The swiglu root is the other way round: grouped kernels only.
  auto swiglu = kernels::EpilogueSpec::parse("swiglu(acc)");
  ASSERT_TRUE(swiglu.has_value()) << swiglu.error().message();
  s.epilogue = *swiglu;
  EXPECT_TRUE(instance_request(s).has_value());
  s.family = kernels::GemmFamily::dense;
  auto dense_swiglu = instance_request(s);
  ASSERT_FALSE(dense_swiglu.has_value());
  EXPECT_EQ(dense_swiglu.error(), errc::unsupported);
  EXPECT_NE(dense_swiglu.error().message().find("swiglu root is rendered for grouped kernels only"), std::string::npos)
      << dense_swiglu.error().message();
}

TEST(JitGemm, ConvSkusRenderTheConvTemplate) {
  const auto sku = kernels::ConvPlan::sku_for(kernels::ConvSpec{.operation = kernels::ConvOperation::wgrad},
                                              GpuArch{9, 0, true}, {128, 64, 64});
  CUACTOR_ASSERT_OK_AND_ASSIGN(request, instance_request(sku));
  EXPECT_EQ(request.template_name, "conv_sm90_instance.cu.in");
  CUACTOR_ASSERT_OK_AND_ASSIGN(rendered, render_template_file(kernels_dir() / request.template_name, request.values));
  EXPECT_NE(rendered.find("tags::conv_wgrad"), std::string::npos);
  EXPECT_NE(rendered.find(sku.symbol_name()), std::string::npos);
  CUACTOR_ASSERT_OK_AND_ASSIGN(back, sku_of_identity(request.identity()));
  EXPECT_EQ(back, sku);

  // The cooperative conv kernel renders the same template with its schedule tag.
  GemmSku cooperative = sku;
  cooperative.schedule = kernels::GemmSchedule::cooperative;
  cooperative.tile = {256, 128, 64};
  CUACTOR_ASSERT_OK_AND_ASSIGN(cooperative_request, instance_request(cooperative));
  CUACTOR_ASSERT_OK_AND_ASSIGN(cooperative_rendered,
                               render_template_file(kernels_dir() / request.template_name, cooperative_request.values));
  EXPECT_NE(cooperative_rendered.find("tags::cooperative"), std::string::npos);
  CUACTOR_ASSERT_OK_AND_ASSIGN(cooperative_back, sku_of_identity(cooperative_request.identity()));
  EXPECT_EQ(cooperative_back, cooperative);
  // So does the coresident one, with tiles of 64 rows too.
  GemmSku coresident = sku;
  coresident.schedule = kernels::GemmSchedule::coresident;
  coresident.tile = {64, 64, 64};
  CUACTOR_ASSERT_OK_AND_ASSIGN(coresident_request, instance_request(coresident));
  CUACTOR_ASSERT_OK_AND_ASSIGN(coresident_rendered,
                               render_template_file(kernels_dir() / request.template_name, coresident_request.values));
  EXPECT_NE(coresident_rendered.find("tags::coresident"), std::string::npos);
  CUACTOR_ASSERT_OK_AND_ASSIGN(coresident_back, sku_of_identity(coresident_request.identity()));
  EXPECT_EQ(coresident_back, coresident);
  // And the persistent pingpong one.
  GemmSku pingpong = sku;
  pingpong.schedule = kernels::GemmSchedule::pingpong;
  pingpong.tile = {128, 128, 64};
  CUACTOR_ASSERT_OK_AND_ASSIGN(pingpong_request, instance_request(pingpong));
  CUACTOR_ASSERT_OK_AND_ASSIGN(pingpong_rendered,
                               render_template_file(kernels_dir() / request.template_name, pingpong_request.values));
  EXPECT_NE(pingpong_rendered.find("tags::pingpong"), std::string::npos);
  CUACTOR_ASSERT_OK_AND_ASSIGN(pingpong_back, sku_of_identity(pingpong_request.identity()));
  EXPECT_EQ(pingpong_back, pingpong);

  // sm_80 convolution (CUTLASS 2.x): its own template, the multistage mainloop with its stage count.
  const auto sm80 =
      kernels::ConvPlan::sku_for(kernels::ConvSpec{.operation = kernels::ConvOperation::dgrad}, GpuArch{8, 0, false},
                                 {128, 128, 64}, {1, 1, 1}, kernels::GemmSchedule::multistage, 3);
  CUACTOR_ASSERT_OK_AND_ASSIGN(sm80_request, instance_request(sm80));
  EXPECT_EQ(sm80_request.template_name, "conv_sm80_instance.cu.in");
  CUACTOR_ASSERT_OK_AND_ASSIGN(sm80_rendered,
                               render_template_file(kernels_dir() / sm80_request.template_name, sm80_request.values));
  EXPECT_NE(sm80_rendered.find("sm80::ImplicitGemmConv"), std::string::npos);
  EXPECT_NE(sm80_rendered.find("tags::conv_dgrad"), std::string::npos);
  CUACTOR_ASSERT_OK_AND_ASSIGN(sm80_back, sku_of_identity(sm80_request.identity()));
  EXPECT_EQ(sm80_back, sm80);

  // Schedules belong to their templates (sm_80: multistage with 2 or more stages); one epilogue.
  GemmSku wrong = sm80;
  wrong.stages = 1;
  EXPECT_EQ(instance_request(wrong).error(), errc::unsupported);
  wrong = sm80;
  wrong.schedule = kernels::GemmSchedule::warpspecialized;
  EXPECT_EQ(instance_request(wrong).error(), errc::unsupported);
  wrong = sku;
  wrong.schedule = kernels::GemmSchedule::pingpong;
  wrong.tile = {128, 256, 64};  // one warpgroup's accumulators: 128x128 at most
  EXPECT_EQ(instance_request(wrong).error(), errc::unsupported);
  wrong.tile = {128, 128, 64};
  wrong.cluster = {1, 2, 1};  // persistent over tiles, not clusters
  EXPECT_EQ(instance_request(wrong).error(), errc::unsupported);
  wrong = cooperative;
  wrong.tile = {64, 128, 64};  // two warpgroups need 128 rows
  EXPECT_EQ(instance_request(wrong).error(), errc::unsupported);
  wrong = jit_only_sku();
  wrong.schedule = kernels::GemmSchedule::warpspecialized;
  EXPECT_EQ(instance_request(wrong).error(), errc::unsupported);
  wrong.schedule = kernels::GemmSchedule::coresident;  // a conv schedule only
  const auto dense_coresident = instance_request(wrong);
  ASSERT_FALSE(dense_coresident.has_value());
  EXPECT_NE(dense_coresident.error().message().find("schedule coresident is for convolution families only"),
            std::string::npos)
      << dense_coresident.error().message();
  wrong = sku;
  wrong.arch = GpuArch{8, 0, false};  // warpspecialized is an sm_90a schedule
  EXPECT_EQ(instance_request(wrong).error(), errc::unsupported);
  wrong = sku;
  wrong.epilogue = kernels::GemmEpilogue::scaled_linear_combination;
  EXPECT_EQ(instance_request(wrong).error(), errc::unsupported);
}

TEST(JitGemm, IdentityCoversEverySkuField) {
  const GemmSku base = jit_only_sku();
  GemmSku other = base;
  other.stages = 4;
  CUACTOR_ASSERT_OK_AND_ASSIGN(r1, instance_request(base));
  CUACTOR_ASSERT_OK_AND_ASSIGN(r2, instance_request(other));
  EXPECT_NE(r1.identity(), r2.identity());
  other = base;
  other.epilogue = kernels::GemmEpilogue::scaled_linear_combination;
  CUACTOR_ASSERT_OK_AND_ASSIGN(r3, instance_request(other));
  EXPECT_NE(r1.identity(), r3.identity());
}

// The one real CUTLASS compile in CI (25-60 s, ~3.3 GB): warm a JIT-only sm_90a SKU on a machine
// without a GPU, then find it on disk from a fresh engine without compiling again.
TEST(JitGemmWarm, RealCutlassCompileIsCachedOnDisk) {
  if (!find_nvcc()) GTEST_SKIP() << "nvcc not found";
  TempDir dir;
  JitOptions o;
  o.disk.directory = dir.path();
  int reports = 0;
  o.progress = [&](const JitProgress& p) { reports += p.stage == JitStage::compiling ? 1 : 0; };
  {
    CUACTOR_ASSERT_OK_AND_ASSIGN(engine, JitEngine::create(o));
    GemmJit gemm(engine);
    CUACTOR_ASSERT_OK_AND_ASSIGN(first, gemm.warm(jit_only_sku()));
    EXPECT_FALSE(first.already_cached);
    EXPECT_GT(first.bytes, 100000u);
    EXPECT_GE(reports, 1);
  }
  o.progress = {};
  CUACTOR_ASSERT_OK_AND_ASSIGN(engine2, JitEngine::create(o));
  GemmJit gemm2(engine2);
  CUACTOR_ASSERT_OK_AND_ASSIGN(second, gemm2.warm(jit_only_sku()));
  EXPECT_TRUE(second.already_cached);
  EXPECT_EQ(engine2->stats().disk.builds, 0u);
  // The stored object loads and exposes the instance ABI with the SKU it was asked for (host only).
  CUACTOR_ASSERT_OK_AND_ASSIGN(request, instance_request(jit_only_sku()));
  CUACTOR_ASSERT_OK_AND_ASSIGN(prepared, engine2->prepare(request));
  CUACTOR_ASSERT_OK_AND_ASSIGN(entry, engine2->disk_cache().load(prepared.first));
  ASSERT_TRUE(entry.has_value());
  CUACTOR_ASSERT_OK_AND_ASSIGN(so, SharedObject::load(entry->payload, request.symbol));
  CUACTOR_ASSERT_OK_AND_ASSIGN(sym, so->symbol(request.symbol));
  const auto& abi = *static_cast<const cuactor_gemm_instance*>(sym);
  EXPECT_EQ(abi.abi_version, CUACTOR_KERNEL_ABI_VERSION);
  CUACTOR_ASSERT_OK_AND_ASSIGN(sku, GemmSku::from_desc(abi.sku));
  EXPECT_EQ(sku, jit_only_sku());
}

}  // namespace
}  // namespace cuactor::jit
