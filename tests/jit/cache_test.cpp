// Disk cache ([J3]), plan cache ([J4]), hashing and rendering: no GPU and no compiler needed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

#include "cuactor/jit/disk_cache.hpp"
#include "cuactor/jit/hash.hpp"
#include "cuactor/jit/plan_cache.hpp"
#include "cuactor/jit/render.hpp"
#include "jit/test_support.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::jit {
namespace {

namespace fs = std::filesystem;
using test_support::TempDir;

Artifact make_artifact(std::size_t bytes, unsigned seed) {
  Artifact a;
  a.kind = ArtifactKind::cubin;
  a.metadata = "meta " + std::to_string(seed);
  a.payload.resize(bytes);
  for (std::size_t i = 0; i < bytes; ++i) a.payload[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return a;
}

Digest key_of(const std::string& s) {
  return Hasher().text(s).digest();
}

TEST(JitHash, FieldsAreUnambiguousAndStable) {
  EXPECT_NE(Hasher().field("a", "bc").digest(), Hasher().field("ab", "c").digest());
  EXPECT_EQ(Hasher().field("a", "bc").digest(), Hasher().field("a", "bc").digest());
  EXPECT_NE(key_of("x"), key_of("y"));
  EXPECT_EQ(key_of("x").hex().size(), 32u);
}

TEST(JitDiskCache, MissThenStoreThenHit) {
  TempDir dir;
  CUACTOR_ASSERT_OK_AND_ASSIGN(cache, DiskCache::open({dir.path(), 1 << 20}));
  const Digest k = key_of("entry");
  CUACTOR_ASSERT_OK_AND_ASSIGN(miss, cache.load(k));
  EXPECT_FALSE(miss.has_value());
  const Artifact a = make_artifact(1000, 7);
  CUACTOR_ASSERT_OK(cache.store(k, a));
  CUACTOR_ASSERT_OK_AND_ASSIGN(hit, cache.load(k));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->payload, a.payload);
  EXPECT_EQ(hit->metadata, a.metadata);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 1u);
  // No temp files are left behind by the atomic write (CACHEDIR.TAG marks the directory).
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    if (e.path().filename() == "CACHEDIR.TAG") continue;
    ++files;
    EXPECT_EQ(e.path().extension(), ".cjit") << e.path();
  }
  EXPECT_EQ(files, 1);
}

TEST(JitDiskCache, EntriesOfDeviceCodeBecomeModuleImagesForLaunchesByKey) {
  TempDir dir;
  CUACTOR_ASSERT_OK_AND_ASSIGN(cache, DiskCache::open({dir.path(), 1 << 20}));
  Artifact cubin = make_artifact(512, 3);
  const char elf[] = {0x7f, 'E', 'L', 'F'};  // a binary image is kept byte for byte (PTX gets a NUL)
  for (int i = 0; i < 4; ++i) cubin.payload[static_cast<std::size_t>(i)] = static_cast<std::byte>(elf[i]);
  CUACTOR_ASSERT_OK(cache.store(key_of("cubin"), cubin));
  CUACTOR_ASSERT_OK_AND_ASSIGN(image, module_image(cache, key_of("cubin")));
  EXPECT_TRUE(std::equal(image->bytes().begin(), image->bytes().end(), cubin.payload.begin(), cubin.payload.end()));
  Artifact so = make_artifact(64, 4);
  so.kind = ArtifactKind::shared_object;
  CUACTOR_ASSERT_OK(cache.store(key_of("so"), so));
  auto host = module_image(cache, key_of("so"));
  ASSERT_FALSE(host.has_value());
  EXPECT_EQ(host.error().code(), make_error_code(errc::unsupported));
  auto missing = module_image(cache, key_of("nothing"));
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message().find(key_of("nothing").hex()), std::string::npos);
}

TEST(JitDiskCache, TruncatedEntryIsDetectedRemovedAndRebuilt) {
  TempDir dir;
  CUACTOR_ASSERT_OK_AND_ASSIGN(cache, DiskCache::open({dir.path(), 1 << 20}));
  const Digest k = key_of("truncated");
  CUACTOR_ASSERT_OK(cache.store(k, make_artifact(5000, 1)));
  fs::resize_file(cache.entry_path(k), 3000);
  CUACTOR_ASSERT_OK_AND_ASSIGN(r, cache.load(k));
  EXPECT_FALSE(r.has_value());
  EXPECT_EQ(cache.stats().corrupt, 1u);
  EXPECT_FALSE(fs::exists(cache.entry_path(k)));
  int builds = 0;
  CUACTOR_ASSERT_OK_AND_ASSIGN(rebuilt, cache.get_or_build(k, [&]() -> Result<Artifact> {
    ++builds;
    return make_artifact(5000, 1);
  }));
  EXPECT_EQ(builds, 1);
  EXPECT_FALSE(rebuilt.from_disk);
  CUACTOR_ASSERT_OK_AND_ASSIGN(again, cache.load(k));
  EXPECT_TRUE(again.has_value());
}

