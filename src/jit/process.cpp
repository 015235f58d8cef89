#include "process.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "cuactor/core/files.hpp"
#include "cuactor/core/log.hpp"
#include "cuactor/core/paths.hpp"

extern char** environ;

namespace cuactor::jit::detail {
namespace {

// argv[0] as execve needs it: PATH is searched here, in the parent, because the forked child of a
// multi-threaded process may only make async-signal-safe calls (execvp may allocate).
std::optional<std::string> resolve_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(ss, dir, ':');) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

// The supervisor's reaction to its parent's death (PR_SET_PDEATHSIG delivers SIGTERM): kill the
// whole group, itself and the compiler's own children included.
void kill_own_group(int) {
  ::kill(0, SIGKILL);
}

// Runs in the forked child: only async-signal-safe calls until execve. Never returns.
[[noreturn]] void supervise(const char* exe, char* const* args, int out_fd, pid_t parent) {
  ::setpgid(0, 0);
  struct sigaction sa {};
  sa.sa_handler = kill_own_group;
  ::sigaction(SIGTERM, &sa, nullptr);
  sigset_t all;
  sigemptyset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);  // the forking thread's mask is inherited
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) kill_own_group(0);  // the parent died before prctl took effect
  const pid_t child = ::fork();
  if (child == 0) {
    sa.sa_handler = SIG_DFL;
    ::sigaction(SIGTERM, &sa, nullptr);
    const int in = ::open("/dev/null", O_RDONLY);
    if (in >= 0) ::dup2(in, STDIN_FILENO);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(out_fd, STDERR_FILENO);
    ::execve(exe, args, environ);
    ::_exit(127);
  }
  if (child < 0) ::_exit(126);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) ::_exit(126);
  }
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
}

}  // namespace

Result<ProcessResult> run_process(const std::vector<std::string>& argv, std::chrono::seconds timeout,
                                  const std::function<void()>& heartbeat) {
  if (argv.empty()) return fail(errc::invalid_argument, "run_process: empty command");
  const auto exe = resolve_executable(argv[0]);
  if (!exe) return fail(errc::unsupported, fmt::format("cannot start '{}': not found in PATH", argv[0]));
  // Output goes to an anonymous file in the temp directory: a pipe could fill up and block the child.
  auto tmp = temp_root();
  if (!tmp) return fail(errc::io_error, fmt::format("cannot run '{}': {}", argv[0], tmp.error().message()));
  int out_fd = ::open(tmp->c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (out_fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {  // no O_TMPFILE there
    std::string name = (*tmp / "cuactor-output-XXXXXX").string();
    out_fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (out_fd >= 0) ::unlink(name.c_str());
  }
  if (out_fd < 0)
    return fail(errc::io_error, fmt::format("cannot create an output file for '{}' in '{}': {}", argv[0], tmp->string(),
                                            std::strerror(errno)));
  std::FILE* out = ::fdopen(out_fd, "w+");
  if (!out) {
    ::close(out_fd);
    return fail(errc::io_error, fmt::format("fdopen failed: {}", std::strerror(errno)));
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) supervise(exe->c_str(), args.data(), out_fd, parent);
  if (pid < 0) {
    std::fclose(out);
    return fail(errc::unsupported, fmt::format("cannot start '{}': fork failed: {}", argv[0], std::strerror(errno)));
  }
  ::setpgid(pid, pid);  // also in the parent, so that a timeout right away already finds the group
  const auto start = std::chrono::steady_clock::now();
  auto last_beat = start;
  int status = 0;
  bool timed_out = false;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      ::kill(-pid, SIGKILL);
      std::fclose(out);
      return fail(errc::internal, fmt::format("waitpid('{}') failed: {}", argv[0], std::strerror(errno)));
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - start > timeout) {
      ::kill(-pid, SIGKILL);  // the supervisor and every compiler process under it
      ::waitpid(pid, &status, 0);
      timed_out = true;
      break;
    }
    if (heartbeat && now - last_beat >= std::chrono::seconds(1)) {
      last_beat = now;
      try {
        heartbeat();
      } catch (...) {  // progress is advisory: a throwing reporter must not abandon a running child
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ProcessResult r;
  std::fseek(out, 0, SEEK_SET);
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, out)) > 0;) r.output.append(buf, n);
  std::fclose(out);
  if (timed_out)
    return fail(errc::timeout, fmt::format("'{}' did not finish within {} s and was killed", argv[0], timeout.count()));
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  if (r.exit_code == 127 && r.output.empty())
    return fail(errc::unsupported, fmt::format("cannot start '{}' ({}): exec failed", argv[0], *exe));
  return r;
}

