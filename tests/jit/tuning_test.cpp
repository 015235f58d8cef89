// The tuning database ([K9]): dense and grouped problem classes, the file format and its rejections,
// atomic saves that touch nothing else, corrupt files ignored with a warning, and dense and grouped
// plans that consult it before their heuristic (and fall back to it when the tuned kernel cannot be
// had). No GPU needed.
#include "cuactor/jit/tuning.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "cuactor/core/log.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/grouped_plan_cache.hpp"
#include "support/gpu_test.hpp"
#include "support/plan_checks.hpp"
#include "test_support.hpp"

namespace cuactor::jit {
namespace {

using kernels::GemmProblem;
using test_support::TempDir;

GemmProblem problem(std::int64_t m, std::int64_t n, std::int64_t k) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

TuningDevice h100() {
  return TuningDevice{"NVIDIA H100 80GB HBM3", 132, 13000, GpuArch{9, 0, true}};
}

TunedGemm choice(kernels::GemmSchedule schedule = kernels::GemmSchedule::cooperative_streamk) {
  TunedGemm c;
  c.sku.tile = {128, 128, 64};
  c.sku.schedule = schedule;
  c.max_swizzle = 4;
  c.raster_order = 2;
  c.shape = "16x8192x8192";
  c.tflops = 40.5;
  c.anchor_tflops = 33.0;
  return c;
}

/// A valid device and valid entry fields of a hand-written database (JSON members, no braces).
const std::string kGoodDevice = R"("sm_count":132,"driver":13000)";
const std::string kGoodFields = R"("max_swizzle":0,"raster_order":0)";

/// The text of a database of one entry of choice()'s SKU with these device members and entry fields
/// (shape, tflops and anchor_tflops are added): what the parse tests edit one field of.
std::string one_entry(const std::string& device, const std::string& fields) {
  return R"({"format":"cuactor-tuning","version":1,"entries":[{"device":{"model":"x",)" + device +
         R"(,"arch":"sm_90a"},"class":"c","sku":")" + choice().sku.to_string() + R"(",)" + fields +
         R"(,"shape":"s","tflops":1,"anchor_tflops":1}]})";
}

/// Collects warnings while it lives.
class Warnings {
 public:
  Warnings() {
    set_log_sink(
        [this](LogLevel level, std::string_view text) {
          if (level < LogLevel::warn) return;
          std::lock_guard lock(mutex_);
          lines_.emplace_back(text);
        },
        LogLevel::warn);
  }
  ~Warnings() {  // back to the default: warnings to stderr
    set_log_sink(
        [](LogLevel, std::string_view text) {
          std::fprintf(stderr, "%.*s\n", static_cast<int>(text.size()), text.data());
        },
        LogLevel::warn);
  }
  [[nodiscard]] std::string all() {
    std::lock_guard lock(mutex_);
    std::string s;
    for (const auto& l : lines_) s += l + "\n";
    return s;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

TEST(TuningClass, BucketsByPowersOfTwoAndKeepsTypesAndLayouts) {
  EXPECT_EQ(DenseGemmClass::of(problem(16, 8192, 8192)).to_string(),
            "bf16,bf16,bf16,bf16:row,col,row:linear_combination:m<=16:n<=8192:k<=8192");
  EXPECT_EQ(DenseGemmClass::of(problem(9, 5000, 4097)).to_string(),
            DenseGemmClass::of(problem(16, 8192, 8192)).to_string());
  EXPECT_NE(DenseGemmClass::of(problem(17, 8192, 8192)).to_string(),
            DenseGemmClass::of(problem(16, 8192, 8192)).to_string());
  GemmProblem batched = problem(8, 8192, 8192);
  batched.batch = 2;  // the batch is folded into M
  EXPECT_EQ(DenseGemmClass::of(batched).to_string(), DenseGemmClass::of(problem(16, 8192, 8192)).to_string());
  GemmProblem nn = problem(16, 8192, 8192);
  nn.layout_b = kernels::MatrixLayout::row;
  EXPECT_NE(DenseGemmClass::of(nn).to_string(), DenseGemmClass::of(problem(16, 8192, 8192)).to_string());
  EXPECT_NE(DenseGemmClass::of(problem(0, 3, 1)).to_string().find(":m<=1:n<=4:k<=1"), std::string::npos)
      << DenseGemmClass::of(problem(0, 3, 1)).to_string();
}

TEST(TuningDb, FindsOnlyForTheSameDeviceAndClass) {
  TuningDb db;
  const auto cls = DenseGemmClass::of(problem(16, 8192, 8192));
  db.record(h100(), cls, choice());
  ASSERT_TRUE(db.find(h100(), cls).has_value());
  EXPECT_EQ(db.find(h100(), DenseGemmClass::of(problem(12, 7000, 8000)))->sku, choice().sku);
  TuningDevice other_driver = h100();
  other_driver.driver_version = 12080;
  EXPECT_FALSE(db.find(other_driver, cls).has_value());
  TuningDevice fewer_sms = h100();
  fewer_sms.sm_count = 114;
  EXPECT_FALSE(db.find(fewer_sms, cls).has_value());
  EXPECT_FALSE(db.find(h100(), DenseGemmClass::of(problem(4096, 4096, 4096))).has_value());
  // Recording again replaces.
  db.record(h100(), cls, choice(kernels::GemmSchedule::pingpong));
  EXPECT_EQ(db.size(), 1u);
  EXPECT_EQ(db.find(h100(), cls)->sku.schedule, kernels::GemmSchedule::pingpong);
  // Erasing drops only that device's entry of that class.
  TuningDevice other = h100();
  other.sm_count = 114;
  db.record(other, cls, choice());
  EXPECT_FALSE(db.erase(h100(), DenseGemmClass::of(problem(4096, 4096, 4096))));
  EXPECT_TRUE(db.erase(h100(), cls));
  EXPECT_FALSE(db.find(h100(), cls).has_value());
  EXPECT_TRUE(db.find(other, cls).has_value());
  EXPECT_FALSE(db.erase(h100(), cls));
  EXPECT_EQ(db.size(), 1u);
}

TEST(TuningDb, SavesAtomicallyPrivatelyAndLoadsBack) {
  TempDir dir;
  const auto path = dir.path() / "sub" / "tuning.json";
  std::ofstream(dir.path() / "unrelated.txt") << "keep me";
  TuningDb db;
  db.record(h100(), DenseGemmClass::of(problem(16, 8192, 8192)), choice());
  db.record(h100(), DenseGemmClass::of(problem(8192, 8192, 8192)), choice(kernels::GemmSchedule::cooperative));
  CUACTOR_ASSERT_OK(db.save(path));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(path.parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  const TuningDb loaded = TuningDb::load(path);
  EXPECT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded.to_json(), db.to_json());
  const auto found = loaded.find(h100(), DenseGemmClass::of(problem(16, 8192, 8192)));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->max_swizzle, 4);
  EXPECT_EQ(found->raster_order, 2);
  EXPECT_DOUBLE_EQ(found->tflops, 40.5);
  // Saving again replaces the file and leaves nothing else behind.
  CUACTOR_ASSERT_OK(db.save(path));
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(path.parent_path())) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"tuning.json"});
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "unrelated.txt"));
}

