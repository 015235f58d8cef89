// Tensors from Python without copies: DLPack through nanobind's ndarray, or __cuda_array_interface__.
#include "tensor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <span>
#include <utility>
#include <vector>

namespace cuactor::pyext {
namespace {

/// DLPack type codes (dlpack.h, DLDataTypeCode; the fp8 ones since DLPack 1.1).
constexpr std::uint8_t kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kFloat8E4m3fn = 10, kFloat8E5m2 = 12;
/// DLPack device types (dlpack.h, DLDeviceType).
constexpr std::int32_t kCpu = 1, kCuda = 2, kCudaHost = 3, kCudaManaged = 13;

std::optional<DType> from_dlpack(std::uint8_t code, std::uint8_t bits) {
  switch (code) {
    case kFloat:
      return bits == 16   ? std::optional(DType::f16)
             : bits == 32 ? std::optional(DType::f32)
             : bits == 64 ? std::optional(DType::f64)
                          : std::nullopt;
    case kBfloat:
      return bits == 16 ? std::optional(DType::bf16) : std::nullopt;
    case kInt:
      return bits == 8    ? std::optional(DType::i8)
             : bits == 32 ? std::optional(DType::i32)
             : bits == 64 ? std::optional(DType::i64)
                          : std::nullopt;
    case kUInt:
      return bits == 8 ? std::optional(DType::u8) : std::nullopt;
    case kFloat8E4m3fn:
      return bits == 8 ? std::optional(DType::e4m3) : std::nullopt;
    case kFloat8E5m2:
      return bits == 8 ? std::optional(DType::e5m2) : std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace

DLPackType to_dlpack(DType t) noexcept {
  const auto bits = static_cast<std::uint8_t>(size_bits(t));
  switch (t) {
    case DType::bf16:
      return {kBfloat, bits};
    case DType::f16:
    case DType::f32:
    case DType::f64:
      return {kFloat, bits};
    case DType::i8:
    case DType::i32:
    case DType::i64:
      return {kInt, bits};
    case DType::e4m3:
      return {kFloat8E4m3fn, 8};
    case DType::e5m2:
      return {kFloat8E5m2, 8};
    default:
      return {kUInt, bits};
  }
}

namespace {

/// numpy typestr of __cuda_array_interface__ ("<f2", "|u1", ...) to a dtype.
std::optional<DType> from_typestr(const std::string& s) {
  if (s.size() < 3 || s[0] == '>') return std::nullopt;
  const std::string k = s.substr(1);
  if (k == "f2") return DType::f16;
  if (k == "f4") return DType::f32;
  if (k == "f8") return DType::f64;
  if (k == "i1") return DType::i8;
  if (k == "i4") return DType::i32;
  if (k == "i8") return DType::i64;
  if (k == "u1") return DType::u8;
  return std::nullopt;
}

void set_dtype(TensorArg& t, std::optional<DType> imported, std::optional<DType> as, const std::string& what,
               int bits) {
  t.stored = imported;
  if (as && (imported ? size_bits(*imported) : bits) == size_bits(*as)) {
    t.dtype = *as;  // same-size storage viewed as `as` (fp8 as uint8, bf16 as its uint16 bits)
    return;
  }
  if (!imported)
    raise(errc::invalid_argument, fmt::format("{}: element type {} is not one cuactor handles (f16, bf16, f32, f64, "
                                              "e4m3, e5m2, int8/32/64, uint8)",
                                              t.name, what));
  if (as)
    raise(errc::invalid_argument, fmt::format("{}: cannot view {} storage as {} (element sizes {} and {} bits)", t.name,
                                              name(*imported), name(*as), size_bits(*imported), size_bits(*as)));
  t.dtype = *imported;
}

void set_rank(TensorArg& t, std::size_t ndim) {
  if (ndim > TensorArg::max_rank)
    raise(errc::invalid_argument, fmt::format("{}: rank {} is more than cuactor's operands have (at most {})", t.name,
                                              ndim, TensorArg::max_rank));
  t.ndim = static_cast<int>(ndim);
}

/// An interned attribute name, made once (lookups on every operand of every call).
PyObject* interned(const char* name) {
  return PyUnicode_InternFromString(name);  // immortal for the process: never released
}

/// obj.name() without building a bound method.
nb::object call_method(nb::handle obj, PyObject* name) {
  PyObject* r = PyObject_CallMethodNoArgs(obj.ptr(), name);
  if (r == nullptr) throw nb::python_error();
  return nb::steal(r);
}

nb::object get_attr(nb::handle obj, PyObject* name) {
  PyObject* r = PyObject_GetAttr(obj.ptr(), name);
  if (r == nullptr) throw nb::python_error();
  return nb::steal(r);
}

/// torch.Tensor without DLPack: its attributes, read directly (PyTorch's __dlpack__ would order the
/// legacy default stream after the current one, which a capture cannot record, and costs more).
bool import_torch(nb::handle obj, TensorArg& t, std::optional<DType> as) {
  static PyObject* const kDtype = interned("dtype");
  static PyObject* const kShape = interned("shape");
  static PyObject* const kStride = interned("stride");
  static PyObject* const kDataPtr = interned("data_ptr");
  static PyObject* const kGetDevice = interned("get_device");
  static PyObject* const kIsCuda = interned("is_cuda");
  static PyObject* const kIsCpu = interned("is_cpu");
  const TorchTypes* torch = torch_types();
  if (torch == nullptr || !is_instance(obj, torch->tensor)) return false;
  nb::object dtype = get_attr(obj, kDtype);
  std::optional<DType> imported;
  for (const auto& [h, d] : torch->dtypes)
    if (h.is(dtype)) imported = d;
  set_dtype(t, imported, as, imported ? std::string() : nb::cast<std::string>(nb::str(dtype)), 0);  // named on errors
  nb::tuple shape = nb::cast<nb::tuple>(get_attr(obj, kShape));
  nb::tuple strides = nb::cast<nb::tuple>(call_method(obj, kStride));
  set_rank(t, shape.size());
  for (int i = 0; i < t.ndim; ++i) {
    const auto u = static_cast<std::size_t>(i);
    t.shape[u] = nb::cast<std::int64_t>(shape[u]);
    t.strides[u] = nb::cast<std::int64_t>(strides[u]);
  }
  t.data = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(call_method(obj, kDataPtr)));
  const bool cuda = nb::cast<bool>(get_attr(obj, kIsCuda));
  t.memory = cuda ? MemoryKind::cuda : nb::cast<bool>(get_attr(obj, kIsCpu)) ? MemoryKind::cpu : MemoryKind::other;
  t.device = cuda ? nb::cast<int>(call_method(obj, kGetDevice)) : -1;
  t.owner = nb::borrow(obj);
  return true;
}

bool import_dlpack(nb::handle obj, TensorArg& t, std::optional<DType> as) {
  // stream=-1: the producer must not order anything; the work runs on the caller's stream= argument.
  nb::object capsule;
  if (nb::hasattr(obj, "__dlpack__")) {
    try {
      capsule = obj.attr("__dlpack__")(nb::arg("stream") = -1);
    } catch (const nb::python_error&) {
      capsule = nb::object();  // a producer without the keyword (NumPy on the host takes no stream)
    }
  }
  nb::ndarray<> a;
  if (!nb::try_cast(capsule.is_valid() ? nb::handle(capsule) : obj, a, false)) return false;
  set_rank(t, a.ndim());
  const auto dt = a.dtype();
  set_dtype(t, dt.lanes == 1 ? from_dlpack(dt.code, dt.bits) : std::nullopt, as,
            fmt::format("(DLPack code {}, {} bits, {} lanes)", dt.code, dt.bits, dt.lanes),
            dt.lanes == 1 ? dt.bits : 0);
  for (int i = 0; i < t.ndim; ++i) {
    t.shape[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(i)));
    t.strides[static_cast<std::size_t>(i)] = a.stride(static_cast<std::size_t>(i));
  }
  t.data = a.data();
  const std::int32_t type = a.device_type();
  t.memory = type == kCuda || type == kCudaManaged ? MemoryKind::cuda
             : type == kCpu || type == kCudaHost   ? MemoryKind::cpu
                                                   : MemoryKind::other;
  t.device = t.memory == MemoryKind::cuda ? a.device_id() : -1;
  t.owner = nb::borrow(obj);  // not nb::cast(a): exporting `a` back to Python would try to copy it
  t.imported = std::move(a);
  return true;
}

bool import_cuda_array_interface(nb::handle obj, TensorArg& t, std::optional<DType> as) {
  if (!nb::hasattr(obj, "__cuda_array_interface__")) return false;
  nb::dict cai = nb::cast<nb::dict>(obj.attr("__cuda_array_interface__"));
  nb::tuple shape = nb::cast<nb::tuple>(cai["shape"]);
  set_rank(t, shape.size());
  const std::string typestr = nb::cast<std::string>(cai["typestr"]);
  set_dtype(t, from_typestr(typestr), as, fmt::format("'{}' (__cuda_array_interface__ typestr)", typestr), 0);
  const auto elem = static_cast<std::int64_t>(size_bits(t.dtype) / 8);
  nb::object strides = cai.contains("strides") ? nb::object(cai["strides"]) : nb::none();
  std::int64_t packed = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    const auto u = static_cast<std::size_t>(i);
    t.shape[u] = nb::cast<std::int64_t>(shape[u]);
    if (strides.is_none()) {
      t.strides[u] = packed;
    } else {
      const auto bytes = nb::cast<std::int64_t>(nb::cast<nb::tuple>(strides)[u]);
      if (bytes % elem != 0)
        raise(errc::invalid_argument,
              fmt::format("{}: stride of {} bytes in dimension {} is not a multiple of the element size {}", t.name,
                          bytes, i, elem));
      t.strides[u] = bytes / elem;
    }
    packed *= t.shape[u];
  }
  t.data = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(nb::cast<nb::tuple>(cai["data"])[0]));
  t.memory = MemoryKind::cuda;
  cudaPointerAttributes attr{};
  if (t.data != nullptr && cudaPointerGetAttributes(&attr, t.data) == cudaSuccess) {
    t.device = attr.device;
  } else {
    (void)cudaGetLastError();
    t.device = -1;
  }
  t.owner = nb::borrow(obj);
  return true;
}

}  // namespace

