// The expert-parallel MoE layer on every visible device (one rank each, driven by this thread)
// against an fp64 host evaluation of the same layer: uneven routing (an expert no token chooses, on
// two or more devices a rank whose experts no token chooses, empty slots, a token with no expert),
// invalid expert ids, interleaved gate/up weights, and a captured forward replayed on new routing.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/graph.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/epilogue.hpp"
#include "cuactor/kernels/moe_ffn.hpp"
#include "cuactor/parallel/expert_parallel.hpp"
#include "support/bf16_data.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::parallel {
namespace {

using test_support::relative_error;

constexpr int kTokens = 37;  // per rank; odd, so no tile or vector divides it
constexpr int kHidden = 64;
constexpr int kFfn = 48;
constexpr int kTopK = 3;
constexpr int kExpertsPerRank = 4;
constexpr int kNeverChosen = 1;  // an expert of rank 0 that no token chooses

/// bf16 values in [-scale, scale) and their exact values.
struct Bf16Tensor {
  std::vector<__nv_bfloat16> bits;
  std::vector<double> values;
};
Bf16Tensor random_tensor(std::size_t n, unsigned seed, float scale) {
  Bf16Tensor t;
  t.bits = test_support::random_bf16(n, seed);
  for (auto& b : t.bits) b = __float2bfloat16(__bfloat162float(b) * scale);
  t.values = test_support::to_f64(t.bits);
  return t;
}

/// Routing of all ranks' tokens: ids and weights, token-major (rank r's tokens are rows r*T..).
struct Routing {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
};

/// Distinct experts per token from the allowed ones; every 5th token leaves its last slot empty and
/// the first token of each rank has no expert at all.
Routing make_routing(int ranks, unsigned seed) {
  const int experts = ranks * kExpertsPerRank;
  std::vector<int> allowed;
  for (int e = 0; e < experts; ++e) {
    if (e == kNeverChosen) continue;
    if (ranks > 1 && e / kExpertsPerRank == ranks - 1) continue;  // the last rank receives nothing
    allowed.push_back(e);
  }
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> weight(0.1f, 1.0f);
  Routing r;
  const int tokens = ranks * kTokens;
  for (int t = 0; t < tokens; ++t) {
    std::vector<int> pick = allowed;
    std::shuffle(pick.begin(), pick.end(), rng);
    for (int j = 0; j < kTopK; ++j) {
      const bool empty = (t % kTokens == 0) || (t % 5 == 0 && j == kTopK - 1);
      r.ids.push_back(empty ? -1 : pick[static_cast<std::size_t>(j)]);
      r.weights.push_back(empty ? 0.0f : weight(rng));
    }
  }
  return r;
}

double silu(double v) {
  return v / (1.0 + std::exp(-v));
}

/// out[t] = sum over valid slots of w * W_down[e] (silu(W_gate[e] x) * (W_up[e] x)), in fp64, for all tokens.
std::vector<double> reference(const Bf16Tensor& x, const Routing& routing, const Bf16Tensor& w_gate_up,
                              const Bf16Tensor& w_down, int ranks) {
  const int experts = ranks * kExpertsPerRank;
  const std::size_t tokens = static_cast<std::size_t>(ranks) * kTokens;
  std::vector<double> out(tokens * kHidden, 0.0);
  std::vector<double> act(kFfn);
  for (std::size_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < kTopK; ++j) {
      const int e = routing.ids[t * kTopK + static_cast<std::size_t>(j)];
      if (e < 0 || e >= experts) continue;
      const double w = routing.weights[t * kTopK + static_cast<std::size_t>(j)];
      const double* gu = &w_gate_up.values[static_cast<std::size_t>(e) * 2 * kFfn * kHidden];
      const double* xt = &x.values[t * kHidden];
      for (int f = 0; f < kFfn; ++f) {
        double g = 0, u = 0;
        for (int h = 0; h < kHidden; ++h) {
          g += gu[static_cast<std::size_t>(f) * kHidden + h] * xt[h];
          u += gu[static_cast<std::size_t>(kFfn + f) * kHidden + h] * xt[h];
        }
        act[static_cast<std::size_t>(f)] = silu(g) * u;
      }
      const double* wd = &w_down.values[static_cast<std::size_t>(e) * kHidden * kFfn];
      for (int h = 0; h < kHidden; ++h) {
        double y = 0;
        for (int f = 0; f < kFfn; ++f)
          y += wd[static_cast<std::size_t>(h) * kFfn + f] * act[static_cast<std::size_t>(f)];
        out[t * kHidden + static_cast<std::size_t>(h)] += w * y;
      }
    }
  }
  return out;
}

