#include "cuactor/jit/tuning.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "cuactor/core/files.hpp"
#include "cuactor/core/log.hpp"
#include "cuactor/core/paths.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/jit/engine.hpp"
#include "cuactor/jit/gemm.hpp"
#include "cuactor/kernels/catalog.hpp"

namespace cuactor::jit {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::size_t kMaxFileBytes = std::size_t{16} << 20;
/// How a grouped class's key starts (GroupedGemmClass::to_string); dense keys start with a type name.
constexpr std::string_view kGroupedClassPrefix = "grouped:";

/// Today's heuristic revision for the class `key` names (grouped or dense).
int heuristic_revision_of(std::string_view key) {
  return key.starts_with(kGroupedClassPrefix) ? kernels::kGroupedHeuristicRevision : kernels::kDenseHeuristicRevision;
}

/// The power of two at or above `v` (>= 1): the bucket a size falls into.
std::int64_t bucket(std::int64_t v) {
  return static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(v, 1))));
}

json device_json(const TuningDevice& d) {
  return {{"model", d.model}, {"sm_count", d.sm_count}, {"driver", d.driver_version}, {"arch", d.arch.name()}};
}

}  // namespace

Result<TuningDevice> TuningDevice::of(int ordinal) {
  auto props = gpu::device_properties(ordinal);
  if (!props) return fail(props.error());
  int driver = 0;
  CUACTOR_TRY(gpu::check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion"));
  return TuningDevice{props->name, props->multiprocessors, driver, props->arch};
}

std::string TuningDevice::to_string() const {
  return fmt::format("{}, {} SMs, driver {}, {}", model, sm_count, driver_version, arch.name());
}

DenseGemmClass DenseGemmClass::of(const kernels::GemmProblem& problem) {
  DenseGemmClass c{problem};
  c.representative.m = bucket(problem.m * problem.batch);
  c.representative.n = bucket(problem.n);
  c.representative.k = bucket(problem.k);
  c.representative.batch = 1;
  return c;
}

std::string DenseGemmClass::to_string() const {
  const auto& p = representative;
  return fmt::format("{},{},{},{}:{},{},{}:{}:m<={}:n<={}:k<={}", name(p.a), name(p.b), name(p.c), name(p.d),
                     kernels::name(p.layout_a), kernels::name(p.layout_b), kernels::name(p.layout_c),
                     kernels::name(p.epilogue), p.m, p.n, p.k);
}

GroupedGemmClass GroupedGemmClass::of(const kernels::GroupedGemmSpec& spec) {
  GroupedGemmClass c;
  c.representative.a = spec.a;
  c.representative.b = spec.b;
  c.representative.d = spec.d;
  c.representative.layout_b = spec.layout_b;
  c.representative.arch = spec.arch;
  c.representative.epilogue = spec.epilogue;
  c.representative.group_count_hint = kernels::shape_hint_bucket(spec.group_count_hint);
  c.representative.rows_per_group_hint = kernels::shape_hint_bucket(spec.rows_per_group_hint);
  c.representative.n_hint = kernels::shape_hint_bucket(spec.n_hint);
  c.representative.k_hint = kernels::shape_hint_bucket(spec.k_hint);
  return c;
}

std::string GroupedGemmClass::to_string() const {
  const auto& s = representative;
  // Every preset runs on the same grouped kernels (the plan picks the fp8 scaling itself): one class.
  const std::string epilogue = s.epilogue.is_preset() ? std::string("preset") : s.epilogue.token();
  return fmt::format("{}{},{},{}:{}:{}:g<={}:rows<={}:n<={}:k<={}", kGroupedClassPrefix, name(s.a), name(s.b),
                     name(s.d), kernels::name(s.layout_b), epilogue, s.group_count_hint, s.rows_per_group_hint,
                     s.n_hint, s.k_hint);
}

Result<fs::path> TuningDb::default_path() {
  auto root = cache_root();
  if (!root) return fail(root.error());
  return *root / "tuning.json";
}

std::optional<TunedGemm> TuningDb::find_key(const TuningDevice& device, const std::string& key) const {
  for (const Entry& e : entries_)
    if (e.device == device && e.problem_class == key)
      return e.choice.heuristic_revision == heuristic_revision_of(key) ? std::optional(e.choice) : std::nullopt;
  return std::nullopt;
}

void TuningDb::record_key(const TuningDevice& device, std::string key, TunedGemm choice) {
  choice.heuristic_revision = heuristic_revision_of(key);
  for (Entry& e : entries_)
    if (e.device == device && e.problem_class == key) {
      e.choice = std::move(choice);
      return;
    }
  entries_.push_back(Entry{device, std::move(key), std::move(choice)});
}

std::size_t TuningDb::stale_entries() const noexcept {
  return static_cast<std::size_t>(std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) {
    return e.choice.heuristic_revision != heuristic_revision_of(e.problem_class);
  }));
}

