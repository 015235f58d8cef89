#include "cuactor/jit/disk_cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>
#include <utility>

#include "cuactor/core/log.hpp"
#include "cuactor/core/paths.hpp"

namespace cuactor::jit {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'C', 'U', 'A', 'C', 'T', 'J', 'I', 'T'};
constexpr std::uint32_t kFormatVersion = 2;  // 2: word-wise checksum
constexpr std::string_view kEntrySuffix = ".cjit";
constexpr std::string_view kTempMarker = ".tmp.";

// Fixed-size little-endian header in front of every entry.
struct Header {
  char magic[8];
  std::uint32_t format_version;
  std::uint32_t kind;
  std::uint64_t metadata_bytes;
  std::uint64_t payload_bytes;
  std::uint64_t checksum[2];  // digest of metadata + payload
};
static_assert(sizeof(Header) == 48);

Digest checksum_of(std::string_view metadata, std::span<const std::byte> payload) {
  return Hasher().field("metadata", metadata).bytes(payload).digest();
}

// An exclusive flock() on a per-key lock file; excludes other threads (each opens its own file
// description) and other processes. Released on destruction.
class FileLock {
 public:
  static Result<FileLock> acquire(const fs::path& path) {
    FileLock l;
    l.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (l.fd_ < 0)
      return fail(errc::invalid_argument,
                  fmt::format("cannot open lock file '{}': {}", path.string(), std::strerror(errno)));
    while (::flock(l.fd_, LOCK_EX) != 0) {
      if (errno != EINTR)
        return fail(errc::internal, fmt::format("flock('{}') failed: {}", path.string(), std::strerror(errno)));
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

Result<std::vector<std::byte>> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(errc::invalid_argument, fmt::format("cannot open '{}'", path.string()));
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

bool is_entry(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.ends_with(kEntrySuffix) && name.find(kTempMarker) == std::string::npos;
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
  const Digest d = checksum_of(a.metadata, a.payload);
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
  if (h.kind < 1 || h.kind > 3) return fail(errc::cache_corrupt, fmt::format("entry kind {} is unknown", h.kind));
  const std::uint64_t body = bytes.size() - sizeof h;
  if (h.metadata_bytes > body || h.payload_bytes != body - h.metadata_bytes)
    return fail(errc::cache_corrupt,
                fmt::format("entry body has {} bytes, header says {} metadata + {} payload (truncated?)", body,
                            h.metadata_bytes, h.payload_bytes));
  Artifact a;
  a.kind = static_cast<ArtifactKind>(h.kind);
  a.metadata.assign(reinterpret_cast<const char*>(bytes.data() + sizeof h), h.metadata_bytes);
  const auto payload = bytes.subspan(sizeof h + h.metadata_bytes);
  a.payload.assign(payload.begin(), payload.end());
  const Digest d = checksum_of(a.metadata, a.payload);
  if (d.words[0] != h.checksum[0] || d.words[1] != h.checksum[1])
    return fail(errc::cache_corrupt, "entry checksum does not match its contents");
  return a;
}

std::filesystem::path default_cache_directory() {
  return cache_root() / "jit";
}

Result<DiskCache> DiskCache::open(DiskCacheOptions options) {
  if (options.directory.empty()) options.directory = default_cache_directory();
  std::error_code ec;
  fs::create_directories(options.directory, ec);
  if (ec || !fs::is_directory(options.directory))
    return fail(errc::invalid_argument, fmt::format("JIT cache directory '{}' cannot be created: {}",
                                                    options.directory.string(), ec.message()));
  DiskCache c;
  c.options_ = std::move(options);
  return c;
}

fs::path DiskCache::entry_path(const Digest& key) const {
  return options_.directory / (key.hex() + std::string(kEntrySuffix));
}

DiskCacheStats DiskCache::stats() const noexcept {
  return {counters_->hits.load(),   counters_->misses.load(),    counters_->corrupt.load(),
          counters_->stores.load(), counters_->evictions.load(), counters_->builds.load()};
}

Result<std::optional<Artifact>> DiskCache::load(const Digest& key) {
  const fs::path path = entry_path(key);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    ++counters_->misses;
    return std::optional<Artifact>{};
  }
  auto bytes = read_file(path);
  if (!bytes) {  // removed by an evicting process between exists() and open()
    ++counters_->misses;
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
  const fs::path temp = path.string() + fmt::format("{}{}.{}", kTempMarker, ::getpid(), sequence++);
  const auto bytes = encode_entry(artifact);
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(temp, ec);
      return fail(errc::invalid_argument, fmt::format("cannot write JIT cache entry '{}'", temp.string()));
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);  // atomic on POSIX: readers see the old file or the whole new one
  if (ec) {
    fs::remove(temp, ec);
    return fail(errc::invalid_argument,
                fmt::format("cannot rename '{}' to '{}': {}", temp.string(), path.string(), ec.message()));
  }
  ++counters_->stores;
  return evict_to(options_.max_bytes, key);
}

Result<CacheLookup> DiskCache::get_or_build(const Digest& key, const std::function<Result<Artifact>()>& build) {
  auto first = load(key);
  if (!first) return fail(first.error());
  if (*first) return CacheLookup{std::move(**first), true};
  auto lock = FileLock::acquire(options_.directory / (key.hex() + ".lock"));
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
    if (fname.find(kTempMarker) != std::string::npos) {
      if (now - t > std::chrono::hours(1)) fs::remove(e.path(), fec);  // left by a crashed writer
      continue;
    }
    if (!is_entry(e.path())) continue;
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
      fs::remove(fs::path(f.path).replace_extension(".lock"), rec);
    }
  }
  return ok();
}

Result<std::vector<CacheEntryInfo>> DiskCache::list() const {
  std::vector<CacheEntryInfo> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.directory, ec)) {
    if (!is_entry(e.path())) continue;
    auto bytes = read_file(e.path());
    if (!bytes) continue;
    CacheEntryInfo info;
    info.key = e.path().stem().string();
    info.file_bytes = bytes->size();
    std::error_code tec;
    info.last_use = e.last_write_time(tec);
    if (auto a = decode_entry(*bytes)) {
      info.kind = a->kind;
      info.metadata = std::move(a->metadata);
    } else {
      info.metadata = "DAMAGED: " + a.error().message();
    }
    out.push_back(std::move(info));
  }
  if (ec)
    return fail(errc::invalid_argument, fmt::format("cannot list '{}': {}", options_.directory.string(), ec.message()));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.last_use > b.last_use; });
  return out;
}

Status DiskCache::clear() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.directory, ec)) {
    const std::string fname = e.path().filename().string();
    if (fname.find(std::string(kEntrySuffix)) != std::string::npos) {
      std::error_code rec;
      fs::remove(e.path(), rec);
    }
  }
  if (ec)
    return fail(errc::invalid_argument,
                fmt::format("cannot clear '{}': {}", options_.directory.string(), ec.message()));
  return ok();
}

Result<bool> DiskCache::remove(const Digest& key) {
  std::error_code ec;
  const bool removed = fs::remove(entry_path(key), ec);
  if (ec)
    return fail(errc::invalid_argument, fmt::format("cannot remove '{}': {}", entry_path(key).string(), ec.message()));
  return removed;
}

}  // namespace cuactor::jit
