// Hostile inputs and environments (issue 16): every case here once crashed, lied or deleted a file
// that cuactor did not create. No GPU needed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuactor/core/files.hpp"
#include "cuactor/core/no_throw.hpp"
#include "cuactor/core/paths.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/module.hpp"
#include "cuactor/jit/disk_cache.hpp"
#include "cuactor/jit/engine.hpp"
#include "cuactor/jit/nvcc.hpp"
#include "cuactor/jit/nvrtc.hpp"
#include "jit/process.hpp"
#include "jit/test_support.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::jit {
namespace {

namespace fs = std::filesystem;
using test_support::TempDir;

Artifact small_artifact(unsigned seed) {
  Artifact a;
  a.metadata = "meta " + std::to_string(seed);
  a.payload.assign(256, static_cast<std::byte>(seed));
  return a;
}

Digest key_of(const std::string& s) {
  return Hasher().text(s).digest();
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

void touch(const fs::path& p, std::string_view text = "user data") {
  std::ofstream(p) << text;
}

// Sets or unsets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Root ignores permission bits, so tests of unwritable directories mean nothing under it.
bool running_as_root() {
  return ::geteuid() == 0;
}

// A pid that is certainly not running: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

// True when `pid` no longer runs (gone, or a zombie nobody has reaped yet).
bool is_dead(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = all.rfind(')');
  return close != std::string::npos && close + 2 < all.size() && all[close + 2] == 'Z';
}

bool wait_until_dead(pid_t pid, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (is_dead(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::optional<pid_t> read_pid_file(const fs::path& p, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream in(p);
    long v = 0;
    if (in >> v && v > 0) return static_cast<pid_t>(v);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

// ---- row 4: every header byte is covered by the checksum ----

TEST(Hardening, EveryBitOfTheEntryHeaderIsChecked) {
  const auto bytes = encode_entry(small_artifact(3));
  ASSERT_TRUE(decode_entry(bytes).has_value());
  for (std::size_t i = 0; i < 48; ++i)
    for (int bit = 0; bit < 8; ++bit) {
      auto flipped = bytes;
      flipped[i] ^= static_cast<std::byte>(1 << bit);
      auto r = decode_entry(flipped);
      ASSERT_FALSE(r.has_value()) << "flip of byte " << i << " bit " << bit << " went unnoticed";
      EXPECT_EQ(r.error(), errc::cache_corrupt);
    }
}

// ---- rows 3 and 7: the cache touches only its own files ----

TEST(Hardening, ClearAndCleanupTouchOnlyTheCachesOwnFiles) {
  TempDir dir;
  CUACTOR_ASSERT_OK_AND_ASSIGN(cache, DiskCache::open({dir.path(), 1 << 20}));
  const std::vector<std::string> user_files = {"report.tmp.txt", "thesis.tmp.docx", "notes.cjit.txt", "x.cjit",
                                               "my.lock",        "ab.cjit.tmp.1.2", "README"};
  for (const auto& f : user_files) touch(dir.path() / f);
  // Old user temp files once were "stale temp files" and deleted by every store.
  for (const auto& f : user_files)
    fs::last_write_time(dir.path() / f, fs::file_time_type::clock::now() - std::chrono::hours(3));
  // A temp file of ours whose writer died is swept by the next store.
  const Digest k = key_of("own");
  const fs::path stale_temp = dir.path() / (k.hex() + (".cjit.tmp." + std::to_string(dead_pid()) + ".0"));
  touch(stale_temp);
  CUACTOR_ASSERT_OK(cache.store(k, small_artifact(1)));
  EXPECT_FALSE(fs::exists(stale_temp));
  CUACTOR_ASSERT_OK(cache.get_or_build(key_of("other"), [] { return Result<Artifact>(small_artifact(2)); }));
  EXPECT_TRUE(fs::exists(dir.path() / (key_of("other").hex() + ".lock")));

  CUACTOR_ASSERT_OK(cache.clear());
  for (const auto& f : user_files) EXPECT_TRUE(fs::exists(dir.path() / f)) << f << " was deleted";
  EXPECT_FALSE(fs::exists(cache.entry_path(k)));
  EXPECT_FALSE(fs::exists(dir.path() / (key_of("other").hex() + ".lock"))) << "clear left a lock file";
}

TEST(Hardening, ClearOfAnUnwritableDirectoryReportsWhatItCouldNotRemove) {
  if (running_as_root()) GTEST_SKIP() << "root ignores directory permissions";
  TempDir dir;
  CUACTOR_ASSERT_OK_AND_ASSIGN(cache, DiskCache::open({dir.path(), 1 << 20}));
  CUACTOR_ASSERT_OK(cache.store(key_of("a"), small_artifact(1)));
  ASSERT_EQ(::chmod(dir.path().c_str(), 0500), 0);
  auto s = cache.clear();
  ::chmod(dir.path().c_str(), 0700);
  ASSERT_FALSE(s.has_value()) << "clear claimed success but removed nothing";
  EXPECT_EQ(s.error(), errc::io_error);
  EXPECT_NE(s.error().message().find(cache.entry_path(key_of("a")).string()), std::string::npos) << s.error().message();
  EXPECT_TRUE(fs::exists(cache.entry_path(key_of("a"))));
}

// ---- row 13: modes whatever the umask, and trust checks before loading ----

TEST(Hardening, DirectoryAndEntriesArePrivateWhateverTheUmask) {
  TempDir dir;
  const fs::path cache_dir = dir.path() / "new" / "jit";
  const mode_t old = ::umask(0);
  auto cache = DiskCache::open({cache_dir, 1 << 20});
  Status stored = cache ? cache->store(key_of("m"), small_artifact(1)) : Status(fail(cache.error()));
  ::umask(old);
  CUACTOR_ASSERT_OK(stored);
  EXPECT_EQ(mode_of(cache_dir), 0700u);
  EXPECT_EQ(mode_of(cache->entry_path(key_of("m"))), 0600u);
  EXPECT_TRUE(fs::exists(cache_dir / "CACHEDIR.TAG"));
}

TEST(Hardening, AnEntryOthersCanWriteIsNeverLoadedButRebuilt) {
  TempDir dir;
  CUACTOR_ASSERT_OK_AND_ASSIGN(cache, DiskCache::open({dir.path(), 1 << 20}));
  const Digest k = key_of("writable");
  CUACTOR_ASSERT_OK(cache.store(k, small_artifact(1)));
  ASSERT_EQ(::chmod(cache.entry_path(k).c_str(), 0666), 0);
  CUACTOR_ASSERT_OK_AND_ASSIGN(loaded, cache.load(k));
  EXPECT_FALSE(loaded.has_value()) << "a group/other-writable entry was trusted";
  int builds = 0;
  CUACTOR_ASSERT_OK_AND_ASSIGN(r, cache.get_or_build(k, [&] {
    ++builds;
    return Result<Artifact>(small_artifact(2));
  }));
  EXPECT_EQ(builds, 1);
  EXPECT_FALSE(r.from_disk);
  EXPECT_EQ(mode_of(cache.entry_path(k)), 0600u);
  CUACTOR_ASSERT_OK_AND_ASSIGN(entries, cache.list());
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_TRUE(entries[0].problem.empty()) << entries[0].problem;
}

TEST(Hardening, AnUntrustedDirectoryIsRefusedByNameAndModeThenReplaced) {
  TempDir dir, tmp;
  const fs::path shared = dir.path() / "shared";
  fs::create_directories(shared);
  ASSERT_EQ(::chmod(shared.c_str(), 0777), 0);
  DiskCacheOptions strict{shared, 1 << 20};
  strict.fallback_when_untrusted = false;
  auto refused = DiskCache::open(strict);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error(), errc::untrusted);
  EXPECT_NE(refused.error().message().find(shared.string()), std::string::npos) << refused.error().message();
  EXPECT_NE(refused.error().message().find("0777"), std::string::npos) << refused.error().message();

  ScopedEnv tmpdir("TMPDIR", tmp.path().c_str());
  CUACTOR_ASSERT_OK_AND_ASSIGN(fallback, DiskCache::open({shared, 1 << 20}));
  EXPECT_EQ(fallback.directory(), tmp.path() / ("cuactor-jit-" + std::to_string(::geteuid())));
  CUACTOR_ASSERT_OK(fallback.store(key_of("f"), small_artifact(1)));
  EXPECT_TRUE(fs::is_empty(shared));
}

// ---- injected failures: small disk, missing temp directory, throwing code ----

TEST(Hardening, AFullDiskIsATypedErrorAndLeavesNoTempFile) {
  TempDir dir;
  // RLIMIT_FSIZE makes write() fail with EFBIG past 100 bytes, as a full disk fails with ENOSPC;
  // in a child so that the limit does not outlive the test.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{100, 100};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    auto cache = DiskCache::open({dir.path(), 1 << 20});
    if (!cache) ::_exit(10);
    auto s = cache->store(key_of("big"), small_artifact(1));
    if (s) ::_exit(11);
    if (!(s.error() == errc::io_error) || s.error().message().find("File too large") == std::string::npos) ::_exit(12);
    for (const auto& e : fs::directory_iterator(dir.path()))
      if (e.path().filename() != "CACHEDIR.TAG") ::_exit(13);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: open failed, 11: store succeeded, 12: wrong error, 13: file left";
}

TEST(Hardening, AMissingTempDirectoryAndNoHomeAreTypedErrors) {
  ScopedEnv tmpdir("TMPDIR", "/nonexistent/cuactor-test-tmp");
  ScopedEnv home("HOME", nullptr), xdg("XDG_CACHE_HOME", nullptr), dir("CUACTOR_CACHE_DIR", nullptr);
  auto t = temp_root();
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error(), errc::io_error);
  EXPECT_NE(t.error().message().find("/nonexistent/cuactor-test-tmp"), std::string::npos);
  auto root = cache_root();
  ASSERT_FALSE(root.has_value());
  EXPECT_NE(root.error().message().find("HOME"), std::string::npos) << root.error().message();
  auto cache = DiskCache::open({});
  ASSERT_FALSE(cache.has_value());
  EXPECT_EQ(cache.error(), errc::io_error);
  auto engine = JitEngine::create({});
  ASSERT_FALSE(engine.has_value());
  auto run = detail::run_process({"true"}, std::chrono::seconds(10));
  ASSERT_FALSE(run.has_value());
  EXPECT_EQ(run.error(), errc::io_error);
  auto scratch = detail::ScratchDir::create();
  ASSERT_FALSE(scratch.has_value());
  EXPECT_EQ(scratch.error(), errc::io_error);
}

TEST(Hardening, ExceptionsBecomeTypedErrors) {
  auto oom = result_or_error("alloc", []() -> Result<int> { throw std::bad_alloc(); });
  ASSERT_FALSE(oom.has_value());
  EXPECT_EQ(oom.error(), errc::out_of_memory);
  auto other = result_or_error("work", []() -> Status { throw std::runtime_error("boom"); });
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error(), errc::internal);
  EXPECT_NE(other.error().message().find("boom"), std::string::npos);
}

TEST(Hardening, AThrowingProgressCallbackNeitherEscapesNorLeavesAFutureUnset) {
  TempDir dir;
  JitOptions o;
  o.disk.directory = dir.path();
  o.progress = [](const JitProgress&) { throw std::runtime_error("progress sink broke"); };
  CUACTOR_ASSERT_OK_AND_ASSIGN(engine, JitEngine::create(o));
  // Progress is advisory: the compile goes on (an exception here once left the worker thread).
  CUACTOR_ASSERT_OK(engine->warm(test_support::saxpy_request("throwing progress warm")));
  auto future = engine->module(test_support::saxpy_request("throwing progress module"));
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!future.is_ready() && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(future.is_ready()) << "the future was never set";
  const auto m = future.get();
  if (gpu::device_count() == 0) {
    ASSERT_FALSE(m.has_value());
    EXPECT_EQ(m.error(), errc::no_device) << m.error().to_string();
  }
}

// ---- row 2: NUL bytes ----

TEST(Hardening, ANulByteInAnNvrtcSourceIsRejectedWithItsOffset) {
  NvrtcRequest r;
  r.program_name = "nul.cu";
  r.source = std::string("int a;\0 this is not C++", 23);
  auto out = nvrtc_compile(r);
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error(), errc::invalid_argument);
  EXPECT_NE(out.error().message().find("NUL byte at offset 6"), std::string::npos) << out.error().message();
}

TEST(Hardening, ReadingADirectoryAsAFileIsATypedError) {
  TempDir dir;
  auto r = read_file(dir.path(), "NVRTC source");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::invalid_argument);
  EXPECT_NE(r.error().message().find("is a directory"), std::string::npos) << r.error().message();
}

// ---- row 5: compilers never outlive their parent; temp directories are swept ----

// Runs a command that starts a background grandchild (as nvcc starts cicc) and waits; returns the
// grandchild's pid through `pid_file`.
std::vector<std::string> grandchild_command(const fs::path& pid_file) {
  return {"sh", "-c", "sleep 60 & echo $! > " + pid_file.string() + "; wait"};
}

TEST(Hardening, ACompilerAndItsChildrenDieWithAKilledParent) {
  TempDir dir;
  const fs::path pid_file = dir.path() / "grandchild.pid";
  const pid_t parent = ::fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    (void)detail::run_process(grandchild_command(pid_file), std::chrono::seconds(120));
    ::_exit(0);
  }
  const auto grandchild = read_pid_file(pid_file, std::chrono::seconds(10));
  ASSERT_TRUE(grandchild.has_value());
  ::kill(parent, SIGKILL);  // as `kill -9` of `cuactor jit warm`
  int status = 0;
  ::waitpid(parent, &status, 0);
  const bool died = wait_until_dead(*grandchild, std::chrono::seconds(10));
  if (!died) ::kill(*grandchild, SIGKILL);
  EXPECT_TRUE(died) << "the compiler's child outlived the killed parent";
}