TEST(TuningDb, MissingFileIsEmptyAndCorruptOrForeignFilesAreIgnoredWithAWarning) {
  TempDir dir;
  EXPECT_EQ(TuningDb::load(dir.path() / "absent.json").size(), 0u);
  const auto path = dir.path() / "tuning.json";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{ not json", "not a JSON object"},
      {R"({"format":"something-else","version":1,"entries":[]})", "format"},
      {R"({"format":"cuactor-tuning","version":99,"entries":[]})", "version 99"},
      {R"({"format":"cuactor-tuning","version":1,"entries":{}})", "entries"},
      {R"({"format":"cuactor-tuning","version":1,"entries":[{"device":{"model":"x","sm_count":1,"driver":1,)"
       R"("arch":"sm_90a"},"class":"c","sku":"dense:nonsense","max_swizzle":0,"raster_order":0,"shape":"s",)"
       R"("tflops":1,"anchor_tflops":1}]})",
       "entry 0: sku"},
      {R"({"format":"cuactor-tuning","version":1,"entries":[{"device":{"model":"x","sm_count":"many"}}]})",
       "device.sm_count"},
  };
  for (const auto& [text, mentions] : cases) {
    write_text(path, text);
    Warnings warnings;
    EXPECT_EQ(TuningDb::load(path).size(), 0u) << text;
    EXPECT_NE(warnings.all().find(mentions), std::string::npos) << text << "\n" << warnings.all();
    EXPECT_NE(warnings.all().find("ignored"), std::string::npos) << warnings.all();
  }
  // A good file after a corrupt one: the next save rebuilds it.
  TuningDb db;
  db.record(h100(), DenseGemmClass::of(problem(16, 8192, 8192)), choice());
  CUACTOR_ASSERT_OK(db.save(path));
  EXPECT_EQ(TuningDb::load(path).size(), 1u);
}

