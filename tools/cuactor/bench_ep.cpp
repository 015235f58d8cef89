// `cuactor bench ep`: the expert-parallel MoE layer over every visible device (one rank each, this
// process driving them), eager and replayed from a captured graph, and its dispatch + combine
// communication alone. bench/ep_torch.py runs the PyTorch formulation on the same shapes and prints
// both side by side.
#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "commands.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/graph.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/parallel/expert_parallel.hpp"
#include "json_output.hpp"

namespace cuactor::cli {
namespace {

struct EpShape {
  std::string name;
  int tokens = 0;  // per rank
  int hidden = 0;
  int ffn = 0;
  int experts = 0;
  int top_k = 0;
};

// The shapes: DeepSeek-V3-like prefill and decode, and a Qwen3-MoE-like prefill.
const std::vector<EpShape> kShapes = {
    {"h7168 f2048 e64 k8 prefill", 4096, 7168, 2048, 64, 8},
    {"h7168 f2048 e64 k8 decode", 128, 7168, 2048, 64, 8},
    {"h4096 f1536 e128 k8 prefill", 4096, 4096, 1536, 128, 8},
};

struct Options {
  int reps = 20;
  int warmup = 3;
  int ranks = 0;  // 0: every visible device
  bool json = false;
  bool interleaved = false;  // gate/up weights interleaved: the SwiGLU in the gate/up GEMM's epilogue
  std::string only;
};

/// The gate/up weight layout the options ask for, as printed.
const char* layout_name(const Options& opt) {
  return opt.interleaved ? "interleaved" : "stacked";
}

/// One rank's tensors.
struct Rank {
  gpu::Stream stream;
  gpu::MemPool pool;
  gpu::DeviceBuffer x, ids, weights, w_gate_up, w_down, out, workspace, comm_send, comm_recv;
};

/// Uniform top-k routing without repeats per token, weights in [0.1, 1): `tokens` x `top_k`.
void random_routing(int tokens, int experts, int top_k, unsigned seed, std::vector<std::int32_t>& ids,
                    std::vector<float>& weights) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> w(0.1f, 1.0f);
  std::vector<int> all(static_cast<std::size_t>(experts));
  std::iota(all.begin(), all.end(), 0);
  ids.clear();
  weights.clear();
  for (int t = 0; t < tokens; ++t) {
    for (int j = 0; j < top_k; ++j) {  // a partial Fisher-Yates shuffle picks k distinct experts
      std::uniform_int_distribution<int> pick(j, experts - 1);
      std::swap(all[static_cast<std::size_t>(j)], all[static_cast<std::size_t>(pick(rng))]);
      ids.push_back(all[static_cast<std::size_t>(j)]);
      weights.push_back(w(rng));
    }
  }
}

/// Milliseconds per call of `step` (which issues one forward on every rank): wall time over `reps`
/// calls after `warmup`, every device synchronised before and after, so host issue time counts as it
/// does for a caller.
template <class Step>
Result<double> wall_ms(std::vector<Rank>& ranks, int warmup, int reps, Step&& step) {
  auto sync_all = [&]() -> Status {
    for (Rank& r : ranks) CUACTOR_TRY(r.stream.synchronize());
    return ok();
  };
  for (int i = 0; i < warmup; ++i) CUACTOR_TRY(step());
  CUACTOR_TRY(sync_all());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) CUACTOR_TRY(step());
  CUACTOR_TRY(sync_all());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / reps;
}

/// Milliseconds per replay of `step` captured into one graph per rank (this thread issues it on every
/// rank's stream while they all capture), timed like `wall_ms`.
template <class Step>
Result<double> replayed_ms(std::vector<Rank>& ranks, const Options& opt, Step&& step) {
  std::size_t begun = 0;
  Status captured = ok();
  for (; begun < ranks.size() && captured; ++begun)
    captured = gpu::begin_stream_capture(ranks[begun].stream.get(), gpu::CaptureMode::relaxed);
  if (!captured) --begun;  // the failed one did not begin
  if (captured) captured = step();
  std::vector<gpu::GraphExec> execs;
  Status ended = ok();
  for (std::size_t r = 0; r < begun; ++r) {  // every begun capture ends, so no stream is left capturing
    auto graph = gpu::end_stream_capture(ranks[r].stream.get());
    if (!graph) {
      ended = fail(graph.error());
      continue;
    }
    auto exec = gpu::GraphExec::instantiate(*graph);
    if (!exec)
      ended = fail(exec.error());
    else
      execs.push_back(std::move(*exec));
  }
  CUACTOR_TRY(captured);
  CUACTOR_TRY(ended);
  return wall_ms(ranks, opt.warmup, opt.reps, [&]() -> Status {
    for (std::size_t r = 0; r < execs.size(); ++r) {
      auto device = gpu::ScopedDevice::make(static_cast<int>(r));
      if (!device) return fail(device.error());
      CUACTOR_TRY(execs[r].launch(ranks[r].stream.get()));
    }
    return ok();
  });
}