TEST(Hardening, ATimeoutKillsTheWholeProcessGroup) {
  TempDir dir;
  const fs::path pid_file = dir.path() / "grandchild.pid";
  auto r = detail::run_process(grandchild_command(pid_file), std::chrono::seconds(1));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::timeout);
  const auto grandchild = read_pid_file(pid_file, std::chrono::seconds(1));
  ASSERT_TRUE(grandchild.has_value());
  const bool died = wait_until_dead(*grandchild, std::chrono::seconds(10));
  if (!died) ::kill(*grandchild, SIGKILL);
  EXPECT_TRUE(died);
}

TEST(Hardening, OnlyOurOwnStaleScratchDirectoriesAreSwept) {
  TempDir tmp;
  const pid_t dead = dead_pid();
  auto make = [&](const std::string& name, bool marker) {
    fs::create_directories(tmp.path() / name);
    touch(tmp.path() / name / "instance.cu");
    if (marker) touch(tmp.path() / name / ".cuactor-scratch", "");
    return tmp.path() / name;
  };
  const auto stale = make("cuactor-nvcc-" + std::to_string(dead) + "-abcdef", true);
  const auto unmarked = make("cuactor-nvcc-" + std::to_string(dead) + "-ghijkl", false);
  const auto alive = make("cuactor-nvcc-" + std::to_string(::getpid()) + "-mnopqr", true);
  const auto user = make("cuactor-nvcc-notes", true);
  EXPECT_EQ(detail::sweep_stale_scratch(tmp.path()), 1u);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(unmarked));
  EXPECT_TRUE(fs::exists(alive));
  EXPECT_TRUE(fs::exists(user));
}