TEST(TuningDb, ParseNamesTheBadField) {
  auto r = TuningDb::parse(R"({"format":"cuactor-tuning","version":1,"entries":[{"device":{"model":"x",)"
                           R"("sm_count":1,"driver":1,"arch":"sm_90a"},"class":"c","sku":")" +
                           choice().sku.to_string() + R"(","max_swizzle":"wide"}]})");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), errc::invalid_argument);
  EXPECT_NE(r.error().message().find("max_swizzle"), std::string::npos) << r.error().message();
  // Integers out of their range (one that an int would truncate to a valid value included) are refused
  // by name, not loaded as something else.
  CUACTOR_ASSERT_OK(TuningDb::parse(one_entry(kGoodDevice, kGoodFields)));
  // The widest values a sweep records load: swizzle 8, raster order 2 (along N).
  CUACTOR_ASSERT_OK_AND_ASSIGN(widest, TuningDb::parse(one_entry(kGoodDevice, R"("max_swizzle":8,"raster_order":2)")));
  EXPECT_NE(widest.to_json().find(R"("max_swizzle": 8)"), std::string::npos) << widest.to_json();
  for (const auto& [device, fields, mentions] :
       {std::tuple{kGoodDevice, std::string(R"("max_swizzle":4294967298,"raster_order":0)"), "max_swizzle"},
        {kGoodDevice, R"("max_swizzle":3,"raster_order":0)", "max_swizzle"},
        {kGoodDevice, R"("max_swizzle":-1,"raster_order":0)", "max_swizzle"},
        {kGoodDevice, R"("max_swizzle":0,"raster_order":3)", "raster_order"},
        {kGoodDevice, R"("max_swizzle":0,"raster_order":4294967296)", "raster_order"},
        {R"("sm_count":4294967428,"driver":13000)", kGoodFields, "device.sm_count"},
        {R"("sm_count":0,"driver":13000)", kGoodFields, "device.sm_count"},
        {R"("sm_count":132,"driver":-1)", kGoodFields, "device.driver"},
        {R"("sm_count":132,"driver":4294967296)", kGoodFields, "device.driver"},
        {kGoodDevice, kGoodFields + R"(,"heuristic_revision":0)", "heuristic_revision"},
        {kGoodDevice, kGoodFields + R"(,"heuristic_revision":4294967297)", "heuristic_revision"}}) {
    auto bad = TuningDb::parse(one_entry(device, fields));
    ASSERT_FALSE(bad.has_value()) << device << fields;
    EXPECT_NE(bad.error().message().find(std::string("field \"") + mentions + "\""), std::string::npos)
        << bad.error().message();
  }
  // A version an int would truncate to the supported one is not that version.
  auto wrapped = TuningDb::parse(R"({"format":"cuactor-tuning","version":4294967297,"entries":[]})");
  ASSERT_FALSE(wrapped.has_value());
  EXPECT_NE(wrapped.error().message().find("version 4294967297 is not the supported"), std::string::npos)
      << wrapped.error().message();
}

TEST(TuningPlan, ConsultsTheDatabaseBeforeTheHeuristic) {
  const GemmProblem p = problem(16, 8192, 8192);
  // Without a tuned entry (or database): the heuristic, whatever this build's catalog holds.
  auto heuristic = plan_dense_gemm(p, h100(), {}, nullptr, nullptr);
  if (heuristic) {
    EXPECT_EQ(heuristic->source(), kernels::PlanSource::heuristic);
  }
  // A tuned kernel that is neither compiled in nor compilable here (no JIT given): a warning, then the
  // heuristic's answer.
  TuningDb db;
  TunedGemm absent = choice();
  absent.sku.tile = {64, 64, 32};  // never in the catalog
  db.record(h100(), DenseGemmClass::of(p), absent);
  {
    Warnings warnings;
    auto fallback = plan_dense_gemm(p, h100(), {}, &db, nullptr);
    EXPECT_EQ(fallback.has_value(), heuristic.has_value());
    if (fallback) {
      EXPECT_EQ(fallback->source(), kernels::PlanSource::heuristic);
    }
    EXPECT_NE(warnings.all().find("not usable"), std::string::npos) << warnings.all();
  }
  // A tuned catalog kernel: chosen, reported as tuned, with the tuned scheduling options.
  const kernels::CatalogEntry* entry = nullptr;
  for (const kernels::CatalogEntry* e : kernels::catalog_entries(kernels::GemmFamily::dense))
    if (e->sku.a == DType::bf16 && e->sku.d == DType::bf16 && e->sku.layout_b == kernels::MatrixLayout::col &&
        e->sku.arch.arch_specific && e->sku.epilogue == kernels::GemmEpilogue::linear_combination)
      entry = e;
  if (entry == nullptr) GTEST_SKIP() << "no sm_90a bf16 TN kernel in this build's catalog";
  TunedGemm in_catalog = choice();
  in_catalog.sku = entry->sku;
  db.record(h100(), DenseGemmClass::of(p), in_catalog);
  CUACTOR_ASSERT_OK_AND_ASSIGN(tuned, plan_dense_gemm(p, h100(), {}, &db, nullptr));
  EXPECT_EQ(tuned.source(), kernels::PlanSource::tuned);
  EXPECT_EQ(tuned.sku(), entry->sku);
  // An explicit override bypasses the database.
  kernels::GemmPlanOptions o;
  o.sku_override = entry->sku;
  CUACTOR_ASSERT_OK_AND_ASSIGN(overridden, plan_dense_gemm(p, h100(), o, &db, nullptr));
  EXPECT_EQ(overridden.source(), kernels::PlanSource::overridden);
}