namespace {

constexpr std::string_view kScratchPrefix = "cuactor-nvcc-";
constexpr std::string_view kScratchMarker = ".cuactor-scratch";
constexpr std::uint64_t kBytesPerCompile = 3'300ULL << 20;  // a CUTLASS sm_90a nvcc compile, measured

// The pid of a scratch directory's name "cuactor-nvcc-<pid>-XXXXXX", when the name is ours.
std::optional<pid_t> scratch_pid(std::string_view name) {
  if (!name.starts_with(kScratchPrefix)) return std::nullopt;
  const std::string_view rest = name.substr(kScratchPrefix.size());
  const auto dash = rest.find('-');
  if (dash == 0 || dash == std::string_view::npos || dash > 9 || rest.size() - dash - 1 != 6) return std::nullopt;
  pid_t pid = 0;
  for (char c : rest.substr(0, dash)) {
    if (c < '0' || c > '9') return std::nullopt;
    pid = pid * 10 + (c - '0');
  }
  return pid;
}

}  // namespace

std::size_t sweep_stale_scratch(const std::filesystem::path& root) noexcept {
  namespace fs = std::filesystem;
  std::size_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const auto pid = scratch_pid(it->path().filename().string());
    if (!pid || !process_is_gone(*pid)) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    std::error_code mec;
    if (!fs::is_regular_file(it->path() / kScratchMarker, mec)) continue;
    std::error_code rec;
    if (fs::remove_all(it->path(), rec) > 0 && !rec) ++removed;
  }
  return removed;
}

Result<ScratchDir> ScratchDir::create() {
  auto root = temp_root();
  if (!root) return fail(root.error());
  static std::once_flag swept;
  std::call_once(swept, [&] { sweep_stale_scratch(*root); });
  std::string templ = (*root / fmt::format("{}{}-XXXXXX", kScratchPrefix, ::getpid())).string();
  if (::mkdtemp(templ.data()) == nullptr)  // mode 0700
    return fail(errc::io_error, fmt::format("cannot create a scratch directory '{}': {}", templ, std::strerror(errno)));
  ScratchDir dir{std::filesystem::path(templ)};
  CUACTOR_TRY(write_new_private_file(dir.path_ / kScratchMarker, {}));
  return dir;
}

ScratchDir::ScratchDir(ScratchDir&& o) noexcept : path_(std::exchange(o.path_, {})) {}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

unsigned compile_slots_for(unsigned cores, std::uint64_t mem_available) noexcept {
  const auto by_memory = static_cast<unsigned>(std::min<std::uint64_t>(mem_available / kBytesPerCompile, 1u << 16));
  return std::max(1u, std::min(std::max(1u, cores), by_memory));
}

std::optional<std::uint64_t> parse_mem_available(std::string_view meminfo) noexcept {
  constexpr std::string_view key = "MemAvailable:";
  const auto at = meminfo.find(key);
  if (at == std::string_view::npos || (at != 0 && meminfo[at - 1] != '\n')) return std::nullopt;
  std::size_t i = at + key.size();
  while (i < meminfo.size() && meminfo[i] == ' ') ++i;
  std::uint64_t kib = 0;
  const std::size_t digits_start = i;
  for (; i < meminfo.size() && meminfo[i] >= '0' && meminfo[i] <= '9'; ++i) {
    if (kib > (UINT64_MAX >> 14)) return std::nullopt;  // would overflow once scaled to bytes
    kib = kib * 10 + static_cast<std::uint64_t>(meminfo[i] - '0');
  }
  if (i == digits_start || meminfo.substr(i, 3) != " kB") return std::nullopt;
  return kib * 1024;
}

namespace {

unsigned compute_slot_limit() {
  if (const char* v = std::getenv("CUACTOR_JIT_MAX_COMPILES"); v && *v) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(v, &end, 10);
    if (end && *end == '\0' && n >= 1 && n <= 1024) return static_cast<unsigned>(n);
    log(LogLevel::warn, fmt::format("CUACTOR_JIT_MAX_COMPILES='{}' is not a number from 1 to 1024; ignored", v));
  }
  std::ifstream in("/proc/meminfo");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Without /proc/meminfo, assume memory for one compile per core rather than refusing to compile.
  const std::uint64_t mem = parse_mem_available(text).value_or(UINT64_MAX);
  return compile_slots_for(std::thread::hardware_concurrency(), mem);
}

struct Slots {
  std::mutex mutex;
  std::condition_variable cv;
  unsigned in_use = 0;
};

Slots& slots() {
  static Slots s;
  return s;
}

}  // namespace

unsigned CompileSlot::limit() noexcept {
  static const unsigned n = [] {
    try {
      return compute_slot_limit();
    } catch (...) {
      return 1u;
    }
  }();
  return n;
}

CompileSlot::CompileSlot() {
  auto& s = slots();
  std::unique_lock lock(s.mutex);
  s.cv.wait(lock, [&] { return s.in_use < limit(); });
  ++s.in_use;
}

CompileSlot::~CompileSlot() {
  auto& s = slots();
  {
    std::lock_guard lock(s.mutex);
    --s.in_use;
  }
  s.cv.notify_one();
}

}  // namespace cuactor::jit::detail
