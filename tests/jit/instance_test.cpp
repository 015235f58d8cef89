// The whole nvcc instance path without a GPU and without CUTLASS: render a small template from a
// kernels directory, compile it into a shared object, store it, load it, check its ABI, plan-cache
// it; a second engine finds it on disk ([J1]-[J5]).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <span>
#include <string>
#include <thread>

#include "cuactor/jit/engine.hpp"
#include "jit/test_support.hpp"
#include "kernels/instance_abi.h"
#include "support/gpu_test.hpp"

namespace cuactor::jit {
namespace {

namespace fs = std::filesystem;
using test_support::TempDir;

constexpr const char* kTinyTemplate = R"(// @SYMBOL@: a host-only stand-in for a kernel instance.
#include "kernels/instance_abi.h"
static int tiny_can_implement(const void*) { return CUACTOR_KERNEL_OK; }
static size_t tiny_workspace_size(const void*) { return @WORKSPACE@; }
static int tiny_run(const void*, void*, size_t, void*) { return CUACTOR_KERNEL_OK; }
extern "C" {
extern const cuactor_gemm_instance @SYMBOL@;
const cuactor_gemm_instance @SYMBOL@ = {
    @ABI@, 0,
    {"dense", "sm_80", "bf16", "bf16", "bf16", "bf16", "f32", "row", "col", "row", 128, 128, 64, 1, 1, 1, 3,
     "multistage", "linear_combination"},
    &tiny_can_implement, &tiny_workspace_size, &tiny_run};
}
)";

// A kernels directory holding the tiny template and the real instance ABI header; the engine
// reads templates from $CUACTOR_KERNELS_DIR.
class JitInstancePath : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!find_nvcc()) GTEST_SKIP() << "nvcc not found";
    fs::create_directories(root_.path() / "kernels");
    fs::copy_file(kernels_dir() / "instance_abi.h", root_.path() / "kernels" / "instance_abi.h");
    std::ofstream(root_.path() / "kernels" / "tiny.cu.in") << kTinyTemplate;
    ::setenv("CUACTOR_KERNELS_DIR", (root_.path() / "kernels").c_str(), 1);
  }
  void TearDown() override { ::unsetenv("CUACTOR_KERNELS_DIR"); }

  std::shared_ptr<JitEngine> engine() {
    JitOptions o;
    o.disk.directory = cache_.path();
    auto e = JitEngine::create(o);
    EXPECT_TRUE(e.has_value()) << e.error().to_string();
    return e ? *e : nullptr;
  }
  static InstanceRequest request(const std::string& symbol, const std::string& workspace, const std::string& abi) {
    InstanceRequest r;
    r.template_name = "tiny.cu.in";
    r.symbol = symbol;
    r.values = {{"SYMBOL", symbol}, {"WORKSPACE", workspace}, {"ABI", abi}};
    r.arch = GpuArch{8, 0, false};
    return r;
  }

  TempDir root_, cache_;
};

TEST_F(JitInstancePath, CompilesLoadsAndIsFoundOnDiskByAFreshEngine) {
  const auto req = request("tiny_instance_a", "4096", "CUACTOR_KERNEL_ABI_VERSION");
  {
    auto e = engine();
    ASSERT_NE(e, nullptr);
    const auto r = e->instance(req).get();
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    EXPECT_FALSE((*r)->from_disk());
    EXPECT_EQ((*r)->abi().workspace_size(nullptr), 4096u);
    EXPECT_EQ((*r)->abi().can_implement(nullptr), CUACTOR_KERNEL_OK);
    // The same request again is a plan-cache hit on the same object.
    const auto again = e->instance(req).get();
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->get(), r->get());
    EXPECT_EQ(e->stats().instance_plans.hits, 1u);
    EXPECT_EQ(e->stats().disk.builds, 1u);
  }
  auto fresh = engine();
  const auto r = fresh->instance(req).get();
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_TRUE((*r)->from_disk());
  EXPECT_EQ(fresh->stats().disk.builds, 0u);
  EXPECT_EQ((*r)->abi().workspace_size(nullptr), 4096u);
}

// Stores `payload` as the disk entry of `request`'s object (the cache's only entry, written by `e`).
void replace_the_only_entry(JitEngine& e, std::span<const std::byte> payload) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(entries, e.disk_cache().list());
  ASSERT_EQ(entries.size(), 1u);
  Digest key;
  key.words = {std::stoull(entries[0].key.substr(0, 16), nullptr, 16),
               std::stoull(entries[0].key.substr(16), nullptr, 16)};
  ASSERT_EQ(key.hex(), entries[0].key);
  CUACTOR_ASSERT_OK(e.disk_cache().store(
      key, Artifact{ArtifactKind::shared_object, entries[0].metadata, {payload.begin(), payload.end()}}));
}

