#include "cuactor/kernels/epilogue.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/container_hash/hash.hpp>
#include <utility>

namespace cuactor::kernels {
namespace {

struct NodeInfo {
  EpilogueNode node;
  std::string_view token;
  int arity;
};
constexpr std::array<NodeInfo, 21> kNodes{{
    {EpilogueNode::acc, "acc", 0},
    {EpilogueNode::c, "c", 0},
    {EpilogueNode::alpha, "alpha", 0},
    {EpilogueNode::beta, "beta", 0},
    {EpilogueNode::row_scale, "rowscale", 0},
    {EpilogueNode::col_scale, "colscale", 0},
    {EpilogueNode::row_bias, "rowbias", 0},
    {EpilogueNode::col_bias, "colbias", 0},
    {EpilogueNode::add, "add", 2},
    {EpilogueNode::mul, "mul", 2},
    {EpilogueNode::fma, "fma", 3},
    {EpilogueNode::relu, "relu", 1},
    {EpilogueNode::gelu, "gelu", 1},
    {EpilogueNode::gelu_tanh, "gelutanh", 1},
    {EpilogueNode::silu, "silu", 1},
    {EpilogueNode::sigmoid, "sigmoid", 1},
    {EpilogueNode::clamp, "clamp", 1},
    {EpilogueNode::amax, "amax", 1},
    {EpilogueNode::aux, "aux", 1},
    {EpilogueNode::row_sum, "rowsum", 1},
    {EpilogueNode::swiglu, "swiglu", 1},
}};
/// Side outputs: each writes through one pointer of EpilogueOperands, so a tree holds at most one of each.
constexpr std::array<EpilogueNode, 3> kSideOutputs{EpilogueNode::amax, EpilogueNode::aux, EpilogueNode::row_sum};
constexpr std::array<std::pair<std::string_view, GemmEpilogue>, 2> kPresets{{
    {"linear_combination", GemmEpilogue::linear_combination},
    {"scaled_linear_combination", GemmEpilogue::scaled_linear_combination},
}};

const NodeInfo* info(EpilogueNode n) noexcept {
  for (const NodeInfo& i : kNodes)
    if (i.node == n) return &i;
  return nullptr;
}

bool is_name_char(char ch) noexcept {
  return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
}

/// Writes the subtree starting at nodes[pos] with `open`, `sep` and `close` around children and
/// `qualify` before every name; returns the position after it.
std::size_t write_subtree(std::span<const EpilogueNode> nodes, std::size_t pos, std::string& out,
                          std::string_view qualify, char open, char sep, char close) {
  const NodeInfo* i = pos < nodes.size() ? info(nodes[pos]) : nullptr;
  if (i == nullptr) {  // a short or corrupt tree (check() reports it): mark the gap
    out.push_back('?');
    return pos + 1;
  }
  out.append(qualify);
  out.append(i->token);
  ++pos;
  if (i->arity == 0) return pos;
  out.push_back(open);
  for (int child = 0; child < i->arity; ++child) {
    if (child > 0) out.push_back(sep);
    pos = write_subtree(nodes, pos, out, qualify, open, sep, close);
  }
  out.push_back(close);
  return pos;
}

}  // namespace

std::string_view name(EpilogueNode n) noexcept {
  const NodeInfo* i = info(n);
  return i != nullptr ? i->token : "unknown";
}

int arity(EpilogueNode n) noexcept {
  const NodeInfo* i = info(n);
  return i != nullptr ? i->arity : 0;
}

std::string_view name(GemmEpilogue e) noexcept {
  for (const auto& [n, v] : kPresets)
    if (v == e) return n;
  return "unknown";
}

Status EpilogueSpec::check() const {
  if (is_preset()) return {};
  if (overflow_) return fail(errc::invalid_argument, fmt::format("epilogue tree has more than {} nodes", kMaxNodes));
  const std::span<const EpilogueNode> list = nodes();
  // Walking the prefix sequence: `open` counts the children still owed to the nodes seen so far.
  std::size_t open = 1;
  std::array<int, kSideOutputs.size()> outputs{};
  bool reads_acc = false;
  for (std::size_t pos = 0; pos < list.size(); ++pos) {
    const NodeInfo* i = info(list[pos]);
    if (i == nullptr)
      return fail(errc::invalid_argument, fmt::format("epilogue tree: node {} has an unknown kind", pos));
    if (open == 0)
      return fail(errc::invalid_argument,
                  fmt::format("epilogue tree: node {} ('{}') follows a complete tree", pos, i->token));
    if (i->node == EpilogueNode::swiglu && pos != 0)
      return fail(
          errc::invalid_argument,
          fmt::format("epilogue tree '{}': swiglu (node {}) must be the root, since it writes D itself", token(), pos));
    open = open - 1 + static_cast<std::size_t>(i->arity);
    reads_acc = reads_acc || i->node == EpilogueNode::acc;
    for (std::size_t o = 0; o < kSideOutputs.size(); ++o) outputs[o] += i->node == kSideOutputs[o] ? 1 : 0;
  }
  if (open != 0)
    return fail(errc::invalid_argument,
                fmt::format("epilogue tree '{}' (prefix order) is short of {} operand(s); a preset cannot be a child",
                            symbol_key(), open));
  if (!reads_acc)
    return fail(errc::invalid_argument, fmt::format("epilogue tree '{}' never reads the accumulator 'acc'", token()));
  for (std::size_t o = 0; o < kSideOutputs.size(); ++o)
    if (outputs[o] > 1)
      return fail(errc::invalid_argument,
                  fmt::format("epilogue tree '{}' has {} {} nodes; one {} output is supported", token(), outputs[o],
                              name(kSideOutputs[o]), name(kSideOutputs[o])));
  return {};
}

Result<EpilogueSpec> EpilogueSpec::from_prefix(std::vector<EpilogueNode> nodes) {
  if (nodes.empty()) return fail(errc::invalid_argument, "epilogue tree: no nodes");
  if (nodes.size() > kMaxNodes)
    return fail(errc::invalid_argument,
                fmt::format("epilogue tree has {} nodes; at most {} are accepted", nodes.size(), kMaxNodes));
  EpilogueSpec s;
  std::copy(nodes.begin(), nodes.end(), s.nodes_.begin());
  s.size_ = static_cast<std::uint8_t>(nodes.size());
  CUACTOR_TRY(s.check());
  return s;
}

Result<EpilogueSpec> EpilogueSpec::parse(std::string_view text) {
  for (const auto& [n, v] : kPresets)
    if (n == text) return EpilogueSpec(v);
  std::vector<EpilogueNode> nodes;
  // Expected separators after each node, as a stack of remaining child counts.
  std::vector<int> pending;
  std::size_t i = 0;
  auto error = [&](std::string_view rule) {
    return fail(errc::invalid_argument, fmt::format("epilogue '{}' at offset {}: {}", text, i, rule));
  };
  while (true) {
    std::size_t end = i;
    while (end < text.size() && is_name_char(text[end])) ++end;
    const std::string_view word = text.substr(i, end - i);
    if (word.empty()) return error("expected a node name (lower-case letters and digits)");
    const NodeInfo* found = nullptr;
    for (const NodeInfo& n : kNodes)
      if (n.token == word) found = &n;
    if (found == nullptr) return error(fmt::format("'{}' is not an epilogue node", word));
    if (nodes.size() == kMaxNodes) return error(fmt::format("more than {} nodes", kMaxNodes));
    nodes.push_back(found->node);
    i = end;
    if (found->arity > 0) {
      if (i >= text.size() || text[i] != '(')
        return error(fmt::format("'{}' takes {} operand(s) in parentheses", word, found->arity));
      ++i;
      pending.push_back(found->arity);
      continue;
    }
    // A leaf completes operands; close every node whose operands are all there.
    while (!pending.empty()) {
      if (--pending.back() > 0) {
        if (i >= text.size() || text[i] != ',') return error("expected ',' before the next operand");
        ++i;
        break;
      }
      pending.pop_back();
      if (i >= text.size() || text[i] != ')') return error("expected ')' after the last operand");
      ++i;
    }
    if (pending.empty()) break;
  }
  if (i != text.size()) return error("trailing text after a complete tree");
  return from_prefix(std::move(nodes));
}

bool EpilogueSpec::uses(EpilogueNode n) const noexcept {
  if (is_preset())
    return n == EpilogueNode::acc || n == EpilogueNode::alpha || n == EpilogueNode::beta || n == EpilogueNode::c;
  for (EpilogueNode x : nodes())
    if (x == n) return true;
  return false;
}

std::string EpilogueSpec::token() const {
  if (is_preset()) return std::string(name(preset_));
  std::string out;
  write_subtree(nodes(), 0, out, "", '(', ',', ')');
  return out;
}

std::string EpilogueSpec::symbol_key() const {
  if (is_preset()) return std::string(name(preset_));
  std::string out;
  for (EpilogueNode n : nodes()) {
    if (!out.empty()) out.push_back('_');
    out.append(name(n));
  }
  return out;
}

std::string EpilogueSpec::cxx_type() const {
  std::string out;
  if (is_preset()) return fmt::format("cuactor::kernels::tags::{}", name(preset_));
  write_subtree(nodes(), 0, out, "cuactor::kernels::tags::", '<', ',', '>');
  return out;
}

std::optional<EpilogueNode> dense_only_output(const EpilogueSpec& spec) noexcept {
  if (spec.is_preset()) return std::nullopt;
  for (EpilogueNode n : kSideOutputs)
    if (spec.uses(n)) return n;
  return std::nullopt;
}

bool pairs_columns(const EpilogueSpec& spec) noexcept {
  return !spec.is_preset() && spec.nodes().front() == EpilogueNode::swiglu;
}

std::int64_t output_columns(const EpilogueSpec& spec, std::int64_t n) noexcept {
  return pairs_columns(spec) ? n / 2 : n;
}

std::string name(const EpilogueSpec& e) {
  return e.token();
}

std::size_t hash_value(const EpilogueSpec& e) noexcept {
  std::size_t h = static_cast<std::size_t>(e.preset());
  for (EpilogueNode n : e.nodes()) boost::hash_combine(h, static_cast<int>(n));
  return h;
}

Status check_epilogue_operands(const EpilogueSpec& spec, const EpilogueOperands& o, std::string_view who) {
  struct Slot {
    EpilogueNode node;
    const void* ptr;
    std::uintptr_t alignment;
  };
  const Slot slots[] = {{EpilogueNode::row_scale, o.row_scale, 16},
                        {EpilogueNode::col_scale, o.col_scale, 16},
                        {EpilogueNode::row_bias, o.row_bias, 16},
                        {EpilogueNode::col_bias, o.col_bias, 16},
                        {EpilogueNode::amax, o.amax, 4},
                        {EpilogueNode::aux, o.aux, 16},
                        {EpilogueNode::row_sum, o.row_sum, 16}};
  for (const Slot& s : slots) {
    const bool used = !spec.is_preset() && spec.uses(s.node);
    if (used && s.ptr == nullptr)
      return fail(errc::invalid_argument,
                  fmt::format("{} epilogue '{}' reads {} but its pointer is null", who, spec.token(), name(s.node)));
    if (!used && s.ptr != nullptr)
      return fail(errc::invalid_argument, fmt::format("{} epilogue operand {} is set but the epilogue '{}' does not "
                                                      "use it",
                                                      who, name(s.node), spec.token()));
    if (used && reinterpret_cast<std::uintptr_t>(s.ptr) % s.alignment != 0)
      return fail(errc::invalid_argument, fmt::format("{} epilogue operand {} at {} is not {}-byte aligned", who,
                                                      name(s.node), s.ptr, s.alignment));
  }
  if (!spec.is_preset() && spec.uses(EpilogueNode::clamp) && !(o.clamp_lo <= o.clamp_hi))
    return fail(errc::invalid_argument, fmt::format("{} epilogue clamp bounds [{}, {}] must be numbers with lo <= hi",
                                                    who, o.clamp_lo, o.clamp_hi));
  return {};
}

EpilogueSpec epi_node(EpilogueNode n, std::initializer_list<const EpilogueSpec*> children) {
  EpilogueSpec s;
  auto append = [&s](EpilogueNode node) {
    if (s.size_ == EpilogueSpec::kMaxNodes) {
      s.overflow_ = true;
      return;
    }
    s.nodes_[s.size_++] = node;
  };
  append(n);
  for (const EpilogueSpec* child : children) {
    s.overflow_ = s.overflow_ || child->overflow_;
    for (EpilogueNode c : child->nodes()) append(c);
  }
  return s;
}

namespace epi {
EpilogueSpec acc() {
  return epi_node(EpilogueNode::acc, {});
}
EpilogueSpec c() {
  return epi_node(EpilogueNode::c, {});
}
EpilogueSpec alpha() {
  return epi_node(EpilogueNode::alpha, {});
}
EpilogueSpec beta() {
  return epi_node(EpilogueNode::beta, {});
}
EpilogueSpec row_scale() {
  return epi_node(EpilogueNode::row_scale, {});
}
EpilogueSpec col_scale() {
  return epi_node(EpilogueNode::col_scale, {});
}
EpilogueSpec row_bias() {
  return epi_node(EpilogueNode::row_bias, {});
}
EpilogueSpec col_bias() {
  return epi_node(EpilogueNode::col_bias, {});
}
EpilogueSpec add(const EpilogueSpec& x, const EpilogueSpec& y) {
  return epi_node(EpilogueNode::add, {&x, &y});
}
EpilogueSpec mul(const EpilogueSpec& x, const EpilogueSpec& y) {
  return epi_node(EpilogueNode::mul, {&x, &y});
}
EpilogueSpec fma(const EpilogueSpec& x, const EpilogueSpec& y, const EpilogueSpec& z) {
  return epi_node(EpilogueNode::fma, {&x, &y, &z});
}
EpilogueSpec apply(EpilogueNode unary, const EpilogueSpec& x) {
  return epi_node(unary, {&x});
}
}  // namespace epi

}  // namespace cuactor::kernels
