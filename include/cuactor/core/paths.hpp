/// @file
/// Well-known file-system locations.
#pragma once

#include <filesystem>

namespace cuactor {

/// Root of cuactor's on-disk caches: $CUACTOR_CACHE_DIR, else $XDG_CACHE_HOME/cuactor, else
/// $HOME/.cache/cuactor, else <temp>/cuactor-cache.
std::filesystem::path cache_root();

}  // namespace cuactor
