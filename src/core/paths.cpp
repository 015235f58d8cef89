#include "cuactor/core/paths.hpp"

#include <cstdlib>

namespace cuactor {

std::filesystem::path cache_root() {
  if (const char* p = std::getenv("CUACTOR_CACHE_DIR"); p && *p) return p;
  if (const char* p = std::getenv("XDG_CACHE_HOME"); p && *p) return std::filesystem::path(p) / "cuactor";
  if (const char* p = std::getenv("HOME"); p && *p) return std::filesystem::path(p) / ".cache" / "cuactor";
  return std::filesystem::temp_directory_path() / "cuactor-cache";
}

}  // namespace cuactor