struct EpRow {
  EpShape shape;
  int ranks = 0;
  double eager_ms = 0, graph_ms = 0, comm_ms = 0, comm_graph_ms = 0;
  double comm_bytes = 0;  // per rank: gathered tokens in, partial sums out
  double flops = 0;       // all ranks: 2 * routed rows * 3 * H * F
  bool fused_swiglu = false;
};

Result<EpRow> bench_shape(const EpShape& shape, std::vector<parallel::Communicator>& comms, const Options& opt) {
  const int ranks = static_cast<int>(comms.size());
  std::vector<parallel::ExpertParallelMoe> layers;
  std::vector<Rank> state(static_cast<std::size_t>(ranks));
  std::vector<parallel::ExpertParallelTensors> tensors;
  std::vector<void*> workspaces;
  std::vector<cudaStream_t> streams;
  const int local = shape.experts / ranks;
  for (int r = 0; r < ranks; ++r) {
    auto device = gpu::ScopedDevice::make(r);
    if (!device) return fail(device.error());
    auto props = gpu::device_properties(r);
    if (!props) return fail(props.error());
    parallel::ExpertParallelSpec s;
    s.hidden = shape.hidden;
    s.ffn = shape.ffn;
    s.experts = shape.experts;
    s.top_k = shape.top_k;
    s.tokens_per_rank = shape.tokens;
    s.ranks = ranks;
    s.rank = r;
    s.arch = props->arch;
    s.sm_count = props->multiprocessors;
    s.device = r;
    // The weights are random either way, so their row order needs no conversion here.
    s.gate_up_layout = opt.interleaved ? kernels::GateUpLayout::interleaved : kernels::GateUpLayout::stacked;
    auto layer = parallel::ExpertParallelMoe::create(s);
    if (!layer) return fail(layer.error());
    layers.push_back(*layer);
    Rank& k = state[static_cast<std::size_t>(r)];
    auto stream = gpu::Stream::create(r);
    if (!stream) return fail(stream.error());
    k.stream = std::move(*stream);
    auto pool = gpu::MemPool::device_default(r);
    if (!pool) return fail(pool.error());
    k.pool = std::move(*pool);
    const cudaStream_t st = k.stream.get();
    const auto t = static_cast<std::size_t>(shape.tokens), h = static_cast<std::size_t>(shape.hidden),
               f = static_cast<std::size_t>(shape.ffn), kk = static_cast<std::size_t>(shape.top_k),
               e = static_cast<std::size_t>(local);
    auto alloc = [&](gpu::DeviceBuffer& into, std::size_t bytes) -> Status {
      auto b = gpu::DeviceBuffer::allocate(k.pool, bytes, st);
      if (!b) return fail(b.error());
      into = std::move(*b);
      return ok();
    };
    CUACTOR_TRY(alloc(k.x, t * h * 2));
    CUACTOR_TRY(alloc(k.ids, t * kk * 4));
    CUACTOR_TRY(alloc(k.weights, t * kk * 4));
    CUACTOR_TRY(alloc(k.w_gate_up, e * 2 * f * h * 2));
    CUACTOR_TRY(alloc(k.w_down, e * h * f * 2));
    CUACTOR_TRY(alloc(k.out, t * h * 2));
    CUACTOR_TRY(alloc(k.workspace, layer->workspace_size()));
    CUACTOR_TRY(alloc(k.comm_send, static_cast<std::size_t>(ranks) * t * h * 2));
    CUACTOR_TRY(alloc(k.comm_recv, static_cast<std::size_t>(ranks) * t * h * 2));
    CUACTOR_TRY(fill_random(k.x.data(), k.x.size(), DType::bf16, 1 + static_cast<unsigned>(r), st));
    CUACTOR_TRY(fill_random(k.w_gate_up.data(), k.w_gate_up.size(), DType::bf16, 2, st));
    CUACTOR_TRY(fill_random(k.w_down.data(), k.w_down.size(), DType::bf16, 3, st));
    CUACTOR_TRY(fill_random(k.comm_send.data(), k.comm_send.size(), DType::bf16, 4, st));
    std::vector<std::int32_t> ids;
    std::vector<float> weights;
    random_routing(shape.tokens, shape.experts, shape.top_k, 100 + static_cast<unsigned>(r), ids, weights);
    CUACTOR_TRY(gpu::copy_async(k.ids.data(), ids.data(), ids.size() * 4, st));
    CUACTOR_TRY(gpu::copy_async(k.weights.data(), weights.data(), weights.size() * 4, st));
    CUACTOR_TRY(k.stream.synchronize());
    parallel::ExpertParallelTensors tt;
    tt.x = k.x.data();
    tt.expert_ids = k.ids.data_as<std::int32_t>();
    tt.routing_weights = k.weights.data_as<float>();
    tt.w_gate_up = k.w_gate_up.data();
    tt.w_down = k.w_down.data();
    tt.out = k.out.data();
    tensors.push_back(tt);
    workspaces.push_back(k.workspace.data());
    streams.push_back(st);
  }
  const std::size_t ws_bytes = layers.front().workspace_size();
  auto forward = [&] {
    return parallel::ExpertParallelMoe::run_local(layers, comms, tensors, workspaces, ws_bytes, streams);
  };

  EpRow row;
  row.shape = shape;
  row.fused_swiglu = layers.front().ffn().fused_swiglu();
  row.ranks = ranks;
  row.flops = 2.0 * ranks * shape.tokens * shape.top_k * 3.0 * shape.hidden * shape.ffn;
  auto eager = wall_ms(state, opt.warmup, opt.reps, forward);
  if (!eager) return fail(eager.error());
  row.eager_ms = *eager;

  auto replay = replayed_ms(state, opt, forward);
  if (!replay) return fail(replay.error());
  row.graph_ms = *replay;

  // Dispatch + combine alone: the token gather (by the layer's algorithm) and the output
  // reduce-scatter (the routing's gathers are 1/H of it), on the same bytes, as the forward issues
  // them: one after the other, in separate NCCL groups (one group could overlap them, which
  // PyTorch's two all_to_all_single calls cannot).
  const std::size_t block = static_cast<std::size_t>(shape.tokens) * static_cast<std::size_t>(shape.hidden);
  row.comm_bytes = 2.0 * (ranks - 1) * static_cast<double>(block) * 2.0;
  if (ranks > 1) {
    auto comm_step = [&]() -> Status {
      CUACTOR_TRY(parallel::Communicator::grouped(comms, [&](parallel::Communicator& c) -> Status {
        Rank& k = state[static_cast<std::size_t>(c.rank())];
        auto* send = static_cast<std::byte*>(k.comm_send.data());
        return c.all_gather(send + static_cast<std::size_t>(c.rank()) * block * 2, k.comm_recv.data(), block,
                            DType::bf16, k.stream.get(), parallel::ExpertParallelMoe::kDispatchGather);
      }));
      return parallel::Communicator::grouped(comms, [&](parallel::Communicator& c) -> Status {
        Rank& k = state[static_cast<std::size_t>(c.rank())];
        return c.reduce_scatter(k.comm_send.data(), k.out.data(), block, DType::bf16, k.stream.get());
      });
    };
    auto comm = wall_ms(state, opt.warmup, opt.reps, comm_step);
    if (!comm) return fail(comm.error());
    row.comm_ms = *comm;
    // Replayed from graphs as well, as the captured forward issues them: no host launch time.
    auto comm_graph = replayed_ms(state, opt, comm_step);
    if (!comm_graph) return fail(comm_graph.error());
    row.comm_graph_ms = *comm_graph;
  }
  return row;
}

