#include "cuactor/jit/disk_cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>

#include "cuactor/core/files.hpp"
#include "cuactor/core/log.hpp"
#include "cuactor/core/paths.hpp"

namespace cuactor::jit {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'C', 'U', 'A', 'C', 'T', 'J', 'I', 'T'};
constexpr std::uint32_t kFormatVersion = 3;  // 2: word-wise checksum; 3: the checksum covers the header
constexpr std::string_view kEntrySuffix = ".cjit";
constexpr std::string_view kLockSuffix = ".lock";
constexpr std::string_view kTempMarker = ".cjit.tmp.";
// Marks a directory as a cache (https://bford.info/cachedir/: backup tools skip it); written when
// the cache creates its directory.
constexpr std::string_view kMarkerName = "CACHEDIR.TAG";
constexpr std::string_view kMarkerText =
    "Signature: 8a477f597d28d172789f06886806bc55\n# cuactor JIT cache: entries <key>.cjit, locks <key>.lock\n";
constexpr std::size_t kKeyHexDigits = 32;

// Fixed-size little-endian header in front of every entry.
struct Header {
  char magic[8];
  std::uint32_t format_version;
  std::uint32_t kind;
  std::uint64_t metadata_bytes;
  std::uint64_t payload_bytes;
  std::uint64_t checksum[2];  // digest of every header byte before it + metadata + payload
};
static_assert(sizeof(Header) == 48);
constexpr std::size_t kChecksummedHeaderBytes = offsetof(Header, checksum);

Digest checksum_of(const Header& h, std::string_view metadata, std::span<const std::byte> payload) {
  const auto head = std::as_bytes(std::span(reinterpret_cast<const char*>(&h), kChecksummedHeaderBytes));
  return Hasher().bytes(head).field("metadata", metadata).bytes(payload).digest();
}

bool is_hex_key(std::string_view s) {
  return s.size() == kKeyHexDigits &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool is_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The names the cache creates, matched exactly: anything else in the directory is not ours.
bool is_entry_name(std::string_view n) {
  return n.size() == kKeyHexDigits + kEntrySuffix.size() && n.ends_with(kEntrySuffix) &&
         is_hex_key(n.substr(0, kKeyHexDigits));
}
bool is_lock_name(std::string_view n) {
  return n.size() == kKeyHexDigits + kLockSuffix.size() && n.ends_with(kLockSuffix) &&
         is_hex_key(n.substr(0, kKeyHexDigits));
}
// "<key>.cjit.tmp.<pid>.<sequence>"; the writer's pid when the name is ours, else nullopt.
std::optional<pid_t> temp_name_pid(std::string_view n) {
  if (n.size() <= kKeyHexDigits + kTempMarker.size() || !is_hex_key(n.substr(0, kKeyHexDigits)) ||
      n.substr(kKeyHexDigits, kTempMarker.size()) != kTempMarker)
    return std::nullopt;
  const std::string_view rest = n.substr(kKeyHexDigits + kTempMarker.size());
  const auto dot = rest.find('.');
  if (dot == std::string_view::npos || !is_digits(rest.substr(0, dot)) || !is_digits(rest.substr(dot + 1)) || dot > 9)
    return std::nullopt;
  return static_cast<pid_t>(std::stol(std::string(rest.substr(0, dot))));
}

// A temp file of a writer that died: its process is gone, or it is older than any write takes.
bool is_stale_temp(pid_t writer, fs::file_time_type written, fs::file_time_type now) {
  return (writer != ::getpid() && process_is_gone(writer)) || now - written > std::chrono::hours(1);
}

// An exclusive flock() on a per-key lock file; excludes other threads (each opens its own file
// description) and other processes. Released on destruction.
class FileLock {
 public:
  static Result<FileLock> acquire(const fs::path& path) {
    FileLock l;
    l.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (l.fd_ < 0)
      return fail(errc::io_error, fmt::format("cannot open lock file '{}': {}", path.string(), std::strerror(errno)));
    while (::flock(l.fd_, LOCK_EX) != 0) {
      if (errno != EINTR)
        return fail(errc::io_error, fmt::format("flock('{}') failed: {}", path.string(), std::strerror(errno)));
    }
    return l;
  }
  FileLock() = default;
  FileLock(FileLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the description releases the flock
  }

 private:
  int fd_ = -1;
};

// Where an untrusted cache directory is replaced: a per-user directory under the temp root.
Result<fs::path> fallback_directory() {
  auto tmp = temp_root();
  if (!tmp) return fail(tmp.error());
  return *tmp / fmt::format("cuactor-jit-{}", ::geteuid());
}

// Creates (0700) or checks the directory; marks it when it is new or holds nothing but our files.
Status prepare_directory(const fs::path& dir) {
  CUACTOR_TRY(make_private_directory(dir, "JIT cache directory"));
  std::error_code ec;
  if (fs::exists(dir / kMarkerName, ec)) return ok();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (!is_entry_name(n) && !is_lock_name(n) && !temp_name_pid(n)) return ok();  // shared with other files
  }
  // Best effort: a read-only cache directory is still usable for loads.
  (void)write_new_private_file(dir / kMarkerName, std::as_bytes(std::span(kMarkerText.data(), kMarkerText.size())));
  return ok();
}

}  // namespace

