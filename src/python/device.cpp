// cuactor.Device ([P3]): the device actor from Python. Requests go to the actor with a plain request
// id; the actor's reply handler (on the runtime's completion threads, without the GIL and without
// touching any Python object) pushes (id, error code, C++ payload) into a ReplyQueue and signals its
// eventfd. The Python Device (python/cuactor/device.py) watches that descriptor with
// loop.add_reader and drains the queue on the event loop's thread, where payloads become Python
// objects and futures are resolved: no Python runs on CUDA's or the actor's threads, and no
// exception crosses a thread or C boundary.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <variant>
#include <vector>

#include "cuactor/jit/tuning.hpp"
#include "cuactor/kernels/grouped_actor.hpp"
#include "cuactor/kernels/grouped_plan_cache.hpp"
#include "cuactor/runtime/device_actor.hpp"
#include "tensor.hpp"

namespace cuactor::pyext {
namespace {

using Bytes = std::vector<std::byte>;
using Allocation = std::shared_ptr<runtime::DeviceAllocation>;

/// A buffer of the device actor seen from Python: a GpuRef plus its element type and shape.
class PyGpuRef {
 public:
  PyGpuRef(Allocation allocation, DType dtype, std::vector<std::int64_t> shape)
      : allocation_(std::move(allocation)), dtype_(dtype), shape_(std::move(shape)) {}

  [[nodiscard]] const Allocation& allocation() const noexcept { return allocation_; }
  [[nodiscard]] DType dtype() const noexcept { return dtype_; }
  [[nodiscard]] std::string dtype_name() const { return std::string(name(dtype_)); }
  [[nodiscard]] const std::vector<std::int64_t>& shape() const noexcept { return shape_; }
  [[nodiscard]] std::size_t nbytes() const noexcept { return allocation_->bytes(); }
  [[nodiscard]] int device() const noexcept { return allocation_->device(); }
  [[nodiscard]] std::uint64_t generation() const noexcept { return allocation_->generation(); }
  [[nodiscard]] bool valid() const { return runtime::GpuRef<std::byte>(allocation_).access().has_value(); }
  void check_access() const { check(runtime::GpuRef<std::byte>(allocation_).access()); }
  [[nodiscard]] std::string repr() const {
    return fmt::format("GpuRef({}, shape=({}), device={}, generation={})", name(dtype_), fmt::join(shape_, ", "),
                       device(), generation());
  }

  /// The DLPack capsule of the buffer, after the generation check ([R2]); the consumer's stream
  /// (DLPack: an integer, -1 = no ordering, None/1 = legacy default stream, 2 = per-thread default)
  /// first waits on the device for the buffer's last recorded write ([R3]).
  nb::object dlpack(nb::handle stream) const {
    const runtime::GpuRef<std::byte> ref(allocation_);
    std::byte* ptr = unwrap(ref.raw_device_ptr());
    const std::int64_t s = stream.is_none() ? 1 : nb::cast<std::int64_t>(stream);
    if (s != -1) {
      const cudaStream_t consumer = s == 1   ? cudaStreamLegacy
                                    : s == 2 ? cudaStreamPerThread
                                             : reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(s));
      check(ref.wait_for_last_write(consumer));
    }
    std::vector<std::size_t> shape(shape_.begin(), shape_.end());
    auto* keep = new Allocation(allocation_);
    nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Allocation*>(p); });
    const DLPackType type = to_dlpack(dtype_);
    const nb::dlpack::dtype dt{type.code, type.bits, 1};
    nb::ndarray<> nd(ptr, shape.size(), shape.data(), owner, nullptr, dt, nb::device::cuda::value, device());
    // A view, never a copy: the default policy makes nanobind copy the export, which fails for an array
    // of no framework ("'PyCapsule' object has no attribute 'copy'", seen on the H100). `owner` keeps
    // the buffer alive for as long as the consumer holds the capsule.
    nb::object exported = nb::cast(nd, nb::rv_policy::reference);
    // nanobind exports an ndarray of no framework as the DLPack capsule itself (seen on the H100).
    if (PyCapsule_CheckExact(exported.ptr())) return exported;
    return exported.attr("__dlpack__")();
  }

 private:
  Allocation allocation_;
  DType dtype_;
  std::vector<std::int64_t> shape_;
};

