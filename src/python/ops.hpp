/// @file
/// Internal to the Python extension module: the pieces the functional operations (ops.cpp) and the
/// plan objects (plans.cpp) share — device facts, the current-device guard, workspaces, and the
/// import and validation of grouped GEMM operands.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>

#include "cuactor/core/arch.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"
#include "tensor.hpp"

namespace cuactor::pyext {

/// What plans need to know about a device (queried once per device and cached).
struct DeviceFacts {
  GpuArch arch;
  int sm_count = 0;
};
/// The facts of CUDA device `device`; `no_device` when it does not exist.
const DeviceFacts& device_facts(int device);

/// Makes `device` current for the scope (kernels launch on the current device) and restores the
/// previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

/// Device scratch memory for one launch, on the current device: from the caller's allocator, either
/// a stream-ordered raw pair (raw_alloc(nbytes, stream) -> address, raw_delete(address): PyTorch's
/// caching allocator for torch inputs, so a capture draws from the graph's pool) or a callable
/// alloc(nbytes) returning a tensor; without one, stream-ordered from the device's default pool
/// (cudaMallocAsync, freed with cudaFreeAsync after the launch: also capturable). Nothing is
/// allocated for 0 bytes (data() is null).
class Workspace {
 public:
  Workspace(std::size_t bytes, nb::handle alloc, cudaStream_t stream, int device);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  bool owned_ = false;
  nb::object tensor_;   ///< The callable's tensor, held until the launch is enqueued.
  nb::object release_;  ///< The raw pair's delete.
};

/// Where an operation runs and where its workspace comes from.
struct Launch {
  cudaStream_t stream = nullptr;
  nb::handle alloc;  ///< Borrowed: the caller's allocator, torch's raw pair, or None (the device's pool).
};

/// The stream and allocator arguments of an operation whose first operand is `operand`, checked before
/// the operands are (so the rule holds without a GPU): `stream` is a cudaStream_t's value, or
/// None for torch tensors, which then run on torch's current stream; `alloc` is the caller's, or for
/// torch tensors without one the caching allocator's raw pair (a capture then draws from the graph's
/// pool). `invalid_argument` for stream=None with other tensors: they carry no current stream. The one
/// place that asks torch for a stream or an allocator.
class LaunchSource {
 public:
  LaunchSource(std::optional<std::uintptr_t> stream, nb::handle alloc, nb::handle operand);
  /// The launch on CUDA device `device` (the operands' device).
  [[nodiscard]] Launch on(int device) const;

 private:
  std::optional<cudaStream_t> stream_;  ///< Given by the caller; else torch's current stream.
  nb::handle alloc_;
};

/// The operands of a grouped GEMM in torch._grouped_mm's 2-D x 3-D form, imported and validated.
struct GroupedOperands {
  TensorArg a;                       ///< (T, K): the rows of every group stacked.
  TensorArg b;                       ///< (G, K, N): one matrix per group, K or N contiguous.
  TensorArg offs;                    ///< (G,) int32: cumulative end row of each group, in device memory.
  TensorArg out;                     ///< (T, N), rows contiguous.
  std::optional<TensorArg> scale_a;  ///< fp8: 1 or G float32 values; row-wise: T.
  std::optional<TensorArg> scale_b;  ///< fp8: G float32 values; row-wise: (G, N).
  bool rowwise = false;              ///< Row-wise fp8 scales (a 2-D scale_b): the kernels' epilogue tree applies them.
  kernels::MatrixLayout layout_b = kernels::MatrixLayout::col;
  std::int64_t ldb = 0;
  int device = 0;
};

/// Imports and checks a, b, offs, out (and the fp8 scales) as torch._grouped_mm's 2-D x 3-D case;
/// `ab_dtype` reinterprets a's and b's storage (fp8 passed as uint8). `invalid_argument` /
/// `wrong_device` / `unsupported` naming the operand, its value and the rule.
GroupedOperands import_grouped(nb::handle a, nb::handle b, nb::handle offs, nb::handle out, nb::handle scale_a,
                               nb::handle scale_b, std::optional<DType> ab_dtype);

/// The checks of import_grouped on operands already imported (`g.device` is set here).
void check_grouped(GroupedOperands& g, nb::handle scale_a, nb::handle scale_b);

/// The plan specification of grouped operands (device facts filled in; `sku` overrides the choice).
kernels::GroupedGemmSpec grouped_spec(const GroupedOperands& ops, std::optional<kernels::GemmSku> sku = std::nullopt);
/// The device-sized description ([K6]) of grouped operands: the group rows are read from offs when
/// the work runs, so nothing is synchronised and one capture serves every routing.
kernels::DeviceSizedGroups device_sized(const GroupedOperands& ops);
/// The fp8 scales of grouped operands (alpha = 1, beta = 0).
kernels::GroupedScalars grouped_scalars(const GroupedOperands& ops);

}  // namespace cuactor::pyext