bool TuningDb::erase_key(const TuningDevice& device, const std::string& key) {
  return std::erase_if(entries_, [&](const Entry& e) { return e.device == device && e.problem_class == key; }) > 0;
}

std::optional<TunedGemm> TuningDb::find(const TuningDevice& device, const DenseGemmClass& problem_class) const {
  return find_key(device, problem_class.to_string());
}

void TuningDb::record(const TuningDevice& device, const DenseGemmClass& problem_class, TunedGemm choice) {
  record_key(device, problem_class.to_string(), std::move(choice));
}

std::optional<TunedGemm> TuningDb::find(const TuningDevice& device, const GroupedGemmClass& problem_class) const {
  return find_key(device, problem_class.to_string());
}

void TuningDb::record(const TuningDevice& device, const GroupedGemmClass& problem_class, TunedGemm choice) {
  record_key(device, problem_class.to_string(), std::move(choice));
}

bool TuningDb::erase(const TuningDevice& device, const DenseGemmClass& problem_class) {
  return erase_key(device, problem_class.to_string());
}

bool TuningDb::erase(const TuningDevice& device, const GroupedGemmClass& problem_class) {
  return erase_key(device, problem_class.to_string());
}

std::string TuningDb::to_json() const {
  json entries = json::array();
  for (const Entry& e : entries_)
    entries.push_back({{"device", device_json(e.device)},
                       {"class", e.problem_class},
                       {"sku", e.choice.sku.to_string()},
                       {"max_swizzle", e.choice.max_swizzle},
                       {"raster_order", e.choice.raster_order},
                       {"shape", e.choice.shape},
                       {"tflops", e.choice.tflops},
                       {"anchor_tflops", e.choice.anchor_tflops},
                       {"heuristic_revision", e.choice.heuristic_revision},
                       {"swap_ab", e.choice.swap_ab},
                       {"split_k", e.choice.split_k}});
  return json{{"format", "cuactor-tuning"}, {"version", kVersion}, {"entries", std::move(entries)}}.dump(2) + "\n";
}