/// What a reply carries back to the event loop.
using Payload = std::variant<std::monostate, PyGpuRef, std::pair<Bytes, PyGpuRef>>;

struct Reply {
  std::uint64_t id = 0;
  std::error_code ec;
  std::string what;  ///< The request's name, for the exception message.
  Payload payload;
};

/// Replies handed from the runtime's threads to the event loop's: a mutex-guarded queue and an
/// eventfd that is readable while replies wait. Neither side holds the GIL inside.
class ReplyQueue {
 public:
  ReplyQueue() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) raise(errc::internal, fmt::format("eventfd failed: {}", std::strerror(errno)));
  }
  ~ReplyQueue() { ::close(fd_); }
  ReplyQueue(const ReplyQueue&) = delete;
  ReplyQueue& operator=(const ReplyQueue&) = delete;

  [[nodiscard]] int fd() const noexcept { return fd_; }

  void push(Reply r) noexcept {
    try {
      std::lock_guard lock(mutex_);
      replies_.push_back(std::move(r));
    } catch (...) {  // out of memory: the reply is lost, but no exception leaves the actor's handler
      return;
    }
    const std::uint64_t one = 1;
    (void)!::write(fd_, &one, sizeof one);
  }

  std::deque<Reply> take() {
    std::uint64_t count = 0;
    (void)!::read(fd_, &count, sizeof count);
    std::lock_guard lock(mutex_);
    return std::exchange(replies_, {});
  }

 private:
  int fd_ = -1;
  std::mutex mutex_;
  std::deque<Reply> replies_;
};

/// The handler the actor completes with: moves (id, code, payload) into the queue; nothing else.
template <class Convert>
auto reply_to(std::shared_ptr<ReplyQueue> queue, std::uint64_t id, std::string what, Convert convert) {
  return [queue = std::move(queue), id, what = std::move(what), convert = std::move(convert)](std::error_code ec,
                                                                                              auto value) mutable {
    Reply r{id, ec, std::move(what), {}};
    if (!ec) r.payload = convert(std::move(value));
    queue->push(std::move(r));
  };
}

std::uint16_t half_bits(DType t, double v) {
  std::uint16_t bits = 0;
  if (t == DType::bf16) {
    const __nv_bfloat16 b = __float2bfloat16(static_cast<float>(v));
    std::memcpy(&bits, &b, sizeof bits);
  } else {
    const __half h = __float2half(static_cast<float>(v));
    std::memcpy(&bits, &h, sizeof bits);
  }
  return bits;
}

/// The device actor of one device, with its grouped GEMM plans and its reply queue.
class DeviceCore {
 public:
  DeviceCore(int ordinal, bool isolated, const std::string& worker_path, std::size_t mailbox_capacity)
      : queue_(std::make_shared<ReplyQueue>()), ordinal_(ordinal) {
    runtime::ActorOptions o;
    o.mailbox_capacity = mailbox_capacity;
    if (isolated) {
      o.isolation = runtime::Isolation::worker;
      o.worker_path = worker_path;
    }
    nb::gil_scoped_release release;  // starts a thread (and maybe a worker process)
    actor_.emplace(unwrap(runtime::DeviceActor::create(ordinal, std::move(o))));
  }
  ~DeviceCore() { shutdown(); }
  DeviceCore(const DeviceCore&) = delete;
  DeviceCore& operator=(const DeviceCore&) = delete;

  [[nodiscard]] int fileno() const noexcept { return queue_->fd(); }
  [[nodiscard]] int ordinal() const noexcept { return ordinal_; }

