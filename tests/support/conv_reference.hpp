/// @file
/// Test support for convolution ([K7]): an fp64 host reference of fprop, dgrad and wgrad on packed
/// NHWC / KRSC tensors, the definition the GPU results are checked against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuactor/kernels/conv_plan.hpp"

namespace cuactor::test_support {

/// The accumulator of `spec` (no alpha, beta or source) in fp64: fprop reads x and w, dgrad dy and
/// w, wgrad dy and x (the tensor it does not read may be empty); the result has
/// spec.result_elements() values in the layout of the tensor the operation writes.
inline std::vector<double> conv_reference(const kernels::ConvSpec& spec, const std::vector<double>& x,
                                          const std::vector<double>& w, const std::vector<double>& dy) {
  const std::int64_t P = spec.p(), Q = spec.q();
  std::vector<double> out(static_cast<std::size_t>(spec.result_elements()), 0.0);
  for (std::int64_t n = 0; n < spec.n; ++n)
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t q = 0; q < Q; ++q)
        for (std::int64_t k = 0; k < spec.k; ++k) {
          const auto yi = static_cast<std::size_t>(((n * P + p) * Q + q) * spec.k + k);
          for (std::int64_t r = 0; r < spec.r; ++r) {
            const std::int64_t h = p * spec.stride_h - spec.pad_h + r * spec.dilation_h;
            if (h < 0 || h >= spec.h) continue;
            for (std::int64_t s = 0; s < spec.s; ++s) {
              const std::int64_t col = q * spec.stride_w - spec.pad_w + s * spec.dilation_w;
              if (col < 0 || col >= spec.w) continue;
              const auto xi = static_cast<std::size_t>(((n * spec.h + h) * spec.w + col) * spec.c);
              const auto wi = static_cast<std::size_t>(((k * spec.r + r) * spec.s + s) * spec.c);
              for (std::int64_t c = 0; c < spec.c; ++c) {
                const auto ci = static_cast<std::size_t>(c);
                switch (spec.operation) {
                  case kernels::ConvOperation::fprop:
                    out[yi] += x[xi + ci] * w[wi + ci];
                    break;
                  case kernels::ConvOperation::dgrad:
                    out[xi + ci] += dy[yi] * w[wi + ci];
                    break;
                  case kernels::ConvOperation::wgrad:
                    out[wi + ci] += dy[yi] * x[xi + ci];
                    break;
                }
              }
            }
          }
        }
  return out;
}

}  // namespace cuactor::test_support