Status run_bench_ep(const Options& opt) {
  const int visible = gpu::device_count();
  const int ranks = opt.ranks > 0 ? opt.ranks : visible;
  if (ranks > visible)
    return fail(errc::invalid_argument, fmt::format("--ranks={} but {} devices are visible", ranks, visible));
  std::vector<int> devices(static_cast<std::size_t>(ranks));
  std::iota(devices.begin(), devices.end(), 0);
  auto comms = parallel::Communicator::create_local(devices, parallel::ExpertParallelMoe::communicator_options());
  if (!comms) return fail(comms.error());
  std::vector<EpRow> rows;
  if (!opt.json) {
    auto props = gpu::device_properties(0);
    std::cout << fmt::format("expert-parallel MoE layer, {} rank(s) on {} (bf16, {} gate/up; wall time per forward)\n",
                             ranks, props ? props->name : "?", layout_name(opt));
    std::cout << fmt::format("{:<30} {:>10} {:>10} {:>9} {:>10} {:>10} {:>11} {:>9}\n", "shape", "eager ms", "graph ms",
                             "TFLOP/s", "comm ms", "comm GB/s", "graph GB/s", "swiglu");
  }
  for (const EpShape& shape : kShapes) {
    if (!opt.only.empty() && shape.name.find(opt.only) == std::string::npos) continue;
    if (shape.experts % ranks != 0) continue;
    auto row = bench_shape(shape, *comms, opt);
    if (!row) return fail(Error(row.error().code(), fmt::format("{}: {}", shape.name, row.error().message())));
    rows.push_back(*row);
    if (!opt.json)
      std::cout << fmt::format("{:<30} {:>10.3f} {:>10.3f} {:>9.1f} {:>10.3f} {:>10.1f} {:>11.1f} {:>9}\n", shape.name,
                               row->eager_ms, row->graph_ms, row->flops / (row->graph_ms * 1e9), row->comm_ms,
                               row->comm_ms > 0 ? row->comm_bytes / (row->comm_ms * 1e6) : 0.0,
                               row->comm_graph_ms > 0 ? row->comm_bytes / (row->comm_graph_ms * 1e6) : 0.0,
                               row->fused_swiglu ? "fused" : "separate");
  }
  if (opt.json) {
    std::string json = "[";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const EpRow& r = rows[i];
      json += fmt::format(
          "{}{{\"shape\": \"{}\", \"ranks\": {}, \"tokens\": {}, \"hidden\": {}, \"ffn\": {}, \"experts\": {}, "
          "\"top_k\": {}, \"eager_ms\": {:.4f}, \"graph_ms\": {:.4f}, \"comm_ms\": {:.4f}, \"comm_graph_ms\": {:.4f}, "
          "\"comm_bytes\": {:.0f}, "
          "\"flops\": {:.0f}, \"gate_up\": \"{}\", \"fused_swiglu\": {}}}",
          i ? ", " : "", r.shape.name, r.ranks, r.shape.tokens, r.shape.hidden, r.shape.ffn, r.shape.experts,
          r.shape.top_k, r.eager_ms, r.graph_ms, r.comm_ms, r.comm_graph_ms, r.comm_bytes, r.flops, layout_name(opt),
          r.fused_swiglu);
    }
    std::cout << json << "]\n";
  }
  return ok();
}

}  // namespace

