// The runtime's fill (enqueue_fill) on a real GPU: every element size and pattern class, whether it
// takes the driver's memset (a pattern that repeats a 1-, 2- or 4-byte word) or the fill kernel (8- and
// 16-byte patterns that do not), at aligned offsets inside a poisoned buffer whose bytes around the
// fill must stay as they were.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/runtime/commands.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::runtime {
namespace {

constexpr unsigned char kPoison = 0x5A;

/// A pattern of `bytes` bytes whose smallest period is `period` bytes (period == bytes: none repeats).
std::vector<unsigned char> pattern_with_period(std::size_t bytes, std::size_t period) {
  std::vector<unsigned char> p(bytes);
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(0x11 * ((i % period) + 1) + 0x80);
  return p;
}

class FillGpu : public test_support::GpuTest {};

TEST_F(FillGpu, EveryElementSizeAndPatternClassMatchesTheHostFill) {
  auto stream = gpu::Stream::create(0);
  ASSERT_TRUE(stream.has_value()) << stream.error().to_string();
  // The largest count runs past a few waves of the kernel's grid and a few MiB of the memset.
  const std::array<std::size_t, 5> counts{1, 3, 1000, 4099, (std::size_t{1} << 20) + 7};
  constexpr std::size_t kGuard = 64;
  for (const std::size_t element : {1, 2, 4, 8, 16}) {
    for (const std::size_t period : {1, 2, 4, 8, 16}) {
      if (period > element) continue;
      const auto pattern = pattern_with_period(element, period);
      for (const std::size_t count : counts) {
        // At the buffer's start and one element in (aligned to the element, not to 4 or 16 bytes).
        for (const std::size_t offset : {std::size_t{0}, kGuard + element}) {
          SCOPED_TRACE("element " + std::to_string(element) + " period " + std::to_string(period) + " count " +
                       std::to_string(count) + " offset " + std::to_string(offset));
          const std::size_t bytes = offset + count * element + kGuard;
          void* raw = nullptr;
          ASSERT_EQ(cudaMalloc(&raw, bytes), cudaSuccess);
          auto* base = static_cast<unsigned char*>(raw);
          ASSERT_EQ(cudaMemsetAsync(base, kPoison, bytes, stream->get()), cudaSuccess);
          CUACTOR_ASSERT_OK(enqueue_fill(base + offset, count, pattern.data(), element, stream->get()));
          std::vector<unsigned char> host(bytes);
          ASSERT_EQ(cudaMemcpyAsync(host.data(), base, bytes, cudaMemcpyDeviceToHost, stream->get()), cudaSuccess);
          ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
          ASSERT_EQ(cudaFree(raw), cudaSuccess);
          for (std::size_t i = 0; i < bytes; ++i) {
            const bool inside = i >= offset && i < offset + count * element;
            const unsigned char want = inside ? pattern[(i - offset) % element] : kPoison;
            ASSERT_EQ(host[i], want) << "byte " << i << (inside ? " (filled)" : " (outside the fill)");
          }
        }
      }
    }
  }
}

TEST_F(FillGpu, ZeroCountWritesNothing) {
  auto stream = gpu::Stream::create(0);
  ASSERT_TRUE(stream.has_value());
  void* raw = nullptr;
  ASSERT_EQ(cudaMalloc(&raw, 64), cudaSuccess);
  ASSERT_EQ(cudaMemset(raw, kPoison, 64), cudaSuccess);
  const std::uint32_t v = 7;
  CUACTOR_ASSERT_OK(enqueue_fill(raw, 0, &v, sizeof(v), stream->get()));
  ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
  std::array<unsigned char, 64> host{};
  ASSERT_EQ(cudaMemcpy(host.data(), raw, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaFree(raw), cudaSuccess);
  for (unsigned char b : host) ASSERT_EQ(b, kPoison);
}

}  // namespace
}  // namespace cuactor::runtime
