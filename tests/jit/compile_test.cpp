// Real compiles without a GPU ([J2], [J5]): NVRTC to cubin, nvcc to a loadable shared object, and
// warming the disk cache from several threads and processes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "cuactor/jit/engine.hpp"
#include "jit/test_support.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::jit {
namespace {

using test_support::saxpy_request;
using test_support::TempDir;

TEST(JitNvrtc, CompilesToCubinForARealArchitecture) {
  for (GpuArch arch : {GpuArch{9, 0, true}, GpuArch{8, 0, false}}) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(out, nvrtc_compile(saxpy_request("cubin", arch)));
    ASSERT_GE(out.cubin.size(), 4u);
    EXPECT_EQ(std::memcmp(out.cubin.data(),
                          "\x7f"
                          "ELF",
                          4),
              0)
        << "cubin is an ELF image, not PTX";
    ASSERT_EQ(out.lowered_names.size(), 1u);
    EXPECT_EQ(out.lowered_names[0].first, "scale<float>");
    EXPECT_NE(out.lowered_names[0].second.find("scale"), std::string::npos);
  }
}

TEST(JitNvrtc, CompileErrorCarriesTheLog) {
  NvrtcRequest r = saxpy_request("broken");
  r.source += "\n__global__ void oops() { undeclared_identifier = 1; }\n";
  auto out = nvrtc_compile(r);
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error(), errc::compile_failed);
  EXPECT_NE(out.error().message().find("undeclared_identifier"), std::string::npos) << out.error().message();
}

TEST(JitNvrtc, EmptySourceIsRejected) {
  NvrtcRequest r;
  auto out = nvrtc_compile(r);
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error(), errc::invalid_argument);
}

TEST(JitNvrtc, KeyCoversSourceOptionsAndArch) {
  const auto base = saxpy_request("key");
  auto other_arch = base;
  other_arch.arch = GpuArch{8, 0, false};
  auto other_opt = base;
  other_opt.options.push_back("-DX=1");
  auto other_src = saxpy_request("key2");
  EXPECT_EQ(cache_key(base), cache_key(saxpy_request("key")));
  EXPECT_NE(cache_key(base), cache_key(other_arch));
  EXPECT_NE(cache_key(base), cache_key(other_opt));
  EXPECT_NE(cache_key(base), cache_key(other_src));
}

TEST(JitEngineWarm, SecondWarmIsADiskHit) {
  TempDir dir;
  std::vector<JitStage> stages;
  std::mutex m;
  JitOptions o;
  o.disk.directory = dir.path();
  o.progress = [&](const JitProgress& p) {
    std::lock_guard lock(m);
    stages.push_back(p.stage);
  };
  CUACTOR_ASSERT_OK_AND_ASSIGN(engine, JitEngine::create(o));
  CUACTOR_ASSERT_OK_AND_ASSIGN(first, engine->warm(saxpy_request("warm")));
  EXPECT_FALSE(first.already_cached);
  EXPECT_GT(first.bytes, 0u);
  CUACTOR_ASSERT_OK_AND_ASSIGN(second, engine->warm(saxpy_request("warm")));
  EXPECT_TRUE(second.already_cached);
  EXPECT_EQ(first.key, second.key);
  EXPECT_EQ(engine->stats().disk.builds, 1u);
  EXPECT_NE(std::find(stages.begin(), stages.end(), JitStage::compiling), stages.end());
}

TEST(JitEngineWarm, TwoThreadsCompileOneKeyOnce) {
  TempDir dir;
  JitOptions o;
  o.disk.directory = dir.path();
  CUACTOR_ASSERT_OK_AND_ASSIGN(engine, JitEngine::create(o));
  std::atomic<int> cached{0};
  auto work = [&] {
    auto r = engine->warm(saxpy_request("threads"));
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    cached += r->already_cached ? 1 : 0;
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(engine->stats().disk.builds, 1u);
  EXPECT_EQ(cached.load(), 1);
}

TEST(JitEngineWarm, TwoProcessesCompileOneKeyOnce) {
  TempDir dir;
  std::vector<pid_t> pids;
  for (int i = 0; i < 2; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      JitOptions o;
      o.disk.directory = dir.path();
      auto engine = JitEngine::create(o);
      if (!engine) ::_exit(3);
      auto r = (*engine)->warm(saxpy_request("processes"));
      ::_exit(!r ? 2 : r->already_cached ? 0 : 1);
    }
    pids.push_back(pid);
  }
  int compiled = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_LE(WEXITSTATUS(status), 1) << "child failed with " << WEXITSTATUS(status);
    compiled += WEXITSTATUS(status);
  }
  EXPECT_EQ(compiled, 1);
}