Result<TuningDb> TuningDb::parse(const std::string& text) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return fail(errc::invalid_argument, "tuning database: not a JSON object");
  if (doc.value("format", std::string()) != "cuactor-tuning")
    return fail(errc::invalid_argument, "tuning database: \"format\" is not \"cuactor-tuning\"");
  const json& version = doc.contains("version") ? doc["version"] : json();
  if (!version.is_number_integer() || version.get<std::int64_t>() != kVersion)
    return fail(errc::invalid_argument,
                fmt::format("tuning database: version {} is not the supported {}", version.dump(), kVersion));
  if (!doc.contains("entries") || !doc["entries"].is_array())
    return fail(errc::invalid_argument, "tuning database: \"entries\" is not an array");
  TuningDb db;
  std::size_t index = 0;
  for (const json& e : doc["entries"]) {
    const auto bad = [&](std::string_view field) {
      return fail(errc::invalid_argument,
                  fmt::format("tuning database: entry {}: field \"{}\" is missing or malformed", index, field));
    };
    // An integer field within [lo, hi] (all of them fit an int: a larger one would be truncated).
    const auto int_in = [](const json& o, const char* f, std::int64_t lo, std::int64_t hi) {
      return o.contains(f) && o[f].is_number_integer() && o[f].get<std::int64_t>() >= lo &&
             o[f].get<std::int64_t>() <= hi;
    };
    constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
    if (!e.is_object()) return bad("(entry)");
    const json& d = e.contains("device") ? e["device"] : json();
    if (!d.is_object() || !d.contains("model") || !d["model"].is_string()) return bad("device.model");
    if (!int_in(d, "sm_count", 1, kIntMax)) return bad("device.sm_count");
    if (!int_in(d, "driver", 0, kIntMax)) return bad("device.driver");
    if (!d.contains("arch") || !d["arch"].is_string()) return bad("device.arch");
    auto arch = parse_arch(d["arch"].get<std::string>());
    if (!arch) return bad("device.arch");
    if (!e.contains("class") || !e["class"].is_string()) return bad("class");
    if (!e.contains("sku") || !e["sku"].is_string()) return bad("sku");
    auto sku = kernels::GemmSku::parse(e["sku"].get<std::string>());
    if (!sku)
      return fail(errc::invalid_argument,
                  fmt::format("tuning database: entry {}: sku: {}", index, sku.error().message()));
    if (!int_in(e, "max_swizzle", 0, 8) || std::popcount(e["max_swizzle"].get<unsigned>()) > 1)
      return bad("max_swizzle");  // 0 (the default), 1, 2, 4 or 8
    if (!int_in(e, "raster_order", 0, 2)) return bad("raster_order");
    for (const char* f : {"tflops", "anchor_tflops"})
      if (!e.contains(f) || !e[f].is_number()) return bad(f);
    if (!e.contains("shape") || !e["shape"].is_string()) return bad("shape");
    // Files written before the field existed were measured against revision 1 of both heuristics.
    if (e.contains("heuristic_revision") && !int_in(e, "heuristic_revision", 1, kIntMax))
      return bad("heuristic_revision");
    // Files written before decode plans were tuned hold neither field: not swapped, not split.
    if (e.contains("swap_ab") && !e["swap_ab"].is_boolean()) return bad("swap_ab");
    if (e.contains("split_k") && !int_in(e, "split_k", 1, kernels::kMaxSplitK)) return bad("split_k");
    // Grouped plans are never swapped or split: such an entry was not written by a sweep.
    const bool grouped_class = e["class"].get<std::string>().starts_with(kGroupedClassPrefix);
    if (grouped_class && (e.value("swap_ab", false) || e.value("split_k", 1) != 1))
      return fail(errc::invalid_argument,
                  fmt::format("tuning database: entry {}: a grouped entry is never swapped or split (swap_ab {}, "
                              "split_k {})",
                              index, e.value("swap_ab", false), e.value("split_k", 1)));
    TuningDevice device{d["model"].get<std::string>(), d["sm_count"].get<int>(), d["driver"].get<int>(), *arch};
    TunedGemm choice{*sku,
                     e["max_swizzle"].get<int>(),
                     e["raster_order"].get<int>(),
                     e["shape"].get<std::string>(),
                     e["tflops"].get<double>(),
                     e["anchor_tflops"].get<double>(),
                     e.value("heuristic_revision", 1),
                     e.value("swap_ab", false),
                     e.value("split_k", 1)};
    db.entries_.push_back(Entry{std::move(device), e["class"].get<std::string>(), std::move(choice)});
    ++index;
  }
  return db;
}

