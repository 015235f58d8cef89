// 2-D convolution on tensors ([K7] from Python): conv2d (fprop), conv2d_backward_data (dgrad) and
// conv2d_backward_weight (wgrad) through ConvPlan, on channels-last tensors (activations N x H x W x C,
// filters K x R x S x C, both packed). Plans come from a ConvPlanCache; each launch goes onto the
// caller's stream without allocating outside stream order or synchronising, so torch.cuda.graph
// captures it. Shape and layout rules are checked before the device ones, so they hold without a GPU.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "cuactor/kernels/conv_plan.hpp"
#include "cuactor/kernels/conv_plan_cache.hpp"
#include "ops.hpp"

namespace cuactor::pyext {
namespace {

using Pair = std::array<std::int64_t, 2>;
/// A split: images, rows (wgrad) and input-channel ranges (fprop), as kernels::ConvSplit.
using SplitCounts = std::array<std::int64_t, 3>;

kernels::ConvPlanCache& conv_plans() {
  static kernels::ConvPlanCache cache;
  return cache;
}

/// The names of the tensors of one operation, for messages: its two inputs and its result.
struct ConvRoles {
  const char* a;
  const char* b;
  const char* a_dims;
  const char* b_dims;
  const char* out_dims;
};

ConvRoles roles_of(kernels::ConvOperation op) {
  switch (op) {
    case kernels::ConvOperation::fprop:
      return {"x", "w", "N x H x W x C", "K x R x S x C", "N x P x Q x K"};
    case kernels::ConvOperation::dgrad:
      return {"dy", "w", "N x P x Q x K", "K x R x S x C", "N x H x W x C"};
    case kernels::ConvOperation::wgrad:
      break;
  }
  return {"dy", "x", "N x P x Q x K", "N x H x W x C", "K x R x S x C"};
}

/// Checks that `t` is rank 4 and packed in the order of its dimensions `dims` (channels contiguous).
void require_packed(const TensorArg& t, const char* dims) {
  const std::string what = fmt::format("a {} tensor", dims);
  require_rank(t, 4, what.c_str());
  std::array<std::int64_t, 4> packed{};
  std::int64_t stride = 1;
  bool ok = true;
  for (int i = 3; i >= 0; --i) {
    const auto u = static_cast<std::size_t>(i);
    packed[u] = stride;
    if (t.shape[u] > 1 && t.strides[u] != stride) ok = false;  // a size-1 dimension's stride is never used
    stride *= t.shape[u];
  }
  if (!ok)
    raise(errc::invalid_argument,
          fmt::format("{}: must be packed {} with the channels contiguous (strides ({})); a torch tensor in the "
                      "channels_last memory format passes as t.permute(0, 2, 3, 1) without a copy",
                      t.describe(), dims, fmt::join(packed, ", ")));
}

/// Checks that dimension `dim` (called `what`) of `t` equals the one `from` has.
void require_extent(const TensorArg& t, std::size_t dim, const TensorArg& from, std::size_t from_dim,
                    const char* what) {
  if (t.shape[dim] != from.shape[from_dim])
    raise(errc::invalid_argument, fmt::format("{}: {}={} does not match {}'s {}={}", t.describe(), what, t.shape[dim],
                                              from.name, what, from.shape[from_dim]));
}

/// One convolution: imports and checks `a`, `b` (the inputs) and `out` (the result) in the roles of
/// `op`, plans it (cached) and enqueues it on `stream` (see LaunchSource).
void conv(kernels::ConvOperation op, nb::handle a_obj, nb::handle b_obj, nb::handle out_obj,
          std::optional<std::uintptr_t> stream, const Pair& stride, const Pair& padding, const Pair& dilation,
          nb::handle alloc_obj, const std::optional<std::string>& sku, const std::optional<SplitCounts>& split) {
  using kernels::ConvOperation;
  const LaunchSource source(stream, alloc_obj, a_obj);
  const std::optional<kernels::GemmSku> sku_override =
      sku ? std::optional(unwrap(kernels::GemmSku::parse(*sku))) : std::nullopt;
  const ConvRoles roles = roles_of(op);
  const TensorArg a = import_tensor(a_obj, roles.a), b = import_tensor(b_obj, roles.b),
                  out = import_tensor(out_obj, "out");
  // Shapes and layouts first: these rules hold (and are tested) without a GPU.
  require_packed(a, roles.a_dims);
  require_packed(b, roles.b_dims);
  require_packed(out, roles.out_dims);
  if (a.dtype != b.dtype)
    raise(errc::invalid_argument, fmt::format("{} is {} and {} is {}: a convolution needs one input dtype", a.name,
                                              name(a.dtype), b.name, name(b.dtype)));
  // Each role's tensor: the activation x (N H W C), the filter w (K R S C), the output side dy (N P Q K).
  const TensorArg* x = op == ConvOperation::fprop ? &a : op == ConvOperation::dgrad ? &out : &b;
  const TensorArg* w = op == ConvOperation::wgrad ? &out : &b;
  const TensorArg* dy = op == ConvOperation::fprop ? &out : &a;
  require_extent(*w, 3, *x, 3, "C");
  require_extent(*dy, 0, *x, 0, "N");
  require_extent(*dy, 3, *w, 0, "K");

  kernels::ConvSpec spec;
  spec.operation = op;
  spec.element = a.dtype;
  spec.output = out.dtype;
  spec.n = x->shape[0];
  spec.h = x->shape[1];
  spec.w = x->shape[2];
  spec.c = x->shape[3];
  spec.k = w->shape[0];
  spec.r = w->shape[1];
  spec.s = w->shape[2];
  spec.stride_h = stride[0];
  spec.stride_w = stride[1];
  spec.pad_h = padding[0];
  spec.pad_w = padding[1];
  spec.dilation_h = dilation[0];
  spec.dilation_w = dilation[1];

  for (const TensorArg* t : {&a, &b, &out}) require_cuda(*t);
  require_same_device(b, a.device);
  require_same_device(out, a.device);
  const DeviceFacts& facts = device_facts(a.device);
  kernels::ConvPlanOptions options;
  options.sm_count = facts.sm_count;
  options.device = a.device;
  options.sku_override = sku_override;
  if (split) {
    // The plan checks the split's rules; here only that each count fits its int.
    const auto [images, rows, channels] = *split;
    if (images < 1 || images > kernels::kMaxConvSlices || rows < 1 || rows > kernels::kMaxConvSlices)
      raise(errc::invalid_argument, fmt::format("split=({}, {}): each count must lie in [1, {}] (images, rows)", images,
                                                rows, kernels::kMaxConvSlices));
    if (channels < 1 || channels > kernels::kMaxConvChannelSlices)
      raise(errc::invalid_argument, fmt::format("split={}: the input channels split into [1, {}] ranges", channels,
                                                kernels::kMaxConvChannelSlices));
    options.split_override =
        kernels::ConvSplit{static_cast<int>(images), static_cast<int>(rows), static_cast<int>(channels)};
  }
  // Malformed specs (stride, padding, an empty output, channel alignment) and those without a kernel
  // are rejected here, naming the value and the rule; failures are not cached.
  const kernels::ConvPlan plan = unwrap(conv_plans().get(spec, facts.arch, options));
  if (dy->shape[1] != spec.p() || dy->shape[2] != spec.q())
    raise(errc::invalid_argument,
          fmt::format("{}: P={}, Q={}, but {} gives P={}, Q={} (P = (H + 2 pad_h - dilation_h (R - 1) - 1) / stride_h "
                      "+ 1, likewise Q)",
                      dy->describe(), dy->shape[1], dy->shape[2], spec.to_string(), spec.p(), spec.q()));

  kernels::ConvTensors t;  // only what the operation reads
  const kernels::ConvReads reads = kernels::reads_of(op);
  t.x = reads.x ? x->data : nullptr;
  t.w = reads.w ? w->data : nullptr;
  t.dy = reads.dy ? dy->data : nullptr;
  t.out = out.data;
  check(plan.validate(t));
  const auto bytes = [](const TensorArg& v, bool read) {
    return read ? static_cast<std::size_t>(v.extent_bytes()) : 0;
  };
  check(plan.check_buffer_sizes(bytes(*x, t.x != nullptr), bytes(*w, t.w != nullptr), bytes(*dy, t.dy != nullptr),
                                bytes(out, true), 0));
  const DeviceGuard guard(a.device);
  const Launch launch = source.on(a.device);
  const Workspace ws(plan.workspace_size(), launch.alloc, launch.stream, a.device);
  check(plan.run(t, ws.data(), ws.bytes(), launch.stream));
}

}  // namespace

void bind_conv(nb::module_& m) {
  struct Binding {
    const char* name;
    kernels::ConvOperation op;
    const char* a;
    const char* b;
    const char* doc;
  };
  const Binding bindings[] = {
      {"conv2d", kernels::ConvOperation::fprop, "x", "w",
       "Convolution forward on `stream` (a cudaStream_t as an integer; None: torch's current stream for torch tensors) "
       "with a cached ConvPlan: out (N, P, Q, K) = conv(x (N, H, W, C), w (K, R, S, C)); `stride`, `padding` "
       "(symmetric) and `dilation` are (height, width) pairs. Every tensor is packed in the order of its dimensions "
       "(channels contiguous) and on one CUDA device. `alloc` gives the plan's workspace, if any, as for mm (default: "
       "torch's caching allocator for torch tensors, else stream-ordered from the device's pool). `sku` (a GemmSku "
       "text) runs exactly that catalog kernel instead of the heuristic's choice; `split` (images, rows, channels) "
       "slices the reduction into that many ranges instead of the plan's split: wgrad splits images and rows, fprop "
       "its input channels. Raises the cuactor.errors class "
       "of the failure."},
      {"conv2d_backward_data", kernels::ConvOperation::dgrad, "dy", "w",
       "Convolution data gradient, as conv2d: out = dx (N, H, W, C) from dy (N, P, Q, K) and w (K, R, S, C); H and W "
       "are out's. It is never split (a `split` other than (1, 1, 1) is refused)."},
      {"conv2d_backward_weight", kernels::ConvOperation::wgrad, "dy", "x",
       "Convolution filter gradient, as conv2d: out = dw (K, R, S, C) from dy (N, P, Q, K) and x (N, H, W, C); R and S "
       "are out's."},
  };
  for (const Binding& d : bindings)
    m.def(
        d.name,
        [op = d.op](nb::handle a, nb::handle b, nb::handle out, std::optional<std::uintptr_t> stream,
                    const Pair& stride, const Pair& padding, const Pair& dilation, nb::handle alloc,
                    const std::optional<std::string>& sku, const std::optional<SplitCounts>& split) {
          conv(op, a, b, out, stream, stride, padding, dilation, alloc, sku, split);
        },
        nb::arg(d.a).none(), nb::arg(d.b).none(), nb::arg("out").none(), nb::arg("stream").none(), nb::arg("stride"),
        nb::arg("padding"), nb::arg("dilation"), nb::arg("alloc").none() = nb::none(),
        nb::arg("sku").none() = nb::none(), nb::arg("split").none() = nb::none(), d.doc);
}

}  // namespace cuactor::pyext