// Decode choices ([K9]): swap-AB and split-K are saved with the kernel, files without them load as
// neither, and malformed values are refused by name.
TEST(TuningDb, DecodeChoicesKeepTheirSwapAndSplit) {
  TempDir dir;
  const auto path = dir.path() / "tuning.json";
  TuningDb db;
  TunedGemm decode = choice(kernels::GemmSchedule::pingpong);
  decode.swap_ab = true;
  decode.split_k = 4;
  db.record(h100(), DenseGemmClass::of(problem(16, 8192, 8192)), decode);
  db.record(h100(), DenseGemmClass::of(problem(8192, 8192, 8192)), choice(kernels::GemmSchedule::cooperative));
  CUACTOR_ASSERT_OK(db.save(path));
  const TuningDb loaded = TuningDb::load(path);
  const auto found = loaded.find(h100(), DenseGemmClass::of(problem(16, 8192, 8192)));
  ASSERT_TRUE(found.has_value());
  EXPECT_TRUE(found->swap_ab);
  EXPECT_EQ(found->split_k, 4);
  const auto large = loaded.find(h100(), DenseGemmClass::of(problem(8192, 8192, 8192)));
  ASSERT_TRUE(large.has_value());
  EXPECT_FALSE(large->swap_ab);
  EXPECT_EQ(large->split_k, 1);
  CUACTOR_ASSERT_OK_AND_ASSIGN(older, TuningDb::parse(one_entry(kGoodDevice, kGoodFields)));
  EXPECT_NE(older.to_json().find(R"("split_k": 1)"), std::string::npos) << older.to_json();
  EXPECT_NE(older.to_json().find(R"("swap_ab": false)"), std::string::npos) << older.to_json();
  for (const auto& [field, mentions] : {std::pair{R"(,"swap_ab":1)", "swap_ab"},
                                        {R"(,"split_k":0)", "split_k"},
                                        {R"(,"split_k":17)", "split_k"},
                                        {R"(,"split_k":2.5)", "split_k"},
                                        {R"(,"split_k":99999999999)", "split_k"}}) {
    auto r = TuningDb::parse(one_entry(kGoodDevice, kGoodFields + field));
    ASSERT_FALSE(r.has_value()) << field;
    EXPECT_EQ(r.error(), errc::invalid_argument);
    EXPECT_NE(r.error().message().find(std::string("field \"") + mentions + "\""), std::string::npos)
        << r.error().message();
  }
}

// A tuned swap or split yields to the caller's "never" (swap_ab or split_k 1) without a warning; asked
// for nothing, the plan takes the tuned choice (here: its kernel is not compiled in, a warning names it).
TEST(TuningPlan, TunedSwapOrSplitYieldsToNever) {
  const GemmProblem p = problem(16, 8192, 8192);
  TuningDb db;
  TunedGemm decode = choice(kernels::GemmSchedule::pingpong);
  decode.sku.tile = {64, 16, 32};  // never in the catalog
  decode.swap_ab = true;
  decode.split_k = 4;
  db.record(h100(), DenseGemmClass::of(p), decode);
  auto heuristic = plan_dense_gemm(p, h100(), {}, nullptr, nullptr);
  for (const auto& [swap_ab, split_k] : {std::pair{1, 0}, {0, 1}, {1, 1}}) {
    kernels::GemmPlanOptions never;
    never.swap_ab = swap_ab;
    never.split_k = split_k;
    Warnings warnings;
    auto plan = plan_dense_gemm(p, h100(), never, &db, nullptr);
    EXPECT_EQ(warnings.all(), "") << "swap_ab=" << swap_ab << " split_k=" << split_k;
    if (plan) {
      EXPECT_EQ(plan->source(), kernels::PlanSource::heuristic);
    }
  }
  {
    Warnings warnings;
    auto plan = plan_dense_gemm(p, h100(), {}, &db, nullptr);
    EXPECT_EQ(plan.has_value(), heuristic.has_value());
    EXPECT_NE(warnings.all().find("not usable"), std::string::npos) << warnings.all();
  }
  // "Never" covers only its own option: a tuned split meets swap_ab 1, a tuned swap meets split_k 1,
  // and each is tried (the warning says its kernel is missing).
  for (const auto& [tuned_swap, tuned_split, swap_ab, split_k] :
       {std::tuple{false, 4, 1, 0}, std::tuple{true, 1, 0, 1}}) {
    decode.swap_ab = tuned_swap;
    decode.split_k = tuned_split;
    db.record(h100(), DenseGemmClass::of(p), decode);
    kernels::GemmPlanOptions o;
    o.swap_ab = swap_ab;
    o.split_k = split_k;
    Warnings warnings;
    (void)plan_dense_gemm(p, h100(), o, &db, nullptr);
    EXPECT_NE(warnings.all().find("not usable"), std::string::npos)
        << "tuned swap " << tuned_swap << " split " << tuned_split << ": " << warnings.all();
  }
  // A tuned split whose rule this problem of the class breaks (K not a multiple of 4 x 64): the
  // heuristic, quietly.
  decode.swap_ab = false;
  decode.split_k = 4;
  db.record(h100(), DenseGemmClass::of(p), decode);
  Warnings warnings;
  auto odd = plan_dense_gemm(problem(16, 8192, 8000), h100(), {}, &db, nullptr);
  EXPECT_EQ(warnings.all(), "");
  if (odd) {
    EXPECT_EQ(odd->source(), kernels::PlanSource::heuristic);
  }
}

