#include "cuactor/kernels/sku.hpp"

#include <fmt/format.h>

#include <array>
#include <boost/container_hash/hash.hpp>
#include <charconv>
#include <utility>
#include <vector>

#include "kernels/instance_abi.h"

namespace cuactor::kernels {
namespace {

template <class E, std::size_t N>
std::optional<E> lookup(const std::array<std::pair<std::string_view, E>, N>& table, std::string_view s) noexcept {
  for (const auto& [n, e] : table)
    if (n == s) return e;
  return std::nullopt;
}

template <class E, std::size_t N>
std::string_view token(const std::array<std::pair<std::string_view, E>, N>& table, E e) noexcept {
  for (const auto& [n, v] : table)
    if (v == e) return n;
  return "unknown";
}

constexpr std::array<std::pair<std::string_view, GemmFamily>, 5> kFamilies{{
    {"dense", GemmFamily::dense},
    {"grouped", GemmFamily::grouped},
    {"conv_fprop", GemmFamily::conv_fprop},
    {"conv_dgrad", GemmFamily::conv_dgrad},
    {"conv_wgrad", GemmFamily::conv_wgrad},
}};
constexpr std::array<std::pair<std::string_view, MatrixLayout>, 4> kLayouts{{
    {"row", MatrixLayout::row},
    {"col", MatrixLayout::col},
    {"nhwc", MatrixLayout::nhwc},
    {"krsc", MatrixLayout::krsc},
}};
constexpr std::array<std::pair<std::string_view, GemmSchedule>, 9> kSchedules{{
    {"cooperative", GemmSchedule::cooperative},
    {"pingpong", GemmSchedule::pingpong},
    {"cooperative_fp8_fast_accum", GemmSchedule::cooperative_fp8_fast_accum},
    {"pingpong_fp8_fast_accum", GemmSchedule::pingpong_fp8_fast_accum},
    {"cooperative_streamk", GemmSchedule::cooperative_streamk},
    {"cooperative_fp8_fast_accum_streamk", GemmSchedule::cooperative_fp8_fast_accum_streamk},
    {"multistage", GemmSchedule::multistage},
    {"warpspecialized", GemmSchedule::warpspecialized},
    {"coresident", GemmSchedule::coresident},
}};

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t end = s.find(sep, start);
    parts.push_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

std::optional<int> parse_int(std::string_view s) noexcept {
  int v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

std::optional<Shape3> parse_shape(std::string_view s) {
  const auto parts = split(s, 'x');
  if (parts.size() != 3) return std::nullopt;
  const auto m = parse_int(parts[0]), n = parse_int(parts[1]), k = parse_int(parts[2]);
  if (!m || !n || !k || *m == 0 || *n == 0 || *k == 0) return std::nullopt;
  return Shape3{*m, *n, *k};
}

/// A parsed value or `invalid_argument` naming the field and the text.
template <class T>
Result<T> need(std::optional<T> v, std::string_view field, std::string_view text) {
  if (!v) return fail(errc::invalid_argument, fmt::format("GemmSku: {} '{}' is not a known token", field, text));
  return *v;
}

/// The SKU from its tokens (shared by parse and from_desc so the two vocabularies cannot diverge).
Result<GemmSku> from_tokens(std::string_view family, std::string_view arch,
                            const std::array<std::string_view, 5>& types,
                            const std::array<std::string_view, 3>& layouts, Shape3 tile, Shape3 cluster, int stages,
                            std::string_view schedule, std::string_view epilogue) {
  GemmSku s;
  auto f = need(parse_family(family), "family", family);
  if (!f) return fail(f.error());
  s.family = *f;
  auto a = need(parse_arch(arch), "arch", arch);
  if (!a) return fail(a.error());
  s.arch = *a;
  std::array<DType*, 5> slots{&s.a, &s.b, &s.c, &s.d, &s.accumulator};
  constexpr std::array<std::string_view, 5> kTypeFields{"element A", "element B", "element C", "element D",
                                                        "accumulator"};
  for (std::size_t i = 0; i < slots.size(); ++i) {
    // Only canonical names: the token doubles as a C++ tag name in the instantiation templates.
    auto t = parse_dtype(types[i]);
    if (!t || name(*t) != types[i])
      return fail(errc::invalid_argument,
                  fmt::format("GemmSku: {} '{}' is not a canonical dtype name", kTypeFields[i], types[i]));
    *slots[i] = *t;
  }
  std::array<MatrixLayout*, 3> lslots{&s.layout_a, &s.layout_b, &s.layout_c};
  for (std::size_t i = 0; i < lslots.size(); ++i) {
    auto l = need(parse_layout(layouts[i]), "layout", layouts[i]);
    if (!l) return fail(l.error());
    *lslots[i] = *l;
  }
  s.tile = tile;
  s.cluster = cluster;
  s.stages = stages;
  auto sc = need(parse_schedule(schedule), "schedule", schedule);
  if (!sc) return fail(sc.error());
  s.schedule = *sc;
  auto e = EpilogueSpec::parse(epilogue);
  if (!e) return fail(errc::invalid_argument, fmt::format("GemmSku: epilogue: {}", e.error().message()));
  s.epilogue = *e;
  return s;
}

}  // namespace

std::string_view name(GemmFamily f) noexcept {
  return token(kFamilies, f);
}
std::string_view name(MatrixLayout l) noexcept {
  return token(kLayouts, l);
}
std::string_view name(GemmSchedule s) noexcept {
  return token(kSchedules, s);
}
std::optional<GemmFamily> parse_family(std::string_view s) noexcept {
  return lookup(kFamilies, s);
}
std::optional<MatrixLayout> parse_layout(std::string_view s) noexcept {
  return lookup(kLayouts, s);
}
std::optional<GemmSchedule> parse_schedule(std::string_view s) noexcept {
  return lookup(kSchedules, s);
}
bool is_conv(GemmFamily f) noexcept {
  return f == GemmFamily::conv_fprop || f == GemmFamily::conv_dgrad || f == GemmFamily::conv_wgrad;
}
bool is_stream_k(GemmSchedule s) noexcept {
  return s == GemmSchedule::cooperative_streamk || s == GemmSchedule::cooperative_fp8_fast_accum_streamk;
}
bool conv_schedule_fits(const GemmSku& sku) noexcept {
  if (!sku.arch.arch_specific)
    return sku.schedule == GemmSchedule::multistage && sku.stages >= 2 && sku.cluster == Shape3{1, 1, 1};
  return sku.schedule == GemmSchedule::warpspecialized || sku.schedule == GemmSchedule::coresident ||
         (sku.schedule == GemmSchedule::cooperative && sku.tile.m >= 128) ||
         (sku.schedule == GemmSchedule::pingpong && sku.cluster == Shape3{1, 1, 1} &&
          sku.tile.m * sku.tile.n <= 128 * 128);
}

std::string GemmSku::to_string() const {
  return fmt::format("{}:{}:{},{},{},{},{}:{},{},{}:{}x{}x{}:{}x{}x{}:s{}:{}:{}", name(family), arch.name(), name(a),
                     name(b), name(c), name(d), name(accumulator), name(layout_a), name(layout_b), name(layout_c),
                     tile.m, tile.n, tile.k, cluster.m, cluster.n, cluster.k, stages, name(schedule), epilogue.token());
}

std::string GemmSku::symbol_name() const {
  std::string arch_key = arch.name();
  std::erase(arch_key, '_');
  return fmt::format("cuactor_gemm_{}_{}_{}_{}_{}_{}_{}_{}{}{}_{}x{}x{}_{}x{}x{}_s{}_{}_{}", name(family), arch_key,
                     name(a), name(b), name(c), name(d), name(accumulator), name(layout_a).front(),
                     name(layout_b).front(), name(layout_c).front(), tile.m, tile.n, tile.k, cluster.m, cluster.n,
                     cluster.k, stages, name(schedule), epilogue.symbol_key());
}

Result<GemmSku> GemmSku::parse(std::string_view text) {
  const auto fields = split(text, ':');
  if (fields.size() != 9)
    return fail(errc::invalid_argument,
                fmt::format("GemmSku '{}': expected 9 ':'-separated fields "
                            "(family:arch:types:layouts:tile:cluster:stages:schedule:epilogue), got {}",
                            text, fields.size()));
  const auto types = split(fields[2], ',');
  if (types.size() != 5)
    return fail(errc::invalid_argument,
                fmt::format("GemmSku '{}': types '{}' must be A,B,C,D,accumulator", text, fields[2]));
  const auto layouts = split(fields[3], ',');
  if (layouts.size() != 3)
    return fail(errc::invalid_argument, fmt::format("GemmSku '{}': layouts '{}' must be A,B,C", text, fields[3]));
  const auto tile = parse_shape(fields[4]);
  if (!tile) return fail(errc::invalid_argument, fmt::format("GemmSku '{}': tile '{}' is not MxNxK", text, fields[4]));
  const auto cluster = parse_shape(fields[5]);
  if (!cluster)
    return fail(errc::invalid_argument, fmt::format("GemmSku '{}': cluster '{}' is not MxNxK", text, fields[5]));
  const auto stages = fields[6].starts_with('s') ? parse_int(fields[6].substr(1)) : std::nullopt;
  if (!stages)
    return fail(errc::invalid_argument, fmt::format("GemmSku '{}': stages '{}' is not s<count>", text, fields[6]));
  return from_tokens(fields[0], fields[1], {types[0], types[1], types[2], types[3], types[4]},
                     {layouts[0], layouts[1], layouts[2]}, *tile, *cluster, *stages, fields[7], fields[8]);
}

Result<GemmSku> GemmSku::from_desc(const cuactor_gemm_sku_desc& d) {
  for (const char* p : {d.family, d.arch, d.element_a, d.element_b, d.element_c, d.element_d, d.element_accumulator,
                        d.layout_a, d.layout_b, d.layout_c, d.schedule, d.epilogue})
    if (p == nullptr) return fail(errc::invalid_argument, "GemmSku description: a token is null");
  if (d.tile_m <= 0 || d.tile_n <= 0 || d.tile_k <= 0 || d.cluster_m <= 0 || d.cluster_n <= 0 || d.cluster_k <= 0 ||
      d.stages < 0)
    return fail(errc::invalid_argument,
                fmt::format("GemmSku description: tile {}x{}x{}, cluster {}x{}x{} and stages {} must be positive",
                            d.tile_m, d.tile_n, d.tile_k, d.cluster_m, d.cluster_n, d.cluster_k, d.stages));
  return from_tokens(d.family, d.arch, {d.element_a, d.element_b, d.element_c, d.element_d, d.element_accumulator},
                     {d.layout_a, d.layout_b, d.layout_c}, {d.tile_m, d.tile_n, d.tile_k},
                     {d.cluster_m, d.cluster_n, d.cluster_k}, d.stages, d.schedule, d.epilogue);
}

std::size_t hash_value(const GemmSku& s) noexcept {
  std::size_t h = 0;
  for (long long v : {static_cast<long long>(s.family),
                      static_cast<long long>(s.arch.major),
                      static_cast<long long>(s.arch.minor),
                      static_cast<long long>(s.arch.arch_specific),
                      static_cast<long long>(s.a),
                      static_cast<long long>(s.b),
                      static_cast<long long>(s.c),
                      static_cast<long long>(s.d),
                      static_cast<long long>(s.accumulator),
                      static_cast<long long>(s.layout_a),
                      static_cast<long long>(s.layout_b),
                      static_cast<long long>(s.layout_c),
                      static_cast<long long>(s.tile.m),
                      static_cast<long long>(s.tile.n),
                      static_cast<long long>(s.tile.k),
                      static_cast<long long>(s.cluster.m),
                      static_cast<long long>(s.cluster.n),
                      static_cast<long long>(s.cluster.k),
                      static_cast<long long>(s.stages),
                      static_cast<long long>(s.schedule),
                      static_cast<long long>(hash_value(s.epilogue))})
    boost::hash_combine(h, v);
  return h;
}

}  // namespace cuactor::kernels
