#include "runtime/isolated/spawn.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <thread>

extern char** environ;

namespace cuactor::runtime::isolated {
namespace {

/// Closes a descriptor on scope exit.
class FdGuard {
 public:
  explicit FdGuard(int fd) noexcept : fd_(fd) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

/// A close-on-exec copy of `fd` numbered 10 or above, so that the spawn's dup2 onto 3 and 4 can never
/// overwrite a source descriptor nor be a no-op that keeps close-on-exec.
Result<int> high_copy(int fd) {
  const int c = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  if (c < 0) return fail(errc::internal, fmt::format("fcntl(F_DUPFD_CLOEXEC) of fd {}: {}", fd, std::strerror(errno)));
  return c;
}

template <class T>
Result<T> parse_number(std::string_view flag, std::string_view text) {
  T v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    return fail(errc::invalid_argument, fmt::format("worker argument {} '{}' is not a number", flag, text));
  return v;
}

}  // namespace

std::string default_worker_path() {
  if (const char* env = std::getenv("CUACTOR_WORKER"); env && *env) return env;
  // Next to this program (the build tree, or an application installed beside cuactor), else where
  // cuactor's install put it: a service living elsewhere still finds the installed worker.
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto beside = self.parent_path() / "cuactor-worker";
    if (std::filesystem::exists(beside, ec)) return beside.string();
  }
#ifdef CUACTOR_INSTALL_BINDIR
  auto installed = std::filesystem::path(CUACTOR_INSTALL_BINDIR) / "cuactor-worker";
  if (std::filesystem::exists(installed, ec)) return installed.string();
#endif
  if (!self.empty()) return (self.parent_path() / "cuactor-worker").string();  // named in the spawn error
  return "cuactor-worker";
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::sigdescr_np(sig);
    return fmt::format("killed by signal {} ({})", sig, name ? name : "unknown");
  }
  return fmt::format("wait status 0x{:x}", status);
}

Result<std::unique_ptr<WorkerProcess>> WorkerProcess::spawn(const SpawnOptions& options) {
  auto pair = make_socket_pair();
  if (!pair) return fail(pair.error());
  FdGuard parent_end(pair->first);
  FdGuard child_end_low(pair->second);
  auto child_src = high_copy(child_end_low.get());
  if (!child_src) return fail(child_src.error());
  FdGuard child_end(*child_src);

  std::unique_ptr<WorkerProcess> w(new WorkerProcess());
  FdGuard shm_src(-1);
  if (options.shm && options.shm->fd() >= 0) {
    auto c = high_copy(options.shm->fd());
    if (!c) return fail(c.error());
    shm_src.reset(*c);
  }

  std::vector<std::string> args{options.executable, "--channel-fd", std::to_string(kChildChannelFd), "--parent-pid",
                                std::to_string(::getpid())};
  if (shm_src.get() >= 0) {
    args.insert(args.end(),
                {"--shm-fd", std::to_string(kChildShmFd), "--shm-bytes", std::to_string(options.shm->size())});
  }
  args.insert(args.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child_end.get(), kChildChannelFd);
  if (shm_src.get() >= 0) posix_spawn_file_actions_adddup2(&actions, shm_src.get(), kChildShmFd);
  // Descriptors this process inherited without close-on-exec must not reach the worker either.
  posix_spawn_file_actions_addclosefrom_np(&actions, kChildShmFd + 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, options.executable.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return fail(errc::worker_lost, fmt::format("cannot start worker '{}': {}", options.executable, std::strerror(rc)));
  w->pid_ = pid;

  auto channel = Channel::adopt(parent_end.release(), options.max_payload);
  if (!channel) {
    w->kill_now();
    return fail(channel.error());
  }
  w->channel_ = std::move(*channel);
  return w;
}

WorkerProcess::~WorkerProcess() {
  terminate(std::chrono::milliseconds(1000));
}

std::optional<int> WorkerProcess::poll_exit() noexcept {
  if (status_ || pid_ < 0) return status_;
  int st = 0;
  const pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) status_ = st;
  if (r < 0 && errno == ECHILD) status_ = 0;  // reaped elsewhere (SIGCHLD ignored): nothing left to wait for
  return status_;
}

std::optional<int> WorkerProcess::wait_exit(std::chrono::milliseconds timeout) noexcept {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto step = std::chrono::microseconds(200);
  while (!poll_exit()) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(step);
    step = std::min(step * 2, std::chrono::microseconds(10000));
  }
  return status_;
}

int WorkerProcess::kill_now() noexcept {
  if (poll_exit()) return *status_;
  ::kill(pid_, SIGKILL);
  int st = 0;
  pid_t r;
  do r = ::waitpid(pid_, &st, 0);
  while (r < 0 && errno == EINTR);
  status_ = r == pid_ ? st : 0;
  return *status_;
}

int WorkerProcess::terminate(std::chrono::milliseconds grace) noexcept {
  if (channel_) channel_->close();
  if (pid_ < 0) return 0;
  if (auto st = wait_exit(grace)) return *st;
  return kill_now();
}

Result<ChildEnd> child_startup(int argc, char** argv, std::uint32_t max_payload) {
  // First of all: die with the parent. Then check it did not die before this line (the signal would
  // never come): the parent passed its pid, and an orphan has been re-parented to another one.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::signal(SIGPIPE, SIG_IGN);
  int channel_fd = -1;
  int shm_fd = -1;
  std::size_t shm_bytes = 0;
  pid_t parent = -1;
  ChildEnd end;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    const bool standard =
        flag == "--channel-fd" || flag == "--parent-pid" || flag == "--shm-fd" || flag == "--shm-bytes";
    if (!standard) {
      end.rest.emplace_back(flag);
      continue;
    }
    if (i + 1 >= argc) return fail(errc::invalid_argument, fmt::format("worker argument {} needs a value", flag));
    const std::string_view value = argv[++i];
    if (flag == "--channel-fd") {
      auto v = parse_number<int>(flag, value);
      if (!v) return fail(v.error());
      channel_fd = *v;
    } else if (flag == "--parent-pid") {
      auto v = parse_number<pid_t>(flag, value);
      if (!v) return fail(v.error());
      parent = *v;
    } else if (flag == "--shm-fd") {
      auto v = parse_number<int>(flag, value);
      if (!v) return fail(v.error());
      shm_fd = *v;
    } else {
      auto v = parse_number<std::size_t>(flag, value);
      if (!v) return fail(v.error());
      shm_bytes = *v;
    }
  }
  if (channel_fd < 0 || parent <= 0)
    return fail(errc::invalid_argument,
                "worker needs --channel-fd and --parent-pid (it is started by the client library)");
  if (::getppid() != parent)
    return fail(errc::worker_lost,
                fmt::format("parent {} is already gone (getppid() is {}): not starting", parent, ::getppid()));
  // Our descriptors must not leak into anything this process might start.
  ::fcntl(channel_fd, F_SETFD, FD_CLOEXEC);
  auto channel = Channel::adopt(channel_fd, max_payload);
  if (!channel) return fail(channel.error());
  end.channel = std::move(*channel);
  if (shm_fd >= 0) {
    ::fcntl(shm_fd, F_SETFD, FD_CLOEXEC);
    auto shm = SharedRegion::map(shm_fd, shm_bytes);
    if (!shm) return fail(shm.error());
    end.shm = std::move(*shm);
  }
  end.parent = parent;
  return end;
}

}  // namespace cuactor::runtime::isolated