// A tuned swap and split run as recorded (catalog-gated: the swapped slice kernel must be compiled in).
TEST(TuningPlan, TunedSwapAndSplitRunAsRecorded) {
  const GemmProblem p = problem(16, 8192, 8192);
  // The swapped problem's slice kernel: D^T of float32 partials, column-major, 16 columns (the rows).
  CUACTOR_ASSERT_OK_AND_ASSIGN(
      slice, kernels::GemmSku::parse(
                 "dense:sm_90a:bf16,bf16,f32,f32,f32:row,col,col:64x16x64:1x1x1:s0:pingpong:linear_combination"));
  const kernels::CatalogEntry* entry = kernels::find_in_catalog(slice);
  if (entry == nullptr) GTEST_SKIP() << "the swapped slice kernel " << slice.to_string() << " is not in this build";
  TuningDb db;
  TunedGemm decode = choice(kernels::GemmSchedule::pingpong);
  decode.sku = entry->sku;
  decode.max_swizzle = 0;
  decode.raster_order = 0;
  decode.swap_ab = true;
  decode.split_k = 4;
  db.record(h100(), DenseGemmClass::of(p), decode);
  // Another shape of the class (n <= 8192): the choice generalises by class.
  CUACTOR_ASSERT_OK_AND_ASSIGN(plan, plan_dense_gemm(problem(16, 6144, 8192), h100(), {}, &db, nullptr));
  EXPECT_EQ(plan.source(), kernels::PlanSource::tuned);
  EXPECT_EQ(plan.sku(), entry->sku);
  EXPECT_TRUE(plan.swap_ab());
  EXPECT_EQ(plan.split_k(), 4);
  EXPECT_GE(plan.workspace_size(), 4u * 16u * 6144u * sizeof(float));
}

TEST(TuningPlan, PlanCachesMakePlansThroughTheirPlanner) {
  int calls = 0;
  kernels::GemmPlanCache cache(8, [&](const GemmProblem& p, GpuArch arch, const kernels::GemmPlanOptions& o) {
    ++calls;
    return kernels::GemmPlan::make(p, arch, o);
  });
  const GemmProblem p = problem(16, 8192, 8192);
  auto first = cache.get(p, GpuArch{9, 0, true});
  auto second = cache.get(p, GpuArch{9, 0, true});
  EXPECT_EQ(first.has_value(), second.has_value());
  // A plan is cached; a failure is not (every lookup asks the planner again).
  EXPECT_EQ(calls, first.has_value() ? 1 : 2);
  // The tuned planner without entries, or for a device this machine does not have, is the heuristic.
  auto planner = tuned_planner(std::make_shared<TuningDb>(), nullptr);
  auto heuristic = kernels::GemmPlan::make(p, GpuArch{9, 0, true});
  auto planned = planner(p, GpuArch{9, 0, true}, {});
  ASSERT_EQ(planned.has_value(), heuristic.has_value());
  if (planned) {
    EXPECT_EQ(planned->sku(), heuristic->sku());
    EXPECT_EQ(planned->source(), kernels::PlanSource::heuristic);
  }
  auto db = std::make_shared<TuningDb>();
  db->record(h100(), DenseGemmClass::of(p), choice());
  kernels::GemmPlanOptions absent_device;
  absent_device.device = 63;
  auto elsewhere = tuned_planner(db, nullptr)(p, GpuArch{9, 0, true}, absent_device);
  EXPECT_EQ(elsewhere.has_value(), heuristic.has_value());
}