void add_bench_ep_command(CLI::App& app) {
  auto* cmd = bench_command(app).add_subcommand(
      "ep", "Expert-parallel MoE layer over every visible device: eager, graph replay, dispatch + combine");
  auto opt = std::make_shared<Options>();
  cmd->add_option("--reps", opt->reps, "Timed forwards (mean wall time)");
  cmd->add_option("--warmup", opt->warmup, "Untimed forwards first");
  cmd->add_option("--ranks", opt->ranks, "Devices to use (default: all visible)");
  cmd->add_option("--only", opt->only, "Only the shapes whose name contains this text");
  cmd->add_flag("--json", opt->json, "Print one JSON array instead of the table (for bench/ep_torch.py)");
  cmd->add_flag("--interleaved", opt->interleaved,
                "Interleaved gate/up weights: the SwiGLU runs in the gate/up GEMM's epilogue where the catalog has "
                "that kernel (default: stacked weights, a separate SwiGLU kernel)");
  cmd->callback([opt] {
    // Checked before any device is touched (and without one).
    if (opt->reps < 1 || opt->warmup < 0 || opt->ranks < 0) {
      std::cerr << fmt::format("cuactor bench ep: --reps={} must be >= 1, --warmup={} >= 0, --ranks={} >= 0\n",
                               opt->reps, opt->warmup, opt->ranks);
      std::exit(2);
    }
    if (gpu::device_count() == 0) {
      if (opt->json) {
        print_json_error(Error(errc::no_device, "cuactor bench ep: no CUDA GPU is visible; nothing to measure"));
        std::exit(1);
      }
      std::cout << "cuactor bench ep: no CUDA GPU is visible; nothing to measure.\n";
      return;
    }
    if (auto s = run_bench_ep(*opt); !s) {
      if (opt->json) print_json_error(s.error());
      std::cerr << "cuactor bench ep failed: " << s.error().to_string() << "\n";
      std::exit(1);
    }
  });
}

}  // namespace cuactor::cli
