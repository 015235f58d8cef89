/// @file
/// The tuning database ([K9]): which kernel configuration won a timed sweep (`cuactor tune gemm|grouped`) for
/// a device and a problem class, consulted by plans before their heuristic. A small versioned JSON
/// file under the cache root, shippable with an application; a corrupt or foreign one is ignored with
/// a warning and rebuilt by the next save.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"
#include "cuactor/kernels/grouped_plan_cache.hpp"
#include "cuactor/kernels/sku.hpp"

namespace cuactor::jit {

class GemmJit;

/// The device a tuning result was measured on. A result holds only for the same model, SM count and
/// driver: another driver may compile and schedule the same kernel differently.
struct TuningDevice {
  std::string model;       ///< cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3".
  int sm_count = 0;        ///< Multiprocessors.
  int driver_version = 0;  ///< cudaDriverGetVersion (e.g. 13000).
  GpuArch arch{9, 0, true};

  /// The device `ordinal` of this machine.
  static Result<TuningDevice> of(int ordinal);
  /// "NVIDIA H100 80GB HBM3, 132 SMs, driver 13000, sm_90a".
  [[nodiscard]] std::string to_string() const;
  friend bool operator==(const TuningDevice&, const TuningDevice&) = default;
};

/// The problem class of a dense GEMM, the database's key beside the device: element types, layouts,
/// epilogue, and power-of-two buckets of M (batch folded in), N and K, so that a result measured on
/// one shape serves the shapes of its bucket.
struct DenseGemmClass {
  kernels::GemmProblem representative;  ///< Types, layouts, epilogue; M, N, K rounded up to their bucket.

  /// The class of `problem`.
  static DenseGemmClass of(const kernels::GemmProblem& problem);
  /// Stable text, e.g. "bf16,bf16,bf16,bf16:row,col,row:linear_combination:m<=16:n<=8192:k<=8192".
  [[nodiscard]] std::string to_string() const;
};

/// The problem class of a grouped GEMM: element types, B layout, epilogue, and power-of-two buckets of
/// the group count, rows per group, N and K (GroupedGemmSpec's hints; an unknown hint is its own
/// bucket, 0). Routing changes the rows of every group from call to call; the class holds still.
struct GroupedGemmClass {
  kernels::GroupedGemmSpec representative;  ///< Types, layout, epilogue; hints rounded up to their bucket.

  /// The class of `spec` (its device, SM count and override do not take part).
  static GroupedGemmClass of(const kernels::GroupedGemmSpec& spec);
  /// Stable text, e.g. "grouped:bf16,bf16,bf16:col:linear_combination:g<=128:rows<=256:n<=2048:k<=2048".
  [[nodiscard]] std::string to_string() const;
};

/// One tuned choice: the kernel and its run-time scheduling options, with what the sweep measured.
struct TunedGemm {
  kernels::GemmSku sku;
  int max_swizzle = 0;       ///< GemmPlanOptions::max_swizzle the winner was timed with.
  int raster_order = 0;      ///< GemmPlanOptions::raster_order the winner was timed with.
  std::string shape;         ///< The shape that was timed, "MxNxK".
  double tflops = 0;         ///< The winner's median TFLOP/s on that shape.
  double anchor_tflops = 0;  ///< The anchor's (cuBLAS) in the same run.
  /// The heuristic revision the choice beat (kernels::kDenseHeuristicRevision or
  /// kGroupedHeuristicRevision); TuningDb::record stamps today's.
  int heuristic_revision = 0;
  /// Dense decode plans: whether the kernel computes D^T = B^T A^T (GemmPlanOptions::swap_ab 2), and
  /// the K slices it runs as (GemmPlanOptions::split_k; 1: not split); grouped entries are neither.
  /// Files written before these existed hold neither. A binary that predates them runs such an
  /// entry's SKU as it is: for the classes `tune gemm` records (C and D of the input type)
  /// GemmPlan::with_instance refuses the swapped or slice SKU there, so that binary falls back to its
  /// heuristic; and if it saves the database, it drops these fields, which leaves such entries
  /// unusable for newer binaries too.
  bool swap_ab = false;
  int split_k = 1;
};

/// Tuned choices by (device, problem class). Not thread-safe; plans read a loaded copy.
class TuningDb {
 public:
  /// Format version written and accepted.
  static constexpr int kVersion = 1;

  /// Loads `path`. A missing file is an empty database. A file that cannot be read, is over 16 MiB,
  /// is not JSON of this format, or has another version is ignored with a warning (through the log
  /// sink) and gives an empty database, which the next save() replaces. Entries measured against an
  /// older heuristic are kept (find() passes them over) and counted in one warning.
  static TuningDb load(const std::filesystem::path& path);
  /// cuactor::cache_root() / "tuning.json".
  static Result<std::filesystem::path> default_path();