std::string_view name(ArtifactKind k) noexcept {
  switch (k) {
    case ArtifactKind::cubin:
      return "cubin";
    case ArtifactKind::ptx:
      return "ptx";
    case ArtifactKind::shared_object:
      return "shared_object";
  }
  return "unknown";
}

std::vector<std::byte> encode_entry(const Artifact& a) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.format_version = kFormatVersion;
  h.kind = static_cast<std::uint32_t>(a.kind);
  h.metadata_bytes = a.metadata.size();
  h.payload_bytes = a.payload.size();
  const Digest d = checksum_of(h, a.metadata, a.payload);
  h.checksum[0] = d.words[0];
  h.checksum[1] = d.words[1];
  std::vector<std::byte> out(sizeof h + a.metadata.size() + a.payload.size());
  std::memcpy(out.data(), &h, sizeof h);
  if (!a.metadata.empty()) std::memcpy(out.data() + sizeof h, a.metadata.data(), a.metadata.size());
  if (!a.payload.empty()) std::memcpy(out.data() + sizeof h + a.metadata.size(), a.payload.data(), a.payload.size());
  return out;
}

Result<Artifact> decode_entry(std::span<const std::byte> bytes) {
  Header h{};
  if (bytes.size() < sizeof h)
    return fail(errc::cache_corrupt,
                fmt::format("entry has {} bytes, fewer than its {}-byte header", bytes.size(), sizeof h));
  std::memcpy(&h, bytes.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    return fail(errc::cache_corrupt, "entry does not start with CUACTJIT");
  if (h.format_version != kFormatVersion)
    return fail(errc::cache_corrupt,
                fmt::format("entry format version {} is not {}", h.format_version, kFormatVersion));
  const std::uint64_t body = bytes.size() - sizeof h;
  if (h.metadata_bytes > body || h.payload_bytes != body - h.metadata_bytes)
    return fail(errc::cache_corrupt,
                fmt::format("entry body has {} bytes, header says {} metadata + {} payload (truncated?)", body,
                            h.metadata_bytes, h.payload_bytes));
  const std::string_view metadata(reinterpret_cast<const char*>(bytes.data() + sizeof h), h.metadata_bytes);
  const auto payload = bytes.subspan(sizeof h + h.metadata_bytes);
  const Digest d = checksum_of(h, metadata, payload);
  if (d.words[0] != h.checksum[0] || d.words[1] != h.checksum[1])
    return fail(errc::cache_corrupt, "entry checksum does not match its header and contents");
  if (h.kind < 1 || h.kind > 3) return fail(errc::cache_corrupt, fmt::format("entry kind {} is unknown", h.kind));
  Artifact a;
  a.kind = static_cast<ArtifactKind>(h.kind);
  a.metadata.assign(metadata);
  a.payload.assign(payload.begin(), payload.end());
  return a;
}

Result<std::shared_ptr<const runtime::ModuleImage>> module_image(DiskCache& cache, const Digest& key) {
  auto entry = cache.load(key);
  if (!entry) return fail(entry.error());
  if (!*entry)
    return fail(
        errc::invalid_argument,
        fmt::format("module_image: the JIT cache has no entry {} (warm it first: cuactor jit warm)", key.hex()));
  Artifact& a = **entry;
  switch (a.kind) {
    case ArtifactKind::cubin:
      return runtime::ModuleImage::from_bytes(std::move(a.payload));
    case ArtifactKind::ptx:
      return runtime::ModuleImage::from_ptx(
          std::string_view(reinterpret_cast<const char*>(a.payload.data()), a.payload.size()));
    default:
      return fail(errc::unsupported, fmt::format("module_image: entry {} is a {}, not device code (cubin or PTX)",
                                                 key.hex(), name(a.kind)));
  }
}

Result<fs::path> default_cache_directory() {
  auto root = cache_root();
  if (!root) return fail(root.error());
  return *root / "jit";
}

Result<DiskCache> DiskCache::open(DiskCacheOptions options) {
  if (options.directory.empty()) {
    auto dir = default_cache_directory();
    if (!dir) return fail(dir.error());
    options.directory = std::move(*dir);
  }
  auto prepared = prepare_directory(options.directory);
  if (!prepared && prepared.error() == errc::untrusted && options.fallback_when_untrusted) {
    // Refuse to load anything from there, but keep working: entries are rebuilt in a private place.
    auto fallback = fallback_directory();
    if (!fallback) return fail(fallback.error());
    log(LogLevel::warn, fmt::format("{}; using '{}' instead", prepared.error().message(), fallback->string()));
    options.directory = std::move(*fallback);
    prepared = prepare_directory(options.directory);
  }
  if (!prepared) return fail(prepared.error());
  DiskCache c;
  c.options_ = std::move(options);
  return c;
}

fs::path DiskCache::entry_path(const Digest& key) const {
  return options_.directory / (key.hex() + std::string(kEntrySuffix));
}

DiskCacheStats DiskCache::stats() const noexcept {
  return {counters_->hits.load(),      counters_->misses.load(), counters_->corrupt.load(), counters_->stores.load(),
          counters_->evictions.load(), counters_->builds.load(), counters_->replaced.load()};
}

Result<std::optional<Artifact>> DiskCache::load(const Digest& key) {
  const fs::path path = entry_path(key);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    ++counters_->misses;
    return std::optional<Artifact>{};
  }
  auto bytes = read_file(path, "JIT cache entry", FileTrust::private_only);
  if (!bytes) {
    ++counters_->misses;
    // An entry others could have written is never loaded (it may be code that gets dlopen()ed): it
    // is rebuilt and the new file replaces it. A vanished file was evicted by another process.
    if (bytes.error() == errc::untrusted || bytes.error() == errc::invalid_argument)
      log(LogLevel::warn, fmt::format("{}; rebuilding it", bytes.error().message()));
    return std::optional<Artifact>{};
  }
  auto artifact = decode_entry(*bytes);
  if (!artifact) {
    ++counters_->corrupt;
    ++counters_->misses;
    log(LogLevel::warn, fmt::format("JIT cache entry '{}' is damaged ({}); removing it so it is rebuilt", path.string(),
                                    artifact.error().message()));
    fs::remove(path, ec);
    return std::optional<Artifact>{};
  }
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // LRU: a use counts as recent
  ++counters_->hits;
  return std::optional<Artifact>(std::move(*artifact));
}

