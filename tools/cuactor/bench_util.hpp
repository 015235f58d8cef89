// Helpers shared by the `cuactor bench ...` and `cuactor tune ...` subcommands: cuBLAS data types,
// random device data, shape lists, CUDA-event timing and medians (shape text: shape_text.hpp).
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cuactor/core/dtype.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/core/files.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/event.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "shape_text.hpp"

namespace cuactor::cli {

/// cuBLAS's name of a 16-bit, fp8 or f32 element type.
inline cudaDataType_t cuda_data_type(DType t) {
  switch (t) {
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    case DType::e4m3:
      return CUDA_R_8F_E4M3;
    default:
      return CUDA_R_32F;
  }
}

/// Device 0 as a benchmark or sweep times on it: its properties, a stream and its default memory pool.
struct BenchDevice {
  gpu::DeviceProperties props;
  gpu::Stream stream;
  gpu::MemPool pool;

  /// Opens device 0; `no_device` with `no_device_message` when no GPU is visible.
  static Result<BenchDevice> open(std::string_view no_device_message) {
    if (gpu::device_count() == 0) return fail(errc::no_device, std::string(no_device_message));
    auto props = gpu::device_properties(0);
    if (!props) return fail(props.error());
    auto stream = gpu::Stream::create(0);
    if (!stream) return fail(stream.error());
    auto pool = gpu::MemPool::device_default(0);
    if (!pool) return fail(pool.error());
    return BenchDevice{std::move(*props), std::move(*stream), std::move(*pool)};
  }
};

/// Median of `v` (0 when empty).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// Fills `bytes` of device memory with pseudo-random finite values of `t` by repeating one pinned
/// chunk. Random data draws the tensor cores' real power; constant data would flatter every side.
inline Status fill_random(void* dst, std::size_t bytes, DType t, unsigned seed, cudaStream_t stream) {
  constexpr std::size_t kChunk = std::size_t{32} << 20;
  auto chunk = gpu::PinnedBuffer::allocate(kChunk);
  if (!chunk) return fail(chunk.error());
  std::mt19937 rng(seed);
  for (auto& w : chunk->as_span<std::uint16_t>()) {
    const auto r = static_cast<std::uint16_t>(rng());
    // 16-bit: random sign and mantissa, magnitude 0.5..2; e4m3: two signed bytes that are never NaN
    // (0x7f / 0xff) nor large.
    w = t == DType::e4m3 ? static_cast<std::uint16_t>(r & 0xb7b7) : static_cast<std::uint16_t>((r & 0x80ff) | 0x3f00);
  }
  for (std::size_t off = 0; off < bytes; off += kChunk)
    CUACTOR_TRY(
        gpu::copy_async(static_cast<std::byte*>(dst) + off, chunk->data(), std::min(kChunk, bytes - off), stream));
  return gpu::check(cudaStreamSynchronize(stream), "fill_random");
}

/// The lines of the shape list `from` (one shape per line; '#' starts a comment; blank lines skipped)
/// after `given`: what `--shape` and `--from` of the tuning commands name.
inline Result<std::vector<std::string>> shape_texts(std::vector<std::string> given, const std::string& from) {
  if (from.empty()) return given;
  auto bytes = read_file(from, "shape list");
  if (!bytes) return fail(bytes.error());
  std::istringstream in(std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    if (line.find_first_not_of(" \t\r") != std::string::npos) given.push_back(line);
  }
  return given;
}

/// `invalid_argument` naming the value unless warmup >= 0, rounds >= 1 and reps >= 1 (a median of no
/// samples would report a zero time). Checked before any device is touched.
inline Status check_timing_options(int warmup, int rounds, int reps) {
  if (warmup < 0 || rounds < 1 || reps < 1)
    return fail(errc::invalid_argument,
                fmt::format("--warmup={} must be >= 0, --rounds={} >= 1 and --reps={} >= 1", warmup, rounds, reps));
  return ok();
}

/// Appends `reps` event-timed milliseconds of `launch(i)` to `out`; `counter` numbers the launches
/// (for rotating inputs) and advances.
template <class Launch>
Status time_into(std::vector<double>& out, cudaStream_t stream, int reps, int& counter, Launch&& launch) {
  std::vector<gpu::Event> events;
  for (int i = 0; i < 2 * reps; ++i) {
    auto e = gpu::Event::create(gpu::Event::Kind::timing);
    if (!e) return fail(e.error());
    events.push_back(std::move(*e));
  }
  for (int i = 0; i < reps; ++i) {
    CUACTOR_TRY(events[static_cast<std::size_t>(2 * i)].record(stream));
    CUACTOR_TRY(launch(counter++));
    CUACTOR_TRY(events[static_cast<std::size_t>(2 * i + 1)].record(stream));
  }
  CUACTOR_CUDA_TRY(cudaStreamSynchronize(stream));
  for (int i = 0; i < reps; ++i) {
    auto ms =
        gpu::Event::elapsed_ms(events[static_cast<std::size_t>(2 * i)], events[static_cast<std::size_t>(2 * i + 1)]);
    if (!ms) return fail(ms.error());
    out.push_back(static_cast<double>(*ms));
  }
  return ok();
}

/// Median milliseconds of each of `launches` (called with the launch number, for rotating inputs):
/// `warmup` untimed launches of each, then `rounds` rounds in which each runs `reps` event-timed
/// launches in turn, so that clock and thermal drift (large on a power-bound GPU) hit all of them alike.
inline Result<std::vector<double>> time_rounds(cudaStream_t stream, int warmup, int rounds, int reps,
                                               std::span<const std::function<Status(int)>> launches) {
  int counter = 0;
  std::vector<std::vector<double>> ms(launches.size());
  std::vector<double> discard;
  for (const auto& launch : launches) CUACTOR_TRY(time_into(discard, stream, warmup, counter, launch));
  for (int r = 0; r < rounds; ++r)
    for (std::size_t i = 0; i < launches.size(); ++i) CUACTOR_TRY(time_into(ms[i], stream, reps, counter, launches[i]));
  std::vector<double> medians;
  for (auto& side : ms) medians.push_back(median(std::move(side)));
  return medians;
}

/// time_rounds of `ours(i)` and `anchor(i)`: their medians.
template <class Ours, class Anchor>
Result<std::pair<double, double>> time_interleaved(cudaStream_t stream, int warmup, int rounds, int reps, Ours&& ours,
                                                   Anchor&& anchor) {
  const std::function<Status(int)> launches[] = {std::forward<Ours>(ours), std::forward<Anchor>(anchor)};
  auto ms = time_rounds(stream, warmup, rounds, reps, launches);
  if (!ms) return fail(ms.error());
  return std::pair{(*ms)[0], (*ms)[1]};
}

/// Median milliseconds of `reps` event-timed calls of `launch()` after `warmup` untimed ones.
template <class Launch>
Result<double> time_ms(cudaStream_t stream, int warmup, int reps, Launch&& launch) {
  for (int i = 0; i < warmup; ++i) CUACTOR_TRY(launch());
  std::vector<double> ms;
  int counter = 0;
  CUACTOR_TRY(time_into(ms, stream, reps, counter, [&](int) { return launch(); }));
  return median(std::move(ms));
}

}  // namespace cuactor::cli
