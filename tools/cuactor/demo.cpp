// `cuactor demo`: the headline work end to end. A supervised device actor runs a mixture-of-experts
// grouped GEMM (bf16, CUTLASS, routing read from device memory) that is captured once into a CUDA
// graph and replayed for several routings; every replay is checked against an fp64 host reference.
#include <cuda_bf16.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <boost/asio/use_future.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <iostream>
#include <numeric>
#include <random>
#include <vector>

#include "commands.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/graph/actor_capture.hpp"
#include "cuactor/kernels/grouped_actor.hpp"

namespace cuactor::cli {
namespace {

namespace asio = boost::asio;
using runtime::DeviceActor;
using runtime::GpuRef;
using bf16 = __nv_bfloat16;

constexpr int kExperts = 8;
constexpr int kN = 256;
constexpr int kK = 512;
constexpr std::int64_t kCapacityRows = 1024;

/// Waits for an actor reply and turns its error code into an Error naming the step.
template <class R>
Result<R> await(std::future<std::tuple<std::error_code, R>> f, const char* step) {
  auto [ec, value] = f.get();
  if (ec) return fail(Error(ec, fmt::format("{}: {}", step, ec.message())));
  return std::move(value);
}

std::vector<bf16> random_bf16(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<bf16> v(n);
  for (auto& x : v) x = __float2bfloat16(dist(rng));
  return v;
}

/// Rows per expert summing to at most the capacity, with some experts receiving none.
std::vector<int> random_routing(std::mt19937& rng) {
  std::vector<int> rows(kExperts);
  std::uniform_int_distribution<int> pick(0, 2 * static_cast<int>(kCapacityRows) / kExperts - 1);
  int total = 0;
  for (auto& r : rows) {
    r = rng() % 4 == 0 ? 0 : pick(rng);
    r = std::min<int>(r, static_cast<int>(kCapacityRows) - total);
    total += r;
  }
  return rows;
}

/// Relative norm error of the routed rows of D against an fp64 reference (B[g] is N x K).
double relative_error(const std::vector<bf16>& a, const std::vector<bf16>& b, const std::vector<bf16>& d,
                      const std::vector<int>& rows) {
  double num = 0, den = 0;
  std::size_t start = 0;
  for (std::size_t g = 0; g < rows.size(); ++g) {
    for (std::size_t r = start; r < start + static_cast<std::size_t>(rows[g]); ++r)
      for (std::size_t c = 0; c < kN; ++c) {
        double ref = 0;
        for (std::size_t q = 0; q < kK; ++q)
          ref += static_cast<double>(__bfloat162float(a[r * kK + q])) *
                 static_cast<double>(__bfloat162float(b[(g * kN + c) * kK + q]));
        const double got = __bfloat162float(d[r * kN + c]);
        num += (got - ref) * (got - ref);
        den += ref * ref;
      }
    start += static_cast<std::size_t>(rows[g]);
  }
  return den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

Status run_demo() {
  auto props = gpu::device_properties(0);
  if (!props) return fail(props.error());
  std::cout << fmt::format("device 0: {} ({}, {} SMs)\n", props->name, props->arch.name(), props->multiprocessors);

  auto created = DeviceActor::create(0);
  if (!created) return fail(created.error());
  DeviceActor& actor = *created;

  std::mt19937 rng(2026);
  const auto a_host = random_bf16(static_cast<std::size_t>(kCapacityRows) * kK, rng);
  const auto b_host = random_bf16(static_cast<std::size_t>(kExperts) * kN * kK, rng);
  const std::vector<bf16> poison(static_cast<std::size_t>(kCapacityRows) * kN, __float2bfloat16(NAN));

  auto upload = [&](const auto& host,
                    const char* what) -> Result<GpuRef<typename std::decay_t<decltype(host)>::value_type>> {
    using T = typename std::decay_t<decltype(host)>::value_type;
    auto ref = await(actor.allocate<T>(host.size(), asio::use_future), what);
    if (!ref) return fail(ref.error());
    return await(actor.copy_to_device(*ref, std::span<const T>(host), asio::use_future), what);
  };
  auto a = upload(a_host, "upload A");
  auto b = upload(b_host, "upload experts");
  auto d = upload(poison, "allocate D");
  auto offsets = upload(std::vector<std::int32_t>(kExperts, 0), "allocate routing offsets");
  for (const Error* e : {a ? nullptr : &a.error(), b ? nullptr : &b.error(), d ? nullptr : &d.error(),
                         offsets ? nullptr : &offsets.error()})
    if (e) return fail(*e);

  // Capture the grouped GEMM once; the routing offsets are read from device memory at replay time.
  kernels::GroupedPlanCache plans;
  kernels::GroupedGemmSpec spec;
  spec.a = spec.b = spec.d = DType::bf16;
  spec.rows_per_group_hint = static_cast<int>(kCapacityRows / kExperts);
  kernels::PackedGroupedOperands<bf16, bf16> ops{*a, *b, *d, kN, kK};
  auto capture = graph::ActorCapture::begin(actor, gpu::CaptureMode::global);
  if (!capture) return fail(capture.error());
  auto recorded = await(kernels::async_grouped_gemm_device_sized(actor, plans, spec, ops, *offsets, kCapacityRows,
                                                                 kernels::GroupedScalars{}, asio::use_future),
                        "record grouped GEMM");
  if (!recorded) return fail(recorded.error());
  auto captured = capture->end_capture();
  if (!captured) return fail(captured.error());
  auto graph = std::make_shared<graph::CapturedGraph>(std::move(*captured));
  if (auto plan = plans.get(spec); plan) std::cout << "kernel: " << (*plan)->sku().to_string() << "\n";
  std::cout << fmt::format("captured one graph: {} experts, N={}, K={}, capacity {} rows\n", kExperts, kN, kK,
                           kCapacityRows);

  for (int replay = 0; replay < 3; ++replay) {
    const auto rows = random_routing(rng);
    std::vector<std::int32_t> ends(rows.size());
    std::partial_sum(rows.begin(), rows.end(), ends.begin());
    // A new routing and a poisoned D, written through the actor like any other request.
    if (auto r = await(actor.copy_to_device(*offsets, std::span<const std::int32_t>(ends), asio::use_future),
                       "write routing");
        !r)
      return fail(r.error());
    if (auto r = await(actor.copy_to_device(*d, std::span<const bf16>(poison), asio::use_future), "poison D"); !r)
      return fail(r.error());
    if (auto r = await(graph::replay(actor, graph, asio::use_future), "replay"); !r) return fail(r.error());
    auto d_host = await(actor.copy_to_host(*d, asio::use_future), "read D");
    if (!d_host) return fail(d_host.error());
    const double err = relative_error(a_host, b_host, *d_host, rows);
    std::cout << fmt::format("replay {}: rows per expert [{}] -> relative error vs fp64 {:.2e}\n", replay,
                             fmt::join(rows, " "), err);
    if (!(err < 1e-2))  // bf16 output rounding is ~2e-3; NaN (an unwritten row) fails too
      return fail(errc::internal, fmt::format("replay {}: relative error {:.3e} >= 1e-2", replay, err));
  }
  const auto stats = actor.stats();
  std::cout << fmt::format("device stats: generation {}, circuit {}, completed {}, failed {}, in flight {}\n",
                           stats.generation, runtime::to_string(stats.circuit), stats.completed, stats.failed,
                           stats.in_flight);
  std::cout << "result check: PASS\n";
  return ok();
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Run a short GPU demonstration and check its result");
  cmd->callback([] {
    if (gpu::device_count() == 0) {
      std::cout << "cuactor demo: no CUDA GPU is visible on this machine, so nothing can run on a device.\n"
                   "What still works here: `cuactor info`, `cuactor jit warm` (fills the kernel cache for a GPU\n"
                   "machine), building everything, and the unit tests (scripts/test). Run scripts/demo on a\n"
                   "machine with an NVIDIA GPU (sm_80 or newer).\n";
      return;
    }
    if (auto s = run_demo(); !s) {
      std::cerr << "cuactor demo failed: " << s.error().to_string() << "\n";
      std::exit(1);
    }
  });
}

}  // namespace cuactor::cli
