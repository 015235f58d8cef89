/// @file
/// A kernel image (cubin, fatbin or PTX) as bytes that every device-actor backend can launch from
/// ([R10]): the in-process actor loads it once (cuLibraryLoadData), an isolated worker receives the
/// bytes once per worker process and is asked for kernels by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "cuactor/gpu/module.hpp"

namespace cuactor::runtime {

/// Immutable image bytes plus the library loaded from them in this process on first use. Thread-safe.
class ModuleImage {
 public:
  /// An image from bytes (cubin or fatbin as is; PTX text gets its terminating NUL added).
  static std::shared_ptr<const ModuleImage> from_bytes(std::vector<std::byte> image);
  /// An image from PTX text.
  static std::shared_ptr<const ModuleImage> from_ptx(std::string_view ptx);
  /// An image read from a file (cubin, fatbin or PTX); `not_found` naming the path when unreadable.
  static Result<std::shared_ptr<const ModuleImage>> from_file(const std::filesystem::path& path);

  /// The bytes (PTX NUL-terminated).
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return bytes_; }
  /// A process-unique id (keys caches of loaded modules, e.g. per worker process).
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  /// The kernel `name` from the library loaded in this process (loaded on the first call).
  Result<gpu::Kernel> kernel(const std::string& name) const;
  /// The library loaded in this process (on the first call), kept alive by the image.
  Result<std::shared_ptr<const gpu::Library>> library() const;

  explicit ModuleImage(std::vector<std::byte> bytes);

 private:
  std::vector<std::byte> bytes_;
  std::uint64_t id_;
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const gpu::Library> library_;
};

}  // namespace cuactor::runtime
