/// @file
/// EpilogueSpec ([K8]): what a GEMM's epilogue computes from the accumulator, as a small tree of
/// leaves (accumulator, C, scalars, per-row / per-column vectors), compute nodes (add, multiply,
/// fused multiply-add, activations, clamp), side outputs (amax, aux, rowsum) and the pairing root swiglu,
/// which writes D itself at half the GEMM's width. The tree is part of a kernel's
/// SKU: its canonical token ("silu(add(acc,colbias))") is stable, readable, and rendered by the
/// same template machinery as every other SKU token into a CUTLASS Sm90EVT visitor tree
/// (kernels/sm90_epilogue.cuh). The two historical epilogues are named presets of the same type.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cuactor/core/expected.hpp"

namespace cuactor::kernels {

/// The two epilogues every kernel family supports, as named presets.
enum class GemmEpilogue {
  linear_combination,         ///< D = alpha * acc + beta * C.
  scaled_linear_combination,  ///< D = alpha * scale_a * scale_b * acc + beta * C (per-tensor scales).
};

/// One node of an epilogue tree. Leaves read values, compute nodes combine their children
/// (elementwise, in f32); the side outputs `amax`, `aux` and `rowsum` pass their child through and
/// record it (max |x|, the matrix itself, per-row sums).
enum class EpilogueNode : std::uint8_t {
  acc,        ///< The accumulator (A * B).
  c,          ///< The source matrix C (element C's dtype).
  alpha,      ///< Scalar alpha (host value, or a device pointer read at run time).
  beta,       ///< Scalar beta (host value, or a device pointer read at run time).
  row_scale,  ///< f32 vector with one value per output row (length M): fp8 row-wise scales, MoE routing weights.
  col_scale,  ///< f32 vector with one value per output column (length N): fp8 column-wise scales.
  row_bias,   ///< Vector of element C's dtype with one value per output row (length M).
  col_bias,   ///< Vector of element C's dtype with one value per output column (length N): a Linear bias.
  add,        ///< x + y.
  mul,        ///< x * y.
  fma,        ///< x * y + z.
  relu,       ///< max(x, 0).
  gelu,       ///< GELU with the error function, x * Phi(x), within 1.4e-5 relative (gelu(-inf) = 0).
  gelu_tanh,  ///< GELU's tanh approximation.
  silu,       ///< x * sigmoid(x) (SwiGLU's gate, Swish).
  sigmoid,    ///< 1 / (1 + exp(-x)).
  clamp,      ///< min(max(x, lo), hi) with run-time bounds.
  amax,       ///< Passes x through; atomically max-reduces |x| into an f32 in device memory (fp8 scaling).
  aux,        ///< Passes x through and stores it, in C's dtype, to an aux matrix laid out like D (a pre-activation).
  row_sum,    ///< Passes x through and sums it over each output row into f32 (M values per batch).
  /// Root only: pairs adjacent columns of x into D, which is N/2 columns wide:
  /// D[m, j] = silu(x[m, 2j]) * x[m, 2j + 1] (SwiGLU over gate/up weights interleaved row by row).
  swiglu,
};

/// Token of a node as it appears in epilogue tokens ("acc", "rowscale", "gelutanh", ...): letters and
/// digits only, so that a tree's prefix sequence joined by '_' names a C symbol unambiguously.
std::string_view name(EpilogueNode n) noexcept;
/// Number of children of a node (0 for leaves).
int arity(EpilogueNode n) noexcept;

/// What an epilogue computes: a named preset or a tree. Value type, cheap to copy and compare.
/// Build trees with the functions of namespace `epi` or parse a token.
class EpilogueSpec {
 public:
  /// Largest tree accepted (nodes), so hostile tokens cannot recurse without bound.
  static constexpr std::size_t kMaxNodes = 64;

  /// A preset (implicit, so `GemmEpilogue` values read as specs).
  EpilogueSpec(GemmEpilogue preset = GemmEpilogue::linear_combination) noexcept  // NOLINT(google-explicit-constructor)
      : preset_(preset) {}

  /// Parses a token: a preset name or a tree in prefix form, e.g. "relu(fma(alpha,acc,colbias))".
  /// `invalid_argument` naming the position and the rule for unknown nodes, wrong arity, trailing
  /// text, trees without the accumulator, more than one amax, aux or rowsum node (each has one output),
  /// swiglu anywhere but at the root, or more than kMaxNodes nodes.
  static Result<EpilogueSpec> parse(std::string_view token);
  /// The tree of `nodes` in prefix order (checked like parse()).
  static Result<EpilogueSpec> from_prefix(std::vector<EpilogueNode> nodes);

  /// The rules parse() applies, for trees made with the `epi` builders (which cannot fail): a
  /// preset used as a child leaves the tree short, and that is reported here.
  [[nodiscard]] Status check() const;