std::int64_t TensorArg::extent_bytes() const noexcept {
  std::int64_t last = 0;
  for (int i = 0; i < ndim; ++i) {
    const auto u = static_cast<std::size_t>(i);
    if (shape[u] == 0) return 0;
    last += (shape[u] - 1) * strides[u];
  }
  return (last + 1) * size_bits(dtype) / 8;
}

std::int64_t TensorArg::numel() const noexcept {
  std::int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[static_cast<std::size_t>(i)];
  return n;
}

std::string TensorArg::describe() const {
  const auto dims = std::span(shape.data(), static_cast<std::size_t>(ndim));
  const auto st = std::span(strides.data(), static_cast<std::size_t>(ndim));
  const std::string where = memory == MemoryKind::cuda  ? fmt::format("cuda:{}", device)
                            : memory == MemoryKind::cpu ? std::string("cpu")
                                                        : std::string("other memory");
  return fmt::format("{} ({}, shape ({}), strides ({}), {})", name, cuactor::name(dtype), fmt::join(dims, ", "),
                     fmt::join(st, ", "), where);
}

const TorchTypes* torch_types() {
  static TorchTypes* types = nullptr;  // built once with the GIL held; leaked on purpose (no teardown order)
  if (types != nullptr) return types;
  nb::handle modules = PyImport_GetModuleDict();
  if (!PyDict_Contains(modules.ptr(), nb::str("torch").ptr())) return nullptr;
  nb::module_ torch = nb::module_::import_("torch");
  nb::object c = torch.attr("_C");
  auto* t = new TorchTypes;
  t->tensor = torch.attr("Tensor").inc_ref();
  t->dtype = torch.attr("dtype").inc_ref();
  if (nb::hasattr(c, "_cuda_getCurrentRawStream")) t->current_stream = c.attr("_cuda_getCurrentRawStream").inc_ref();
  if (nb::hasattr(c, "_cuda_cudaCachingAllocator_raw_alloc") && nb::hasattr(c, "_cuda_cudaCachingAllocator_raw_delete"))
    t->raw_pair =
        nb::make_tuple(c.attr("_cuda_cudaCachingAllocator_raw_alloc"), c.attr("_cuda_cudaCachingAllocator_raw_delete"));
  const std::pair<const char*, DType> names[] = {
      {"bfloat16", DType::bf16},      {"float16", DType::f16},     {"float32", DType::f32}, {"float64", DType::f64},
      {"int32", DType::i32},          {"int64", DType::i64},       {"int8", DType::i8},     {"uint8", DType::u8},
      {"float8_e4m3fn", DType::e4m3}, {"float8_e5m2", DType::e5m2}};
  for (const auto& [n, d] : names)
    if (nb::hasattr(torch, n)) t->dtypes.emplace_back(torch.attr(n).inc_ref(), d);
  types = t;
  return types;
}

