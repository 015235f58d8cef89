/// @file
/// On-disk cache of compiled machine code ([J3]): one file per key, written atomically (temp file +
/// rename), with a checksum over the whole header and body so that corrupt or truncated entries are
/// detected, removed and rebuilt; a size cap enforced by evicting the least recently used entries;
/// cross-thread and cross-process single-flight building through per-key file locks.
///
/// The cache owns only what it made and trusts only what it made: it touches only names of its own
/// exact forms (`<32 hex>.cjit`, `<32 hex>.lock`, `<32 hex>.cjit.tmp.<pid>.<n>`), so a directory it
/// shares with other files loses none of them; its directory is created 0700 and marked with a
/// CACHEDIR.TAG, entries are written 0600 whatever the umask, and an entry or directory that
/// another user owns or may write is never loaded.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "cuactor/jit/hash.hpp"
#include "cuactor/runtime/module_image.hpp"

namespace cuactor::jit {

/// What a cache entry holds.
enum class ArtifactKind : std::uint32_t {
  cubin = 1,          ///< SASS for one architecture (NVRTC or nvcc), loaded with gpu::Library.
  ptx = 2,            ///< PTX text, JIT-compiled by the driver at load (driver version is in the key).
  shared_object = 3,  ///< An ELF shared object (nvcc back end) exposing the kernels' instance ABI.
};

/// Name of an artifact kind ("cubin", "ptx", "shared_object").
std::string_view name(ArtifactKind k) noexcept;

/// One cache entry as read back: kind, free-form metadata text and the machine code.
struct Artifact {
  ArtifactKind kind = ArtifactKind::cubin;
  /// Metadata stored with the code (e.g. lowered kernel names, the request's description).
  std::string metadata;
  std::vector<std::byte> payload;
};

class DiskCache;

/// The module image of cache entry `key` (a cubin or PTX artifact), for DeviceActor::launch(module,
/// ...) in-process or in an isolated worker ([R10]: launches by JIT key): `invalid_argument` naming the
/// key when the cache has no such entry, `unsupported` for a shared-object artifact (host code).
Result<std::shared_ptr<const runtime::ModuleImage>> module_image(DiskCache& cache, const Digest& key);

/// The default cache directory: cuactor::cache_root() / "jit" (cache_root's error when it has none).
Result<std::filesystem::path> default_cache_directory();

/// Where a cache lives and how large it may grow.
struct DiskCacheOptions {
  /// Directory of the entries (created when missing). Default: cuactor::cache_root() / "jit".
  std::filesystem::path directory;
  /// Total size of all entries above which the least recently used ones are evicted.
  std::uint64_t max_bytes = 4ULL << 30;
  /// When `directory` belongs to another user or others may write it (`untrusted`): true logs the
  /// error and uses <temp_root()>/cuactor-jit-<uid> instead (entries are rebuilt there); false
  /// makes open() fail (tools that inspect one directory).
  bool fallback_when_untrusted = true;
};

/// Counters of one DiskCache object (not of the directory: other processes keep their own).
struct DiskCacheStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t corrupt = 0;  ///< Entries found damaged (bad magic, size or checksum) and removed.
  std::uint64_t stores = 0;
  std::uint64_t evictions = 0;
  std::uint64_t builds = 0;    ///< Times get_or_build or replace_unusable ran its build function.
  std::uint64_t replaced = 0;  ///< Entries replace_unusable replaced by a fresh build its caller could use.
};

/// Listing entry of `DiskCache::list()`.
struct CacheEntryInfo {
  std::string key;
  ArtifactKind kind = ArtifactKind::cubin;
  std::uint64_t file_bytes = 0;
  std::filesystem::file_time_type last_use;
  std::string metadata;
  /// Why the entry cannot be used (damaged, or untrusted owner/mode); empty when it is intact.
  std::string problem;
};

/// Result of get_or_build: the artifact and whether it came from disk.
struct CacheLookup {
  Artifact artifact;
  bool from_disk = false;
};

/// The on-disk cache. Cheap to copy (copies share counters); safe to use from many threads and
/// processes at once on one directory.
class DiskCache {
 public:
  /// Opens (creating if needed, mode 0700) the cache directory; `io_error` if it cannot be created,
  /// `untrusted` (see DiskCacheOptions::fallback_when_untrusted).
  static Result<DiskCache> open(DiskCacheOptions options);

  /// The entry for `key`, or nullopt on a miss. A damaged entry counts as corrupt, is removed and
  /// reported as a miss. A hit refreshes the entry's last-use time (LRU).
  Result<std::optional<Artifact>> load(const Digest& key);
  /// Writes the entry atomically (temp file + rename), then evicts down to the size cap (never the
  /// entry just written).
  Status store(const Digest& key, const Artifact& artifact);
  /// Loads `key`, or under an exclusive per-key file lock (which serialises threads and processes)
  /// loads again and, if still missing, runs `build`, stores its result and returns it. Concurrent
  /// callers for one key therefore build once.
  Result<CacheLookup> get_or_build(const Digest& key, const std::function<Result<Artifact>()>& build);
  /// For an intact entry its caller could not use (a shared object this machine's loader refuses, as
  /// one built against a newer C++ runtime elsewhere is): under the key's lock, the entry on disk if
  /// `usable` now takes it (another thread or process replaced it meanwhile; from_disk true), else
  /// `build`'s result, which replaces the entry only if `usable` takes it; a build refused alike
  /// leaves the entry and fails with `usable`'s error.
  Result<CacheLookup> replace_unusable(const Digest& key, const std::function<Result<Artifact>()>& build,
                                       const std::function<Status(const Artifact&)>& usable);
  /// Removes the least recently used entries until the total is at most `max_bytes`, sparing `keep`.
  Status evict_to(std::uint64_t max_bytes, const std::optional<Digest>& keep = std::nullopt);
  /// Every entry of the cache's own name form, most recently used first (damaged ones included,
  /// with CacheEntryInfo::problem set).
  Result<std::vector<CacheEntryInfo>> list() const;
  /// Removes every file of the cache's own name forms (entries, locks, temp files) and nothing else;
  /// `io_error` naming the files it could not remove.
  Status clear();
  /// Removes one entry; true if it existed.
  Result<bool> remove(const Digest& key);

  /// Path of the file of `key` (exists only after a store).
  [[nodiscard]] std::filesystem::path entry_path(const Digest& key) const;
  [[nodiscard]] const std::filesystem::path& directory() const noexcept { return options_.directory; }
  [[nodiscard]] std::uint64_t max_bytes() const noexcept { return options_.max_bytes; }
  /// Counters of this object and its copies.
  [[nodiscard]] DiskCacheStats stats() const noexcept;

 private:
  struct Counters {
    std::atomic<std::uint64_t> hits{0}, misses{0}, corrupt{0}, stores{0}, evictions{0}, builds{0}, replaced{0};
  };
  DiskCacheOptions options_;
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
};

/// Parses an entry file's bytes; `cache_corrupt` naming the defect when the header, size or
/// checksum is wrong. Exposed for tests and `cuactor jit cache verify`.
Result<Artifact> decode_entry(std::span<const std::byte> file_bytes);
/// Serialises an artifact in the entry format that decode_entry reads.
std::vector<std::byte> encode_entry(const Artifact& artifact);

}  // namespace cuactor::jit
