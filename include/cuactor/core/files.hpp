/// @file
/// File primitives that never throw and never trust by accident: reads refuse directories and
/// symbolic links, private files and directories get modes 0600 / 0700 whatever the umask, and
/// a trust check (owner = effective user, not writable by group or others) guards anything that
/// is later loaded as code. Every failure is a typed error naming the path and the rule.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cuactor/core/expected.hpp"

namespace cuactor {

/// Whether read_file checks the file's owner and mode (see check_trusted_mode).
enum class FileTrust { any, private_only };

/// `untrusted` naming `path` and `mode` (octal) when `uid` is not the effective user or `mode`
/// lets group or others write. `what` says what the path is ("JIT cache entry").
Status check_trusted_mode(const std::filesystem::path& path, std::string_view what, uid_t uid, mode_t mode);

/// check_trusted_mode on what `path` names (following symbolic links, for directories).
Status check_trusted(const std::filesystem::path& path, std::string_view what);

/// The bytes of a regular file. `io_error` when it cannot be opened or read, `invalid_argument`
/// when it is a directory or another non-regular file; with `private_only`, `untrusted` (checked
/// on the opened descriptor, so the file cannot be swapped between check and read). Symbolic links
/// are refused with `private_only` and followed otherwise.
Result<std::vector<std::byte>> read_file(const std::filesystem::path& path, std::string_view what,
                                         FileTrust trust = FileTrust::any);

/// Creates `path` exclusively (it must not exist) with mode 0600 and writes `bytes`; removes it
/// again on failure. `io_error` naming the path and the system's reason (ENOSPC, EFBIG, ...).
Status write_new_private_file(const std::filesystem::path& path, std::span<const std::byte> bytes);

/// Creates `dir` and missing parents; the directories it creates get mode 0700 whatever the
/// umask. `io_error` when it cannot; `untrusted` when `dir` exists and fails check_trusted.
Status make_private_directory(const std::filesystem::path& dir, std::string_view what);

/// True if process `pid` is gone (so files named after it are stale). An existing process of
/// another user counts as alive.
bool process_is_gone(pid_t pid) noexcept;

}  // namespace cuactor
