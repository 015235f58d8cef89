// `cuactor soak --isolated --faults N [--threads T]`: fault cycles under load against an isolated
// device ([R10]). Submitting threads run fills, copies and launches while the main thread injects
// faults of mixed kinds (illegal address in a kernel, SIGKILL of the worker, a kernel that outlives
// the request deadline); every reply is counted per request, so a lost or doubled answer shows.
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "commands.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/jit/nvrtc.hpp"
#include "cuactor/runtime/device_actor.hpp"

namespace cuactor::cli {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// The soak's kernels, compiled with NVRTC for the device at start.
constexpr const char* kSoakKernels = R"(
extern "C" __global__ void soak_add(unsigned* p, unsigned v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += v;
}
extern "C" __global__ void soak_fault(int v) { *reinterpret_cast<volatile int*>(0xdead0000ull) = v; }
extern "C" __global__ void soak_spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
)";

enum class Fault { illegal_address, kill, hang };
const char* name(Fault f) {
  return f == Fault::illegal_address ? "illegal-address" : f == Fault::kill ? "sigkill" : "hang";
}

/// Counts the answers of every request by a tag of its own.
class Ledger {
 public:
  std::uint64_t open() {
    std::lock_guard lock(mutex_);
    const auto tag = next_++;
    answers_[tag] = {};
    return tag;
  }
  /// The completion handler of request `tag`.
  auto handler(std::uint64_t tag) {
    return [this, tag](std::error_code ec, auto&&...) {
      std::lock_guard lock(mutex_);
      auto& a = answers_[tag];
      ++a.count;
      if (a.count == 1) a.ec = ec;
      cv_.notify_all();
    };
  }
  /// Waits for the first answer of `tag` (false after `timeout`).
  bool wait(std::uint64_t tag, std::error_code& ec, Clock::duration timeout) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [&] { return answers_[tag].count > 0; })) return false;
    ec = answers_[tag].ec;
    return true;
  }
  struct Totals {
    std::uint64_t sent = 0, ok = 0, failed = 0, lost = 0, doubled = 0;
  };
  Totals totals() const {
    std::lock_guard lock(mutex_);
    Totals t;
    for (const auto& [tag, a] : answers_) {
      ++t.sent;
      if (a.count == 0) ++t.lost;
      if (a.count > 1) ++t.doubled;
      if (a.count >= 1) ++(a.ec ? t.failed : t.ok);
    }
    return t;
  }
  /// Waits until every request has an answer (or `timeout`).
  void settle(Clock::duration timeout) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, timeout, [&] {
      return std::all_of(answers_.begin(), answers_.end(), [](const auto& kv) { return kv.second.count > 0; });
    });
  }

 private:
  struct Answer {
    int count = 0;
    std::error_code ec;
  };
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::unordered_map<std::uint64_t, Answer> answers_;
  std::uint64_t next_ = 1;
};

