// `cuactor kernels [--json]`: what is in the box. Every GEMM instance compiled into the catalog, every
// GEMM instance in the JIT disk cache (compiled at run time or by `cuactor jit warm` / `tune`), and
// every tuning database entry with the figures its sweep measured.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "cuactor/jit/disk_cache.hpp"
#include "cuactor/jit/gemm.hpp"
#include "cuactor/jit/tuning.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"
#include "tune_candidates.hpp"

namespace cuactor::cli {
namespace {

struct KernelsOptions {
  bool json = false;
  std::string cache_dir;  ///< JIT cache directory (empty: the default).
  std::string db;         ///< Tuning database (empty: the default).
};

nlohmann::json sku_json(const kernels::GemmSku& s) {
  return {{"sku", s.to_string()},
          {"family", kernels::name(s.family)},
          {"arch", s.arch.name()},
          {"a", name(s.a)},
          {"b", name(s.b)},
          {"d", name(s.d)},
          {"tile", fmt::format("{}x{}x{}", s.tile.m, s.tile.n, s.tile.k)},
          {"cluster", fmt::format("{}x{}x{}", s.cluster.m, s.cluster.n, s.cluster.k)},
          {"schedule", kernels::name(s.schedule)},
          {"epilogue", kernels::name(s.epilogue)}};
}

nlohmann::json inventory(const KernelsOptions& o) {
  nlohmann::json j;
  j["catalog"] = nlohmann::json::array();
  for (const auto& e : kernels::catalog()) j["catalog"].push_back(sku_json(e.sku));
  j["catalog_scope"] = kernels::name(kernels::catalog_scope());

  jit::DiskCacheOptions d;
  if (!o.cache_dir.empty()) d.directory = o.cache_dir;
  d.fallback_when_untrusted = false;
  nlohmann::json cached = nlohmann::json::array();
  if (auto cache = jit::DiskCache::open(d)) {
    j["jit_cache"] = cache->directory().string();
    if (auto entries = cache->list()) {
      for (const auto& e : *entries) {
        if (e.kind != jit::ArtifactKind::shared_object || !e.problem.empty()) continue;
        auto sku = jit::sku_of_identity(e.metadata);
        if (!sku) continue;  // another template family's instance
        auto item = sku_json(*sku);
        item["key"] = e.key;
        item["bytes"] = e.file_bytes;
        item["in_catalog"] = kernels::find_in_catalog(*sku) != nullptr;
        cached.push_back(std::move(item));
      }
    } else {
      j["jit_cache_error"] = entries.error().to_string();
    }
  } else {
    j["jit_cache"] = nullptr;
    j["jit_cache_error"] = cache.error().to_string();
  }
  j["jit_cached"] = std::move(cached);

  auto path = o.db.empty() ? jit::TuningDb::default_path() : Result<std::filesystem::path>(o.db);
  j["tuning_db"] = path ? nlohmann::json(path->string()) : nlohmann::json(nullptr);
  const auto db = path ? jit::TuningDb::load(*path) : jit::TuningDb{};
  j["tuned"] = nlohmann::json::parse(db.to_json())["entries"];
  return j;
}

void print_text(const nlohmann::json& j) {
  const auto scope = [] {
    switch (kernels::catalog_scope()) {
      case kernels::CatalogScope::sample:
        return " (the sample: CUACTOR_CATALOG=sample)";
      case kernels::CatalogScope::filtered:
        return " (filtered: CUACTOR_CATALOG_FILTER)";
      case kernels::CatalogScope::full:
        break;
    }
    return "";
  };
  std::cout << fmt::format("catalog: {} instance(s) compiled in{}\n", j["catalog"].size(), scope());
  for (const auto& e : j["catalog"]) std::cout << "  " << e["sku"].get<std::string>() << "\n";
  std::cout << fmt::format("JIT cache: {} GEMM instance(s) in {}\n", j["jit_cached"].size(),
                           j["jit_cache"].is_null() ? std::string("(none)") : j["jit_cache"].get<std::string>());
  if (j.contains("jit_cache_error")) std::cout << "  (" << j["jit_cache_error"].get<std::string>() << ")\n";
  for (const auto& e : j["jit_cached"])
    std::cout << fmt::format("  {}  {:.0f} KiB{}\n", e["sku"].get<std::string>(),
                             static_cast<double>(e["bytes"].get<std::uint64_t>()) / 1024.0,
                             e["in_catalog"].get<bool>() ? "  (also in the catalog)" : "");
  std::cout << fmt::format(
      "tuned: {} entr{} in {} (plans use those measured against today's heuristic revision: dense {}, grouped "
      "{})\n",
      j["tuned"].size(), j["tuned"].size() == 1 ? "y" : "ies",
      j["tuning_db"].is_null() ? std::string("(no cache root)") : j["tuning_db"].get<std::string>(),
      kernels::kDenseHeuristicRevision, kernels::kGroupedHeuristicRevision);
  for (const auto& e : j["tuned"]) {
    const auto& d = e["device"];
    std::cout << fmt::format(
        "  {} | {} SMs | driver {}\n    class {}\n    {}{} raster {} swizzle {}: {:.1f} TFLOP/s vs "
        "cuBLAS {:.1f} on {}; heuristic revision {}\n",
        d["model"].get<std::string>(), d["sm_count"].get<int>(), d["driver"].get<int>(), e["class"].get<std::string>(),
        e["sku"].get<std::string>(), decode_schedule_name(e["swap_ab"].get<bool>(), e["split_k"].get<int>()),
        e["raster_order"].get<int>(), e["max_swizzle"].get<int>(), e["tflops"].get<double>(),
        e["anchor_tflops"].get<double>(), e["shape"].get<std::string>(), e["heuristic_revision"].get<int>());
  }
}

}  // namespace

void add_kernels_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("kernels", "List compiled-in, JIT-cached and tuned GEMM kernels");
  auto opt = std::make_shared<KernelsOptions>();
  cmd->add_flag("--json", opt->json, "One JSON object: catalog, jit_cached, tuned");
  cmd->add_option("--cache-dir", opt->cache_dir, "JIT disk cache directory (default: <cache root>/jit)");
  cmd->add_option("--db", opt->db, "Tuning database file (default: <cache root>/tuning.json)");
  cmd->callback([opt] {
    const auto j = inventory(*opt);
    if (opt->json)
      std::cout << j.dump(2) << "\n";
    else
      print_text(j);
  });
}

}  // namespace cuactor::cli
