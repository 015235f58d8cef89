#include "cuactor/core/files.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cuactor {
namespace fs = std::filesystem;
namespace {

std::string errno_text(int e) {
  return std::strerror(e);
}

// Closes a descriptor at scope exit.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Status check_trusted_mode(const fs::path& path, std::string_view what, uid_t uid, mode_t mode) {
  const uid_t me = ::geteuid();
  if (uid != me || (mode & (S_IWGRP | S_IWOTH)) != 0)
    return fail(errc::untrusted,
                fmt::format("{} '{}' has owner uid {} and mode {:04o}: it must belong to uid {} and not be "
                            "writable by group or others",
                            what, path.string(), uid, mode & 07777, me));
  return ok();
}

Status check_trusted(const fs::path& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return fail(errc::io_error, fmt::format("cannot inspect {} '{}': {}", what, path.string(), errno_text(errno)));
  return check_trusted_mode(path, what, st.st_uid, st.st_mode);
}

Result<std::vector<std::byte>> read_file(const fs::path& path, std::string_view what, FileTrust trust) {
  const int flags = O_RDONLY | O_CLOEXEC | (trust == FileTrust::private_only ? O_NOFOLLOW : 0);
  FdGuard fd{::open(path.c_str(), flags)};
  if (fd.fd < 0)
    return fail(errc::io_error, fmt::format("cannot open {} '{}': {}", what, path.string(), errno_text(errno)));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0)
    return fail(errc::io_error, fmt::format("cannot inspect {} '{}': {}", what, path.string(), errno_text(errno)));
  if (!S_ISREG(st.st_mode))
    return fail(errc::invalid_argument, fmt::format("{} '{}' is {}, not a regular file", what, path.string(),
                                                    S_ISDIR(st.st_mode) ? "a directory" : "a special file"));
  if (trust == FileTrust::private_only) CUACTOR_TRY(check_trusted_mode(path, what, st.st_uid, st.st_mode));
  std::vector<std::byte> out(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  for (;;) {
    if (done == out.size()) out.resize(out.size() + 4096);  // the file may have grown
    const ssize_t n = ::read(fd.fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return fail(errc::io_error, fmt::format("cannot read {} '{}': {}", what, path.string(), errno_text(errno)));
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  out.resize(done);
  return out;
}

Status write_new_private_file(const fs::path& path, std::span<const std::byte> bytes) {
  FdGuard fd{::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)};
  if (fd.fd < 0) return fail(errc::io_error, fmt::format("cannot create '{}': {}", path.string(), errno_text(errno)));
  auto failed = [&](const char* step, int e) {
    ::unlink(path.c_str());  // ours: created exclusively above
    return fail(errc::io_error, fmt::format("cannot {} '{}': {}", step, path.string(), errno_text(e)));
  };
  // The umask cannot widen 0600 but could narrow it (a cache entry we cannot read back).
  if (::fchmod(fd.fd, 0600) != 0) return failed("set mode 0600 on", errno);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed("write", errno);
    if (n == 0) return failed("write", EIO);
    done += static_cast<std::size_t>(n);
  }
  const int rc = ::close(fd.fd);  // close reports delayed write errors (NFS, quotas)
  fd.fd = -1;
  if (rc != 0) return failed("close", errno);
  return ok();
}

Status make_private_directory(const fs::path& dir, std::string_view what) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return check_trusted(dir, what);
  if (dir.has_parent_path() && dir.parent_path() != dir) {
    if (!fs::is_directory(dir.parent_path(), ec)) CUACTOR_TRY(make_private_directory(dir.parent_path(), "directory"));
  }
  if (::mkdir(dir.c_str(), 0700) == 0) {
    // The umask can only narrow 0700, but a narrowed mode (e.g. 0500) would make the cache unusable.
    ::chmod(dir.c_str(), 0700);
  } else if (errno != EEXIST) {
    return fail(errc::io_error, fmt::format("cannot create {} '{}': {}", what, dir.string(), errno_text(errno)));
  }
  if (!fs::is_directory(dir, ec))
    return fail(errc::io_error, fmt::format("{} '{}' exists and is not a directory", what, dir.string()));
  return check_trusted(dir, what);
}

bool process_is_gone(pid_t pid) noexcept {
  return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace cuactor