struct SoakOptions {
  bool isolated = false;
  int faults = 10;
  int threads = 4;
  int device = 0;
  int deadline_ms = 2000;
  std::string worker;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

int run_soak(const SoakOptions& o) {
  if (!o.isolated) {
    fmt::print(stderr,
               "cuactor soak: only --isolated is implemented (an in-process device cannot recover from a "
               "poisoned context, SPEC [R8])\n");
    return 2;
  }
  if (o.faults < 0 || o.threads < 1 || o.deadline_ms < 100) {
    fmt::print(stderr, "cuactor soak: --faults={} must be >= 0, --threads={} >= 1, --deadline-ms={} >= 100\n", o.faults,
               o.threads, o.deadline_ms);
    return 2;
  }
  auto props = gpu::device_properties(o.device);
  if (!props) {
    fmt::print(stderr, "cuactor soak: device {}: {}\n", o.device, props.error().to_string());
    return 2;
  }
  jit::NvrtcRequest req;
  req.source = kSoakKernels;
  req.program_name = "cuactor_soak.cu";
  req.arch = props->arch;
  auto compiled = jit::nvrtc_compile(req);
  if (!compiled) {
    fmt::print(stderr, "cuactor soak: {}\n", compiled.error().to_string());
    return 2;
  }
  auto module = runtime::ModuleImage::from_bytes(std::move(compiled->cubin));

  runtime::ActorOptions ao;
  ao.isolation = runtime::Isolation::worker;
  ao.worker_path = o.worker;
  ao.request_deadline = std::chrono::milliseconds(o.deadline_ms);
  ao.breaker.max_poisonings = o.faults + 10;  // the soak loses workers on purpose
  auto created = runtime::DeviceActor::create(o.device, ao);
  if (!created) {
    fmt::print(stderr, "cuactor soak: {}\n", created.error().to_string());
    return 2;
  }
  runtime::DeviceActor& actor = *created;
  const auto start_stats = actor.stats();
  fmt::print("soak: device {} isolated (worker pid {}), {} threads, {} faults, deadline {} ms, free {} MiB\n", o.device,
             start_stats.worker_pid, o.threads, o.faults, o.deadline_ms, start_stats.free_bytes >> 20);
  std::fflush(stdout);

  Ledger ledger;
  std::atomic<bool> stop{false};
  constexpr int n = 1 << 16;
  const runtime::LaunchShape shape{dim3(n / 256), dim3(256), 0};
  auto load = [&](int t) {
    runtime::GpuRef<unsigned> buf;
    std::vector<unsigned> host(n, static_cast<unsigned>(t));
    std::error_code ec;
    auto call = [&](auto initiate) {
      const auto tag = ledger.open();
      initiate(ledger.handler(tag));
      if (!ledger.wait(tag, ec, 60s)) ec = make_error_code(errc::timeout);
      return !ec;
    };
    for (unsigned i = 0; !stop.load(); ++i) {
      if (buf.empty() || !buf.access()) {
        auto tag = ledger.open();
        std::mutex m;
        runtime::GpuRef<unsigned> fresh;
        actor.allocate<unsigned>(n,
                                 [&, h = ledger.handler(tag)](std::error_code e, runtime::GpuRef<unsigned> r) mutable {
                                   {
                                     std::lock_guard lock(m);
                                     fresh = std::move(r);
                                   }
                                   h(e);
                                 });
        if (!ledger.wait(tag, ec, 60s) || ec) continue;
        std::lock_guard lock(m);
        buf = std::move(fresh);
      }
      switch (i % 4) {
        case 0:
          call([&](auto h) { actor.fill(buf, i, std::move(h)); });
          break;
        case 1:
          call([&](auto h) { actor.copy_to_device(buf, host, std::move(h)); });
          break;
        case 2:
          call([&](auto h) {
            actor.launch(module, "soak_add", shape, runtime::KernelArgs::make(buf, 1u, n), std::move(h));
          });
          break;
        default:
          call([&](auto h) { actor.copy_to_host(buf, std::move(h)); });
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) threads.emplace_back(load, t);
  std::this_thread::sleep_for(500ms);

  std::vector<double> recovery_ms;
  int hangs = 0;
  for (int cycle = 0; cycle < o.faults; ++cycle) {
    const auto fault = static_cast<Fault>(cycle % 3);
    const auto before = actor.stats();
    auto t_fault = Clock::now();
    switch (fault) {
      case Fault::illegal_address: {
        const auto tag = ledger.open();
        actor.launch(module, "soak_fault", {}, runtime::KernelArgs::make(1), ledger.handler(tag));
        break;
      }
      case Fault::kill:
        if (before.worker_pid > 0) ::kill(static_cast<pid_t>(before.worker_pid), SIGKILL);
        break;
      case Fault::hang: {
        const auto tag = ledger.open();
        actor.launch(module, "soak_spin", {}, runtime::KernelArgs::make(1ll << 62), ledger.handler(tag));
        t_fault += std::chrono::milliseconds(o.deadline_ms);  // the fault shows when the deadline passes
        break;
      }
    }
    // Recovered: a request sent now succeeds on a worker newer than the one that faulted.
    bool recovered = false;
    while (Clock::now() - t_fault < 30s && !recovered) {
      const auto tag = ledger.open();
      std::mutex m;
      std::uint64_t gen = 0;
      actor.allocate<unsigned>(1, [&, h = ledger.handler(tag)](std::error_code e, runtime::GpuRef<unsigned> r) mutable {
        {
          std::lock_guard lock(m);
          gen = r.generation();
        }
        h(e);
      });
      std::error_code ec;
      if (ledger.wait(tag, ec, 60s) && !ec) {
        std::lock_guard lock(m);
        recovered = gen > before.generation;
      }
      if (!recovered) std::this_thread::sleep_for(2ms);
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t_fault).count();
    const auto after = actor.stats();
    if (recovered)
      recovery_ms.push_back(std::max(ms, 0.0));
    else
      ++hangs;
    const auto t = ledger.totals();
    fmt::print("cycle {}/{} {:<15} {} {:7.1f} ms  generation {} -> {}  restarts {}  sent {} ok {} failed {}\n",
               cycle + 1, o.faults, name(fault), recovered ? "recovered in" : "NOT RECOVERED", ms, before.generation,
               after.generation, after.worker_restarts, t.sent, t.ok, t.failed);
    std::fflush(stdout);                 // progress shows live, also when stdout is a file
    std::this_thread::sleep_for(200ms);  // some load on the new worker before the next fault
  }
  stop = true;
  for (auto& t : threads) t.join();
  ledger.settle(60s);
  std::this_thread::sleep_for(500ms);  // the frees of the last buffers reach the worker
  const auto end_stats = actor.stats();
  const auto t = ledger.totals();
  const long long mem_delta =
      static_cast<long long>(start_stats.free_bytes) - static_cast<long long>(end_stats.free_bytes);
  fmt::print(
      "summary: sent {} ok {} failed-once {} lost {} doubled {} hangs {}; recovery p50 {:.1f} ms p99 {:.1f} ms; "
      "worker restarts {}; device free {} MiB at start, {} MiB at end ({:+.1f} MiB)\n",
      t.sent, t.ok, t.failed, t.lost, t.doubled, hangs, percentile(recovery_ms, 0.5), percentile(recovery_ms, 0.99),
      end_stats.worker_restarts, start_stats.free_bytes >> 20, end_stats.free_bytes >> 20,
      static_cast<double>(-mem_delta) / (1 << 20));
  actor.shutdown();
  return t.lost > 0 || t.doubled > 0 || hangs > 0 ? 1 : 0;
}

}  // namespace

void add_soak_command(CLI::App& app) {
  auto o = std::make_shared<SoakOptions>();
  auto* cmd = app.add_subcommand("soak", "fault cycles under load against an isolated device (SPEC [R10])");
  cmd->add_flag("--isolated", o->isolated, "run the device in a cuactor-worker process (required)");
  cmd->add_option("--faults", o->faults, "fault cycles (illegal address, SIGKILL, hang in turn)")->default_val(10);
  cmd->add_option("--threads", o->threads, "submitting threads")->default_val(4);
  cmd->add_option("--device", o->device, "device ordinal")->default_val(0);
  cmd->add_option("--deadline-ms", o->deadline_ms, "request deadline (ends the hang faults)")->default_val(2000);
  cmd->add_option("--worker", o->worker, "cuactor-worker executable (default: next to this program)");
  cmd->callback([o] {
    if (const int rc = run_soak(*o); rc != 0) throw CLI::RuntimeError(rc);  // the process's exit status
  });
}

}  // namespace cuactor::cli
