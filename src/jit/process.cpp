#include "process.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

extern char** environ;

namespace cuactor::jit::detail {

Result<ProcessResult> run_process(const std::vector<std::string>& argv, std::chrono::seconds timeout,
                                  const std::function<void()>& heartbeat) {
  if (argv.empty()) return fail(errc::invalid_argument, "run_process: empty command");
  // Output goes to an anonymous temp file: a pipe could fill up and block the child.
  std::FILE* out = std::tmpfile();
  if (!out) return fail(errc::internal, fmt::format("tmpfile() failed: {}", std::strerror(errno)));
  const int out_fd = ::fileno(out);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    std::fclose(out);
    return fail(errc::unsupported, fmt::format("cannot start '{}': {}", argv[0], std::strerror(rc)));
  }
  const auto start = std::chrono::steady_clock::now();
  auto last_beat = start;
  int status = 0;
  bool timed_out = false;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      std::fclose(out);
      return fail(errc::internal, fmt::format("waitpid('{}') failed: {}", argv[0], std::strerror(errno)));
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - start > timeout) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      timed_out = true;
      break;
    }
    if (heartbeat && now - last_beat >= std::chrono::seconds(1)) {
      last_beat = now;
      heartbeat();
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
  return r;
}

}  // namespace cuactor::jit::detail