class ExpertParallelGpuTest : public test_support::GpuTest {
 protected:
  void SetUp() override {
    test_support::GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ranks_ = gpu::device_count();
    for (int d = 0; d < ranks_; ++d) {
      auto props = gpu::device_properties(d);
      ASSERT_TRUE(props.has_value());
      if (props->arch != GpuArch{9, 0, true})
        GTEST_SKIP() << "the expert FFN's grouped GEMMs run on sm_90a; device " << d << " is " << props->arch.name();
      props_.push_back(*props);
    }
    std::vector<int> devices(static_cast<std::size_t>(ranks_));
    std::iota(devices.begin(), devices.end(), 0);
    auto comms = Communicator::create_local(devices, ExpertParallelMoe::communicator_options());
    ASSERT_TRUE(comms.has_value()) << comms.error().to_string();
    comms_ = std::move(*comms);
    const int experts = ranks_ * kExpertsPerRank;
    x_ = random_tensor(static_cast<std::size_t>(ranks_) * kTokens * kHidden, 11, 1.0f);
    w_gate_up_ = random_tensor(static_cast<std::size_t>(experts) * 2 * kFfn * kHidden, 12, 0.25f);
    w_down_ = random_tensor(static_cast<std::size_t>(experts) * kHidden * kFfn, 13, 0.25f);
    for (int r = 0; r < ranks_; ++r) {
      ExpertParallelSpec s;
      s.hidden = kHidden;
      s.ffn = kFfn;
      s.experts = experts;
      s.top_k = kTopK;
      s.tokens_per_rank = kTokens;
      s.ranks = ranks_;
      s.rank = r;
      s.arch = props_[static_cast<std::size_t>(r)].arch;
      s.sm_count = props_[static_cast<std::size_t>(r)].multiprocessors;
      s.device = r;
      // Rank r's buffers, streams and pageable copies are made with its device current.
      auto device = gpu::ScopedDevice::make(r);
      ASSERT_TRUE(device.has_value());
      auto layer = ExpertParallelMoe::create(s);
      ASSERT_TRUE(layer.has_value()) << layer.error().to_string();
      layers_.push_back(*layer);
      Rank& k = ranks_state_.emplace_back();
      auto stream = gpu::Stream::create(r);
      ASSERT_TRUE(stream.has_value());
      k.stream = std::move(*stream);
      k.pool = std::move(*gpu::MemPool::device_default(r));
      const cudaStream_t st = k.stream.get();
      auto alloc = [&](std::size_t bytes) { return std::move(*gpu::DeviceBuffer::allocate(k.pool, bytes, st)); };
      k.x = alloc(kTokens * kHidden * 2);
      k.ids = alloc(kTokens * kTopK * 4);
      k.weights = alloc(kTokens * kTopK * 4);
      const std::size_t gu = static_cast<std::size_t>(kExpertsPerRank) * 2 * kFfn * kHidden,
                        dn = static_cast<std::size_t>(kExpertsPerRank) * kHidden * kFfn;
      k.w_gate_up = alloc(gu * 2);
      k.w_down = alloc(dn * 2);
      k.out = alloc(kTokens * kHidden * 2);
      k.workspace = alloc(layer->workspace_size());
      upload(k.x, &x_.bits[static_cast<std::size_t>(r) * kTokens * kHidden], kTokens * kHidden * 2, st);
      upload(k.w_gate_up, &w_gate_up_.bits[static_cast<std::size_t>(r) * gu], gu * 2, st);
      upload(k.w_down, &w_down_.bits[static_cast<std::size_t>(r) * dn], dn * 2, st);
      ASSERT_TRUE(k.stream.synchronize().has_value());
    }
  }

  struct Rank {
    gpu::Stream stream;
    gpu::MemPool pool;
    gpu::DeviceBuffer x, ids, weights, w_gate_up, w_down, out, workspace;
  };

  static void upload(const gpu::DeviceBuffer& d, const void* src, std::size_t bytes, cudaStream_t s) {
    ASSERT_TRUE(gpu::copy_async(d.data(), src, bytes, s).has_value());
  }

