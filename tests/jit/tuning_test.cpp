// The tuning database ([K9]): problem classes, the file format and its rejections, atomic saves that
// touch nothing else, corrupt files ignored with a warning, and plans that consult it before their
// heuristic (and fall back to it when the tuned kernel cannot be had). No GPU needed.
#include "cuactor/jit/tuning.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "cuactor/core/log.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "support/gpu_test.hpp"
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

}  // namespace
}  // namespace cuactor::jit