// A cached object that needs what this process's runtime lacks (as one built against a newer C++
// runtime elsewhere does; the key leaves the host compiler out) is compiled again and replaces the
// entry, instead of failing every later request. Here: an object with an undefined symbol.
TEST_F(JitInstancePath, AnEntryNeedingAnotherRuntimeIsCompiledAgainAndReplaced) {
  const auto req = request("tiny_instance_f", "64", "CUACTOR_KERNEL_ABI_VERSION");
  NvccRequest foreign;
  foreign.description = "foreign";
  foreign.arch = GpuArch{8, 0, false};
  foreign.source = R"(extern "C" int cuactor_test_not_defined_anywhere(int);
extern "C" int cuactor_test_calls_it(int x) { return cuactor_test_not_defined_anywhere(x); })";
  CUACTOR_ASSERT_OK_AND_ASSIGN(foreign_object, nvcc_compile(foreign));
  {
    auto e = engine();
    ASSERT_NE(e, nullptr);
    ASSERT_TRUE(e->instance(req).get().has_value());
    replace_the_only_entry(*e, foreign_object);
  }
  auto fresh = engine();
  ASSERT_NE(fresh, nullptr);
  const auto r = fresh->instance(req).get();
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_FALSE((*r)->from_disk());
  EXPECT_EQ(fresh->stats().disk.builds, 1u);
  EXPECT_EQ(fresh->stats().disk.replaced, 1u);
  EXPECT_EQ((*r)->abi().workspace_size(nullptr), 64u);
  // The rebuilt entry replaced the refused one.
  auto third = engine();
  ASSERT_NE(third, nullptr);
  const auto again = third->instance(req).get();
  ASSERT_TRUE(again.has_value()) << again.error().to_string();
  EXPECT_TRUE((*again)->from_disk());
  EXPECT_EQ(third->stats().disk.builds, 0u);
}

// An object that needs what this process lacks even when built here (an undefined symbol in its own
// source) is compiled again once per process that asks, and the error says the rebuild failed too;
// the entry stays.
TEST_F(JitInstancePath, ARebuildRefusedAlikeLeavesTheEntryAndSaysSo) {
  // A workspace size from a function nothing defines: every build of it has an undefined symbol.
  const auto req = request("tiny_instance_h",
                           "[] { std::size_t cuactor_test_no_such_size(); return cuactor_test_no_such_size(); }()",
                           "CUACTOR_KERNEL_ABI_VERSION");
  {
    auto e = engine();
    ASSERT_NE(e, nullptr);
    const auto first = e->instance(req).get();  // compiled, stored, then refused by dlopen
    ASSERT_FALSE(first.has_value());
    EXPECT_NE(first.error().message().find("undefined symbol"), std::string::npos) << first.error().message();
  }
  auto fresh = engine();
  ASSERT_NE(fresh, nullptr);
  const auto r = fresh->instance(req).get();
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("a rebuild here failed too"), std::string::npos) << r.error().message();
  EXPECT_EQ(fresh->stats().disk.builds, 1u);
  EXPECT_EQ(fresh->stats().disk.replaced, 0u);
  CUACTOR_ASSERT_OK_AND_ASSIGN(entries, fresh->disk_cache().list());
  EXPECT_EQ(entries.size(), 1u);
}

// An entry the loader refuses for a reason a build here would not mend (here: not an ELF object)
// fails as it is, without a compile, and stays.
TEST_F(JitInstancePath, AnEntryNoBuildWouldMendFailsWithoutACompile) {
  const auto req = request("tiny_instance_g", "64", "CUACTOR_KERNEL_ABI_VERSION");
  const std::string junk = "an intact entry whose payload no loader takes";
  {
    auto e = engine();
    ASSERT_NE(e, nullptr);
    ASSERT_TRUE(e->instance(req).get().has_value());
    replace_the_only_entry(*e, std::as_bytes(std::span(junk)));
  }
  auto fresh = engine();
  ASSERT_NE(fresh, nullptr);
  const auto r = fresh->instance(req).get();
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("dlopen"), std::string::npos) << r.error().message();
  EXPECT_EQ(fresh->stats().disk.builds, 0u);
  CUACTOR_ASSERT_OK_AND_ASSIGN(entries, fresh->disk_cache().list());
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_LT(entries[0].file_bytes, 1024u) << "the junk entry (not a rebuilt object) stays";
}

TEST_F(JitInstancePath, ConcurrentRequestsCompileOnce) {
  auto e = engine();
  ASSERT_NE(e, nullptr);
  const auto req = request("tiny_instance_b", "8", "CUACTOR_KERNEL_ABI_VERSION");
  std::vector<JitFuture<JitInstance>> futures(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { futures[i] = e->instance(req); });
  for (auto& t : threads) t.join();
  for (auto& f : futures) ASSERT_TRUE(f.get().has_value()) << f.get().error().to_string();
  EXPECT_EQ(e->stats().disk.builds, 1u);
  EXPECT_EQ(e->stats().instance_plans.misses, 1u);
}

TEST_F(JitInstancePath, ForeignAbiVersionIsRejected) {
  auto e = engine();
  ASSERT_NE(e, nullptr);
  const auto r = e->instance(request("tiny_instance_c", "0", "999u")).get();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::unsupported);
  EXPECT_NE(r.error().message().find("999"), std::string::npos) << r.error().message();
}

TEST_F(JitInstancePath, MissingPlaceholderAndCompileErrorsAreReported) {
  auto e = engine();
  ASSERT_NE(e, nullptr);
  InstanceRequest missing = request("tiny_instance_d", "0", "CUACTOR_KERNEL_ABI_VERSION");
  missing.values.erase("WORKSPACE");
  auto r = e->instance(missing).get();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::invalid_argument);
  EXPECT_NE(r.error().message().find("@WORKSPACE@"), std::string::npos) << r.error().message();

  r = e->instance(request("tiny_instance_e", "not_a_number", "CUACTOR_KERNEL_ABI_VERSION")).get();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::compile_failed);
  EXPECT_NE(r.error().message().find("not_a_number"), std::string::npos) << r.error().message();
}

}  // namespace
}  // namespace cuactor::jit
