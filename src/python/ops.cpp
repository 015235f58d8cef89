// Functional operations on tensors: mm (dense and batched GEMM through GemmPlan) and grouped_mm
// (torch._grouped_mm's 2-D x 3-D case through GroupedGemmPlan with device-resident offsets). Every
// launch goes onto the caller's stream; nothing allocates outside stream order or synchronises, so
// torch.cuda.graph captures them.
#include "ops.hpp"

#include <fmt/format.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <array>
#include <memory>
#include <mutex>

#include "cuactor/core/lru_cache.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/jit/tuning.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "cuactor/kernels/grouped_plan_cache.hpp"
#include "cuactor/kernels/moe_ffn.hpp"

namespace cuactor::pyext {
namespace {

constexpr int kMaxDevices = 64;

kernels::GemmPlanCache& dense_plans() {
  // Consults this machine's tuning database (cuactor tune gemm) before the heuristic.
  static kernels::GemmPlanCache cache(64, jit::default_tuned_planner());
  return cache;
}

kernels::GroupedPlanCache& grouped_plans() {
  // Consults this machine's tuning database (cuactor tune grouped) before the heuristic.
  static kernels::GroupedPlanCache cache(64, jit::default_tuned_grouped_planner());
  return cache;
}

/// Expert FFN plans by their whole spec (two grouped plans each: made once per configuration).
LruCache<kernels::MoeFfnSpec, kernels::MoeExpertFfn>& moe_plans() {
  static LruCache<kernels::MoeFfnSpec, kernels::MoeExpertFfn> cache(64);
  return cache;
}

/// How a matrix (the last two dimensions of `t`) is stored: row-major with leading dimension `ld`
/// (last dimension contiguous) or column-major; nullopt when neither dimension is contiguous.
struct MatrixView {
  kernels::MatrixLayout layout = kernels::MatrixLayout::row;
  std::int64_t ld = 0;
};

std::optional<MatrixView> matrix_view(const TensorArg& t) {
  const auto r = static_cast<std::size_t>(t.ndim - 2), c = static_cast<std::size_t>(t.ndim - 1);
  const std::int64_t rows = t.shape[r], cols = t.shape[c], sr = t.strides[r], sc = t.strides[c];
  if (sc == 1 || cols == 1) return MatrixView{kernels::MatrixLayout::row, rows <= 1 ? cols : sr};
  if (sr == 1 || rows == 1) return MatrixView{kernels::MatrixLayout::col, cols <= 1 ? rows : sc};
  return std::nullopt;
}

MatrixView require_matrix(const TensorArg& t, bool row_only) {
  auto v = matrix_view(t);
  if (!v || (row_only && v->layout != kernels::MatrixLayout::row))
    raise(errc::invalid_argument,
          fmt::format("{}: {} (a stride of 1 in the {} dimension; call .contiguous() first)", t.describe(),
                      row_only ? "rows must be contiguous" : "one of the last two dimensions must be contiguous",
                      row_only ? "last" : "last or second-to-last"));
  return *v;
}

void require_scale(const TensorArg& s, std::int64_t group_count, bool allow_single) {
  require_cuda(s);
  require_dtype(s, DType::f32, "fp8 scales are float32");
  const std::int64_t n = s.numel();
  if (s.ndim > 1 || !(n == group_count || (allow_single && n == 1)) || (s.ndim == 1 && n > 1 && s.strides[0] != 1))
    raise(errc::unsupported,
          fmt::format("{}: per-tensor fp8 scales are {} contiguous values; row-wise scales are scale_a (T,) with "
                      "scale_b (G, N) (torch._scaled_grouped_mm's form); block-wise scales (SPEC [K10]) are not in "
                      "the library",
                      s.describe(),
                      allow_single ? fmt::format("1 or G={}", group_count) : fmt::format("G={}", group_count)));
}

/// Checks that `t` is a contiguous CUDA tensor of rank dims.size() with the given dims (-1: any) on `device`.
void require_contiguous(const TensorArg& t, std::initializer_list<std::int64_t> dims, int device) {
  require_cuda(t);
  require_same_device(t, device);
  require_rank(t, static_cast<int>(dims.size()), t.name.c_str());
  std::int64_t expected_stride = 1;
  for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
    const std::int64_t want = dims.begin()[i];
    if (want >= 0 && t.shape[static_cast<std::size_t>(i)] != want)
      raise(errc::invalid_argument, fmt::format("{}: dimension {} must be {}", t.describe(), i, want));
    if (t.shape[static_cast<std::size_t>(i)] > 1 && t.strides[static_cast<std::size_t>(i)] != expected_stride)
      raise(errc::invalid_argument, fmt::format("{}: must be contiguous (call .contiguous())", t.describe()));
    expected_stride *= t.shape[static_cast<std::size_t>(i)];
  }
}

/// A contiguous tensor of `rank` with the given dims (-1: any) on `device`.
TensorArg contiguous_operand(nb::handle obj, const char* what, std::initializer_list<std::int64_t> dims, int device) {
  TensorArg t = import_tensor(obj, what);
  require_contiguous(t, dims, device);
  return t;
}

/// A contiguous 1-D vector operand of an epilogue tree: `length` values of `dtype` on `device`.
const void* epilogue_vector(nb::handle obj, const char* what, std::int64_t length, DType dtype, int device) {
  if (obj.is_none()) return nullptr;
  const TensorArg v = contiguous_operand(obj, what, {length}, device);
  require_dtype(v, dtype, "epilogue vectors: scales and amax are float32, biases take out's dtype");
  return v.data;
}

/// An mm operand with out's device, rank, dtype and shape (C, the aux output).
TensorArg shaped_like_out(nb::handle obj, const char* what, const TensorArg& out) {
  const TensorArg t = import_tensor(obj, what);
  require_cuda(t);
  require_same_device(t, out.device);
  require_rank(t, out.ndim, fmt::format("mm's {} (out's rank)", what).c_str());
  require_dtype(t, out.dtype, fmt::format("{} takes out's dtype", what).c_str());
  for (std::size_t i = 0; i < static_cast<std::size_t>(out.ndim); ++i)
    if (t.shape[i] != out.shape[i])
      raise(errc::invalid_argument, fmt::format("{}: must have out's shape", t.describe()));
  return t;
}

/// Dense or batched GEMM: out = epilogue(a @ b) for rank 2 (M, K) x (K, N), or rank 3 with a common
/// batch; the epilogue is the default linear combination or a tree token ([K8]) with its operands.
void mm(nb::handle a_obj, nb::handle b_obj, nb::handle out_obj, std::optional<std::uintptr_t> stream,
        nb::handle alloc_obj, std::optional<std::string> epilogue, nb::handle c_obj, nb::handle row_scale,
        nb::handle col_scale, nb::handle row_bias, nb::handle col_bias, nb::handle amax, nb::handle aux_obj,
        nb::handle row_sum, float alpha, float beta, float clamp_lo, float clamp_hi, std::optional<std::string> sku,
        int split_k, int swap_ab) {
  const LaunchSource source(stream, alloc_obj, a_obj);
  const TensorArg a = import_tensor(a_obj, "a"), b = import_tensor(b_obj, "b"), out = import_tensor(out_obj, "out");
  for (const TensorArg* t : {&a, &b, &out}) require_cuda(*t);
  if (a.ndim != 2 && a.ndim != 3)
    raise(errc::invalid_argument, fmt::format("{}: mm takes rank 2 (M, K) or rank 3 (batch, M, K)", a.describe()));
  require_rank(b, a.ndim, "mm (same rank as a)");
  require_rank(out, a.ndim, "mm (same rank as a)");
  require_same_device(b, a.device);
  require_same_device(out, a.device);
  const auto r = static_cast<std::size_t>(a.ndim - 2), c = r + 1;
  const std::int64_t m = a.shape[r], k = a.shape[c], n = b.shape[c];
  if (b.shape[r] != k)
    raise(errc::invalid_argument, fmt::format("{}: K={} does not match a's K={}", b.describe(), b.shape[r], k));
  if (out.shape[r] != m || out.shape[c] != n)
    raise(errc::invalid_argument, fmt::format("{}: must have shape (..., {}, {}) = (..., M, N)", out.describe(), m, n));
  std::int64_t batch = 1;
  if (a.ndim == 3) {
    batch = a.shape[0];
    if (b.shape[0] != batch || out.shape[0] != batch)
      raise(errc::invalid_argument,
            fmt::format("batch sizes differ: a {}, b {}, out {}", batch, b.shape[0], out.shape[0]));
  }
  if (a.dtype != b.dtype)
    raise(errc::invalid_argument,
          fmt::format("a is {} and b is {}: mm needs one input dtype", name(a.dtype), name(b.dtype)));
  const MatrixView va = require_matrix(a, false), vb = require_matrix(b, false), vd = require_matrix(out, true);
  kernels::GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.batch = batch;
  p.a = a.dtype;
  p.b = b.dtype;
  p.c = p.d = out.dtype;
  p.layout_a = va.layout;
  p.layout_b = vb.layout;
  p.layout_c = kernels::MatrixLayout::row;
  p.epilogue = is_low_precision_float(a.dtype) ? kernels::GemmEpilogue::scaled_linear_combination
                                               : kernels::GemmEpilogue::linear_combination;
  kernels::GemmOperands o;
  std::int64_t c_bytes = 0;
  o.a = a.data;
  o.b = b.data;
  o.d = out.data;
  o.lda = va.ld;
  o.ldb = vb.ld;
  o.ldd = vd.ld;
  if (batch > 1) {
    o.batch_stride_a = a.strides[0];
    o.batch_stride_b = b.strides[0];
    o.batch_stride_d = out.strides[0];
  }
  if (epilogue) {
    p.epilogue = unwrap(kernels::EpilogueSpec::parse(*epilogue));
    o.alpha = alpha;
    o.beta = beta;
    auto& e = o.epilogue;
    e.row_scale = static_cast<const float*>(epilogue_vector(row_scale, "row_scale", m, DType::f32, a.device));
    e.col_scale = static_cast<const float*>(epilogue_vector(col_scale, "col_scale", n, DType::f32, a.device));
    e.row_bias = epilogue_vector(row_bias, "row_bias", m, out.dtype, a.device);
    e.col_bias = epilogue_vector(col_bias, "col_bias", n, out.dtype, a.device);
    e.amax = static_cast<float*>(const_cast<void*>(epilogue_vector(amax, "amax", 1, DType::f32, a.device)));
    if (!row_sum.is_none()) {  // one float32 per row: (M,) for rank-2 operands, (batch, M) for rank 3
      const TensorArg v = a.ndim == 3 ? contiguous_operand(row_sum, "row_sum", {batch, m}, a.device)
                                      : contiguous_operand(row_sum, "row_sum", {m}, a.device);
      require_dtype(v, DType::f32, "row sums are float32");
      e.row_sum = static_cast<float*>(const_cast<void*>(v.data));
    }
    if (!aux_obj.is_none()) {  // the kernel writes aux with out's strides, so it must share them
      const TensorArg aux = shaped_like_out(aux_obj, "aux", out);
      for (std::size_t i = 0; i < static_cast<std::size_t>(out.ndim); ++i)
        if (aux.shape[i] > 1 && aux.strides[i] != out.strides[i])
          raise(errc::invalid_argument,
                fmt::format("{}: must have out's shape and strides ({}), which the kernel writes it with",
                            aux.describe(), out.describe()));
      e.aux = aux.data;
    }
    e.clamp_lo = clamp_lo;
    e.clamp_hi = clamp_hi;
    if (!c_obj.is_none()) {
      const TensorArg src = shaped_like_out(c_obj, "c", out);
      const MatrixView vc = require_matrix(src, true);
      o.c = src.data;
      o.ldc = vc.ld;
      c_bytes = src.extent_bytes();
      if (batch > 1) o.batch_stride_c = src.strides[0];
    }
  } else {
    for (nb::handle h : {c_obj, row_scale, col_scale, row_bias, col_bias, amax, aux_obj, row_sum})
      if (!h.is_none())
        raise(errc::invalid_argument,
              "mm: c, row_scale, col_scale, row_bias, col_bias, amax, aux and row_sum are operands of an "
              "epilogue tree; pass epilogue= too");
  }
  const DeviceFacts& facts = device_facts(a.device);
  kernels::GemmPlanOptions options;
  options.sm_count = facts.sm_count;
  options.device = a.device;
  if (sku) options.sku_override = unwrap(kernels::GemmSku::parse(*sku));
  options.split_k = split_k;
  options.swap_ab = swap_ab;
  auto plan = unwrap(dense_plans().get(p, facts.arch, options));
  check(plan.validate(o));
  check(plan.check_buffer_sizes(o, static_cast<std::size_t>(a.extent_bytes()),
                                static_cast<std::size_t>(b.extent_bytes()), static_cast<std::size_t>(c_bytes),
                                static_cast<std::size_t>(out.extent_bytes())));
  const DeviceGuard guard(a.device);
  const Launch launch = source.on(a.device);
  const Workspace ws(plan.workspace_size(), launch.alloc, launch.stream, a.device);
  check(plan.run(o, ws.data(), ws.bytes(), launch.stream));
}

/// Plans (cached), prepares and enqueues validated grouped operands on `stream`.
void run_grouped(const GroupedOperands& ops, const LaunchSource& source) {
  auto plan = unwrap(grouped_plans().get(grouped_spec(ops)));
  auto prepared = unwrap(plan->prepare(device_sized(ops), grouped_scalars(ops)));
  const DeviceGuard guard(ops.device);
  const Launch launch = source.on(ops.device);
  Workspace ws(prepared.workspace_size(), launch.alloc, launch.stream, ops.device);
  check(prepared.run(launch.stream, ws.data(), ws.bytes()));
}

/// torch._grouped_mm's 2-D x 3-D case: out[offs[g-1]:offs[g]] = a[offs[g-1]:offs[g]] @ b[g].
void grouped_mm(nb::handle a, nb::handle b, nb::handle offs, nb::handle out, std::optional<std::uintptr_t> stream,
                nb::handle alloc, nb::handle scale_a, nb::handle scale_b, std::optional<std::string> ab_dtype) {
  const LaunchSource source(stream, alloc, a);
  run_grouped(import_grouped(a, b, offs, out, scale_a, scale_b,
                             ab_dtype ? std::optional(dtype_from_name(*ab_dtype)) : std::nullopt),
              source);
}

/// cuactor.grouped_mm for torch tensors with out=None on torch's current stream, all in C++: the
/// output comes from a.new_empty and the workspace from the caching allocator's raw pair, as on the
/// Python path, without that path's interpreter work. Returns None (the caller then takes the Python
/// path, which also raises its errors) for anything else: other tensor types, a dtype given by name,
/// ranks other than 2-D x 3-D, offs=None, host tensors, a torch without the callables.
nb::object grouped_mm_torch(nb::handle a_obj, nb::handle b_obj, nb::handle offs_obj, nb::handle out_dtype) {
  static PyObject* const kNewEmpty = PyUnicode_InternFromString("new_empty");
  static PyObject* const kDtype = PyUnicode_InternFromString("dtype");
  const TorchTypes* torch = torch_types();
  if (torch == nullptr || !torch->current_stream.is_valid() || !torch->raw_pair.is_valid() || offs_obj.is_none() ||
      !is_instance(a_obj, torch->tensor) || (!out_dtype.is_none() && !is_instance(out_dtype, torch->dtype)))
    return nb::none();
  GroupedOperands g;
  g.a = import_tensor(a_obj, "a");
  if (g.a.ndim != 2 || g.a.memory != MemoryKind::cuda) return nb::none();
  g.b = import_tensor(b_obj, "b");
  if (g.b.ndim != 3) return nb::none();
  g.offs = import_tensor(offs_obj, "offs");
  // a.new_empty((T, N), dtype=...): a's device, one vectorcall.
  nb::object dtype = out_dtype.is_none() ? nb::steal(PyObject_GetAttr(a_obj.ptr(), kDtype)) : nb::borrow(out_dtype);
  if (!dtype.is_valid()) throw nb::python_error();
  nb::object shape = nb::make_tuple(g.a.shape[0], g.b.shape[2]);
  static PyObject* const kDtypeKeyword = nb::make_tuple("dtype").release().ptr();  // kwnames; immortal
  PyObject* args[] = {a_obj.ptr(), shape.ptr(), dtype.ptr()};
  PyObject* made = PyObject_VectorcallMethod(kNewEmpty, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, kDtypeKeyword);
  if (made == nullptr) throw nb::python_error();
  nb::object out = nb::steal(made);
  const std::optional<DType> out_type = out_dtype.is_none() ? std::optional(g.a.dtype) : torch_dtype(out_dtype);
  if (out_type && g.a.shape[0] > 0 && g.b.shape[2] > 0)
    g.out = contiguous_torch_matrix(out, "out", *out_type, g.a.shape[0], g.b.shape[2], g.a.device);
  else
    g.out = import_tensor(out, "out");
  check_grouped(g, nb::none(), nb::none());
  run_grouped(g, LaunchSource(std::nullopt, nb::none(), a_obj));
  return out;
}

}  // namespace