kernels::GroupedGemmSpec grouped(int groups, int rows, int n, int k, DType t = DType::bf16) {
  kernels::GroupedGemmSpec spec;
  spec.a = spec.b = t;
  spec.d = t == DType::e4m3 ? DType::bf16 : t;
  spec.sm_count = 132;
  spec.group_count_hint = groups;
  spec.rows_per_group_hint = rows;
  spec.n_hint = n;
  spec.k_hint = k;
  return spec;
}

/// The catalog's sm_90a grouped kernel for `spec`'s types with a preset epilogue, if this build has one.
const kernels::CatalogEntry* grouped_entry(const kernels::GroupedGemmSpec& spec) {
  for (const kernels::CatalogEntry* e : kernels::catalog_entries(kernels::GemmFamily::grouped))
    if (e->sku.a == spec.a && e->sku.d == spec.d && e->sku.layout_b == spec.layout_b && e->sku.arch == spec.arch &&
        e->sku.epilogue.is_preset())
      return e;
  return nullptr;
}

TEST(TuningClass, GroupedClassesBucketEveryHintAndKeepTypesLayoutAndEpilogue) {
  // Hints from extents are capped; their classes are powers of two, unknown or invalid ones 0.
  EXPECT_EQ(kernels::shape_hint(-5), 0);
  EXPECT_EQ(kernels::shape_hint(1536), 1536);
  EXPECT_EQ(kernels::shape_hint(std::int64_t{5} << 40), 1 << 30);
  EXPECT_EQ(kernels::shape_hint_bucket(0), 0);
  EXPECT_EQ(kernels::shape_hint_bucket(-3), 0);
  EXPECT_EQ(kernels::shape_hint_bucket(1), 1);
  EXPECT_EQ(kernels::shape_hint_bucket(200), 256);
  EXPECT_EQ(kernels::shape_hint_bucket(std::numeric_limits<int>::max()), 1 << 30);
  EXPECT_EQ(GroupedGemmClass::of(grouped(128, 200, 1536, 2048)).to_string(),
            "grouped:bf16,bf16,bf16:col:preset:g<=128:rows<=256:n<=2048:k<=2048");
  // Routing moves rows within the bucket; so does a slightly different expert count or width.
  EXPECT_EQ(GroupedGemmClass::of(grouped(100, 129, 1100, 1500)).to_string(),
            GroupedGemmClass::of(grouped(128, 256, 2048, 2048)).to_string());
  EXPECT_NE(GroupedGemmClass::of(grouped(128, 257, 2048, 2048)).to_string(),
            GroupedGemmClass::of(grouped(128, 256, 2048, 2048)).to_string());
  EXPECT_NE(GroupedGemmClass::of(grouped(128, 200, 1536, 2048, DType::e4m3)).to_string(),
            GroupedGemmClass::of(grouped(128, 200, 1536, 2048)).to_string());
  // Unknown hints are their own bucket; device, SM count and overrides take no part.
  EXPECT_NE(GroupedGemmClass::of(grouped(0, 0, 0, 0)).to_string().find(":g<=0:rows<=0:n<=0:k<=0"), std::string::npos);
  auto elsewhere = grouped(128, 200, 1536, 2048);
  elsewhere.device = 3;
  elsewhere.sm_count = 114;
  EXPECT_EQ(GroupedGemmClass::of(elsewhere).to_string(),
            GroupedGemmClass::of(grouped(128, 200, 1536, 2048)).to_string());
  auto tree = grouped(128, 200, 1536, 2048);
  tree.epilogue = kernels::epi::mul(kernels::epi::acc(), kernels::epi::row_scale());
  EXPECT_NE(GroupedGemmClass::of(tree).to_string().find(":mul(acc,rowscale):"), std::string::npos)
      << GroupedGemmClass::of(tree).to_string();
}