  void shutdown() {
    if (!actor_) return;
    nb::gil_scoped_release release;  // waits for in-flight work; reply handlers never need the GIL
    actor_->shutdown();
  }

  [[nodiscard]] std::string stats_json() const { return runtime::to_json(actor().stats()); }

  void allocate(std::uint64_t id, const std::vector<std::int64_t>& shape, const std::string& dtype_name) {
    const DType dtype = dtype_from_name(dtype_name);
    std::int64_t count = 1;
    for (auto d : shape) {
      if (d < 0)
        raise(errc::invalid_argument, fmt::format("shape ({}): sizes must not be negative", fmt::join(shape, ", ")));
      count *= d;
    }
    const auto bytes = static_cast<std::size_t>(count) * static_cast<std::size_t>(size_bits(dtype)) / 8;
    actor().allocate<std::byte>(bytes, reply_to(queue_, id, "allocate", [dtype, shape](runtime::GpuRef<std::byte> r) {
                                  return Payload(PyGpuRef(r.allocation(), dtype, shape));
                                }));
  }

  void copy_to_device(std::uint64_t id, const PyGpuRef& dst, nb::handle host) {
    // bf16 and fp8 have no NumPy dtype: their bits come as uint16 / uint8 (as copy_to_host returns them).
    const bool bits_only = dst.dtype() == DType::bf16 || is_low_precision_float(dst.dtype());
    const TensorArg src = import_tensor(host, "host", bits_only ? std::optional(dst.dtype()) : std::nullopt);
    if (src.memory != MemoryKind::cpu)
      raise(errc::invalid_argument, fmt::format("{}: copy_to_device takes host memory", src.describe()));
    // Bits are taken from storage of a type cuactor does not know (uint16) or uint8 (fp8), never
    // from values of another type (f16 values are not bf16 bits).
    const bool bits_ok = !src.stored || *src.stored == dst.dtype() || *src.stored == DType::u8;
    if (src.dtype != dst.dtype() || !bits_ok)
      raise(errc::invalid_argument,
            fmt::format("{}: host {} values into a {} buffer (pass {} values{})", src.describe(),
                        src.stored ? name(*src.stored) : "unknown", dst.dtype_name(), dst.dtype_name(),
                        bits_only ? ", or their bits as uint16 / uint8" : ""));
    std::int64_t packed = 1;
    for (int i = src.ndim - 1; i >= 0; --i) {
      const auto u = static_cast<std::size_t>(i);
      if (src.shape[u] > 1 && src.strides[u] != packed)
        raise(errc::invalid_argument, fmt::format("{}: must be C-contiguous", src.describe()));
      packed *= src.shape[u];
    }
    const auto bytes = static_cast<std::size_t>(src.extent_bytes());
    if (bytes > dst.nbytes())
      raise(errc::invalid_argument,
            fmt::format("{}: {} bytes do not fit the buffer's {}", src.describe(), bytes, dst.nbytes()));
    auto staged = std::make_shared<const Bytes>(static_cast<const std::byte*>(src.data),
                                                static_cast<const std::byte*>(src.data) + bytes);
    actor().copy_to_device(
        runtime::GpuRef<std::byte>(dst.allocation()), std::move(staged),
        reply_to(queue_, id, "copy_to_device", [dst](runtime::GpuRef<std::byte>) { return Payload(dst); }));
  }

  void copy_to_host(std::uint64_t id, const PyGpuRef& src) {
    actor().copy_to_host(
        runtime::GpuRef<std::byte>(src.allocation()),
        reply_to(queue_, id, "copy_to_host", [src](Bytes bytes) { return Payload(std::pair(std::move(bytes), src)); }));
  }

