/// @file
/// Internal to the Python extension module: a borrowed view of a tensor handed in from Python
/// (DLPack `__dlpack__` — PyTorch, CuPy, JAX, NumPy — or `__cuda_array_interface__` — Numba and
/// others), never a copy, and the checks every operation applies to its operands ([E2]: each names
/// the operand, the value and the rule).
#pragma once

#include <cuda_runtime_api.h>
#include <nanobind/ndarray.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "cuactor/core/dtype.hpp"

namespace cuactor::pyext {

/// Where a tensor's memory lives (DLPack device types that matter here).
enum class MemoryKind { cpu, cuda, other };

/// A tensor's address, element type, shape and strides (in elements), borrowed from its Python
/// object, which `owner` keeps alive while this view lives.
struct TensorArg {
  static constexpr int max_rank = 4;
  std::string name;  ///< Operand name used in error messages ("a", "b", "offs", ...).
  void* data = nullptr;
  DType dtype = DType::f32;
  std::optional<DType> stored;  ///< The producer's element type before a reinterpretation (none if unknown).
  int ndim = 0;
  std::array<std::int64_t, max_rank> shape{};
  std::array<std::int64_t, max_rank> strides{};
  MemoryKind memory = MemoryKind::other;
  int device = -1;  ///< CUDA ordinal for cuda memory, -1 otherwise.
  nb::object owner;
  nb::ndarray<> imported;  ///< A DLPack import, kept alive with the call (its deleter frees a raw capsule's memory).

  /// Bytes from data to one past the last element the shape and strides address (0 when empty).
  [[nodiscard]] std::int64_t extent_bytes() const noexcept;
  /// Number of elements.
  [[nodiscard]] std::int64_t numel() const noexcept;
  /// "a (bf16, shape (64, 128), strides (128, 1), cuda:0)" for messages.
  [[nodiscard]] std::string describe() const;
};

/// Imports `obj` without copying: torch tensors directly, else DLPack, then
/// `__cuda_array_interface__`. `as` reinterprets the element type (e.g. uint8 storage of fp8 values,
/// uint16 bits of bf16 values); its size must equal the imported one's.
/// `invalid_argument` naming the operand when `obj` is neither, or its dtype or rank is not one
/// cuactor handles (rank 0-4).
TensorArg import_tensor(nb::handle obj, const char* name, std::optional<DType> as = std::nullopt);

/// isinstance(obj, type); raises the Python error when the check itself fails.
inline bool is_instance(nb::handle obj, nb::handle type) {
  const int r = PyObject_IsInstance(obj.ptr(), type.ptr());
  if (r < 0) throw nb::python_error();
  return r == 1;
}

/// PyTorch's types and the callables cuactor uses, looked up once torch is imported (never imported
/// here); members that this torch lacks stay empty.
struct TorchTypes {
  nb::handle tensor;                                 ///< torch.Tensor
  nb::handle dtype;                                  ///< torch.dtype
  std::vector<std::pair<nb::handle, DType>> dtypes;  ///< torch dtypes cuactor knows, with their DType
  nb::handle current_stream;                         ///< torch._C._cuda_getCurrentRawStream(index) -> int
  nb::object raw_pair;  ///< (raw_alloc, raw_delete) of the CUDA caching allocator, or invalid
};
/// The torch types, or null while torch is not imported. Call with the GIL held.
const TorchTypes* torch_types();

/// The cuactor dtype of a torch.dtype object; nullopt for other objects, dtypes cuactor lacks, or
/// when torch is not imported.
std::optional<DType> torch_dtype(nb::handle dtype);
/// A rows x cols row-major contiguous CUDA tensor this module has just made (a.new_empty) on
/// `device`, described without reading its attributes: only its address is asked for. Both extents
/// must be at least 1 (torch gives empty tensors other strides).
TensorArg contiguous_torch_matrix(nb::handle obj, const char* name, DType dtype, std::int64_t rows, std::int64_t cols,
                                  int device);

/// Checks that `t` lives in CUDA device memory; `invalid_argument` naming where it lives otherwise.
void require_cuda(const TensorArg& t);
/// Checks the rank; `invalid_argument` naming the operand, its shape and the rank expected.
void require_rank(const TensorArg& t, int rank, const char* what);
/// Checks the element type; `invalid_argument` naming the operand, its dtype and the one expected.
void require_dtype(const TensorArg& t, DType want, const char* rule);
/// Checks that every operand is on `device`; `wrong_device` naming the operand otherwise.
void require_same_device(const TensorArg& t, int device);

/// The DLPack type of a cuactor dtype, for exporting a buffer: {type code, bits}. The inverse of
/// the import mapping; types DLPack has no code for (tf32, e2m1, u8) export as unsigned integers.
struct DLPackType {
  std::uint8_t code;
  std::uint8_t bits;
};
DLPackType to_dlpack(DType t) noexcept;

/// The cuactor dtype of a name ("bf16", "float16", "float8_e4m3fn", ...); `invalid_argument` otherwise.
DType dtype_from_name(const std::string& name);

/// The stream handle Python passed (an integer: cudaStream_t's value; 0 = legacy default stream).
inline cudaStream_t stream_from(std::uintptr_t handle) noexcept {
  return reinterpret_cast<cudaStream_t>(handle);
}

}  // namespace cuactor::pyext
