/// @file
/// The device actor's built-in operations as plain data ([R10]): allocate, copies, fill and kernel
/// launch. The in-process actor runs them with execute(); an isolated backend serialises the same
/// values to its worker process, which runs them with the same execute().
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <boost/container/small_vector.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "cuactor/gpu/module.hpp"
#include "cuactor/runtime/gpu_ref.hpp"
#include "cuactor/runtime/host_buffer.hpp"
#include "cuactor/runtime/module_image.hpp"

namespace cuactor::runtime {

class OpContext;

/// Pointer argument of a kernel launch that the kernel only reads (`in(x)`); a plain GpuRef argument
/// is treated as read and written.
template <class T>
struct InArg {
  GpuRef<T> ref;
};
/// Marks `ref` as read-only for KernelArgs.
template <class T>
InArg<T> in(GpuRef<T> ref) {
  return {std::move(ref)};
}

/// Arguments of a kernel launch: GpuRefs (validated on the actor's thread and passed as T*) and
/// trivially copyable values, each checked against the kernel's parameter sizes.
class KernelArgs {
 public:
  /// Builds the argument list in parameter order.
  template <class... A>
  static KernelArgs make(const A&... args) {
    KernelArgs k;
    (k.push(args), ...);
    return k;
  }
  /// Appends a read-write buffer argument.
  template <class T>
  void push(const GpuRef<T>& ref) {
    push_buffer(ref.allocation(), true);
  }
  /// Appends a read-only buffer argument.
  template <class T>
  void push(const InArg<T>& arg) {
    push_buffer(arg.ref.allocation(), false);
  }
  /// Appends a value argument.
  template <class T>
  requires std::is_trivially_copyable_v<T>
  void push(const T& value) { push_value(&value, sizeof(T), alignof(T)); }

  /// Where one argument lives in storage().
  struct Slot {
    std::size_t offset = 0;  ///< Byte offset in storage().
    std::size_t size = 0;    ///< Bytes (sizeof(void*) for buffers).
    int buffer = -1;         ///< Index into buffers(), or -1 for a value.
  };
  /// Argument slots in parameter order.
  [[nodiscard]] std::span<const Slot> slots() const noexcept { return slots_; }
  /// Buffer arguments and whether each is written.
  [[nodiscard]] std::span<const std::pair<std::shared_ptr<DeviceAllocation>, bool>> buffers() const noexcept {
    return buffers_;
  }
  /// Packed argument bytes (buffer slots are filled in at launch).
  [[nodiscard]] std::span<const std::byte> storage() const noexcept { return storage_; }

 private:
  void push_buffer(std::shared_ptr<DeviceAllocation> allocation, bool written);
  void push_value(const void* value, std::size_t size, std::size_t align);

