// How the tuning and benchmark commands read the shapes they are given: a dense "MxNxK" and a
// mixture-of-experts "GxRxNxK" (and how its rows spread over the groups). Free of CUDA calls and
// printing, so the unit tests check the rules.
#pragma once

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "cuactor/core/dtype.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"

namespace cuactor::cli {

/// `groups` row counts summing to about `total`, uniformly jittered by +-`spread`, with `empty`
/// groups set to zero; deterministic so that the torch script can reproduce them.
inline std::vector<int> ragged_rows(int groups, int total, double spread, int empty, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(1.0 - spread, 1.0 + spread);
  std::vector<double> w(static_cast<std::size_t>(groups));
  for (auto& v : w) v = jitter(rng);
  for (int i = 0; i < empty; ++i) w[rng() % w.size()] = 0.0;
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<int> rows;
  for (double v : w) rows.push_back(static_cast<int>(v / sum * total + 0.5));
  return rows;
}

/// One field of a shape's text: its digits, and whether they fit the integer they were read into.
struct ShapeField {
  std::string_view digits;
  bool fits = true;
};

/// The N decimal fields of `text`, between single 'x's ("16 x 8192 x 8192" too), or between runs of
/// blanks when there is no 'x' at all, read into `values`; blanks around the text and its fields are
/// ignored (a line of a --from file may end in "\r"). None unless there are exactly N fields, each of
/// digits only.
template <std::size_t N>
std::optional<std::array<ShapeField, N>> shape_fields(std::string_view text, std::array<long long, N>& values) {
  constexpr std::string_view kBlanks = " \t\r\n";
  const auto trim = [&](std::string_view s) {
    const std::size_t first = s.find_first_not_of(kBlanks);
    return first == std::string_view::npos ? std::string_view()
                                           : s.substr(first, s.find_last_not_of(kBlanks) - first + 1);
  };
  text = trim(text);
  std::vector<std::string_view> fields;
  if (text.find('x') != std::string_view::npos) {
    for (std::size_t start = 0;;) {
      const std::size_t end = text.find('x', start);
      fields.push_back(trim(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start)));
      if (end == std::string_view::npos) break;
      start = end + 1;
    }
  } else {
    for (std::size_t start = text.empty() ? std::string_view::npos : 0; start != std::string_view::npos;) {
      const std::size_t end = text.find_first_of(kBlanks, start);
      fields.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
      start = end == std::string_view::npos ? end : text.find_first_not_of(kBlanks, end);
    }
  }
  if (fields.size() != N) return std::nullopt;
  std::array<ShapeField, N> out;
  for (std::size_t i = 0; i < N; ++i) {
    const std::string_view f = fields[i];
    if (f.empty() || f.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
    const auto result = std::from_chars(f.data(), f.data() + f.size(), values[i]);
    out[i] = {f, result.ec == std::errc{}};
  }
  return out;
}

/// {M, N, K} of a dense GEMM shape written "MxNxK" (or "M N K"), each a positive integer:
/// `invalid_argument` quoting the text otherwise.
inline Result<std::array<std::int64_t, 3>> parse_gemm_shape(const std::string& text) {
  std::array<long long, 3> v{};
  const auto fields = shape_fields(text, v);
  if (!fields || !(*fields)[0].fits || !(*fields)[1].fits || !(*fields)[2].fits || v[0] < 1 || v[1] < 1 || v[2] < 1)
    return fail(errc::invalid_argument,
                fmt::format("shape '{}' is not MxNxK (or M N K) with three positive integers", text));
  return std::array<std::int64_t, 3>{v[0], v[1], v[2]};
}

/// One grouped problem as the tuning and benchmark commands name it ("GxRxNxK"): `groups` experts
/// sharing N and K, about `rows` rows each.
struct GroupedSize {
  int groups = 0, rows = 0, n = 0, k = 0;

  [[nodiscard]] std::string to_string() const { return fmt::format("{}x{}x{}x{}", groups, rows, n, k); }

  /// The rows of each group: `rows` each, or with `skew` > 0 jittered uniformly by +-skew around it
  /// (routing is never even), each rounded, so the total is about groups x rows; reproducible from `seed`.
  [[nodiscard]] std::vector<int> rows_per_group(double skew, unsigned seed) const {
    return skew > 0 ? ragged_rows(groups, groups * rows, skew, 0, seed) : std::vector<int>(groups, rows);
  }
};

/// `invalid_argument` naming `skew` unless it is in [0, 0.9] (NaN is not): how far rows per group may
/// stray from their mean (rows_per_group), checked by every command that takes --skew.
inline Status check_skew(double skew) {
  if (!(skew >= 0.0 && skew <= 0.9))
    return fail(errc::invalid_argument, fmt::format("--skew={} must be in [0, 0.9]", skew));
  return ok();
}

/// The largest group count, rows per group, N and K, and total rows, a GxRxNxK shape may name.
inline constexpr int kMaxGroups = 1 << 14;
inline constexpr int kMaxGroupedExtent = 1 << 20;
inline constexpr long long kMaxGroupedRows = 1 << 24;

/// The grouped problem `text` names ("GxRxNxK", or "G R N K") for inputs of `dtype`:
/// `invalid_argument` quoting the text, naming the value and the rule otherwise (four fields of
/// decimal digits, each in range, at most kMaxGroupedRows rows in all, N and K whole 16-byte rows of
/// `dtype`).
inline Result<GroupedSize> parse_grouped_size(const std::string& text, DType dtype) {
  const auto malformed = [&] {
    return fail(errc::invalid_argument,
                fmt::format("shape '{}' is not GxRxNxK (groups, rows per group, N, K: four integers)", text));
  };
  std::array<long long, 4> v{};
  const auto fields = shape_fields(text, v);
  if (!fields) return malformed();
  const std::array<long long, 4> limits = {kMaxGroups, kMaxGroupedExtent, kMaxGroupedExtent, kMaxGroupedExtent};
  const std::array<const char*, 4> names = {"groups", "rows per group", "N", "K"};
  for (std::size_t i = 0; i < 4; ++i)
    if (!(*fields)[i].fits || v[i] < 1 || v[i] > limits[i])
      return fail(errc::invalid_argument,
                  fmt::format("shape '{}': {}={} must be in [1, {}]", text, names[i], (*fields)[i].digits, limits[i]));
  if (v[0] * v[1] > kMaxGroupedRows)
    return fail(errc::invalid_argument, fmt::format("shape '{}': groups x rows per group = {} must be at most {}", text,
                                                    v[0] * v[1], kMaxGroupedRows));
  const int align = kernels::grouped_alignment_elements(dtype);
  for (std::size_t i : {2u, 3u})
    if (v[i] % align != 0)
      return fail(errc::invalid_argument, fmt::format("shape '{}': {}={} must be a multiple of {} for {} (16-byte "
                                                      "rows for the TMA kernels)",
                                                      text, names[i], v[i], align, name(dtype)));
  return GroupedSize{static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2]), static_cast<int>(v[3])};
}

}  // namespace cuactor::cli