  void fill(std::uint64_t id, const PyGpuRef& dst, double value) {
    auto done = [dst](auto) { return Payload(dst); };
    const auto& a = dst.allocation();
    switch (dst.dtype()) {
      case DType::f32:
        actor().fill(runtime::GpuRef<float>(a), static_cast<float>(value), reply_to(queue_, id, "fill", done));
        return;
      case DType::f64:
        actor().fill(runtime::GpuRef<double>(a), value, reply_to(queue_, id, "fill", done));
        return;
      case DType::bf16:
      case DType::f16:
        actor().fill(runtime::GpuRef<std::uint16_t>(a), half_bits(dst.dtype(), value),
                     reply_to(queue_, id, "fill", done));
        return;
      case DType::i32:
        actor().fill(runtime::GpuRef<std::int32_t>(a), static_cast<std::int32_t>(value),
                     reply_to(queue_, id, "fill", done));
        return;
      case DType::i64:
        actor().fill(runtime::GpuRef<std::int64_t>(a), static_cast<std::int64_t>(value),
                     reply_to(queue_, id, "fill", done));
        return;
      default:
        raise(errc::unsupported,
              fmt::format("fill of a {} buffer: cuactor.Device fills bf16, f16, f32, f64, i32 and i64",
                          dst.dtype_name()));
    }
  }

  /// torch._grouped_mm's 2-D x 3-D case on the actor ([K6]): a (T, K), b (G, N, K) for layout_b col
  /// or (G, K, N) for row, offs (G,) int32 cumulative end rows, out (T, N).
  void grouped_mm(std::uint64_t id, const PyGpuRef& a, const PyGpuRef& b, const PyGpuRef& offs, const PyGpuRef& out,
                  const std::string& layout_b) {
    const auto layout = kernels::parse_layout(layout_b);
    if (!layout) raise(errc::invalid_argument, fmt::format("layout_b='{}' is not 'col' or 'row'", layout_b));
    const bool col = *layout == kernels::MatrixLayout::col;
    auto rank = [](const PyGpuRef& r, std::size_t n, const char* what, const char* form) {
      if (r.shape().size() != n)
        raise(errc::invalid_argument, fmt::format("{}: {} must have shape {}", r.repr(), what, form));
    };
    rank(a, 2, "a", "(T, K)");
    rank(b, 3, "b", col ? "(G, N, K) for layout_b='col'" : "(G, K, N) for layout_b='row'");
    rank(offs, 1, "offs", "(G,)");
    rank(out, 2, "out", "(T, N)");
    if (offs.dtype() != DType::i32) raise(errc::invalid_argument, fmt::format("{}: offs must be i32", offs.repr()));
    if (a.dtype() != b.dtype())
      raise(errc::invalid_argument,
            fmt::format("a is {} and b is {}: one input dtype", a.dtype_name(), b.dtype_name()));
    const std::int64_t rows = a.shape()[0], k = a.shape()[1], groups = b.shape()[0];
    const std::int64_t n = col ? b.shape()[1] : b.shape()[2], bk = col ? b.shape()[2] : b.shape()[1];
    if (bk != k) raise(errc::invalid_argument, fmt::format("{}: K={} does not match a's K={}", b.repr(), bk, k));
    if (offs.shape()[0] != groups)
      raise(errc::invalid_argument,
            fmt::format("{}: {} offsets for G={} groups", offs.repr(), offs.shape()[0], groups));
    if (out.shape()[0] != rows || out.shape()[1] != n)
      raise(errc::invalid_argument, fmt::format("{}: must have shape ({}, {})", out.repr(), rows, n));
    if (size_bits(a.dtype()) != 16 || (size_bits(out.dtype()) != 16 && out.dtype() != DType::f32))
      raise(errc::unsupported,
            fmt::format("Device.grouped_mm multiplies bf16 or f16 into bf16, f16 or f32, not {} into {} "
                        "(fp8 needs scales: use cuactor.scaled_grouped_mm on tensors)",
                        a.dtype_name(), out.dtype_name()));
    kernels::GroupedGemmSpec spec;
    spec.a = spec.b = a.dtype();
    spec.d = out.dtype();
    spec.layout_b = *layout;
    spec.rows_per_group_hint = static_cast<int>(std::max<std::int64_t>(1, rows / std::max<std::int64_t>(1, groups)));
    spec.group_count_hint = kernels::shape_hint(groups);
    spec.n_hint = kernels::shape_hint(n);
    spec.k_hint = kernels::shape_hint(k);
    runtime::GpuRef<std::int32_t> offsets(offs.allocation());
    auto done = [out](auto) { return Payload(out); };
    if (out.dtype() == DType::f32) {
      kernels::PackedGroupedOperands<std::uint16_t, float> ops{
          runtime::GpuRef<std::uint16_t>(a.allocation()), runtime::GpuRef<std::uint16_t>(b.allocation()),
          runtime::GpuRef<float>(out.allocation()), static_cast<int>(n), static_cast<int>(k)};
      kernels::async_grouped_gemm_device_sized(actor(), plans_, spec, ops, offsets, rows, {},
                                               reply_to(queue_, id, "grouped_mm", done));
    } else {
      kernels::PackedGroupedOperands<std::uint16_t, std::uint16_t> ops{
          runtime::GpuRef<std::uint16_t>(a.allocation()), runtime::GpuRef<std::uint16_t>(b.allocation()),
          runtime::GpuRef<std::uint16_t>(out.allocation()), static_cast<int>(n), static_cast<int>(k)};
      kernels::async_grouped_gemm_device_sized(actor(), plans_, spec, ops, offsets, rows, {},
                                               reply_to(queue_, id, "grouped_mm", done));
    }
  }