TEST(TuningDb, GroupedAndDenseEntriesAreKeptApartAndSavedTogether) {
  TempDir dir;
  TuningDb db;
  const auto dense = DenseGemmClass::of(problem(16, 8192, 8192));
  const auto moe = GroupedGemmClass::of(grouped(128, 200, 1536, 2048));
  db.record(h100(), dense, choice());
  TunedGemm g = choice(kernels::GemmSchedule::pingpong);
  g.sku.family = kernels::GemmFamily::grouped;
  g.max_swizzle = g.raster_order = 0;
  g.shape = "128x200x1536x2048";
  db.record(h100(), moe, g);
  EXPECT_EQ(db.size(), 2u);
  ASSERT_TRUE(db.find(h100(), moe).has_value());
  EXPECT_EQ(db.find(h100(), moe)->sku.family, kernels::GemmFamily::grouped);
  EXPECT_EQ(db.find(h100(), dense)->sku.family, kernels::GemmFamily::dense);
  EXPECT_FALSE(db.find(h100(), GroupedGemmClass::of(grouped(8, 2048, 14336, 4096))).has_value());
  EXPECT_FALSE(db.erase(h100(), GroupedGemmClass::of(grouped(8, 2048, 14336, 4096))));
  CUACTOR_ASSERT_OK(db.save(dir.path() / "tuning.json"));
  const TuningDb loaded = TuningDb::load(dir.path() / "tuning.json");
  ASSERT_TRUE(loaded.find(h100(), moe).has_value());
  EXPECT_EQ(loaded.find(h100(), moe)->sku, g.sku);
  EXPECT_EQ(loaded.find(h100(), moe)->shape, "128x200x1536x2048");
  // A grouped entry that claims a swap or a split was not written by a sweep: the file is refused.
  const std::string saved = loaded.to_json();
  ASSERT_NE(saved.find(R"("swap_ab": false)"), std::string::npos);
  for (const auto& [from, to] :
       {std::pair{R"("swap_ab": false)", R"("swap_ab": true)"}, {R"("split_k": 1)", R"("split_k": 4)"}}) {
    std::string edited = saved;
    // The grouped entry is the one whose class starts "grouped:"; edit the field after it.
    const auto at = edited.find(from, edited.find("\"grouped:"));
    ASSERT_NE(at, std::string::npos);
    edited.replace(at, std::string(from).size(), to);
    auto r = TuningDb::parse(edited);
    ASSERT_FALSE(r.has_value()) << to;
    EXPECT_NE(r.error().message().find("a grouped entry is never swapped or split"), std::string::npos)
        << r.error().message();
  }
}

// A choice beat the heuristic of its day; once the heuristic changes (kDenseHeuristicRevision), plans
// pass it over until a tuning run measures its class again. Files from before the field: revision 1.
TEST(TuningDb, ChoicesMeasuredAgainstAnOlderHeuristicArePassedOverAndCounted) {
  TempDir dir;
  const auto dense = DenseGemmClass::of(problem(16, 8192, 8192));
  const auto moe = GroupedGemmClass::of(grouped(128, 200, 1536, 2048));
  TunedGemm g = choice(kernels::GemmSchedule::pingpong);
  g.sku.family = kernels::GemmFamily::grouped;
  TuningDb today;
  today.record(h100(), dense, choice());
  today.record(h100(), moe, g);
  EXPECT_EQ(today.find(h100(), dense)->heuristic_revision, kernels::kDenseHeuristicRevision);
  EXPECT_EQ(today.find(h100(), moe)->heuristic_revision, kernels::kGroupedHeuristicRevision);
  EXPECT_EQ(today.stale_entries(), 0u);
  // The same entries as an older cuactor wrote them, without the field.
  std::string old_text = today.to_json();
  for (std::size_t at; (at = old_text.find("\"heuristic_revision\"")) != std::string::npos;) {
    const std::size_t line_start = old_text.rfind('\n', at), line_end = old_text.find('\n', at);
    old_text.erase(line_start, line_end - line_start);
  }
  for (const std::string from : {",\n      }", ",\n    }"}) {  // the comma the dropped last field left
    for (std::size_t at; (at = old_text.find(from)) != std::string::npos;) old_text.erase(at, 1);
  }
  CUACTOR_ASSERT_OK_AND_ASSIGN(old, TuningDb::parse(old_text));
  EXPECT_EQ(old.size(), 2u);
  static_assert(kernels::kDenseHeuristicRevision > 1, "the dense heuristic changed since the field existed");
  EXPECT_EQ(old.stale_entries(), 1u);
  EXPECT_FALSE(old.find(h100(), dense).has_value());
  ASSERT_TRUE(old.find(h100(), moe).has_value());  // grouped plans still choose as revision 1 did
  const auto path = dir.path() / "tuning.json";
  write_text(path, old_text);
  {
    Warnings warnings;
    EXPECT_EQ(TuningDb::load(path).size(), 2u);
    EXPECT_NE(warnings.all().find("1 tuned choice(s) beat an older plan heuristic"), std::string::npos)
        << warnings.all();
  }
  // Measuring the class again replaces the stale choice.
  old.record(h100(), dense, choice());
  EXPECT_TRUE(old.find(h100(), dense).has_value());
  EXPECT_EQ(old.stale_entries(), 0u);
  // A malformed revision is named.
  std::string bad = today.to_json();
  bad.replace(bad.find("\"heuristic_revision\": ") + 22, 1, "\"two\"");
  auto r = TuningDb::parse(bad);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("heuristic_revision"), std::string::npos) << r.error().message();
}