TuningDb TuningDb::load(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return {};
  const auto size = fs::file_size(path, ec);
  if (!ec && size > kMaxFileBytes) {
    log(LogLevel::warn, fmt::format("tuning database '{}' has {} bytes, over the {} allowed; ignored (it is rebuilt "
                                    "by the next tuning run)",
                                    path.string(), size, kMaxFileBytes));
    return {};
  }
  auto bytes = read_file(path, "tuning database");
  if (!bytes) {
    log(LogLevel::warn, fmt::format("{}; tuning database ignored", bytes.error().message()));
    return {};
  }
  auto db = parse(std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
  if (!db) {
    log(LogLevel::warn,
        fmt::format("'{}': {}; ignored (it is rebuilt by the next tuning run)", path.string(), db.error().message()));
    return {};
  }
  if (const std::size_t stale = db->stale_entries(); stale > 0)
    log(LogLevel::warn, fmt::format("'{}': {} tuned choice(s) beat an older plan heuristic than today's; their classes "
                                    "use today's heuristic until `cuactor tune` measures them again",
                                    path.string(), stale));
  return std::move(*db);
}

Status TuningDb::prepare_directory(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return fail(errc::invalid_argument, fmt::format("tuning database '{}' is a directory, not a file", path.string()));
  if (path.has_parent_path()) CUACTOR_TRY(make_private_directory(path.parent_path(), "tuning database directory"));
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return fail(errc::io_error,
                fmt::format("cannot write the tuning database into '{}': {}", dir.string(), std::strerror(errno)));
  return ok();
}

Status TuningDb::save(const fs::path& path) const {
  CUACTOR_TRY(prepare_directory(path));
  static std::atomic<std::uint64_t> sequence{0};
  const fs::path temp = path.string() + fmt::format(".tmp.{}.{}", ::getpid(), sequence++);
  const std::string text = to_json();
  CUACTOR_TRY(write_new_private_file(
      temp, std::span<const std::byte>(reinterpret_cast<const std::byte*>(text.data()), text.size())));
  std::error_code ec;
  fs::rename(temp, path, ec);  // atomic: readers see the old database or the whole new one
  if (ec) {
    std::error_code rec;
    fs::remove(temp, rec);
    return fail(errc::io_error,
                fmt::format("cannot rename '{}' to '{}': {}", temp.string(), path.string(), ec.message()));
  }
  return ok();
}

namespace {

/// The plan running `sku` (the heuristic's configuration, GemmPlan::sku_for) compiled or loaded from
/// the disk cache by `jit`.
Result<kernels::GemmPlan> jit_heuristic_plan(const kernels::GemmProblem& problem, GpuArch arch,
                                             const kernels::GemmPlanOptions& options, const kernels::GemmSku& sku,
                                             GemmJit& jit) {
  auto resolved = jit.resolve(sku).get();
  if (!resolved) return fail(resolved.error());
  return kernels::GemmPlan::with_instance(problem, arch, sku, *(*resolved)->abi, (*resolved)->jit,
                                          kernels::PlanSource::heuristic, options);
}

/// GemmPlan::make, falling back to the JIT (when `jit` gives one) for epilogue trees the catalog lacks.
Result<kernels::GemmPlan> heuristic_plan(const kernels::GemmProblem& problem, GpuArch arch,
                                         const kernels::GemmPlanOptions& options,
                                         const std::function<GemmJit*()>& jit) {
  auto plan = kernels::GemmPlan::make(problem, arch, options);
  if (problem.epilogue.is_preset() || options.sku_override) return plan;
  if (!plan && !(plan.error() == errc::unsupported)) return plan;
  // Trees: the catalog holds the common ones in one configuration (large tiles); the heuristic's
  // configuration for this shape (small-M pingpong tiles, ...) comes from the JIT when it differs.
  auto want = kernels::GemmPlan::sku_for(problem, arch, options);
  if (!want) return plan;  // sku_for runs make()'s checks: for trees, make() failed the same way
  if (plan && *want == plan->sku()) return plan;
  GemmJit* compiler = jit ? jit() : nullptr;
  if (compiler == nullptr) return plan;
  auto compiled = jit_heuristic_plan(problem, arch, options, *want, *compiler);
  if (!compiled && plan) {
    log(LogLevel::warn, fmt::format("epilogue tree '{}': the JIT could not build the heuristic's configuration ({}); "
                                    "using the catalog's {}",
                                    problem.epilogue.token(), compiled.error().message(), plan->sku().to_string()));
    return plan;
  }
  return compiled;
}

/// The instance of a tuned SKU: the catalog's, else the JIT's (GemmJit::resolve does both); without a
/// JIT, the catalog's only.
Result<std::shared_ptr<const ResolvedInstance>> tuned_instance(const kernels::GemmSku& sku, GemmJit* jit) {
  if (jit != nullptr) return jit->resolve(sku).get();
  if (const kernels::CatalogEntry* e = kernels::find_in_catalog(sku))
    return std::make_shared<const ResolvedInstance>(ResolvedInstance{e->instance, nullptr});
  return fail(errc::unsupported, "not compiled into the catalog, and no JIT was given");
}

}  // namespace

Result<kernels::GemmPlan> plan_dense_gemm(const kernels::GemmProblem& problem, const TuningDevice& device,
                                          kernels::GemmPlanOptions options, const TuningDb* db, GemmJit* jit) {
  if (options.sm_count == 0) options.sm_count = device.sm_count;
  auto tuned =
      // A forced split or swap is the caller's choice, as an override is.
      (db != nullptr && !options.sku_override && options.split_k <= 1 && options.swap_ab != 2)
          ? db->find(device, DenseGemmClass::of(problem))
          : std::nullopt;
  // So is "never": a tuned swap or split does not overrule it.
  if (tuned && ((tuned->swap_ab && options.swap_ab == 1) || (tuned->split_k > 1 && options.split_k == 1)))
    tuned.reset();
  const std::function<GemmJit*()> jit_source = [jit] { return jit; };
  if (!tuned) return heuristic_plan(problem, device.arch, options, jit_source);
  kernels::GemmPlanOptions tuned_options = options;
  tuned_options.max_swizzle = tuned->max_swizzle;
  tuned_options.raster_order = tuned->raster_order;
  tuned_options.swap_ab = tuned->swap_ab ? 2 : 1;
  tuned_options.split_k = tuned->split_k;
  // A swap or split measured on one shape of the class may break its rules on another (a batch, a K
  // that is not a multiple of the slices' depth): that problem takes the heuristic, quietly.
  if (!kernels::GemmPlan::check_decode_options(problem, device.arch, tuned_options))
    return heuristic_plan(problem, device.arch, options, jit_source);
  const auto fall_back = [&](const Error& why) {
    log(LogLevel::warn, fmt::format("tuned GEMM kernel {} for {} is not usable ({}); using the heuristic's choice",
                                    tuned->sku.to_string(), DenseGemmClass::of(problem).to_string(), why.message()));
    return heuristic_plan(problem, device.arch, options, jit_source);
  };
  auto instance = tuned_instance(tuned->sku, jit);
  if (!instance) return fall_back(instance.error());
  auto plan = kernels::GemmPlan::with_instance(problem, device.arch, tuned->sku, *(*instance)->abi, (*instance)->jit,
                                               kernels::PlanSource::tuned, tuned_options);
  if (!plan) return fall_back(plan.error());
  return plan;
}

Result<kernels::GroupedGemmPlan> plan_grouped_gemm(const kernels::GroupedGemmSpec& spec, const TuningDevice& device,
                                                   const TuningDb* db, GemmJit* jit) {
  const auto tuned =
      (db != nullptr && !spec.sku_override) ? db->find(device, GroupedGemmClass::of(spec)) : std::nullopt;
  if (!tuned) return kernels::GroupedGemmPlan::create(spec);
  const auto fall_back = [&](const Error& why) {
    log(LogLevel::warn, fmt::format("tuned grouped GEMM kernel {} for {} is not usable ({}); using the heuristic's "
                                    "choice",
                                    tuned->sku.to_string(), GroupedGemmClass::of(spec).to_string(), why.message()));
    return kernels::GroupedGemmPlan::create(spec);
  };
  auto instance = tuned_instance(tuned->sku, jit);
  if (!instance) return fall_back(instance.error());
  auto plan = kernels::GroupedGemmPlan::with_instance(spec, tuned->sku, *(*instance)->abi, (*instance)->jit,
                                                      kernels::PlanSource::tuned);
  if (!plan) return fall_back(plan.error());
  return plan;
}

namespace {

/// The tuning device of each ordinal this process asked about, looked up once (null: no such device).
class KnownDevices {
 public:
  std::optional<TuningDevice> get(int ordinal) {
    std::lock_guard lock(mutex_);
    auto it = known_.find(ordinal);
    if (it == known_.end()) {
      auto d = TuningDevice::of(ordinal);
      it = known_.emplace(ordinal, d ? std::optional<TuningDevice>(std::move(*d)) : std::nullopt).first;
    }
    return it->second;
  }

 private:
  std::mutex mutex_;
  std::map<int, std::optional<TuningDevice>> known_;
};

/// A JIT over the default disk cache, created on first use (planners of processes that never need
/// one start no compiler machinery).
std::function<GemmJit*()> lazy_default_jit() {
  struct Lazy {
    std::once_flag once;
    std::shared_ptr<GemmJit> jit;
  };
  auto lazy = std::make_shared<Lazy>();
  return [lazy]() -> GemmJit* {
    std::call_once(lazy->once, [&] {
      if (auto engine = JitEngine::create({})) lazy->jit = std::make_shared<GemmJit>(std::move(*engine));
    });
    return lazy->jit.get();
  };
}

kernels::GemmPlanCache::Planner make_planner(std::shared_ptr<const TuningDb> db, std::function<GemmJit*()> jit) {
  auto devices = std::make_shared<KnownDevices>();
  return [db = std::move(db), jit = std::move(jit), devices](const kernels::GemmProblem& problem, GpuArch arch,
                                                             const kernels::GemmPlanOptions& options) {
    if (!db || db->size() == 0 || options.sku_override) return heuristic_plan(problem, arch, options, jit);
    const auto device = devices->get(options.device);
    // No such device here, or planning for another target: no tuning.
    if (!device || device->arch != arch) return heuristic_plan(problem, arch, options, jit);
    return plan_dense_gemm(problem, *device, options, db.get(), jit());
  };
}

kernels::GroupedPlanCache::Planner make_grouped_planner(std::shared_ptr<const TuningDb> db,
                                                        std::function<GemmJit*()> jit) {
  auto devices = std::make_shared<KnownDevices>();
  return [db = std::move(db), jit = std::move(jit), devices](const kernels::GroupedGemmSpec& spec) {
    if (!db || db->size() == 0 || spec.sku_override) return kernels::GroupedGemmPlan::create(spec);
    const auto device = devices->get(spec.device);
    if (!device || device->arch != spec.arch || device->sm_count != spec.sm_count)
      return kernels::GroupedGemmPlan::create(spec);
    return plan_grouped_gemm(spec, *device, db.get(), jit());
  };
}

/// The default database, loaded once per process and shared by the dense and grouped planners.
std::shared_ptr<const TuningDb> default_db() {
  static const std::shared_ptr<const TuningDb> db = [] {
    auto loaded = std::make_shared<TuningDb>();
    if (auto path = TuningDb::default_path()) *loaded = TuningDb::load(*path);
    return loaded;
  }();
  return db;
}

}  // namespace

kernels::GemmPlanCache::Planner tuned_planner(std::shared_ptr<const TuningDb> db, std::shared_ptr<GemmJit> jit) {
  return make_planner(std::move(db), [jit] { return jit.get(); });
}

kernels::GemmPlanCache::Planner default_tuned_planner() {
  return make_planner(default_db(), lazy_default_jit());
}

kernels::GroupedPlanCache::Planner tuned_grouped_planner(std::shared_ptr<const TuningDb> db,
                                                         std::shared_ptr<GemmJit> jit) {
  return make_grouped_planner(std::move(db), [jit] { return jit.get(); });
}

kernels::GroupedPlanCache::Planner default_tuned_grouped_planner() {
  return make_grouped_planner(default_db(), lazy_default_jit());
}

}  // namespace cuactor::jit