  /// Writes each rank's share of `routing` and poisons its output (0xFF: bf16 NaN).
  void set_routing(const Routing& routing) {
    for (int r = 0; r < ranks_; ++r) {
      auto device = gpu::ScopedDevice::make(r);
      ASSERT_TRUE(device.has_value());
      Rank& k = ranks_state_[static_cast<std::size_t>(r)];
      const std::size_t at = static_cast<std::size_t>(r) * kTokens * kTopK;
      upload(k.ids, &routing.ids[at], kTokens * kTopK * 4, k.stream.get());
      upload(k.weights, &routing.weights[at], kTokens * kTopK * 4, k.stream.get());
      ASSERT_TRUE(gpu::memset_async(k.out.data(), 0xFF, k.out.size(), k.stream.get()).has_value());
      ASSERT_TRUE(k.stream.synchronize().has_value());
    }
  }

  static ExpertParallelTensors tensors_of(const Rank& k) {
    ExpertParallelTensors t;
    t.x = k.x.data();
    t.expert_ids = k.ids.data_as<std::int32_t>();
    t.routing_weights = k.weights.data_as<float>();
    t.w_gate_up = k.w_gate_up.data();
    t.w_down = k.w_down.data();
    t.out = k.out.data();
    return t;
  }

  /// run_local over every rank; `layers` and `w_gate_up` (one per rank), when given, replace the
  /// fixture's plans and gate/up weights (the workspaces fit any plan no larger than the fixture's).
  Status run_all(std::span<const ExpertParallelMoe> layers = {}, std::span<const void* const> w_gate_up = {}) {
    std::vector<ExpertParallelTensors> tensors;
    std::vector<void*> workspaces;
    std::vector<cudaStream_t> streams;
    for (std::size_t i = 0; i < ranks_state_.size(); ++i) {
      Rank& k = ranks_state_[i];
      tensors.push_back(tensors_of(k));
      if (!w_gate_up.empty()) tensors.back().w_gate_up = w_gate_up[i];
      workspaces.push_back(k.workspace.data());
      streams.push_back(k.stream.get());
    }
    const std::span<const ExpertParallelMoe> planned = layers.empty() ? std::span(layers_) : layers;
    // The bytes each workspace has: the fixture's plans', at least any replacement's.
    return ExpertParallelMoe::run_local(planned, comms_, tensors, workspaces, layers_.front().workspace_size(),
                                        streams);
  }

