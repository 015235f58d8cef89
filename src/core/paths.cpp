#include "cuactor/core/paths.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <system_error>

namespace cuactor {
namespace fs = std::filesystem;

Result<fs::path> temp_root() {
  const char* t = std::getenv("TMPDIR");
  if (!t || !*t) return fs::path("/tmp");
  std::error_code ec;
  if (!fs::is_directory(t, ec))
    return fail(errc::io_error, fmt::format("TMPDIR='{}' is not an existing directory{}: create it or unset TMPDIR", t,
                                            ec ? " (" + ec.message() + ")" : std::string()));
  return fs::path(t);
}

Result<fs::path> cache_root() {
  if (const char* p = std::getenv("CUACTOR_CACHE_DIR"); p && *p) return fs::path(p);
  if (const char* p = std::getenv("XDG_CACHE_HOME"); p && *p) return fs::path(p) / "cuactor";
  if (const char* p = std::getenv("HOME"); p && *p) return fs::path(p) / ".cache" / "cuactor";
  auto tmp = temp_root();
  if (!tmp)
    return fail(errc::io_error, fmt::format("no cache directory: CUACTOR_CACHE_DIR, XDG_CACHE_HOME and HOME are "
                                            "unset, and {}",
                                            tmp.error().message()));
  return *tmp / fmt::format("cuactor-cache-{}", ::geteuid());
}

}  // namespace cuactor
