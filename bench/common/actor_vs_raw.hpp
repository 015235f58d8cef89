/// @file
/// How the runtime's and the graph layer's benchmarks report the actor against raw CUDA: interleaved
/// samples of both (so that the launch cost of the moment, which drifts by a third on a virtual machine,
/// weighs on both alike), their p50 and p99, and the actor's ratios to raw.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <vector>

/// p50 and p99 of interleaved raw and actor samples (microseconds), and the actor's ratios to raw, as counters.
inline void report_actor_vs_raw(benchmark::State& state, std::vector<double>& raw, std::vector<double>& actor) {
  if (raw.empty() || actor.empty()) return;
  auto pct = [](std::vector<double>& v, std::size_t num) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, v.size() * num / 100)];
  };
  const double raw50 = pct(raw, 50), raw99 = pct(raw, 99), act50 = pct(actor, 50), act99 = pct(actor, 99);
  state.counters["raw_p50_us"] = raw50;
  state.counters["raw_p99_us"] = raw99;
  state.counters["actor_p50_us"] = act50;
  state.counters["actor_p99_us"] = act99;
  state.counters["ratio_p50"] = act50 / raw50;
  state.counters["ratio_p99"] = act99 / raw99;
}