TEST(JitEngineWarm, CorruptEntryIsRebuiltOnTheNextWarm) {
  TempDir dir;
  JitOptions o;
  o.disk.directory = dir.path();
  CUACTOR_ASSERT_OK_AND_ASSIGN(engine, JitEngine::create(o));
  const auto req = saxpy_request("rebuild");
  CUACTOR_ASSERT_OK(engine->warm(req));
  std::filesystem::resize_file(engine->disk_cache().entry_path(cache_key(req)), 100);
  CUACTOR_ASSERT_OK_AND_ASSIGN(again, engine->warm(req));
  EXPECT_FALSE(again.already_cached);
  EXPECT_EQ(engine->stats().disk.corrupt, 1u);
  EXPECT_EQ(engine->stats().disk.builds, 2u);
}

// The compiler identity in every nvcc cache key is nvcc's banner alone: not its path, not the host
// compiler's banner, so a cache warmed on a machine without a GPU is reused on a GPU machine with the
// same CUDA release and another GCC.
TEST(JitNvcc, CompilerIdentityIsNvccsBannerAlone) {
  const auto nvcc = find_nvcc();
  if (!nvcc) GTEST_SKIP() << "nvcc not found";
  CUACTOR_ASSERT_OK_AND_ASSIGN(id, nvcc_identity());
  EXPECT_NE(id.find("Cuda compilation tools, release"), std::string::npos) << id;
  EXPECT_EQ(id.find(nvcc->string()), std::string::npos) << id;
  EXPECT_EQ(id.find("Free Software Foundation"), std::string::npos) << id;  // GCC's banner
  EXPECT_EQ(id.find("clang version"), std::string::npos) << id;
}

// nvcc back end with a tiny translation unit (no CUTLASS, a couple of seconds): the shared object
// loads from memory and its host function runs; no device is touched.
TEST(JitNvcc, SharedObjectBuildsLoadsAndRuns) {
  if (!find_nvcc()) GTEST_SKIP() << "nvcc not found";
  NvccRequest r;
  r.description = "tiny";
  r.arch = GpuArch{8, 0, false};
  r.source = R"(
__global__ void twice(int* p) { *p *= 2; }
extern "C" int cuactor_test_answer(int x) { return x + 40; }
)";
  std::vector<JitStage> stages;
  CUACTOR_ASSERT_OK_AND_ASSIGN(elf, nvcc_compile(r, [&](const JitProgress& p) { stages.push_back(p.stage); }));
  ASSERT_FALSE(stages.empty());
  CUACTOR_ASSERT_OK_AND_ASSIGN(so, SharedObject::load(elf, "tiny"));
  CUACTOR_ASSERT_OK_AND_ASSIGN(sym, so->symbol("cuactor_test_answer"));
  auto fn = reinterpret_cast<int (*)(int)>(sym);
  EXPECT_EQ(fn(2), 42);
  auto missing = so->symbol("no_such_symbol");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error(), errc::invalid_argument);
}

// Objects with GNU unique symbols (template statics, as in CUTLASS) stay resident after dlclose;
// loading another object after the first was released must still give the new one, not the old
// one under a recycled /proc/self/fd path (a bug seen on the GPU run with two CUTLASS instances).
TEST(JitNvcc, ObjectLoadedAfterAResidentOneIsTheNewOne) {
  if (!find_nvcc()) GTEST_SKIP() << "nvcc not found";
  auto build = [](const std::string& fn) {
    NvccRequest r;
    r.description = fn;
    r.arch = GpuArch{8, 0, false};
    r.source =
        "template <class T> struct Counter { static inline int count = 0; };\n"
        "extern \"C\" int " +
        fn + "() { return ++Counter<int>::count; }\n";
    return nvcc_compile(r);
  };
  CUACTOR_ASSERT_OK_AND_ASSIGN(first_elf, build("cuactor_first"));
  CUACTOR_ASSERT_OK_AND_ASSIGN(second_elf, build("cuactor_second"));
  {
    CUACTOR_ASSERT_OK_AND_ASSIGN(first, SharedObject::load(first_elf, "first"));
    CUACTOR_ASSERT_OK(first->symbol("cuactor_first"));
  }
  CUACTOR_ASSERT_OK_AND_ASSIGN(second, SharedObject::load(second_elf, "second"));
  CUACTOR_ASSERT_OK(second->symbol("cuactor_second"));
  EXPECT_FALSE(second->symbol("cuactor_first").has_value());
}

TEST(JitNvcc, CompileErrorIsCompileFailed) {
  if (!find_nvcc()) GTEST_SKIP() << "nvcc not found";
  NvccRequest r;
  r.arch = GpuArch{8, 0, false};
  r.source = "int f() { return missing_symbol_xyz; }\n";
  auto out = nvcc_compile(r);
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error(), errc::compile_failed);
  EXPECT_NE(out.error().message().find("missing_symbol_xyz"), std::string::npos);
}

TEST(JitNvcc, GarbageBytesAreNotLoaded) {
  std::vector<std::byte> junk(64, std::byte{1});
  auto so = SharedObject::load(junk, "junk");
  ASSERT_FALSE(so.has_value());
  EXPECT_EQ(so.error(), errc::invalid_argument);
}

}  // namespace
}  // namespace cuactor::jit