Status DiskCache::store(const Digest& key, const Artifact& artifact) {
  const fs::path path = entry_path(key);
  static std::atomic<std::uint64_t> sequence{0};
  const fs::path temp = path.string() + fmt::format(".tmp.{}.{}", ::getpid(), sequence++);
  CUACTOR_TRY(write_new_private_file(temp, encode_entry(artifact)));
  std::error_code ec;
  fs::rename(temp, path, ec);  // atomic on POSIX: readers see the old file or the whole new one
  if (ec) {
    std::error_code rec;
    fs::remove(temp, rec);
    return fail(errc::io_error,
                fmt::format("cannot rename '{}' to '{}': {}", temp.string(), path.string(), ec.message()));
  }
  ++counters_->stores;
  return evict_to(options_.max_bytes, key);
}

Result<CacheLookup> DiskCache::get_or_build(const Digest& key, const std::function<Result<Artifact>()>& build) {
  auto first = load(key);
  if (!first) return fail(first.error());
  if (*first) return CacheLookup{std::move(**first), true};
  auto lock = FileLock::acquire(options_.directory / (key.hex() + std::string(kLockSuffix)));
  if (!lock) return fail(lock.error());
  // Another thread or process may have built it while we waited for the lock.
  auto second = load(key);
  if (!second) return fail(second.error());
  if (*second) return CacheLookup{std::move(**second), true};
  ++counters_->builds;
  auto built = build();
  if (!built) return fail(built.error());
  CUACTOR_TRY(store(key, *built));
  return CacheLookup{std::move(*built), false};
}

