#include "cuactor/runtime/module_image.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>

namespace cuactor::runtime {
namespace {

std::atomic<std::uint64_t> g_next_image{1};

/// True for an ELF (cubin) or fatbin header; anything else is treated as PTX text.
bool is_binary(std::span<const std::byte> b) {
  const bool elf = b.size() >= 4 && b[0] == std::byte{0x7f} && b[1] == std::byte{'E'} && b[2] == std::byte{'L'} &&
                   b[3] == std::byte{'F'};
  const bool fatbin = b.size() >= 4 && b[0] == std::byte{0x50} && b[1] == std::byte{0xed} && b[2] == std::byte{0x55} &&
                      b[3] == std::byte{0xba};
  return elf || fatbin;
}

}  // namespace

ModuleImage::ModuleImage(std::vector<std::byte> bytes)
    : bytes_(std::move(bytes)), id_(g_next_image.fetch_add(1, std::memory_order_relaxed)) {
  if (!is_binary(bytes_) && (bytes_.empty() || bytes_.back() != std::byte{0})) bytes_.push_back(std::byte{0});
}

std::shared_ptr<const ModuleImage> ModuleImage::from_bytes(std::vector<std::byte> image) {
  return std::make_shared<const ModuleImage>(std::move(image));
}

std::shared_ptr<const ModuleImage> ModuleImage::from_ptx(std::string_view ptx) {
  std::vector<std::byte> b(ptx.size());
  std::memcpy(b.data(), ptx.data(), ptx.size());
  return from_bytes(std::move(b));
}

Result<std::shared_ptr<const ModuleImage>> ModuleImage::from_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail(errc::invalid_argument, fmt::format("ModuleImage: cannot read '{}'", path.string()));
  std::vector<char> chars((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(chars.size());
  std::memcpy(b.data(), chars.data(), chars.size());
  return from_bytes(std::move(b));
}

Result<std::shared_ptr<const gpu::Library>> ModuleImage::library() const {
  std::lock_guard lock(mutex_);
  if (!library_) {
    auto lib = gpu::Library::load_data(bytes_.data());
    if (!lib) return fail(lib.error());
    library_ = std::make_shared<const gpu::Library>(std::move(*lib));
  }
  return library_;
}

Result<gpu::Kernel> ModuleImage::kernel(const std::string& name) const {
  auto lib = library();
  if (!lib) return fail(lib.error());
  return (*lib)->kernel(name);
}

}  // namespace cuactor::runtime
