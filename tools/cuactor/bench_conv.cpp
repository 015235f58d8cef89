// `cuactor bench conv`: cuactor's 2-D convolution plans (fprop, dgrad, wgrad) on ResNet and Stable
// Diffusion layers, each beside cuBLAS computing a matrix product of the same implicit-GEMM size
// (M x N x K, same dtype) in the same run: how close a convolution comes to the dense GEMM of its
// work, and which kernel and split the plan chose (`--plan-only`: the plans alone, for a given
// architecture and multiprocessor count, without a device). The comparison with cuDNN runs through
// PyTorch (bench/conv_torch.py, on the same shapes): cuDNN is not a dependency of cuactor.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.hpp"
#include "commands.hpp"
#include "cuactor/core/arch.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/kernels/conv_plan.hpp"
#include "gemm_anchor.hpp"

namespace cuactor::cli {
namespace {

using kernels::ConvOperation;
using kernels::ConvPlan;
using kernels::ConvSpec;

struct ConvBenchOptions {
  std::vector<std::string> ops{"fprop", "dgrad", "wgrad"};
  std::vector<std::string> dtypes{"bf16", "f16"};
  std::vector<std::string> shapes;  ///< N,H,W,C,K,R,STRIDE (padding R / 2); empty: the built-in list
  std::string sku;                  ///< a catalog kernel instead of the heuristic's choice
  std::string split;                ///< IMAGESxROWS (wgrad) or 1x1xCHANNELS (fprop) instead of the plan's split
  int warmup = 5;
  int rounds = 3;
  int reps = 20;
  bool plan_only = false;       ///< print each case's plan without touching a device
  std::string arch = "sm_90a";  ///< --plan-only: the architecture planned for
  int sm_count = 132;           ///< --plan-only: its multiprocessor count (an H100 SXM's)
};

/// The built-in shapes (those of bench/conv_torch.py): ResNet-50 and Stable Diffusion layers, a
/// strided 3x3, and a 1x1 with few pixels and many filters.
const std::vector<std::string> kDefaultShapes = {"32,56,56,64,64,3,1",  "32,14,14,1024,256,1,1",
                                                 "2,64,64,320,320,3,1", "1,256,256,512,512,3,1",
                                                 "8,28,28,256,512,3,2", "16,7,7,512,2048,1,1"};

/// Positive integers separated by `sep`, exactly `count` of them; `invalid_argument` naming `what`.
Result<std::vector<std::int64_t>> parse_ints(const std::string& text, char sep, std::size_t count, const char* what,
                                             const char* form) {
  std::vector<std::int64_t> v;
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (;;) {
    std::int64_t x = 0;
    const auto [next, ec] = std::from_chars(p, end, x);
    if (ec != std::errc{} || x < 1 || (next != end && *next != sep)) {
      v.clear();
      break;
    }
    v.push_back(x);
    if (next == end) break;
    p = next + 1;
  }
  if (v.size() != count)
    return fail(errc::invalid_argument, fmt::format("{} {}: give {} positive integers {}", what, text, count, form));
  return v;
}

/// The spec of one shape, operation and dtype (padding R / 2 both ways, no dilation).
ConvSpec spec_of(const std::vector<std::int64_t>& shape, ConvOperation op, DType dtype) {
  ConvSpec s;
  s.operation = op;
  s.element = s.output = dtype;
  s.n = shape[0];
  s.h = shape[1];
  s.w = shape[2];
  s.c = shape[3];
  s.k = shape[4];
  s.r = s.s = shape[5];
  s.pad_h = s.pad_w = shape[5] / 2;
  s.stride_h = s.stride_w = shape[6];
  return s;
}

/// The cases the options ask for: every shape x dtype x operation, each planned with `base` (and
/// `split_op` with `split`, when given).
struct ConvCases {
  std::vector<ConvOperation> ops;
  std::vector<DType> dtypes;
  std::vector<std::vector<std::int64_t>> shapes;
  kernels::ConvPlanOptions base;
  std::optional<kernels::ConvSplit> split;
  ConvOperation split_op = ConvOperation::wgrad;  ///< the operation `split` applies to
};

/// One row per case, in the order shape, dtype, operation: the case's label, then what `row_text`
/// returns for its spec and plan options, or the error it returns. Returns how many rows failed.
template <class RowText>
int print_rows(const ConvCases& cases, RowText&& row_text) {
  int failures = 0;
  for (const auto& shape : cases.shapes)
    for (const DType dtype : cases.dtypes)
      for (const ConvOperation op : cases.ops) {
        kernels::ConvPlanOptions po = cases.base;
        if (op == cases.split_op) po.split_override = cases.split;
        const Result<std::string> text = row_text(spec_of(shape, op, dtype), po);
        std::cout << fmt::format(
            "{:<6} {:<5} {:<24} ", kernels::name(op), name(dtype),
            fmt::format("{},{},{},{},{},{},{}", shape[0], shape[1], shape[2], shape[3], shape[4], shape[5], shape[6]));
        if (text) {
          std::cout << *text << "\n";
        } else {
          ++failures;
          std::cout << "error: " << text.error().to_string() << "\n";
        }
      }
  return failures;
}

/// Elements of `buffer` (16-bit `dtype`) that are not finite: a result poisoned with NaN before the
/// checked run must have none left.
Result<std::size_t> non_finite(const gpu::DeviceBuffer& buffer, std::size_t elements, DType dtype,
                               cudaStream_t stream) {
  std::vector<std::uint16_t> host(elements);
  CUACTOR_CUDA_TRY(cudaMemcpyAsync(host.data(), buffer.data(), elements * 2, cudaMemcpyDeviceToHost, stream));
  CUACTOR_CUDA_TRY(cudaStreamSynchronize(stream));
  const std::uint16_t exponent = dtype == DType::bf16 ? 0x7f80 : 0x7c00;
  std::size_t bad = 0;
  for (std::uint16_t v : host) bad += (v & exponent) == exponent ? 1 : 0;
  return bad;
}

struct ConvRow {
  std::string kernel, source, split;
  std::array<std::int64_t, 3> mnk{};
  double flops = 0, ours_ms = 0, gemm_ms = 0;
};

Result<ConvRow> bench_case(const ConvSpec& spec, const kernels::ConvPlanOptions& po, const gpu::DeviceProperties& props,
                           const gpu::Stream& stream, const gpu::MemPool& pool, const ConvBenchOptions& opt) {
  auto plan = ConvPlan::create(spec, props.arch, po);
  if (!plan) return fail(plan.error());
  const cudaStream_t s = stream.get();
  const auto bytes = [&](std::int64_t elements) { return static_cast<std::size_t>(elements) * 2; };
  const std::size_t result_elements = static_cast<std::size_t>(spec.result_elements());
  auto x = gpu::DeviceBuffer::allocate(pool, bytes(spec.activation_elements()), s);
  auto w = gpu::DeviceBuffer::allocate(pool, bytes(spec.filter_elements()), s);
  auto dy = gpu::DeviceBuffer::allocate(pool, bytes(spec.output_elements()), s);
  auto out = gpu::DeviceBuffer::allocate(pool, bytes(spec.result_elements()), s);
  auto workspace = gpu::DeviceBuffer::allocate(pool, std::max<std::size_t>(plan->workspace_size(), 256), s);
  for (auto* b : {&x, &w, &dy, &out, &workspace})
    if (!*b) return fail(b->error());
  const kernels::ConvReads reads = kernels::reads_of(spec.operation);
  kernels::ConvTensors t;
  t.x = reads.x ? x->data() : nullptr;
  t.w = reads.w ? w->data() : nullptr;
  t.dy = reads.dy ? dy->data() : nullptr;
  t.out = out->data();
  CUACTOR_TRY(fill_random(x->data(), x->size(), spec.element, 1u, s));
  CUACTOR_TRY(fill_random(w->data(), w->size(), spec.element, 2u, s));
  CUACTOR_TRY(fill_random(dy->data(), dy->size(), spec.element, 3u, s));
  // Checked run: a kernel that leaves part of its result unwritten leaves NaN behind.
  CUACTOR_CUDA_TRY(cudaMemsetAsync(out->data(), 0xff, out->size(), s));
  CUACTOR_TRY(plan->run(t, workspace->data(), workspace->size(), s));
  auto bad = non_finite(*out, result_elements, spec.output, s);
  if (!bad) return fail(bad.error());
  if (*bad != 0)
    return fail(errc::internal, fmt::format("{}: {} of {} result elements not finite after the run", spec.to_string(),
                                            *bad, result_elements));

  // The anchor: cuBLAS on random operands of the implicit GEMM's size, row-major D = A B^T.
  ConvRow row;
  row.mnk = spec.implicit_gemm();
  kernels::GemmProblem p;
  p.m = row.mnk[0];
  p.n = row.mnk[1];
  p.k = row.mnk[2];
  p.a = p.b = p.c = p.d = spec.element;
  constexpr std::size_t kBlasWorkspace = std::size_t{32} << 20;
  auto a = gpu::DeviceBuffer::allocate(pool, bytes(p.m * p.k), s);
  auto b = gpu::DeviceBuffer::allocate(pool, bytes(p.k * p.n), s);
  auto d = gpu::DeviceBuffer::allocate(pool, bytes(p.m * p.n), s);
  auto blas_ws = gpu::DeviceBuffer::allocate(pool, kBlasWorkspace, s);
  for (auto* buf : {&a, &b, &d, &blas_ws})
    if (!*buf) return fail(buf->error());
  CUACTOR_TRY(fill_random(a->data(), a->size(), p.a, 4u, s));
  CUACTOR_TRY(fill_random(b->data(), b->size(), p.b, 5u, s));
  auto anchor = CublasAnchor::create(p, s, blas_ws->data(), kBlasWorkspace, nullptr, nullptr);
  if (!anchor) return fail(anchor.error());
  auto times = time_interleaved(
      s, opt.warmup, opt.rounds, opt.reps, [&](int) { return plan->run(t, workspace->data(), workspace->size(), s); },
      [&](int) { return (*anchor)->run(a->data(), b->data(), d->data()); });
  if (!times) return fail(times.error());
  row.kernel = fmt::format("{} {}", plan->sku().arch.name(), short_sku_name(plan->sku()));
  row.source = std::string(kernels::name(plan->source()));
  row.split = plan->split().to_string();
  row.flops = plan->flops();
  row.ours_ms = times->first;
  row.gemm_ms = times->second;
  return row;
}

/// `--plan-only`: each case's plan for the given architecture and multiprocessor count (the kernel,
/// the split and the workspace that `cuactor bench conv` would run, and that `cuactor jit warm --conv`
/// can compile ahead, or `--gemm` for a pointwise fprop's dense kernel), computed on the host alone.
Status print_plans(ConvCases cases, const ConvBenchOptions& opt) {
  const auto arch = parse_arch(opt.arch);
  if (!arch)
    return fail(errc::invalid_argument,
                fmt::format("--arch {}: give a GPU architecture such as sm_90a or sm_80", opt.arch));
  if (opt.sm_count < 1)
    return fail(errc::invalid_argument,
                fmt::format("--sm-count {}: give the device's multiprocessor count (>= 1)", opt.sm_count));
  cases.base.sm_count = opt.sm_count;
  std::cout << fmt::format("cuactor bench conv --plan-only: plans for {} with {} SMs (no device touched)\n",
                           arch->name(), opt.sm_count);
  std::cout << fmt::format("{:<6} {:<5} {:<24} {:<10} {:<7} {:>10}  {}\n", "op", "dtype", "N,H,W,C,K,R,stride", "plan",
                           "split", "workspace", "kernel");
  const int failures =
      print_rows(cases, [&](const ConvSpec& spec, const kernels::ConvPlanOptions& po) -> Result<std::string> {
        auto plan = ConvPlan::create(spec, *arch, po);
        if (!plan) return fail(plan.error());
        return fmt::format("{:<10} {:<7} {:>10}  {}", kernels::name(plan->source()), plan->split().to_string(),
                           plan->workspace_size(), plan->sku().to_string());
      });
  if (failures > 0) return fail(errc::unsupported, fmt::format("{} case(s) have no plan", failures));
  return ok();
}

Status run_bench_conv(const ConvBenchOptions& opt) {
  // Every option's form is checked before a device is touched (a shape's own rules, by the plan).
  CUACTOR_TRY(check_timing_options(opt.warmup, opt.rounds, opt.reps));
  ConvCases cases;
  for (const auto& text : opt.ops) {
    const auto op = kernels::parse_conv_operation(text);
    if (!op) return fail(errc::invalid_argument, fmt::format("--op {}: choose fprop, dgrad or wgrad", text));
    cases.ops.push_back(*op);
  }
  for (const auto& text : opt.dtypes) {
    if (text != "bf16" && text != "f16")
      return fail(errc::invalid_argument,
                  fmt::format("--dtype {}: choose bf16 or f16 (the dtypes every operation has kernels for)", text));
    cases.dtypes.push_back(text == "bf16" ? DType::bf16 : DType::f16);
  }
  for (const auto& text : opt.shapes.empty() ? kDefaultShapes : opt.shapes) {
    auto shape = parse_ints(text, ',', 7, "--shape", "N,H,W,C,K,R,STRIDE");
    if (!shape) return fail(shape.error());
    cases.shapes.push_back(*shape);
  }
  if (!opt.sku.empty()) {
    auto sku = kernels::GemmSku::parse(opt.sku);
    if (!sku) return fail(sku.error());
    cases.base.sku_override = *sku;
  }
  if (!opt.split.empty()) {
    const bool channels = std::count(opt.split.begin(), opt.split.end(), 'x') == 2;
    auto counts = parse_ints(opt.split, 'x', channels ? 3 : 2, "--split", "IMAGESxROWS or 1x1xCHANNELS");
    if (!counts) return fail(counts.error());
    if (channels && ((*counts)[0] != 1 || (*counts)[1] != 1 || (*counts)[2] > kernels::kMaxConvChannelSlices))
      return fail(errc::invalid_argument,
                  fmt::format("--split {}: an fprop split is 1x1xCHANNELS with CHANNELS in [1, {}]", opt.split,
                              kernels::kMaxConvChannelSlices));
    if (!channels && ((*counts)[0] > kernels::kMaxConvSlices || (*counts)[1] > kernels::kMaxConvSlices))
      return fail(errc::invalid_argument,
                  fmt::format("--split {}: each count must lie in [1, {}]", opt.split, kernels::kMaxConvSlices));
    cases.split = kernels::ConvSplit{static_cast<int>((*counts)[0]), static_cast<int>((*counts)[1]),
                                     channels ? static_cast<int>((*counts)[2]) : 1};
    cases.split_op = channels ? ConvOperation::fprop : ConvOperation::wgrad;
    if (std::find(cases.ops.begin(), cases.ops.end(), cases.split_op) == cases.ops.end())
      return fail(errc::invalid_argument,
                  fmt::format("--split {}: it splits {} (wgrad splits IMAGESxROWS, fprop 1x1xCHANNELS), and --op "
                              "leaves {} out",
                              opt.split, kernels::name(cases.split_op), kernels::name(cases.split_op)));
  }

  if (opt.plan_only) return print_plans(std::move(cases), opt);

  auto dev = BenchDevice::open("cuactor bench conv needs a CUDA device (none is visible)");
  if (!dev) return fail(dev.error());
  const gpu::DeviceProperties& props = dev->props;
  cases.base.sm_count = props.multiprocessors;
  std::cout << fmt::format(
      "cuactor bench conv: {} ({}, {} SMs); median of {}x{} event-timed launches per side after {} warm-up, "
      "interleaved; anchor: cuBLAS (cublasGemmEx) on a matrix product of the implicit GEMM's M x N x K; cuDNN: "
      "bench/conv_torch.py\n",
      props.name, props.arch.name(), props.multiprocessors, opt.rounds, opt.reps, opt.warmup);
  std::cout << fmt::format("{:<6} {:<5} {:<24} {:>7} {:>6} {:>7}  {:>8} {:>8} {:>6}  {:<10} {:<7} {}\n", "op", "dtype",
                           "N,H,W,C,K,R,stride", "M", "N", "K", "cuactor", "GEMM", "ratio", "plan", "split", "kernel");
  const int failures =
      print_rows(cases, [&](const ConvSpec& spec, const kernels::ConvPlanOptions& po) -> Result<std::string> {
        auto row = bench_case(spec, po, props, dev->stream, dev->pool, opt);
        if (!row) return fail(row.error());
        const double ours_tf = row->flops / (row->ours_ms * 1e-3) / 1e12;
        const double gemm_tf = row->flops / (row->gemm_ms * 1e-3) / 1e12;
        return fmt::format("{:>7} {:>6} {:>7}  {:>8.1f} {:>8.1f} {:>5.2f}x  {:<10} {:<7} {}", row->mnk[0], row->mnk[1],
                           row->mnk[2], ours_tf, gemm_tf, ours_tf / gemm_tf, row->source, row->split, row->kernel);
      });
  if (failures > 0) return fail(errc::internal, fmt::format("{} benchmark case(s) failed", failures));
  return ok();
}

}  // namespace

void add_bench_conv_command(CLI::App& app) {
  auto* cmd = bench_command(app).add_subcommand(
      "conv",
      "conv2d fprop / dgrad / wgrad plans beside cuBLAS on a matrix product of the same implicit-GEMM size "
      "(TFLOP/s, ratio, kernel, split); cuDNN: bench/conv_torch.py");
  auto opt = std::make_shared<ConvBenchOptions>();
  cmd->add_option("--op", opt->ops, "Operations: fprop, dgrad, wgrad (repeatable; default all three)");
  cmd->add_option("--dtype", opt->dtypes, "Element types: bf16, f16 (repeatable; default both)");
  cmd->add_option("--shape", opt->shapes,
                  "N,H,W,C,K,R,STRIDE with an R x R filter and padding R / 2 (repeatable; default: the layers of "
                  "bench/conv_torch.py)");
  cmd->add_option("--sku", opt->sku, "Run this catalog kernel instead of the heuristic's choice");
  cmd->add_option(
      "--split", opt->split,
      "Split the reduction instead of the plan's choice: wgrad IMAGESxROWS, fprop 1x1xCHANNELS (input channel ranges)");
  cmd->add_option("--reps", opt->reps, "Timed repetitions per side and round (median reported)");
  cmd->add_option("--rounds", opt->rounds, "Interleaved rounds of both sides");
  cmd->add_option("--warmup", opt->warmup, "Untimed warm-up launches per side");
  auto* plan_only = cmd->add_flag("--plan-only", opt->plan_only,
                                  "Print each case's plan (kernel, split, workspace) for --arch and --sm-count "
                                  "without a device, e.g. to warm the JIT for it on a build machine");
  cmd->add_option("--arch", opt->arch, "--plan-only: the GPU architecture planned for (default sm_90a)")
      ->needs(plan_only);
  cmd->add_option("--sm-count", opt->sm_count, "--plan-only: its multiprocessor count (default 132, an H100 SXM's)")
      ->needs(plan_only);
  cmd->callback([opt] {
    if (auto s = run_bench_conv(*opt); !s) {
      std::cerr << "cuactor bench conv: " << s.error().to_string() << "\n";
      std::exit(s.error() == errc::invalid_argument ? 2 : 1);  // 2: a bad option, checked before the device
    }
  });
}

}  // namespace cuactor::cli