TEST(JitDiskCache, CorruptedPayloadByteFailsTheChecksum) {
  TempDir dir;
  CUACTOR_ASSERT_OK_AND_ASSIGN(cache, DiskCache::open({dir.path(), 1 << 20}));
  const Digest k = key_of("corrupt");
  CUACTOR_ASSERT_OK(cache.store(k, make_artifact(4096, 2)));
  {
    std::fstream f(cache.entry_path(k), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    f.put('\x5a');
  }
  auto bytes_raw = [&] {
    std::ifstream in(cache.entry_path(k), std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> v(s.size());
    std::memcpy(v.data(), s.data(), s.size());
    return v;
  }();
  auto decoded = decode_entry(bytes_raw);
  ASSERT_FALSE(decoded.has_value());
  EXPECT_EQ(decoded.error(), errc::cache_corrupt);
  CUACTOR_ASSERT_OK_AND_ASSIGN(r, cache.load(k));
  EXPECT_FALSE(r.has_value());
  EXPECT_EQ(cache.stats().corrupt, 1u);
}

TEST(JitDiskCache, GarbageAndEmptyFilesAreCorrupt) {
  std::vector<std::byte> empty;
  EXPECT_EQ(decode_entry(empty).error(), errc::cache_corrupt);
  std::vector<std::byte> garbage(100, std::byte{0x41});
  EXPECT_EQ(decode_entry(garbage).error(), errc::cache_corrupt);
  auto good = encode_entry(make_artifact(10, 3));
  good.push_back(std::byte{0});  // trailing byte: the size no longer matches the header
  EXPECT_EQ(decode_entry(good).error(), errc::cache_corrupt);
}

TEST(JitDiskCache, SizeCapEvictsLeastRecentlyUsed) {
  TempDir dir;
  const std::uint64_t entry_bytes = encode_entry(make_artifact(10000, 0)).size();
  CUACTOR_ASSERT_OK_AND_ASSIGN(cache, DiskCache::open({dir.path(), 3 * entry_bytes}));
  const Digest k0 = key_of("k0"), k1 = key_of("k1"), k2 = key_of("k2"), k3 = key_of("k3");
  const auto t0 = fs::file_time_type::clock::now() - std::chrono::hours(3);
  CUACTOR_ASSERT_OK(cache.store(k0, make_artifact(10000, 0)));
  fs::last_write_time(cache.entry_path(k0), t0);
  CUACTOR_ASSERT_OK(cache.store(k1, make_artifact(10000, 1)));
  fs::last_write_time(cache.entry_path(k1), t0 + std::chrono::hours(1));
  CUACTOR_ASSERT_OK(cache.store(k2, make_artifact(10000, 2)));
  fs::last_write_time(cache.entry_path(k2), t0 + std::chrono::hours(2));
  // Using k0 makes it the most recent, so k1 is now the least recently used.
  CUACTOR_ASSERT_OK_AND_ASSIGN(used, cache.load(k0));
  ASSERT_TRUE(used.has_value());
  CUACTOR_ASSERT_OK(cache.store(k3, make_artifact(10000, 3)));
  EXPECT_TRUE(fs::exists(cache.entry_path(k0)));
  EXPECT_FALSE(fs::exists(cache.entry_path(k1)));
  EXPECT_TRUE(fs::exists(cache.entry_path(k2)));
  EXPECT_TRUE(fs::exists(cache.entry_path(k3)));
  EXPECT_EQ(cache.stats().evictions, 1u);
  CUACTOR_ASSERT_OK_AND_ASSIGN(entries, cache.list());
  EXPECT_EQ(entries.size(), 3u);
}

TEST(JitDiskCache, UnwritableDirectoryIsRejected) {
  TempDir dir;
  const fs::path file = dir.path() / "plain-file";
  std::ofstream(file) << "x";
  auto r = DiskCache::open({file / "sub", 1 << 20});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::io_error);
  EXPECT_NE(r.error().message().find("plain-file"), std::string::npos);
}

TEST(JitDiskCache, TwoThreadsBuildOneKeyOnce) {
  TempDir dir;
  CUACTOR_ASSERT_OK_AND_ASSIGN(cache, DiskCache::open({dir.path(), 1 << 20}));
  std::atomic<int> builds{0};
  const Digest k = key_of("threads");
  auto work = [&] {
    auto r = cache.get_or_build(k, [&]() -> Result<Artifact> {
      ++builds;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return make_artifact(100, 9);
    });
    EXPECT_TRUE(r.has_value());
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(builds.load(), 1);
}

TEST(JitDiskCache, TwoProcessesBuildOneKeyOnce) {
  TempDir dir;
  const Digest k = key_of("processes");
  // Each child reports through its exit code whether it built (1) or found the entry (0).
  auto child = [&] {
    auto cache = DiskCache::open({dir.path(), 1 << 20});
    if (!cache) ::_exit(3);
    bool built = false;
    auto r = cache->get_or_build(k, [&]() -> Result<Artifact> {
      built = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return make_artifact(100, 4);
    });
    ::_exit(!r ? 2 : built ? 1 : 0);
  };
  std::vector<pid_t> pids;
  for (int i = 0; i < 2; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) child();
    pids.push_back(pid);
  }
  int built = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_LE(WEXITSTATUS(status), 1) << "child failed";
    built += WEXITSTATUS(status);
  }
  EXPECT_EQ(built, 1);
}

