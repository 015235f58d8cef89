// The built-in commands, run by one function for every backend that executes them.
#include "cuactor/runtime/commands.hpp"

#include <fmt/format.h>

#include <bit>
#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <cstring>
#include <optional>

#include "cuactor/core/driver_api.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/runtime/op_context.hpp"
#include "runtime/kernels.hpp"

namespace cuactor::runtime {
namespace {

Status copy_checked(OpContext& ctx, void* dst, std::size_t dst_bytes, const void* src, std::size_t bytes,
                    std::string_view what) {
  if (bytes > dst_bytes)
    return fail(errc::invalid_argument,
                fmt::format("{}: {} bytes do not fit the {}-byte destination", what, bytes, dst_bytes));
  if (bytes == 0) return ok();
  return gpu::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.stream()),
                    [&] { return fmt::format("{}: cudaMemcpyAsync({} bytes)", what, bytes); });
}

Result<CommandResult> run(const AllocateCmd& cmd, OpContext& ctx) {
  if (cmd.bytes == SIZE_MAX) return fail(errc::invalid_argument, "allocate: the element count overflows size_t");
  auto a = ctx.allocate_bytes(cmd.bytes);
  if (!a) return fail(a.error());
  return CommandResult(std::move(*a));
}

Result<CommandResult> run(const CopyToDeviceCmd& cmd, OpContext& ctx) {
  const char* what = cmd.src.pinned ? "copy_to_device(pinned)" : "copy_to_device";
  if (!cmd.src.owner) return fail(errc::invalid_argument, fmt::format("{}: null host buffer", what));
  CUACTOR_TRY(copy_checked(ctx, cmd.dst->data(), cmd.dst->bytes(), cmd.src.data, cmd.src.bytes, what));
  ctx.keep_alive(cmd.src.owner);
  return CommandResult{};
}

Result<CommandResult> run(const CopyToHostCmd& cmd, OpContext& ctx) {
  const char* what = cmd.dst.pinned ? "copy_to_host(pinned)" : "copy_to_host";
  if (!cmd.dst.owner) return fail(errc::invalid_argument, fmt::format("{}: null host buffer", what));
  CUACTOR_TRY(
      copy_checked(ctx, cmd.dst.data, cmd.dst.bytes, cmd.src->data(), std::min(cmd.src->bytes(), cmd.dst.bytes), what));
  ctx.keep_alive(cmd.dst.owner);
  return CommandResult{};
}

Result<CommandResult> run(const FillCmd& cmd, OpContext& ctx) {
  if (cmd.count > cmd.dst->bytes() / std::max<std::size_t>(cmd.element_bytes, 1))
    return fail(errc::invalid_argument, fmt::format("fill: {} elements of {} bytes exceed the {}-byte buffer",
                                                    cmd.count, cmd.element_bytes, cmd.dst->bytes()));
  CUACTOR_TRY(enqueue_fill(cmd.dst->data(), cmd.count, cmd.pattern.data(), cmd.element_bytes, ctx.stream()));
  return CommandResult{};
}

Result<CommandResult> run(const LaunchCmd& cmd, OpContext& ctx) {
  const auto& storage = cmd.args.storage();
  const auto& slots = cmd.args.slots();
  // The packed arguments with the buffers' device addresses filled in.
  // Small inline buffers: a launch is a hot path, and typical kernels take a handful of arguments.
  boost::container::small_vector<std::byte, 256> packed(storage.begin(), storage.end());
  boost::container::small_vector<void*, 16> pointers(slots.size());
  boost::container::small_vector<std::size_t, 16> sizes(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const auto& slot = slots[i];
    if (slot.buffer >= 0) {
      void* device_ptr = cmd.args.buffers()[static_cast<std::size_t>(slot.buffer)].first->data();
      std::memcpy(packed.data() + slot.offset, &device_ptr, sizeof(void*));
    }
    pointers[i] = packed.data() + slot.offset;
    sizes[i] = slot.size;
  }
  gpu::LaunchConfig config{cmd.shape.grid, cmd.shape.block, cmd.shape.shared_bytes, ctx.stream()};
  // Explicit spans: a vector would select launch()'s variadic typed overload.
  CUACTOR_TRY(gpu::launch(cmd.kernel, config, std::span<void* const>(pointers), std::span<const std::size_t>(sizes)));
  // Outside a capture the request's record, which holds this command (or, for LaunchModuleCmd, the
  // module that owns the library), lives until the work completed; a captured graph outlives the
  // record, so it takes the library along.
  if (cmd.library && ctx.capturing()) ctx.keep_alive(cmd.library);
  return CommandResult{};
}

Result<CommandResult> run(const LaunchModuleCmd& cmd, OpContext& ctx) {
  if (!cmd.module) return fail(errc::invalid_argument, fmt::format("launch {}: null module image", cmd.kernel));
  auto library = cmd.module->library();
  if (!library) return fail(library.error());
  auto kernel = (*library)->kernel(cmd.kernel);
  if (!kernel) return fail(kernel.error());
  return run(LaunchCmd{*library, std::move(*kernel), cmd.shape, cmd.args}, ctx);
}