TensorArg import_tensor(nb::handle obj, const char* name, std::optional<DType> as) {
  TensorArg t;
  t.name = name;
  if (obj.is_none()) raise(errc::invalid_argument, fmt::format("{}: is None, a tensor is required", name));
  if (import_torch(obj, t, as) || import_dlpack(obj, t, as) || import_cuda_array_interface(obj, t, as)) return t;
  raise(errc::invalid_argument,
        fmt::format("{}: a {} is not a tensor: it implements neither __dlpack__ nor __cuda_array_interface__", name,
                    nb::cast<std::string>(nb::str(obj.type().attr("__name__")))));
}

std::optional<DType> torch_dtype(nb::handle dtype) {
  const TorchTypes* torch = torch_types();
  if (torch == nullptr) return std::nullopt;
  for (const auto& [h, d] : torch->dtypes)
    if (h.is(dtype)) return d;
  return std::nullopt;
}

TensorArg contiguous_torch_matrix(nb::handle obj, const char* name, DType dtype, std::int64_t rows, std::int64_t cols,
                                  int device) {
  static PyObject* const kDataPtr = interned("data_ptr");
  TensorArg t;
  t.name = name;
  t.dtype = dtype;
  t.ndim = 2;
  t.shape[0] = rows;
  t.shape[1] = cols;
  t.strides[0] = cols;
  t.strides[1] = 1;
  t.data = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(call_method(obj, kDataPtr)));
  t.memory = MemoryKind::cuda;
  t.device = device;
  t.owner = nb::borrow(obj);
  return t;
}

