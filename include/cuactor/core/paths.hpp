/// @file
/// Well-known file-system locations. Nothing here throws: a missing or unusable location is a
/// typed error naming the variable and its value.
#pragma once

#include <filesystem>

#include "cuactor/core/expected.hpp"

namespace cuactor {

/// Directory for temporary files: $TMPDIR when set (it must then be an existing directory, else
/// `io_error` naming it: silently using another place would surprise whoever set it), else /tmp.
Result<std::filesystem::path> temp_root();

/// Root of cuactor's on-disk caches: $CUACTOR_CACHE_DIR, else $XDG_CACHE_HOME/cuactor, else
/// $HOME/.cache/cuactor, else <temp_root()>/cuactor-cache-<uid> (per user, so another user cannot
/// have made it first). Fails only when it falls back to an unusable temp_root().
Result<std::filesystem::path> cache_root();

}  // namespace cuactor