Result<CacheLookup> DiskCache::replace_unusable(const Digest& key, const std::function<Result<Artifact>()>& build,
                                                const std::function<Status(const Artifact&)>& usable) {
  auto lock = FileLock::acquire(options_.directory / (key.hex() + std::string(kLockSuffix)));
  if (!lock) return fail(lock.error());
  auto current = load(key);
  if (!current) return fail(current.error());
  if (*current && usable(**current)) return CacheLookup{std::move(**current), true};
  ++counters_->builds;
  auto built = build();
  if (!built) return fail(built.error());
  CUACTOR_TRY(usable(*built));
  CUACTOR_TRY(store(key, *built));
  ++counters_->replaced;
  return CacheLookup{std::move(*built), false};
}

Status DiskCache::evict_to(std::uint64_t max_bytes, const std::optional<Digest>& keep) {
  struct File {
    fs::path path;
    std::uint64_t bytes;
    fs::file_time_type time;
  };
  std::vector<File> files;
  std::uint64_t total = 0;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  const std::string keep_name = keep ? entry_path(*keep).filename().string() : std::string();
  for (const auto& e : fs::directory_iterator(options_.directory, ec)) {
    std::error_code fec;
    const std::string fname = e.path().filename().string();
    const auto t = e.last_write_time(fec);
    if (fec) continue;
    if (const auto writer = temp_name_pid(fname)) {
      if (is_stale_temp(*writer, t, now)) fs::remove(e.path(), fec);  // left by a crashed writer
      continue;
    }
    if (!is_entry_name(fname)) continue;
    const auto size = e.file_size(fec);
    if (fec) continue;
    total += size;
    if (fname != keep_name) files.push_back({e.path(), size, t});
  }
  if (total <= max_bytes) return ok();
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.time < b.time; });
  for (const File& f : files) {
    if (total <= max_bytes) break;
    std::error_code rec;
    if (fs::remove(f.path, rec)) {
      total -= f.bytes;
      ++counters_->evictions;
      fs::remove(fs::path(f.path).replace_extension(kLockSuffix), rec);
    }
  }
  return ok();
}

Result<std::vector<CacheEntryInfo>> DiskCache::list() const {
  std::vector<CacheEntryInfo> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.directory, ec)) {
    if (!is_entry_name(e.path().filename().string())) continue;
    CacheEntryInfo info;
    info.key = e.path().stem().string();
    std::error_code tec;
    info.last_use = e.last_write_time(tec);
    auto bytes = read_file(e.path(), "JIT cache entry", FileTrust::private_only);
    if (!bytes) {
      if (bytes.error() == errc::io_error) continue;  // evicted meanwhile
      info.problem = bytes.error().message();
    } else if (auto a = decode_entry(*bytes)) {
      info.file_bytes = bytes->size();
      info.kind = a->kind;
      info.metadata = std::move(a->metadata);
    } else {
      info.file_bytes = bytes->size();
      info.problem = a.error().message();
    }
    out.push_back(std::move(info));
  }
  if (ec) return fail(errc::io_error, fmt::format("cannot list '{}': {}", options_.directory.string(), ec.message()));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.last_use > b.last_use; });
  return out;
}

Status DiskCache::clear() {
  std::vector<std::string> failures;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.directory, ec)) {
    const std::string fname = e.path().filename().string();
    if (!is_entry_name(fname) && !is_lock_name(fname) && !temp_name_pid(fname)) continue;  // not ours
    std::error_code rec;
    fs::remove(e.path(), rec);
    if (rec) failures.push_back(fmt::format("'{}' ({})", e.path().string(), rec.message()));
  }
  if (ec) return fail(errc::io_error, fmt::format("cannot clear '{}': {}", options_.directory.string(), ec.message()));
  if (!failures.empty()) {
    const std::size_t shown = std::min<std::size_t>(failures.size(), 5);
    std::string first;
    for (std::size_t i = 0; i < shown; ++i) first += (i ? ", " : "") + failures[i];
    return fail(errc::io_error,
                fmt::format("could not remove {} of the cache's files in '{}': {}{}", failures.size(),
                            options_.directory.string(), first, failures.size() > shown ? ", ..." : ""));
  }
  return ok();
}

Result<bool> DiskCache::remove(const Digest& key) {
  std::error_code ec;
  const bool removed = fs::remove(entry_path(key), ec);
  if (ec) return fail(errc::io_error, fmt::format("cannot remove '{}': {}", entry_path(key).string(), ec.message()));
  return removed;
}

}  // namespace cuactor::jit