  /// Every rank's output, token-major over all ranks.
  std::vector<__nv_bfloat16> outputs() {
    std::vector<__nv_bfloat16> all(static_cast<std::size_t>(ranks_) * kTokens * kHidden);
    for (int r = 0; r < ranks_; ++r) {
      auto device = gpu::ScopedDevice::make(r);
      EXPECT_TRUE(device.has_value());
      Rank& k = ranks_state_[static_cast<std::size_t>(r)];
      EXPECT_TRUE(k.stream.synchronize().has_value());
      EXPECT_EQ(cudaMemcpy(&all[static_cast<std::size_t>(r) * kTokens * kHidden], k.out.data(), k.out.size(),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return all;
  }

  std::int32_t routing_errors(int r) {
    std::int32_t n = -1;
    auto device = gpu::ScopedDevice::make(r);
    EXPECT_TRUE(device.has_value());
    const Rank& k = ranks_state_[static_cast<std::size_t>(r)];
    EXPECT_EQ(cudaMemcpy(&n, layers_[static_cast<std::size_t>(r)].routing_error_count(k.workspace.data()), sizeof n,
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return n;
  }

  int ranks_ = 0;
  std::vector<gpu::DeviceProperties> props_;
  std::vector<Communicator> comms_;
  std::vector<ExpertParallelMoe> layers_;
  std::vector<Rank> ranks_state_;
  Bf16Tensor x_, w_gate_up_, w_down_;
};

// bf16 inputs, bf16 intermediates (h and the SwiGLU output are rounded once each) and a bf16 sum:
// the kernels' bound of 8e-3 for one rounding, doubled.
constexpr double kTolerance = 2e-2;

TEST_F(ExpertParallelGpuTest, EveryRankMatchesTheFp64Layer) {
  const Routing routing = make_routing(ranks_, 21);
  set_routing(routing);
  const Status st = run_all();
  ASSERT_TRUE(st.has_value()) << st.error().to_string();
  const auto got = outputs();
  const auto want = reference(x_, routing, w_gate_up_, w_down_, ranks_);
  EXPECT_LT(relative_error(got, want), kTolerance) << ranks_ << " ranks";
  // The first token of each rank chose no expert: its output is exactly zero (not the poison).
  for (int r = 0; r < ranks_; ++r)
    for (int h = 0; h < kHidden; ++h)
      ASSERT_EQ(__bfloat162float(got[static_cast<std::size_t>(r) * kTokens * kHidden + static_cast<std::size_t>(h)]),
                0.0f);
  for (int r = 0; r < ranks_; ++r) EXPECT_EQ(routing_errors(r), 0);
}

TEST_F(ExpertParallelGpuTest, OneThreadPerRankMatchesTheFp64Layer) {
  // The form a process per GPU takes: each rank calls run() on its own communicator, concurrently.
  const Routing routing = make_routing(ranks_, 25);
  set_routing(routing);
  std::vector<Status> results(static_cast<std::size_t>(ranks_), Status{});
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < ranks_; ++r)
      threads.emplace_back([&, r] {
        const auto i = static_cast<std::size_t>(r);
        Rank& k = ranks_state_[i];
        results[i] =
            layers_[i].run(comms_[i], tensors_of(k), k.workspace.data(), layers_[i].workspace_size(), k.stream.get());
      });
  }
  for (const Status& st : results) ASSERT_TRUE(st.has_value()) << st.error().to_string();
  EXPECT_LT(relative_error(outputs(), reference(x_, routing, w_gate_up_, w_down_, ranks_)), kTolerance);
}

TEST_F(ExpertParallelGpuTest, InterleavedGateUpWeightsMatchTheFp64Layer) {
  // Each rank's gate/up weights interleaved on its device (kernels::interleave_gate_up), planned with
  // that layout: the local FFN fuses the SwiGLU where the catalog has the kernel, and the layer
  // computes what the stacked one does.
  const Routing routing = make_routing(ranks_, 26);
  set_routing(routing);
  std::vector<ExpertParallelMoe> layers;
  std::vector<gpu::DeviceBuffer> interleaved;
  for (int r = 0; r < ranks_; ++r) {
    auto device = gpu::ScopedDevice::make(r);
    ASSERT_TRUE(device.has_value());
    const auto i = static_cast<std::size_t>(r);
    ExpertParallelSpec s = layers_[i].spec();
    s.gate_up_layout = kernels::GateUpLayout::interleaved;
    CUACTOR_ASSERT_OK_AND_ASSIGN(layer, ExpertParallelMoe::create(s));
    ASSERT_LE(layer.workspace_size(), layers_[i].workspace_size());
    // Fused exactly where the catalog has the swiglu form of the kernel the stacked plan runs.
    CUACTOR_ASSERT_OK_AND_ASSIGN(swiglu, kernels::EpilogueSpec::parse("swiglu(acc)"));
    kernels::GemmSku swiglu_form = layers_[i].ffn().gate_up_sku();
    swiglu_form.epilogue = swiglu;
    EXPECT_EQ(layer.ffn().fused_swiglu(), kernels::find_in_catalog(swiglu_form) != nullptr) << swiglu_form.to_string();
    layers.push_back(layer);
    Rank& k = ranks_state_[i];
    auto buffer = gpu::DeviceBuffer::allocate(k.pool, k.w_gate_up.size(), k.stream.get());
    ASSERT_TRUE(buffer.has_value()) << buffer.error().to_string();
    interleaved.push_back(std::move(*buffer));
    ASSERT_TRUE(kernels::interleave_gate_up(DType::bf16, k.w_gate_up.data(), interleaved.back().data(), kExpertsPerRank,
                                            kFfn, kHidden, k.stream.get())
                    .has_value());
  }
  std::vector<const void*> w_gate_up;
  for (const gpu::DeviceBuffer& b : interleaved) w_gate_up.push_back(b.data());
  const Status st = run_all(layers, w_gate_up);
  ASSERT_TRUE(st.has_value()) << st.error().to_string();
  EXPECT_LT(relative_error(outputs(), reference(x_, routing, w_gate_up_, w_down_, ranks_)), kTolerance);
}

TEST_F(ExpertParallelGpuTest, InvalidExpertIdsAreCountedAndSkipped) {
  Routing routing = make_routing(ranks_, 22);
  routing.ids[5] = ranks_ * kExpertsPerRank;  // one past the last expert
  routing.ids[7] = -5;
  set_routing(routing);
  const Status st = run_all();
  ASSERT_TRUE(st.has_value()) << st.error().to_string();
  const auto got = outputs();
  const auto want = reference(x_, routing, w_gate_up_, w_down_, ranks_);  // skips both slots
  EXPECT_LT(relative_error(got, want), kTolerance);
  for (int r = 0; r < ranks_; ++r) EXPECT_EQ(routing_errors(r), 2) << "rank " << r << " saw the gathered routing";
}

TEST_F(ExpertParallelGpuTest, CapturedForwardReplaysNewRoutingAsEagerDoes) {
  set_routing(make_routing(ranks_, 23));
  // Eager first, as a service warms up: NCCL connects its peers on first use, outside the capture.
  const Status warm = run_all();
  ASSERT_TRUE(warm.has_value()) << warm.error().to_string();
  for (int r = 0; r < ranks_; ++r) {
    auto device = gpu::ScopedDevice::make(r);
    ASSERT_TRUE(device.has_value());
    ASSERT_TRUE(
        gpu::begin_stream_capture(ranks_state_[static_cast<std::size_t>(r)].stream.get(), gpu::CaptureMode::relaxed)
            .has_value());
  }
  const Status captured = run_all();
  std::vector<gpu::GraphExec> execs;
  for (int r = 0; r < ranks_; ++r) {
    auto device = gpu::ScopedDevice::make(r);
    ASSERT_TRUE(device.has_value());
    Rank& k = ranks_state_[static_cast<std::size_t>(r)];
    auto graph = gpu::end_stream_capture(k.stream.get());
    ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
    auto exec = gpu::GraphExec::instantiate(*graph);
    ASSERT_TRUE(exec.has_value()) << exec.error().to_string();
    execs.push_back(std::move(*exec));
  }
  ASSERT_TRUE(captured.has_value()) << captured.error().to_string();

  // New routing in the same buffers: the graph reads it on the device.
  const Routing next = make_routing(ranks_, 24);
  set_routing(next);
  for (std::size_t r = 0; r < execs.size(); ++r) {
    auto device = gpu::ScopedDevice::make(static_cast<int>(r));
    ASSERT_TRUE(execs[r].launch(ranks_state_[r].stream.get()).has_value());
  }
  const auto replayed = outputs();
  EXPECT_LT(relative_error(replayed, reference(x_, next, w_gate_up_, w_down_, ranks_)), kTolerance);

  set_routing(next);
  const Status eager = run_all();
  ASSERT_TRUE(eager.has_value()) << eager.error().to_string();
  const auto direct = outputs();
  ASSERT_EQ(replayed.size(), direct.size());
  EXPECT_EQ(std::memcmp(replayed.data(), direct.data(), direct.size() * sizeof(__nv_bfloat16)), 0)
      << "the replay must compute what the eager forward computes";
}

TEST_F(ExpertParallelGpuTest, MismatchedCallsAreRejected) {
  std::vector<ExpertParallelTensors> none;
  std::vector<void*> workspaces;
  std::vector<cudaStream_t> streams;
  const Status st = ExpertParallelMoe::run_local(layers_, comms_, none, workspaces, 0, streams);
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error(), errc::invalid_argument);
  EXPECT_NE(st.error().message().find("0 tensor sets"), std::string::npos) << st.error().message();
  if (ranks_ > 1) {  // rank 0 alone of a layer of several ranks: its peers' parts would never come
    std::vector<ExpertParallelTensors> first{tensors_of(ranks_state_.front())};
    std::vector<void*> first_workspace{ranks_state_.front().workspace.data()};
    std::vector<cudaStream_t> first_stream{ranks_state_.front().stream.get()};
    const Status alone = ExpertParallelMoe::run_local(std::span(layers_).first(1), std::span(comms_).first(1), first,
                                                      first_workspace, layers_.front().workspace_size(), first_stream);
    ASSERT_FALSE(alone.has_value());
    EXPECT_EQ(alone.error(), errc::invalid_argument);
    EXPECT_NE(alone.error().message().find("1 given, the layer has"), std::string::npos) << alone.error().message();
  }
  ExpertParallelTensors t;  // all null
  const Status one = layers_.front().run(comms_.front(), t, ranks_state_.front().workspace.data(),
                                         layers_.front().workspace_size(), ranks_state_.front().stream.get());
  ASSERT_FALSE(one.has_value());
  EXPECT_NE(one.error().message().find("x is null"), std::string::npos) << one.error().message();
}

}  // namespace
}  // namespace cuactor::parallel
