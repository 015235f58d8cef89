// Plan objects for callers who prepare once ([K4]): GroupedGemmPlan -> prepare(...) ->
// PreparedGroupedGemm.run(stream, workspace), with the operands' Python objects kept alive by the
// prepared object (a captured graph that replays it needs them).
#include <fmt/format.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <vector>

#include "cuactor/kernels/grouped_gemm.hpp"
#include "cuactor/kernels/grouped_plan_cache.hpp"
#include "ops.hpp"

namespace cuactor::pyext {
namespace {

/// A prepared grouped GEMM and the Python objects of the buffers it names.
class PreparedGrouped {
 public:
  PreparedGrouped(kernels::PreparedGroupedGemm prepared, std::vector<nb::object> keep, int device)
      : prepared_(std::move(prepared)), keep_(std::move(keep)), device_(device) {}

  [[nodiscard]] std::size_t workspace_size() const noexcept { return prepared_.workspace_size(); }
  [[nodiscard]] std::string sku() const { return prepared_.sku().to_string(); }
  [[nodiscard]] int group_count() const noexcept { return prepared_.group_count(); }
  [[nodiscard]] int device() const noexcept { return device_; }

  void run(std::uintptr_t stream_handle, nb::handle workspace) const {
    const DeviceGuard guard(device_);
    const cudaStream_t stream = stream_from(stream_handle);
    if (workspace.is_none()) {
      Workspace ws(workspace_size(), nb::none(), stream, device_);
      check(prepared_.run(stream, ws.data(), ws.bytes()));
      return;
    }
    const TensorArg t = import_tensor(workspace, "workspace");
    require_cuda(t);
    require_same_device(t, device_);
    check(prepared_.run(stream, t.data, static_cast<std::size_t>(t.extent_bytes())));
  }

 private:
  kernels::PreparedGroupedGemm prepared_;
  std::vector<nb::object> keep_;
  int device_ = 0;
};

/// A grouped GEMM plan for operands like the example ones (dtype, out dtype, B layout, device).
class GroupedPlan {
 public:
  GroupedPlan(const std::string& dtype, const std::string& out_dtype, const std::string& layout_b, int device,
              int rows_per_group_hint, const std::optional<std::string>& sku, const std::string& scales, int n_hint,
              int k_hint) {
    const DeviceFacts& facts = device_facts(device);
    kernels::GroupedGemmSpec spec;
    spec.a = spec.b = dtype_from_name(dtype);
    spec.d = dtype_from_name(out_dtype);
    auto layout = kernels::parse_layout(layout_b);
    if (!layout)
      raise(errc::invalid_argument, fmt::format("layout_b='{}' is not 'col' (b[g] stored N x K) or 'row'", layout_b));
    spec.layout_b = *layout;
    spec.arch = facts.arch;
    spec.sm_count = facts.sm_count;
    spec.device = device;
    spec.rows_per_group_hint = rows_per_group_hint;
    spec.n_hint = n_hint;
    spec.k_hint = k_hint;
    if (scales == "rowwise") {
      if (spec.a != DType::e4m3)
        raise(errc::invalid_argument, fmt::format("scales='rowwise' is for e4m3 inputs; dtype is {}", name(spec.a)));
      spec.epilogue = kernels::rowwise_scaled_epilogue();
    } else if (scales != "tensor") {
      raise(errc::invalid_argument, fmt::format("scales='{}' is not 'tensor' (per-tensor fp8 scales, or none) or "
                                                "'rowwise' (scale_a (T,), scale_b (G, N))",
                                                scales));
    }
    if (sku) spec.sku_override = unwrap(kernels::GemmSku::parse(*sku));
    plan_ = std::make_shared<const kernels::GroupedGemmPlan>(unwrap(kernels::GroupedGemmPlan::create(spec)));
  }

  [[nodiscard]] std::string sku() const { return plan_->sku().to_string(); }