  /// Every reply waiting, as (id, None, result) or (id, exception, None) tuples; runs on the event
  /// loop's thread with the GIL.
  nb::list drain() {
    nb::list out;
    for (Reply& r : queue_->take()) {
      if (r.ec) {
        out.append(nb::make_tuple(
            r.id, make_exception(r.ec, fmt::format("{} on device {}: {}", r.what, ordinal(), r.ec.message())),
            nb::none()));
        continue;
      }
      nb::object value = std::visit(
          [](auto& p) -> nb::object {
            using P = std::decay_t<decltype(p)>;
            if constexpr (std::is_same_v<P, std::monostate>) {
              return nb::none();
            } else if constexpr (std::is_same_v<P, PyGpuRef>) {
              return nb::cast(p);
            } else {
              return host_array(std::move(p.first), p.second);
            }
          },
          r.payload);
      out.append(nb::make_tuple(r.id, nb::none(), value));
    }
    return out;
  }

 private:
  /// A NumPy array owning `bytes`, shaped like `ref` (bf16 comes back as its uint16 bits, fp8 as uint8).
  static nb::object host_array(Bytes bytes, const PyGpuRef& ref) {
    auto* owned = new Bytes(std::move(bytes));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Bytes*>(p); });
    std::vector<std::size_t> shape(ref.shape().begin(), ref.shape().end());
    const auto bits = static_cast<std::uint8_t>(size_bits(ref.dtype()));
    nb::dlpack::dtype dt{static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt), bits, 1};
    if (ref.dtype() == DType::f16 || ref.dtype() == DType::f32 || ref.dtype() == DType::f64)
      dt.code = static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float);
    if (ref.dtype() == DType::i8 || ref.dtype() == DType::i32 || ref.dtype() == DType::i64)
      dt.code = static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int);
    nb::ndarray<nb::numpy> a(owned->data(), shape.size(), shape.data(), owner, nullptr, dt);
    return nb::cast(a);
  }

  runtime::DeviceActor& actor() const {
    if (!actor_) raise(errc::device_shutting_down, "the device was shut down");
    return const_cast<runtime::DeviceActor&>(*actor_);
  }

  std::shared_ptr<ReplyQueue> queue_;
  int ordinal_ = 0;
  // Declared before the actor: outlives every request using it. Consults the tuning database first.
  kernels::GroupedPlanCache plans_{64, jit::default_tuned_grouped_planner()};
  std::optional<runtime::DeviceActor> actor_;
};

}  // namespace