// ---- row 6: concurrent compiles are capped by cores and memory ----

TEST(Hardening, CompileSlotsFollowCoresAndFreeMemory) {
  constexpr std::uint64_t GiB = 1ULL << 30;
  EXPECT_EQ(detail::compile_slots_for(16, 8 * GiB), 2u);
  EXPECT_EQ(detail::compile_slots_for(2, 100 * GiB), 2u);
  EXPECT_EQ(detail::compile_slots_for(8, 1 * GiB), 1u);
  EXPECT_EQ(detail::compile_slots_for(0, 0), 1u);
  EXPECT_EQ(detail::parse_mem_available("MemTotal: 100 kB\nMemAvailable:    2048 kB\n"), 2048u * 1024);
  EXPECT_FALSE(detail::parse_mem_available("MemTotal: 100 kB\n").has_value());
  EXPECT_FALSE(detail::parse_mem_available("MemAvailable: lots\n").has_value());
  EXPECT_FALSE(detail::parse_mem_available("MemAvailable: 99999999999999999999999 kB\n").has_value());
}

TEST(Hardening, NoMoreCompilesRunThanSlots) {
  const unsigned limit = detail::CompileSlot::limit();
  ASSERT_GE(limit, 1u);
  std::atomic<unsigned> running{0}, peak{0};
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < limit + 3; ++i)
    threads.emplace_back([&] {
      const detail::CompileSlot slot;
      const unsigned now = ++running;
      unsigned p = peak.load();
      while (now > p && !peak.compare_exchange_weak(p, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      --running;
    });
  for (auto& t : threads) t.join();
  EXPECT_LE(peak.load(), limit);
}

// ---- row 12: no driver at all ----

TEST(Hardening, LoadingWithoutAnyDriverSaysNoDriverWasFound) {
  if (gpu::driver_version() != 0) GTEST_SKIP() << "a CUDA driver is installed here";
  const char image[] = "not a cubin";
  auto lib = gpu::Library::load_data(image);
  ASSERT_FALSE(lib.has_value());
  EXPECT_EQ(lib.error(), errc::no_device);
  EXPECT_NE(lib.error().message().find("no CUDA driver found"), std::string::npos) << lib.error().message();
}

}  // namespace
}  // namespace cuactor::jit