  PreparedGrouped prepare(nb::handle a, nb::handle b, nb::handle offs, nb::handle out, nb::handle scale_a,
                          nb::handle scale_b, std::optional<std::string> ab_dtype) const {
    const kernels::GroupedGemmSpec& spec = plan_->spec();
    const auto ops = import_grouped(a, b, offs, out, scale_a, scale_b,
                                    ab_dtype ? std::optional(dtype_from_name(*ab_dtype)) : std::nullopt);
    if (ops.a.dtype != spec.a || ops.out.dtype != spec.d)
      raise(errc::invalid_argument, fmt::format("a is {} and out is {}, but the plan multiplies {} into {}",
                                                name(ops.a.dtype), name(ops.out.dtype), name(spec.a), name(spec.d)));
    if (ops.layout_b != spec.layout_b)
      raise(errc::invalid_argument,
            fmt::format("{}: its matrices are stored layout_b={}, the plan takes layout_b={}", ops.b.describe(),
                        kernels::name(ops.layout_b), kernels::name(spec.layout_b)));
    require_same_device(ops.a, spec.device);
    if (ops.rowwise != !spec.epilogue.is_preset())
      raise(errc::invalid_argument,
            ops.rowwise ? "scale_b is 2-D (row-wise scales), but the plan was made with scales='tensor'"
                        : "the plan was made with scales='rowwise': scale_a must be (T,) and scale_b (G, N)");
    std::vector<nb::object> keep{ops.a.owner, ops.b.owner, ops.offs.owner, ops.out.owner};
    if (ops.scale_a) keep.push_back(ops.scale_a->owner);
    if (ops.scale_b) keep.push_back(ops.scale_b->owner);
    return PreparedGrouped(unwrap(plan_->prepare(device_sized(ops), grouped_scalars(ops))), std::move(keep),
                           spec.device);
  }

 private:
  std::shared_ptr<const kernels::GroupedGemmPlan> plan_;
};

}  // namespace

void bind_plans(nb::module_& m) {
  nb::class_<PreparedGrouped>(m, "PreparedGroupedGemm",
                              "A grouped GEMM bound to its operands: validated once, run many times (also inside "
                              "torch.cuda.graph). Keeps the operands alive; their group rows are read from offs in "
                              "device memory at each run, so new routings need no new prepare.")
      .def_prop_ro("workspace_size", &PreparedGrouped::workspace_size, "Device workspace bytes run() needs.")
      .def_prop_ro("sku", &PreparedGrouped::sku, "The kernel's GemmSku text.")
      .def_prop_ro("group_count", &PreparedGrouped::group_count, "Number of groups.")
      .def_prop_ro("device", &PreparedGrouped::device, "CUDA ordinal the work runs on.")
      .def("run", &PreparedGrouped::run, nb::arg("stream"), nb::arg("workspace").none() = nb::none(),
           "Enqueues the metadata build and the kernel on `stream` (a cudaStream_t as an integer): no allocation "
           "when `workspace` (a device tensor of at least workspace_size bytes, 256-byte aligned) is given, no "
           "synchronisation. Without one, the workspace is stream-ordered from the device's pool.");
  nb::class_<GroupedPlan>(m, "GroupedGemmPlan",
                          "A host-only grouped GEMM plan: the catalog kernel (SKU) for an input dtype, an output "
                          "dtype, the layout of B and a device. Raises UnsupportedError when no kernel computes it.")
      .def(nb::init<const std::string&, const std::string&, const std::string&, int, int,
                    const std::optional<std::string>&, const std::string&, int, int>(),
           nb::arg("dtype"), nb::arg("out_dtype"), nb::arg("layout_b") = "col", nb::arg("device") = 0,
           nb::arg("rows_per_group_hint") = 0, nb::arg("sku").none() = nb::none(), nb::arg("scales") = "tensor",
           nb::arg("n_hint") = 0, nb::arg("k_hint") = 0,
           "dtype: bf16, f16 or e4m3; out_dtype: bf16, f16 or f32; layout_b: 'col' (b[g] stored N x K, torch's "
           "transposed weights) or 'row' (K x N); rows_per_group_hint, n_hint and k_hint (0: unknown) pick the size "
           "class as the functional calls do: <= 64 rows the small-M kernel, a few hundred rows with N and K known "
           "(<= 4096; e4m3 <= 8192) the medium one; sku forces one compiled kernel; scales: 'tensor' (e4m3: per-tensor "
           "scale_a (1 or G) and scale_b (G)) or 'rowwise' (e4m3: scale_a (T,) per row, scale_b (G, N) per group and "
           "column, as torch._scaled_grouped_mm).")
      .def_prop_ro("sku", &GroupedPlan::sku, "The chosen kernel's GemmSku text.")
      .def("prepare", &GroupedPlan::prepare, nb::arg("a").none(), nb::arg("b").none(), nb::arg("offs").none(),
           nb::arg("out").none(), nb::arg("scale_a").none() = nb::none(), nb::arg("scale_b").none() = nb::none(),
           nb::arg("ab_dtype").none() = nb::none(),
           "Validates torch._grouped_mm-style operands (a (T, K), b (G, K, N), offs (G,) int32 on the device, out "
           "(T, N); fp8 scales) against the plan and returns a PreparedGroupedGemm. Host only: no device work.");
}

}  // namespace cuactor::pyext