void bind_device(nb::module_& m) {
  nb::class_<PyGpuRef>(m, "GpuRef",
                       "A generation-checked device buffer of a cuactor.Device ([R2]): shared ownership of the "
                       "memory; every use checks that its device incarnation is still current. Exports through "
                       "DLPack (torch.from_dlpack(ref), cupy.from_dlpack(ref)) after that check.")
      .def_prop_ro("dtype", &PyGpuRef::dtype_name, "Element type name (bf16, f16, f32, i32, ...).")
      .def_prop_ro(
          "shape", [](const PyGpuRef& r) { return nb::tuple(nb::cast(r.shape())); }, "Shape.")
      .def_prop_ro("nbytes", &PyGpuRef::nbytes, "Size in bytes.")
      .def_prop_ro("device", &PyGpuRef::device, "CUDA ordinal.")
      .def_prop_ro("generation", &PyGpuRef::generation, "Device generation the buffer was minted in.")
      .def("is_valid", &PyGpuRef::valid, "True while the buffer's device incarnation is current.")
      .def("check", &PyGpuRef::check_access, "Raises StaleHandleError (naming the reason) unless the buffer is usable.")
      .def(
          "__dlpack__", [](const PyGpuRef& r, nb::handle stream, nb::kwargs) { return r.dlpack(stream); },
          nb::kw_only(), nb::arg("stream").none() = nb::none(), nb::arg("kwargs"),
          "DLPack capsule of the buffer after the generation check; the consumer's `stream` first waits for the "
          "buffer's last write (-1: no ordering). UnsupportedError for buffers of an isolated worker.")
      .def(
          "__dlpack_device__", [](const PyGpuRef& r) { return nb::make_tuple(2, r.device()); },
          "(2, ordinal): CUDA device memory.")
      .def("__repr__", &PyGpuRef::repr);

  nb::class_<DeviceCore>(m, "DeviceCore",
                         "The device actor under cuactor.Device (use that class): requests are tagged with ids and "
                         "their replies collected by drain() when fileno() is readable.")
      .def(nb::init<int, bool, const std::string&, std::size_t>(), nb::arg("ordinal"), nb::arg("isolated") = false,
           nb::arg("worker_path") = "", nb::arg("mailbox_capacity") = 1024)
      .def("fileno", &DeviceCore::fileno, "An eventfd that is readable while replies wait.")
      .def_prop_ro("ordinal", &DeviceCore::ordinal, "CUDA ordinal.")
      .def("shutdown", &DeviceCore::shutdown, "Stops the actor: queued requests fail with device_shutting_down.")
      .def("stats_json", &DeviceCore::stats_json, "DeviceStats as JSON text ([O2]).")
      .def("allocate", &DeviceCore::allocate, nb::arg("id"), nb::arg("shape"), nb::arg("dtype"))
      .def("copy_to_device", &DeviceCore::copy_to_device, nb::arg("id"), nb::arg("dst"), nb::arg("host"))
      .def("copy_to_host", &DeviceCore::copy_to_host, nb::arg("id"), nb::arg("src"))
      .def("fill", &DeviceCore::fill, nb::arg("id"), nb::arg("dst"), nb::arg("value"))
      .def("grouped_mm", &DeviceCore::grouped_mm, nb::arg("id"), nb::arg("a"), nb::arg("b"), nb::arg("offs"),
           nb::arg("out"), nb::arg("layout_b") = "col")
      .def("drain", &DeviceCore::drain, "Waiting replies as (id, exception or None, result or None) tuples.");
}

}  // namespace cuactor::pyext
