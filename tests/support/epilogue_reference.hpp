/// @file
/// Test support: an fp64 host evaluation of an epilogue tree (EpilogueSpec) at one output element,
/// and its side outputs there, the reference the GPU tests of dense and grouped epilogue trees compare with.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>

#include "cuactor/kernels/epilogue.hpp"

namespace cuactor::test_support {

/// The leaf values at one output element (row i, column j).
struct EpilogueLeaves {
  double acc = 0, c = 0, alpha = 1, beta = 0;
  double row_scale = 0, col_scale = 0, row_bias = 0, col_bias = 0;
  double clamp_lo = -3.4e38, clamp_hi = 3.4e38;
};

/// What the side-output nodes see at one element: amax max-accumulates |x| across elements; aux and
/// row_sum_term are this element's values of the aux and rowsum nodes' inputs.
struct EpilogueSideOutputs {
  double amax = 0;
  double aux = 0;
  double row_sum_term = 0;
};

namespace detail {
inline double eval_epilogue(std::span<const kernels::EpilogueNode> nodes, std::size_t& pos, const EpilogueLeaves& v,
                            EpilogueSideOutputs& out) {
  using N = kernels::EpilogueNode;
  const N n = nodes[pos++];
  auto next = [&] { return eval_epilogue(nodes, pos, v, out); };
  switch (n) {
    case N::acc:
      return v.acc;
    case N::c:
      return v.c;
    case N::alpha:
      return v.alpha;
    case N::beta:
      return v.beta;
    case N::row_scale:
      return v.row_scale;
    case N::col_scale:
      return v.col_scale;
    case N::row_bias:
      return v.row_bias;
    case N::col_bias:
      return v.col_bias;
    case N::add: {
      const double x = next();
      return x + next();
    }
    case N::mul: {
      const double x = next();
      return x * next();
    }
    case N::fma: {
      const double x = next();
      const double y = next();
      return x * y + next();
    }
    case N::relu: {
      const double x = next();
      return x > 0 ? x : (std::isnan(x) ? x : 0.0);
    }
    case N::gelu: {
      const double x = next();
      return 0.5 * x * std::erfc(-x / std::sqrt(2.0));  // 1 + erf would cancel the negative tail's digits
    }
    case N::gelu_tanh: {
      const double x = next();
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
    case N::silu: {
      const double x = next();
      return x / (1.0 + std::exp(-x));
    }
    case N::sigmoid: {
      const double x = next();
      return 1.0 / (1.0 + std::exp(-x));
    }
    case N::clamp: {
      const double x = next();
      return std::min(std::max(x, v.clamp_lo), v.clamp_hi);
    }
    case N::amax: {
      const double x = next();
      out.amax = std::max(out.amax, std::fabs(x));
      return x;
    }
    case N::aux:
      return out.aux = next();
    case N::row_sum:
      return out.row_sum_term = next();
    case N::swiglu:  // the child's value at this element; evaluate_swiglu pairs two of them
      return next();
  }
  return std::nan("");
}
}  // namespace detail

/// The tree's value at one element; the side outputs' inputs there go to `out` (amax accumulates).
inline double evaluate_epilogue(const kernels::EpilogueSpec& spec, const EpilogueLeaves& v, EpilogueSideOutputs& out) {
  std::size_t pos = 0;
  return detail::eval_epilogue(spec.nodes(), pos, v, out);
}

/// A swiglu tree's D[i, j]: silu of its child at column 2j (`gate`) times the child at column 2j + 1 (`up`).
inline double evaluate_swiglu(const kernels::EpilogueSpec& spec, const EpilogueLeaves& gate, const EpilogueLeaves& up) {
  EpilogueSideOutputs unused;
  const double g = evaluate_epilogue(spec, gate, unused), u = evaluate_epilogue(spec, up, unused);
  return g / (1.0 + std::exp(-g)) * u;
}

}  // namespace cuactor::test_support