Result<CommandResult> run(const AllocateHostCmd& cmd, OpContext&) {
  if (cmd.bytes == 0) return fail(errc::invalid_argument, "allocate_host: 0 bytes; a host buffer needs at least 1");
  auto pinned = gpu::PinnedBuffer::allocate(cmd.bytes);
  if (!pinned) return fail(pinned.error());
  auto storage = std::make_shared<gpu::PinnedBuffer>(std::move(*pinned));
  auto* data = static_cast<std::byte*>(storage->data());
  return CommandResult(std::make_shared<HostBuffer>(std::move(storage), data, cmd.bytes));
}

Result<CommandResult> run(const WorkerOpCmd& cmd, OpContext&) {
  // Requests that carry one (submit_portable) run their closure in-process instead of this command.
  return fail(
      errc::unsupported,
      fmt::format("worker operation {} runs only in an isolated worker (ActorOptions::isolation = worker)", cmd.op));
}

/// A fill's pattern as the word a driver memset repeats.
struct MemsetWord {
  std::size_t bytes;    ///< 1, 2 or 4
  std::uint32_t value;  ///< in its low `bytes` bytes
};

/// The widest word (4, 2 or 1 bytes) whose repetition is the fill's pattern, if any (the destination, aligned to its
/// elements, is aligned to the word too). Such fills go to the driver's memset: it enqueues one for about a third of a
/// kernel launch's host time (0.9-1.3 against 3.6-4.6 us per call on an H100 virtual machine, session 26), and its
/// device time is no worse. Other patterns (8- or 16-byte elements whose 4-byte halves differ) take the fill kernel.
std::optional<MemsetWord> memset_word(const void* value, std::size_t element_bytes) {
  const DriverApi& driver = driver_api();
  if (!driver.memset_d8_async || !driver.memset_d16_async || !driver.memset_d32_async || !driver.ctx_get_current)
    return std::nullopt;
  // The driver's memset needs a current context; the runtime's launch makes the primary one current itself (a
  // caller's first CUDA call may be this fill).
  CUcontext current = nullptr;
  if (driver.ctx_get_current(&current) != CUDA_SUCCESS || current == nullptr) return std::nullopt;
  const auto* pattern = static_cast<const unsigned char*>(value);
  for (const std::size_t bytes : {std::size_t{4}, std::size_t{2}, std::size_t{1}}) {
    if (bytes > element_bytes) continue;
    bool repeats = true;
    for (std::size_t i = bytes; i < element_bytes && repeats; ++i) repeats = pattern[i] == pattern[i % bytes];
    if (!repeats) continue;
    std::uint32_t word = 0;
    static_assert(std::endian::native == std::endian::little, "the word's low bytes are the pattern's first");
    std::memcpy(&word, pattern, bytes);
    return MemsetWord{bytes, word};
  }
  return std::nullopt;
}

}  // namespace

Result<CommandResult> execute(const Command& command, OpContext& ctx) {
  return std::visit([&](const auto& cmd) { return run(cmd, ctx); }, command);
}

Status enqueue_fill(void* dst, std::size_t count, const void* value, std::size_t element_bytes, cudaStream_t stream) {
  if (element_bytes != 1 && element_bytes != 2 && element_bytes != 4 && element_bytes != 8 && element_bytes != 16)
    return fail(errc::unsupported,
                fmt::format("fill: element size {} bytes; supported: 1, 2, 4, 8, 16", element_bytes));
  if (reinterpret_cast<std::uintptr_t>(dst) % element_bytes != 0)
    return fail(errc::invalid_argument,
                fmt::format("fill: destination {} is not aligned to its {}-byte elements", dst, element_bytes));
  if (count > SIZE_MAX / element_bytes)
    return fail(errc::invalid_argument,
                fmt::format("fill: {} elements of {} bytes overflow the address space", count, element_bytes));
  auto describe = [&] { return fmt::format("fill({} elements of {} bytes)", count, element_bytes); };
  if (count == 0) return ok();
  if (const auto word = memset_word(value, element_bytes)) {
    const DriverApi& driver = driver_api();
    const auto ptr = reinterpret_cast<CUdeviceptr>(dst);
    const std::size_t words = count * (element_bytes / word->bytes);
    const auto cu_stream = static_cast<CUstream>(stream);
    switch (word->bytes) {
      case 4:
        return gpu::check(driver.memset_d32_async(ptr, word->value, words, cu_stream), describe);
      case 2:
        return gpu::check(driver.memset_d16_async(ptr, static_cast<unsigned short>(word->value), words, cu_stream),
                          describe);
      default:
        return gpu::check(driver.memset_d8_async(ptr, static_cast<unsigned char>(word->value), words, cu_stream),
                          describe);
    }
  }
  return gpu::check(kernels::launch_fill(dst, count, value, element_bytes, stream), describe);
}

void KernelArgs::push_buffer(std::shared_ptr<DeviceAllocation> allocation, bool written) {
  const std::size_t offset = (storage_.size() + alignof(void*) - 1) / alignof(void*) * alignof(void*);
  storage_.resize(offset + sizeof(void*));
  slots_.push_back({offset, sizeof(void*), static_cast<int>(buffers_.size())});
  buffers_.emplace_back(std::move(allocation), written);
}

void KernelArgs::push_value(const void* value, std::size_t size, std::size_t align) {
  const std::size_t offset = (storage_.size() + align - 1) / align * align;
  storage_.resize(offset + size);
  std::memcpy(storage_.data() + offset, value, size);
  slots_.push_back({offset, size, -1});
}

}  // namespace cuactor::runtime