  /// The choice recorded for `device` and `problem_class`, if any and measured against today's
  /// heuristic (kernels::kDenseHeuristicRevision): an older choice may lose to today's heuristic.
  [[nodiscard]] std::optional<TunedGemm> find(const TuningDevice& device, const DenseGemmClass& problem_class) const;
  /// Records (or replaces) the choice for `device` and `problem_class`, stamped with today's revision.
  void record(const TuningDevice& device, const DenseGemmClass& problem_class, TunedGemm choice);
  /// The grouped choice recorded for `device` and `problem_class`, if any and measured against today's
  /// heuristic (kernels::kGroupedHeuristicRevision); its scheduling options are 0.
  [[nodiscard]] std::optional<TunedGemm> find(const TuningDevice& device, const GroupedGemmClass& problem_class) const;
  /// Records (or replaces) the grouped choice for `device` and `problem_class`, stamped likewise.
  void record(const TuningDevice& device, const GroupedGemmClass& problem_class, TunedGemm choice);
  /// Drops the choice for `device` and `problem_class` (plans fall back to the heuristic); true if there
  /// was one. A sweep that finds the heuristic's own choice fastest erases the class's older entry.
  bool erase(const TuningDevice& device, const DenseGemmClass& problem_class);
  /// The same for a grouped class.
  bool erase(const TuningDevice& device, const GroupedGemmClass& problem_class);
  /// Number of recorded choices.
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  /// Recorded choices measured against an older heuristic than today's (find() passes them over).
  [[nodiscard]] std::size_t stale_entries() const noexcept;

  /// The database as JSON text (what save() writes).
  [[nodiscard]] std::string to_json() const;
  /// Parses to_json()'s format; `invalid_argument` naming what is wrong: a missing or mistyped field,
  /// an integer outside its range, or a grouped entry that claims a swap or a split.
  static Result<TuningDb> parse(const std::string& text);
  /// Writes the database to `path` atomically (a temporary file in the same directory, mode 0600,
  /// renamed over it); creates the parent directory (0700) when missing. Touches no other file.
  [[nodiscard]] Status save(const std::filesystem::path& path) const;
  /// What save() checks first: `path` is not a directory (`invalid_argument`); its parent directory is
  /// created (0700) when missing, else must belong to this user and not be writable by group or others
  /// (`untrusted` naming its mode); and this process can write into it (`io_error`). A sweep calls it
  /// before compiling and timing, so that an unusable location fails before the work, not after.
  static Status prepare_directory(const std::filesystem::path& path);

 private:
  struct Entry {
    TuningDevice device;
    std::string problem_class;
    TunedGemm choice;
  };
  [[nodiscard]] std::optional<TunedGemm> find_key(const TuningDevice& device, const std::string& key) const;
  void record_key(const TuningDevice& device, std::string key, TunedGemm choice);
  bool erase_key(const TuningDevice& device, const std::string& key);

  std::vector<Entry> entries_;
};

/// Plans a dense GEMM, consulting `db` first: a tuned choice for `device` and the problem's class
/// runs (its kernel from the catalog, else compiled or loaded from the disk cache by `jit`) with
/// source `tuned` and the tuned scheduling options (swizzle, raster order, and for decode plans
/// swap-AB and split-K). Without a tuned choice, or when its kernel cannot be had (not compiled in and
/// no `jit`, a failed compile: logged as a warning), GemmPlan::make's heuristic. `options.sku_override`
/// bypasses the database, and so do a forced split or swap; a tuned swap or split also yields to
/// `swap_ab` or `split_k` 1 (never). `db` and `jit` may be null. An epilogue
/// tree that no catalog kernel computes is compiled by `jit` in the heuristic's configuration.
Result<kernels::GemmPlan> plan_dense_gemm(const kernels::GemmProblem& problem, const TuningDevice& device,
                                          kernels::GemmPlanOptions options, const TuningDb* db, GemmJit* jit);

/// A GemmPlanCache planner that consults the tuning database first (plan_dense_gemm for the device
/// the options name), for the actor's dense GEMM requests, the worker's and Python's. `db` is read
/// only; `jit` (may be null) supplies tuned kernels outside the catalog. Thread-safe.
kernels::GemmPlanCache::Planner tuned_planner(std::shared_ptr<const TuningDb> db, std::shared_ptr<GemmJit> jit);

/// Plans a grouped GEMM, consulting `db` first: a tuned choice for `device` and the spec's class
/// (GroupedGemmClass) runs (its kernel from the catalog, else compiled or loaded by `jit`) with source
/// `tuned`. Without one, or when its kernel cannot be had (logged as a warning), GroupedGemmPlan::create's
/// heuristic. `spec.sku_override` bypasses the database. `db` and `jit` may be null.
Result<kernels::GroupedGemmPlan> plan_grouped_gemm(const kernels::GroupedGemmSpec& spec, const TuningDevice& device,
                                                   const TuningDb* db, GemmJit* jit);

/// A GroupedPlanCache planner that consults the tuning database first (plan_grouped_gemm for the
/// device the spec names). Thread-safe; `jit` may be null.
kernels::GroupedPlanCache::Planner tuned_grouped_planner(std::shared_ptr<const TuningDb> db,
                                                         std::shared_ptr<GemmJit> jit);

/// The default database (TuningDb::default_path()) loaded once, or an empty one where there is no
/// cache root; with a JIT over the default disk cache, created when a tuned kernel or an epilogue
/// tree outside the catalog first needs one.
kernels::GemmPlanCache::Planner default_tuned_planner();
/// default_tuned_planner() for grouped plans (the same database, loaded once per process).
kernels::GroupedPlanCache::Planner default_tuned_grouped_planner();

}  // namespace cuactor::jit