  // Inline room for typical kernels (a handful of arguments): building a launch request allocates
  // nothing here, and nothing is freed later on the thread that answers it.
  boost::container::small_vector<Slot, 8> slots_;
  boost::container::small_vector<std::pair<std::shared_ptr<DeviceAllocation>, bool>, 4> buffers_;
  boost::container::small_vector<std::byte, 64> storage_;
};

/// Grid, block and dynamic shared memory of a launch on the actor's stream.
struct LaunchShape {
  dim3 grid{1, 1, 1};
  dim3 block{1, 1, 1};
  unsigned shared_bytes = 0;
};

/// Host bytes a command reads; `owner` keeps them alive until the device is done with them.
struct HostSource {
  std::shared_ptr<const void> owner;
  const void* data = nullptr;
  std::size_t bytes = 0;
  bool pinned = false;                      ///< Page-locked: the copy is asynchronous.
  const HostBuffer* host_buffer = nullptr;  ///< Set when the bytes are (the start of) a HostBuffer `owner` holds.
};
/// Host bytes a command writes; `owner` keeps them alive until the data has arrived.
struct HostSink {
  std::shared_ptr<void> owner;
  void* data = nullptr;
  std::size_t bytes = 0;
  bool pinned = false;                      ///< Page-locked: the copy is asynchronous.
  const HostBuffer* host_buffer = nullptr;  ///< Set when the bytes are (the start of) a HostBuffer `owner` holds.
};

/// Allocates `bytes` of page-locked host memory for copies (HostBuffer); the result is the buffer.
struct AllocateHostCmd {
  std::size_t bytes = 0;
};

/// Allocates `bytes` of device memory in stream order; the result is the allocation.
struct AllocateCmd {
  std::size_t bytes = 0;
};
/// Copies all of `src` to the start of `dst` (src.bytes must fit).
struct CopyToDeviceCmd {
  std::shared_ptr<DeviceAllocation> dst;
  HostSource src;
};
/// Copies min(src bytes, dst.bytes) bytes of `src` into `dst`.
struct CopyToHostCmd {
  std::shared_ptr<DeviceAllocation> src;
  HostSink dst;
};
/// Writes `count` elements of `element_bytes` (1, 2, 4, 8 or 16) bytes of `pattern` to `dst`.
struct FillCmd {
  std::shared_ptr<DeviceAllocation> dst;
  std::size_t count = 0;
  std::uint8_t element_bytes = 0;
  std::array<std::byte, 16> pattern{};
};
/// Launches `kernel` of `library` (kept alive until completion; may be null if the caller keeps the
/// kernel's library alive) with `args` in `shape`.
struct LaunchCmd {
  std::shared_ptr<const gpu::Library> library;
  gpu::Kernel kernel;
  LaunchShape shape;
  KernelArgs args;
};

/// Launches kernel `kernel` of `module` with `args` in `shape`: the launch every backend runs, an
/// isolated worker included (LaunchCmd holds a kernel loaded in this process, which a worker cannot use).
struct LaunchModuleCmd {
  std::shared_ptr<const ModuleImage> module;
  std::string kernel;
  LaunchShape shape;
  KernelArgs args;
};

/// A request for a handler registered in an isolated worker (runtime/worker_op.hpp): how the layers
/// above the runtime (dense and grouped GEMM, capture and replay) cross to the worker without the
/// runtime knowing them. Only the isolated backend runs it; the in-process actor runs the same
/// request's closure instead (DeviceActor::submit_portable).
struct WorkerOpCmd {
  std::uint16_t op = 0;            ///< Handler id (worker_op.hpp lists the ranges of each layer); 0 is none.
  std::vector<std::byte> payload;  ///< The handler's arguments, encoded with runtime::wire::Writer.
  /// Buffer operands in the handler's order, each with whether it is written; every one is also in the
  /// request's Reads or Writes (submit_portable derives those from this list).
  std::vector<std::pair<std::shared_ptr<DeviceAllocation>, bool>> buffers;
  /// Worker generation of the objects the payload names by id (a graph), 0 when it names none; the
  /// request answers `stale_handle` once that worker is gone.
  std::uint64_t generation = 0;
};

/// One built-in operation.
using Command = std::variant<AllocateCmd, CopyToDeviceCmd, CopyToHostCmd, FillCmd, LaunchCmd, LaunchModuleCmd,
                             WorkerOpCmd, AllocateHostCmd>;
/// What a command produces: nothing, the new allocation (AllocateCmd), a worker handler's reply
/// bytes (WorkerOpCmd) or the new host buffer (AllocateHostCmd).
using CommandResult = std::variant<std::monostate, std::shared_ptr<DeviceAllocation>, std::vector<std::byte>,
                                   std::shared_ptr<HostBuffer>>;

/// A FillCmd for `count` elements of `value`.
template <class T>
requires std::is_trivially_copyable_v<T> FillCmd make_fill(std::shared_ptr<DeviceAllocation> dst, std::size_t count,
                                                           const T& value) {
  static_assert(sizeof(T) <= 16, "fill: element types of at most 16 bytes");
  FillCmd f{std::move(dst), count, static_cast<std::uint8_t>(sizeof(T)), {}};
  std::memcpy(f.pattern.data(), &value, sizeof(T));
  return f;
}

/// Runs `command` on ctx's stream (buffers were validated and ordered by the actor beforehand).
/// Errors name the command, the value and the rule.
Result<CommandResult> execute(const Command& command, OpContext& ctx);

/// Enqueues a fill of `count` elements of `element_bytes` bytes with the pattern at `value`
/// (1, 2, 4, 8 or 16 bytes) on `stream`.
Status enqueue_fill(void* dst, std::size_t count, const void* value, std::size_t element_bytes, cudaStream_t stream);

}  // namespace cuactor::runtime