void require_cuda(const TensorArg& t) {
  if (t.memory != MemoryKind::cuda || t.device < 0)
    raise(errc::invalid_argument, fmt::format("{}: must be in CUDA device memory", t.describe()));
}

void require_rank(const TensorArg& t, int rank, const char* what) {
  if (t.ndim != rank)
    raise(errc::invalid_argument, fmt::format("{}: rank {}, {} needs rank {}", t.describe(), t.ndim, what, rank));
}

void require_dtype(const TensorArg& t, DType want, const char* rule) {
  if (t.dtype != want)
    raise(errc::invalid_argument,
          fmt::format("{}: dtype {}, {} (expected {})", t.describe(), name(t.dtype), rule, name(want)));
}

void require_same_device(const TensorArg& t, int device) {
  if (t.device != device)
    raise(errc::wrong_device,
          fmt::format("{}: on cuda:{}, but the operation runs on cuda:{} (every operand on one device)", t.describe(),
                      t.device, device));
}

DType dtype_from_name(const std::string& n) {
  std::string_view v = n;
  if (v.starts_with("torch.")) v.remove_prefix(6);  // str(torch.bfloat16)
  if (auto d = parse_dtype(v)) return *d;
  if (v == "int8") return DType::i8;
  if (v == "uint8") return DType::u8;
  raise(errc::invalid_argument,
        fmt::format("dtype '{}' is not one cuactor knows (bf16/bfloat16, f16/float16, f32/float32, e4m3/float8_e4m3fn, "
                    "e5m2, i32, ...)",
                    n));
}

}  // namespace cuactor::pyext