TEST(TuningPlan, GroupedPlansConsultTheDatabaseBeforeTheHeuristic) {
  const auto spec = grouped(128, 200, 1536, 2048);
  auto heuristic = plan_grouped_gemm(spec, h100(), nullptr, nullptr);
  if (heuristic) {
    EXPECT_EQ(heuristic->source(), kernels::PlanSource::heuristic);
  }
  // A tuned kernel neither compiled in nor compilable here: a warning, then the heuristic's answer.
  TuningDb db;
  TunedGemm absent = choice(kernels::GemmSchedule::cooperative);
  absent.sku.family = kernels::GemmFamily::grouped;
  absent.sku.tile = {64, 64, 32};  // never in the catalog
  db.record(h100(), GroupedGemmClass::of(spec), absent);
  {
    Warnings warnings;
    auto fallback = plan_grouped_gemm(spec, h100(), &db, nullptr);
    EXPECT_EQ(fallback.has_value(), heuristic.has_value());
    if (fallback) {
      EXPECT_EQ(fallback->source(), kernels::PlanSource::heuristic);
    }
    EXPECT_NE(warnings.all().find("not usable"), std::string::npos) << warnings.all();
  }
  const kernels::CatalogEntry* entry = grouped_entry(spec);
  if (entry == nullptr) GTEST_SKIP() << "no sm_90a bf16 grouped kernel in this build's catalog";
  // A tuned catalog kernel: chosen and reported as tuned, for every spec of the class.
  TunedGemm in_catalog = choice();
  in_catalog.sku = entry->sku;
  db.record(h100(), GroupedGemmClass::of(spec), in_catalog);
  CUACTOR_ASSERT_OK_AND_ASSIGN(tuned, plan_grouped_gemm(grouped(120, 180, 2048, 2048), h100(), &db, nullptr));
  EXPECT_EQ(tuned.source(), kernels::PlanSource::tuned);
  EXPECT_EQ(tuned.sku(), entry->sku);
  // A tuned kernel that does not compute the spec (another element type) is not used.
  auto f16 = grouped(128, 200, 1536, 2048, DType::f16);
  db.record(h100(), GroupedGemmClass::of(f16), in_catalog);
  {
    Warnings warnings;
    auto other = plan_grouped_gemm(f16, h100(), &db, nullptr);
    if (other) {
      EXPECT_EQ(other->source(), kernels::PlanSource::heuristic);
    }
    EXPECT_NE(warnings.all().find("not usable"), std::string::npos) << warnings.all();
  }
  // An explicit override bypasses the database.
  auto overridden_spec = spec;
  overridden_spec.sku_override = entry->sku;
  CUACTOR_ASSERT_OK_AND_ASSIGN(overridden, plan_grouped_gemm(overridden_spec, h100(), &db, nullptr));
  EXPECT_EQ(overridden.source(), kernels::PlanSource::overridden);
}

TEST(TuningPlan, GroupedPlanCachesAskTheirPlannerOncePerClass) {
  int calls = 0;
  kernels::GroupedPlanCache cache(8, [&](const kernels::GroupedGemmSpec& s) {
    ++calls;
    return kernels::GroupedGemmPlan::create(s);
  });
  const auto first = cache.get(grouped(128, 100, 1536, 2048));
  const auto same_class = cache.get(grouped(100, 90, 1100, 1500));
  EXPECT_EQ(first.has_value(), same_class.has_value());
  EXPECT_EQ(calls, first.has_value() ? 1 : 2);  // failures are not cached
  const int before = calls;
  (void)cache.get(grouped(8, 2048, 14336, 4096));  // another class: the planner again
  EXPECT_EQ(calls, before + 1);
  // Without a planner only the heuristic's size classes split plans: the two medium shapes share
  // one, the large one has its own.
  kernels::GroupedPlanCache plain(8);
  const auto medium = plain.get(grouped(128, 100, 1536, 2048));
  (void)plain.get(grouped(100, 90, 1100, 1500));
  (void)plain.get(grouped(8, 2048, 14336, 4096));
  if (medium.has_value()) {
    EXPECT_EQ(plain.size(), 2u);
  } else {
    EXPECT_EQ(plain.size(), 0u);  // no grouped kernels in this build: failures are not cached
  }
  // The tuned planner for a device this machine does not have is the heuristic.
  auto db = std::make_shared<TuningDb>();
  auto spec = grouped(128, 200, 1536, 2048);
  spec.device = 63;
  auto planned = tuned_grouped_planner(db, nullptr)(spec);
  auto heuristic = kernels::GroupedGemmPlan::create(spec);
  ASSERT_EQ(planned.has_value(), heuristic.has_value());
  if (planned) {
    EXPECT_EQ(planned->source(), kernels::PlanSource::heuristic);
  }
}

TEST(TuningPlan, GroupedHintsMustNotBeNegative) {
  for (auto bad : {grouped(-1, 200, 1536, 2048), grouped(128, 200, -8, 2048), grouped(128, 200, 1536, -2)})
    cuactor::test_support::expect_error(kernels::GroupedGemmPlan::create(bad), errc::invalid_argument,
                                        "must be 0 (unknown)");
}

}  // namespace
}  // namespace cuactor::jit