const DeviceFacts& device_facts(int device) {
  static std::array<DeviceFacts, kMaxDevices> facts;
  static std::array<std::once_flag, kMaxDevices> once;
  static const int count = gpu::device_count();  // once: no driver call per operation (or during a capture)
  if (device < 0 || device >= kMaxDevices || device >= count)
    raise(errc::no_device, fmt::format("cuda:{} does not exist ({} CUDA devices visible)", device, count));
  const auto u = static_cast<std::size_t>(device);
  std::call_once(once[u], [&] {
    auto p = unwrap(gpu::device_properties(device));
    facts[u] = DeviceFacts{p.arch, p.multiprocessors};
  });
  return facts[u];
}

DeviceGuard::DeviceGuard(int device) {
  int current = -1;
  check(gpu::check(cudaGetDevice(&current), "cudaGetDevice"));
  if (current != device) {
    check(gpu::check(cudaSetDevice(device), "cudaSetDevice"));
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

LaunchSource::LaunchSource(std::optional<std::uintptr_t> stream, nb::handle alloc, nb::handle operand) {
  const TorchTypes* torch = torch_types();
  const bool is_torch = torch != nullptr && is_instance(operand, torch->tensor);
  if (stream) {
    stream_ = stream_from(*stream);
  } else if (!is_torch) {
    raise(errc::invalid_argument,
          "stream=None: for tensors other than torch's, pass the stream to run on as an integer cudaStream_t (CuPy: "
          "cupy.cuda.get_current_stream().ptr; 0 = legacy default stream)");
  } else if (!torch->current_stream.is_valid()) {
    raise(errc::unsupported,
          "stream=None: this PyTorch has no CUDA streams (torch._C._cuda_getCurrentRawStream is "
          "missing: a CPU-only build?); pass stream= or use a CUDA build of PyTorch");
  }
  alloc_ = !alloc.is_none() || !is_torch || !torch->raw_pair.is_valid() ? alloc : nb::handle(torch->raw_pair);
}

Launch LaunchSource::on(int device) const {
  if (stream_) return Launch{*stream_, alloc_};
  return Launch{stream_from(nb::cast<std::uintptr_t>(torch_types()->current_stream(device))), alloc_};
}

Workspace::Workspace(std::size_t bytes, nb::handle alloc, cudaStream_t stream, int device) : stream_(stream) {
  if (bytes == 0) return;
  if (alloc.is_valid() && PyTuple_Check(alloc.ptr()) && PyTuple_GET_SIZE(alloc.ptr()) == 2) {
    // A stream-ordered raw allocator pair (PyTorch's caching allocator): one call each way, no tensor.
    nb::tuple pair = nb::borrow<nb::tuple>(alloc);
    data_ = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(pair[0](bytes, reinterpret_cast<std::uintptr_t>(stream))));
    if (data_ == nullptr)
      raise(errc::out_of_memory, fmt::format("workspace: the allocator returned null for {} bytes", bytes));
    release_ = nb::borrow(pair[1]);
    bytes_ = bytes;
    return;
  }
  if (alloc.is_valid() && !alloc.is_none()) {
    tensor_ = alloc(bytes);
    const TensorArg t = import_tensor(tensor_, "workspace");
    require_cuda(t);
    require_same_device(t, device);
    if (t.extent_bytes() < static_cast<std::int64_t>(bytes))
      raise(errc::workspace_too_small,
            fmt::format("{}: {} bytes, the plan needs {}", t.describe(), t.extent_bytes(), bytes));
    data_ = t.data;
    bytes_ = static_cast<std::size_t>(t.extent_bytes());
    return;
  }
  check(gpu::check(cudaMallocAsync(&data_, bytes, stream), "workspace: cudaMallocAsync"));
  bytes_ = bytes;
  owned_ = true;
}

Workspace::~Workspace() {
  if (owned_) (void)cudaFreeAsync(data_, stream_);
  if (release_.is_valid()) {
    try {
      release_(reinterpret_cast<std::uintptr_t>(data_));  // stream-ordered: the launches above come first
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("cuactor: releasing a workspace");
    }
  }
}

GroupedOperands import_grouped(nb::handle a_obj, nb::handle b_obj, nb::handle offs_obj, nb::handle out_obj,
                               nb::handle scale_a, nb::handle scale_b, std::optional<DType> ab_dtype) {
  GroupedOperands g;
  g.a = import_tensor(a_obj, "a", ab_dtype);
  g.b = import_tensor(b_obj, "b", ab_dtype);
  g.offs = import_tensor(offs_obj, "offs");
  g.out = import_tensor(out_obj, "out");
  check_grouped(g, scale_a, scale_b);
  return g;
}

void check_grouped(GroupedOperands& g, nb::handle scale_a, nb::handle scale_b) {
  const TensorArg &a = g.a, &b = g.b, &offs = g.offs, &out = g.out;
  for (const TensorArg* t : {&a, &b, &offs, &out}) require_cuda(*t);
  require_rank(a, 2, "the 2-D x 3-D grouped GEMM (a: (T, K))");
  require_rank(b, 3, "the 2-D x 3-D grouped GEMM (b: (G, K, N))");
  require_rank(offs, 1, "offs (cumulative end row of each group)");
  require_rank(out, 2, "out (T, N)");
  g.device = a.device;
  for (const TensorArg* t : {&b, &offs, &out}) require_same_device(*t, g.device);
  require_dtype(offs, DType::i32, "offs holds int32 cumulative row offsets");
  if (a.dtype != b.dtype)
    raise(errc::invalid_argument,
          fmt::format("a is {} and b is {}: grouped_mm needs one input dtype", name(a.dtype), name(b.dtype)));
  const std::int64_t rows = a.shape[0], k = a.shape[1], groups = b.shape[0], n = b.shape[2];
  if (b.shape[1] != k)
    raise(errc::invalid_argument, fmt::format("{}: K={} does not match a's K={}", b.describe(), b.shape[1], k));
  if (offs.shape[0] != groups)
    raise(errc::invalid_argument, fmt::format("{}: {} offsets for G={} groups of b (one cumulative end row per group)",
                                              offs.describe(), offs.shape[0], groups));
  if (groups > 1 && offs.strides[0] != 1)
    raise(errc::invalid_argument, fmt::format("{}: offsets must be contiguous", offs.describe()));
  if (out.shape[0] != rows || out.shape[1] != n)
    raise(errc::invalid_argument, fmt::format("{}: must have shape ({}, {}) = (T, N)", out.describe(), rows, n));
  if (rows > 0 && k > 1 && a.strides[1] != 1)
    raise(errc::invalid_argument, fmt::format("{}: rows of a must be contiguous (stride 1 along K)", a.describe()));
  if (rows > 0 && n > 1 && out.strides[1] != 1)
    raise(errc::invalid_argument, fmt::format("{}: rows of out must be contiguous (stride 1 along N)", out.describe()));
  if (b.strides[1] == 1 || k == 1) {
    g.layout_b = kernels::MatrixLayout::col;  // b[g] is N x K row-major: torch's transposed weights (the "TN" kernels)
    g.ldb = n == 1 ? k : b.strides[2];
  } else if (b.strides[2] == 1 || n == 1) {
    g.layout_b = kernels::MatrixLayout::row;  // b[g] is K x N row-major
    g.ldb = b.strides[1];
  } else {
    raise(errc::invalid_argument,
          fmt::format("{}: each b[g] needs K or N contiguous (stride 1 in dimension 1 or 2)", b.describe()));
  }
  const bool fp8 = is_low_precision_float(a.dtype);
  if (!scale_a.is_none()) g.scale_a = import_tensor(scale_a, "scale_a");
  if (!scale_b.is_none()) g.scale_b = import_tensor(scale_b, "scale_b");
  if (fp8) {
    if (!g.scale_a || !g.scale_b)
      raise(errc::invalid_argument, fmt::format("a and b are {}: scale_a and scale_b are required", name(a.dtype)));
    // A 2-D scale_b selects row-wise scaling (torch._scaled_grouped_mm): scale_a[t] per packed row,
    // scale_b[g, n] per group and column, applied by the kernel's epilogue tree.
    g.rowwise = g.scale_b->ndim == 2;
    if (g.rowwise) {
      g.scale_a->name = "scale_a (T,) of row-wise scales";
      g.scale_b->name = "scale_b (G, N) of row-wise scales";
      require_contiguous(*g.scale_a, {rows}, g.device);
      require_contiguous(*g.scale_b, {groups, n}, g.device);
      for (const TensorArg* t : {&*g.scale_a, &*g.scale_b}) {
        require_dtype(*t, DType::f32, "fp8 scales are float32");
        if (reinterpret_cast<std::uintptr_t>(t->data) % 16 != 0)
          raise(errc::invalid_argument,
                fmt::format("{}: row-wise scales must start 16-byte aligned (the epilogue reads them as vectors); "
                            "pass a copy (.clone()) of an offset slice",
                            t->describe()));
      }
    } else {
      require_scale(*g.scale_a, groups, true);
      require_scale(*g.scale_b, groups, false);
      require_same_device(*g.scale_a, g.device);
      require_same_device(*g.scale_b, g.device);
    }
  } else if (g.scale_a || g.scale_b) {
    raise(errc::invalid_argument, fmt::format("scale_a/scale_b are fp8 scales, but a and b are {}", name(a.dtype)));
  }
}

kernels::GroupedGemmSpec grouped_spec(const GroupedOperands& ops, std::optional<kernels::GemmSku> sku) {
  const DeviceFacts& facts = device_facts(ops.device);
  kernels::GroupedGemmSpec spec;
  spec.a = ops.a.dtype;
  spec.b = ops.b.dtype;
  spec.d = ops.out.dtype;
  spec.layout_b = ops.layout_b;
  spec.arch = facts.arch;
  spec.sm_count = facts.sm_count;
  spec.device = ops.device;
  const std::int64_t groups = std::max<std::int64_t>(1, ops.b.shape[0]);
  spec.rows_per_group_hint = static_cast<int>(std::clamp<std::int64_t>(ops.a.shape[0] / groups, 1, 1 << 30));
  spec.group_count_hint = kernels::shape_hint(groups);
  spec.n_hint = kernels::shape_hint(ops.b.shape[2]);
  spec.k_hint = kernels::shape_hint(ops.a.shape[1]);
  if (ops.rowwise) spec.epilogue = kernels::rowwise_scaled_epilogue();
  spec.sku_override = std::move(sku);
  return spec;
}

kernels::DeviceSizedGroups device_sized(const GroupedOperands& ops) {
  kernels::DeviceSizedGroups g;
  g.group_count = static_cast<int>(ops.b.shape[0]);
  g.offsets = static_cast<const std::int32_t*>(ops.offs.data);
  g.capacity_rows = ops.a.shape[0];
  g.n = static_cast<int>(ops.b.shape[2]);
  g.k = static_cast<int>(ops.a.shape[1]);
  g.a = ops.a.data;
  g.lda = ops.a.shape[0] <= 1 ? ops.a.shape[1] : ops.a.strides[0];
  g.b = ops.b.data;
  g.ldb = ops.ldb;
  g.b_group_stride = ops.b.strides[0];
  g.d = ops.out.data;
  g.ldd = ops.out.shape[0] <= 1 ? ops.out.shape[1] : ops.out.strides[0];
  if (ops.rowwise) {
    g.epilogue.row_scale = static_cast<const float*>(ops.scale_a->data);
    g.epilogue.col_scale = static_cast<const float*>(ops.scale_b->data);
  }
  return g;
}

kernels::GroupedScalars grouped_scalars(const GroupedOperands& ops) {
  kernels::GroupedScalars s;
  if (ops.rowwise) return s;  // the scales are the epilogue tree's vectors (device_sized)
  if (ops.scale_a) {
    s.scale_a = static_cast<const float*>(ops.scale_a->data);
    s.scale_a_per_group = ops.scale_a->numel() > 1;
  }
  if (ops.scale_b) s.scale_b = static_cast<const float*>(ops.scale_b->data);
  return s;
}

/// moe_expert_ffn's `swiglu` argument.
kernels::SwigluPlacement swiglu_placement(std::string_view text) {
  if (text == "auto") return kernels::SwigluPlacement::automatic;
  if (text == "epilogue") return kernels::SwigluPlacement::epilogue;
  if (text == "separate") return kernels::SwigluPlacement::separate;
  raise(errc::invalid_argument,
        fmt::format("moe_expert_ffn: swiglu='{}' must be 'auto', 'epilogue' or 'separate'", text));
}

/// The expert FFN: out = w * (silu(x Wg^T) * (x Wu^T)) Wd^T per expert, rows grouped by expert.
void moe_expert_ffn(nb::handle x_obj, nb::handle w_gate_up_obj, nb::handle w_down_obj, nb::handle offs_obj,
                    nb::handle weights_obj, nb::handle out_obj, std::optional<std::uintptr_t> stream,
                    nb::handle alloc_obj, bool gate_up_interleaved, const std::string& swiglu) {
  const kernels::SwigluPlacement placement = swiglu_placement(swiglu);
  const LaunchSource source(stream, alloc_obj, x_obj);
  const TensorArg x0 = import_tensor(x_obj, "x");
  require_cuda(x0);
  const int device = x0.device;
  const TensorArg x = contiguous_operand(x_obj, "x (T, H)", {-1, -1}, device);
  const std::int64_t tokens = x.shape[0], hidden = x.shape[1];
  const TensorArg wgu = contiguous_operand(w_gate_up_obj, "w_gate_up (E, 2F, H)", {-1, -1, hidden}, device);
  const std::int64_t experts = wgu.shape[0], two_f = wgu.shape[1];
  if (two_f % 2 != 0)
    raise(errc::invalid_argument,
          fmt::format("{}: dimension 1 holds gate then up rows, 2F; {} is odd", wgu.describe(), two_f));
  const TensorArg wd = contiguous_operand(w_down_obj, "w_down (E, H, F)", {experts, hidden, two_f / 2}, device);
  const TensorArg offs = contiguous_operand(offs_obj, "offs (E,)", {experts}, device);
  require_dtype(offs, DType::i32, "offs holds int32 cumulative end rows, one per expert");
  const TensorArg out = contiguous_operand(out_obj, "out (T, H)", {tokens, hidden}, device);
  for (const TensorArg* t : {&wgu, &wd, &out})
    if (t->dtype != x.dtype)
      raise(errc::invalid_argument, fmt::format("{}: must have x's dtype {}", t->describe(), name(x.dtype)));
  const void* weights = nullptr;
  if (!weights_obj.is_none()) {
    const TensorArg w = contiguous_operand(weights_obj, "routing_weights (T,)", {tokens}, device);
    require_dtype(w, DType::f32, "routing weights are float32, one per row of x");
    weights = w.data;
  }
  const DeviceFacts& facts = device_facts(device);
  kernels::MoeFfnSpec spec;
  spec.dtype = x.dtype;
  spec.hidden = static_cast<int>(hidden);
  spec.ffn = static_cast<int>(two_f / 2);
  spec.experts = static_cast<int>(experts);
  spec.capacity_rows = tokens;
  spec.weighted = weights != nullptr;
  spec.arch = facts.arch;
  spec.sm_count = facts.sm_count;
  spec.device = device;
  spec.rows_per_expert_hint = experts > 0 ? static_cast<int>(std::min<std::int64_t>(tokens / experts, INT32_MAX)) : 0;
  spec.gate_up_layout = gate_up_interleaved ? kernels::GateUpLayout::interleaved : kernels::GateUpLayout::stacked;
  spec.swiglu = placement;
  if (hidden > INT32_MAX || two_f > INT32_MAX || experts > INT32_MAX)
    raise(errc::invalid_argument, "moe_expert_ffn: H, 2F and E must fit in int32");
  auto plan = unwrap(moe_plans().get_or_create(spec, [&] { return kernels::MoeExpertFfn::create(spec); }));
  kernels::MoeFfnTensors t;
  t.x = x.data;
  t.w_gate_up = wgu.data;
  t.w_down = wd.data;
  t.offsets = static_cast<const std::int32_t*>(offs.data);
  t.routing_weights = static_cast<const float*>(weights);
  t.out = out.data;
  const DeviceGuard guard(device);
  const Launch launch = source.on(device);
  Workspace ws(std::max<std::size_t>(plan.workspace_size(), 256), launch.alloc, launch.stream, device);
  check(plan.run(t, ws.data(), ws.bytes(), launch.stream));
}

/// Stacked gate/up weights (E, 2F, H) copied into `out` with the rows interleaved (gate f, up f, ...).
void interleave_gate_up(nb::handle w_obj, nb::handle out_obj, std::optional<std::uintptr_t> stream) {
  const LaunchSource source(stream, nb::none(), w_obj);
  const TensorArg w0 = import_tensor(w_obj, "w_gate_up");
  require_cuda(w0);
  const int device = w0.device;
  const TensorArg w = contiguous_operand(w_obj, "w_gate_up (E, 2F, H)", {-1, -1, -1}, device);
  if (w.shape[1] % 2 != 0)
    raise(errc::invalid_argument,
          fmt::format("{}: dimension 1 holds gate then up rows, 2F; {} is odd", w.describe(), w.shape[1]));
  const TensorArg out = contiguous_operand(out_obj, "out (E, 2F, H)", {w.shape[0], w.shape[1], w.shape[2]}, device);
  if (out.dtype != w.dtype)
    raise(errc::invalid_argument, fmt::format("{}: must have w_gate_up's dtype {}", out.describe(), name(w.dtype)));
  if (w.shape[0] > INT32_MAX || w.shape[1] > INT32_MAX || w.shape[2] > INT32_MAX)
    raise(errc::invalid_argument, "interleave_gate_up: E, 2F and H must fit in int32");
  const DeviceGuard guard(device);
  const Launch launch = source.on(device);
  check(kernels::interleave_gate_up(w.dtype, w.data, out.data, static_cast<int>(w.shape[0]),
                                    static_cast<int>(w.shape[1] / 2), static_cast<int>(w.shape[2]), launch.stream));
}

void bind_ops(nb::module_& m) {
  m.def(
      "mm", &mm, nb::arg("a").none(), nb::arg("b").none(), nb::arg("out").none(), nb::arg("stream").none(),
      nb::arg("alloc").none() = nb::none(), nb::arg("epilogue").none() = nb::none(), nb::arg("c").none() = nb::none(),
      nb::arg("row_scale").none() = nb::none(), nb::arg("col_scale").none() = nb::none(),
      nb::arg("row_bias").none() = nb::none(), nb::arg("col_bias").none() = nb::none(),
      nb::arg("amax").none() = nb::none(), nb::arg("aux").none() = nb::none(), nb::arg("row_sum").none() = nb::none(),
      nb::arg("alpha") = 1.0f, nb::arg("beta") = 0.0f, nb::arg("clamp_lo") = -3.4028234663852886e38f,
      nb::arg("clamp_hi") = 3.4028234663852886e38f, nb::arg("sku").none() = nb::none(), nb::arg("split_k") = 0,
      nb::arg("swap_ab") = 0,
      "out = epilogue(a @ b) on `stream` (a cudaStream_t as an integer; None: torch's current stream for torch "
      "tensors) with a GemmPlan: rank 2 (M, K) x (K, N) -> "
      "(M, N), or rank 3 with a common batch. `epilogue` is a tree token such as 'silu(add(acc,colbias))' whose "
      "operands are c (out's shape and dtype), row_scale / col_scale (float32, M / N values), row_bias / col_bias "
      "(out's dtype, M / N values), the outputs amax (one float32: max |x|), aux (out's shape, strides and dtype) "
      "and row_sum (float32, batch * M row sums), alpha, beta and the clamp bounds; trees the "
      "catalog lacks are compiled by the JIT on first use; `sku` (a dense SKU's text) runs exactly that catalog kernel "
      "instead of the plan's choice; `split_k` 0 lets the plan split K on small decode grids, 1 never splits, 2..16 "
      "forces that many slices (reduced in order: deterministic); `swap_ab` 0 lets the plan compute decode problems "
      "of up to 32 rows (64 on grids of few tiles) as D^T = B^T A^T, 1 never, 2 always. `alloc` gives the plan's "
      "workspace, if any: "
      "alloc(nbytes) "
      "returning "
      "a device tensor, or a pair (raw_alloc(nbytes, stream) -> int, raw_delete(ptr)) (default: torch's caching "
      "allocator for torch tensors, else the device's pool). "
      "Raises the cuactor.errors class of the "
      "failure.");
  m.def("moe_expert_ffn", &moe_expert_ffn, nb::arg("x").none(), nb::arg("w_gate_up").none(), nb::arg("w_down").none(),
        nb::arg("offs").none(), nb::arg("routing_weights").none(), nb::arg("out").none(), nb::arg("stream").none(),
        nb::arg("alloc").none() = nb::none(), nb::arg("gate_up_interleaved") = false, nb::arg("swiglu") = "auto",
        "The mixture-of-experts expert FFN on `stream` (as for mm): x (T, H) rows grouped by expert, w_gate_up (E, 2F, "
        "H) (gate rows then up rows per expert, or with gate_up_interleaved gate row f and up row f at rows 2f and "
        "2f + 1, which lets the SwiGLU run in the first GEMM's epilogue), w_down (E, H, F), "
        "offs (E,) int32 cumulative end rows "
        "in device memory, routing_weights (T,) float32 or None, out (T, H): out = w * (silu(x Wg^T) * (x Wu^T)) "
        "Wd^T per expert. `swiglu`: 'auto' (the epilogue where the build has the fused form of the GEMM kernel the "
        "expert size takes; interleaved weights only), 'epilogue' (always fused; needs gate_up_interleaved) or "
        "'separate' (an elementwise kernel).");
  m.def("interleave_gate_up", &interleave_gate_up, nb::arg("w_gate_up").none(), nb::arg("out").none(),
        nb::arg("stream").none(),
        "Copies stacked gate/up weights w_gate_up (E, 2F, H) into out (same shape and dtype, bf16 or f16) with gate "
        "row f at row 2f and up row f at row 2f + 1, on `stream` (as for mm): the layout moe_expert_ffn takes with "
        "gate_up_interleaved=True.");
  m.def("grouped_mm_torch", &grouped_mm_torch, nb::arg("a").none(), nb::arg("b").none(), nb::arg("offs").none(),
        nb::arg("out_dtype").none(),
        "cuactor.grouped_mm's torch fast path (out=None, torch's current stream): the new output tensor, or None "
        "when the operands need the general path (which also raises the errors).");
  m.def("grouped_mm", &grouped_mm, nb::arg("a").none(), nb::arg("b").none(), nb::arg("offs").none(),
        nb::arg("out").none(), nb::arg("stream").none(), nb::arg("alloc").none() = nb::none(),
        nb::arg("scale_a").none() = nb::none(), nb::arg("scale_b").none() = nb::none(),
        nb::arg("ab_dtype").none() = nb::none(),
        "torch._grouped_mm's 2-D x 3-D case on `stream` (as for mm): a (T, K), b (G, K, N), offs (G,) int32 cumulative "
        "end rows "
        "in device memory, out (T, N); rows past offs[-1] are not written. fp8 (e4m3) inputs take scale_a (1 or G "
        "float32) and scale_b (G float32); `ab_dtype` reinterprets a's and b's storage (fp8 passed as uint8). "
        "`alloc` gives the workspace: a callable alloc(nbytes) returning a device tensor, or a pair (raw_alloc(nbytes, "
        "stream) -> int, raw_delete(ptr)) of a stream-ordered allocator (default as for mm).");
}

}  // namespace cuactor::pyext