TEST(JitPlanCache, HitMissEvictionAndSingleFlight) {
  PlanCache<std::string, int> cache(2);
  int starts = 0;
  auto start_with = [&](int v) {
    return [&starts, v](JitFuture<int> f) {
      ++starts;
      f.set(std::make_shared<const int>(v));
    };
  };
  auto a = cache.get_or_start("a", start_with(1));
  auto a2 = cache.get_or_start("a", start_with(99));
  EXPECT_EQ(**a2.get(), 1);
  cache.get_or_start("b", start_with(2));
  cache.get_or_start("a", start_with(99));  // a is now most recent
  cache.get_or_start("c", start_with(3));   // evicts b
  EXPECT_TRUE(cache.find("a").has_value());
  EXPECT_FALSE(cache.find("b").has_value());
  EXPECT_TRUE(cache.find("c").has_value());
  EXPECT_EQ(starts, 3);
  const auto s = cache.stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.size, 2u);
  EXPECT_EQ(s.capacity, 2u);
}

TEST(JitPlanCache, ConcurrentRequestsShareOneComputation) {
  PlanCache<std::string, int> cache(64);
  std::atomic<int> starts{0};
  JitFuture<int> pending;
  std::vector<std::thread> threads;
  std::vector<JitFuture<int>> got(8);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      got[i] = cache.get_or_start("k", [&](JitFuture<int> f) {
        ++starts;
        pending = f;
      });
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(starts.load(), 1);
  int callbacks = 0;
  got[3].then([&](const auto& r) { callbacks += r.has_value() ? 1 : 0; });
  pending.set(std::make_shared<const int>(42));
  for (auto& f : got) EXPECT_EQ(**f.get(), 42);
  EXPECT_EQ(callbacks, 1);
}

TEST(JitPlanCache, FailedResultIsRetriedByTheNextRequest) {
  PlanCache<std::string, int> cache(4);
  auto f = cache.get_or_start("k", [](JitFuture<int> p) { p.set(fail(errc::compile_failed, "boom")); });
  ASSERT_FALSE(f.get().has_value());
  EXPECT_EQ(f.get().error(), errc::compile_failed);
  auto g = cache.get_or_start("k", [](JitFuture<int> p) { p.set(std::make_shared<const int>(5)); });
  EXPECT_EQ(**g.get(), 5);
}

TEST(JitRender, SubstitutesLikeConfigureFile) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(out, render_template("a @X@ b @Y_1@ mail@host @ @@X@", {{"X", "1"}, {"Y_1", "two"}}));
  EXPECT_EQ(out, "a 1 b two mail@host @ @1");
}

TEST(JitRender, MissingPlaceholderIsNamed) {
  auto r = render_template("x @TILE_M@ y", {});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::invalid_argument);
  EXPECT_NE(r.error().message().find("@TILE_M@"), std::string::npos);
}

}  // namespace
}  // namespace cuactor::jit