  /// True for the named presets, false for trees.
  [[nodiscard]] bool is_preset() const noexcept { return size_ == 0 && !overflow_; }
  /// The preset (meaningful when is_preset()).
  [[nodiscard]] GemmEpilogue preset() const noexcept { return preset_; }
  /// The tree's nodes in prefix order (empty for presets).
  [[nodiscard]] std::span<const EpilogueNode> nodes() const noexcept { return {nodes_.data(), size_}; }
  /// True if the tree contains `n` (presets: linear_combination reads alpha, beta, acc and c).
  [[nodiscard]] bool uses(EpilogueNode n) const noexcept;
  /// The canonical token: a preset's name or the tree in prefix form with parentheses.
  [[nodiscard]] std::string token() const;
  /// The token as a C identifier fragment: the prefix sequence joined by '_' (unambiguous because
  /// every node has a fixed arity and node names hold no '_').
  [[nodiscard]] std::string symbol_key() const;
  /// The token as a C++ type of kernels/gemm_tags.cuh: each name qualified with
  /// `cuactor::kernels::tags::`, parentheses turned into template brackets.
  [[nodiscard]] std::string cxx_type() const;

  friend bool operator==(const EpilogueSpec&, const EpilogueSpec&) = default;

 private:
  friend EpilogueSpec epi_node(EpilogueNode n, std::initializer_list<const EpilogueSpec*> children);

  GemmEpilogue preset_ = GemmEpilogue::linear_combination;
  // Prefix order in a fixed array (a value type without allocation; unused entries stay zero so the
  // defaulted comparison holds); size_ == 0 means preset_. overflow_: a builder exceeded kMaxNodes.
  std::array<EpilogueNode, kMaxNodes> nodes_{};
  std::uint8_t size_ = 0;
  bool overflow_ = false;
};

/// The first side output of `spec` that only dense GEMM writes (amax, aux, rowsum: one pointer each,
/// where a grouped GEMM would need one per group), or nullopt when there is none.
std::optional<EpilogueNode> dense_only_output(const EpilogueSpec& spec) noexcept;

/// True when `spec`'s root is swiglu: the GEMM computes N columns and D receives N/2 of them.
bool pairs_columns(const EpilogueSpec& spec) noexcept;
/// Columns of D for a GEMM of `n` columns under `spec`: n / 2 for swiglu trees, else n.
std::int64_t output_columns(const EpilogueSpec& spec, std::int64_t n) noexcept;

/// Token of a spec (its canonical text).
std::string name(const EpilogueSpec& e);
/// Token of a preset ("linear_combination", "scaled_linear_combination").
std::string_view name(GemmEpilogue e) noexcept;
/// Hash of a spec (stable within a process).
std::size_t hash_value(const EpilogueSpec& e) noexcept;

/// Run-time operands of an epilogue tree: device pointers of the vectors it reads (null for those it
/// does not read), its side outputs and clamp bounds. Dense GEMM: one input vector shared by every
/// batch. The side outputs are written by the launch itself (amax and row_sum are zeroed by it first),
/// so a captured graph recomputes them on every replay. An empty problem (M or N = 0) launches
/// nothing and leaves them as they were.
struct EpilogueOperands {
  const float* row_scale = nullptr;  ///< rowscale: M floats.
  const float* col_scale = nullptr;  ///< colscale: N floats.
  const void* row_bias = nullptr;    ///< rowbias: M values of C's dtype.
  const void* col_bias = nullptr;    ///< colbias: N values of C's dtype.
  float* amax = nullptr;             ///< amax: one float, overwritten with max |x| over the whole output.
  void* aux = nullptr;               ///< aux: a matrix of C's dtype with D's shape, ld and batch stride.
  /// rowsum: M floats per batch (batch b at row_sum + b * M), overwritten with the sum of x over each
  /// row. CTAs of one row add their partial sums atomically, so the order, and the last bits, vary run to run.
  float* row_sum = nullptr;
  float clamp_lo = -3.4028234663852886e38f;  ///< clamp: lower bound.
  float clamp_hi = 3.4028234663852886e38f;   ///< clamp: upper bound.
};

/// Checks `operands` against `spec` for the GEMM `who` ("GEMM", "grouped GEMM"): every vector or
/// output the tree uses is set and 16-byte aligned (amax: 4-byte), nothing it does not use is set,
/// and clamp bounds are ordered numbers. `invalid_argument` naming the operand and the rule. The aux
/// matrix's geometry is checked by the GEMM's own operand rules.
[[nodiscard]] Status check_epilogue_operands(const EpilogueSpec& spec, const EpilogueOperands& operands,
                                             std::string_view who);

/// Builders of epilogue trees: `epi::silu(epi::add(epi::acc(), epi::col_bias()))`.
namespace epi {
/// The accumulator.
EpilogueSpec acc();
/// The source matrix C.
EpilogueSpec c();
/// Scalar alpha.
EpilogueSpec alpha();
/// Scalar beta.
EpilogueSpec beta();
/// f32 per-row vector (length M).
EpilogueSpec row_scale();
/// f32 per-column vector (length N).
EpilogueSpec col_scale();
/// Per-row vector of C's dtype.
EpilogueSpec row_bias();
/// Per-column vector of C's dtype.
EpilogueSpec col_bias();
/// x + y.
EpilogueSpec add(const EpilogueSpec& x, const EpilogueSpec& y);
/// x * y.
EpilogueSpec mul(const EpilogueSpec& x, const EpilogueSpec& y);
/// x * y + z.
EpilogueSpec fma(const EpilogueSpec& x, const EpilogueSpec& y, const EpilogueSpec& z);
/// An activation or clamp (a node of arity 1) applied to x.
EpilogueSpec apply(EpilogueNode unary, const EpilogueSpec& x);
}  // namespace epi

}  // namespace cuactor::kernels
