// Supervision under a real context fault ([R6]-[R9]). The fault runs in a child process (this same
// binary, re-executed with a filter and an environment variable) so the test binary survives; the
// child writes what every caller received to a file and the parent asserts on it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/use_future.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "cuactor/runtime/device_actor.hpp"
#include "support/gpu_test.hpp"

extern char** environ;

namespace cuactor::runtime {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

constexpr const char* child_env = "CUACTOR_RT_FAULT_CHILD";
constexpr int max_in_flight = 4;
constexpr int requests = 16;  // request 0 faults; requests >= max_in_flight can never be in flight

/// Runs the scenario in the child and writes "key=value" lines to `out_path`.
void child_scenario(const std::string& out_path, bool recover) {
  std::ofstream out(out_path);
  std::atomic<int> escalations{0}, escalation_code{0}, poisoned_hooks{0}, poisoned_hook_code{0};
  ActorOptions o;
  o.max_in_flight = max_in_flight;
  o.recover_in_process = recover;
  o.on_escalation = [&](int, const Error& e) {
    escalation_code.store(e.code().value());
    escalations.fetch_add(1);
  };
  o.on_poisoned = [&](int device, const Error& e) {
    poisoned_hook_code.store(device == 0 ? e.code().value() : -1);
    poisoned_hooks.fetch_add(1);
  };
  auto created = DeviceActor::create(0, o);
  if (!created) {
    out << "create_failed=" << created.error().to_string() << "\n";
    return;
  }
  DeviceActor actor = std::move(*created);
  auto lib_r = gpu::Library::load_file(RUNTIME_TEST_PTX);
  auto [old_ec, old_ref_r] = actor.allocate<int>(64, asio::use_future).get();
  if (old_ec) out << "old_alloc_failed=" << old_ec.message() << "\n";
  if (!lib_r) return;
  auto lib = std::make_shared<const gpu::Library>(std::move(*lib_r));
  auto fault = lib->kernel("cuactor_rt_fault");
  if (!fault) return;

  std::mutex mu;
  std::map<int, std::vector<int>> replies;  // request -> error values received (0 = success)
  auto record = [&](int i, std::error_code ec) {
    std::lock_guard lock(mu);
    replies[i].push_back(ec ? ec.value() : 0);
    if (ec && ec.category() != cuactor_category()) out << "foreign_category_" << i << "=" << ec.message() << "\n";
  };
  actor.launch(lib, *fault, LaunchShape{}, KernelArgs::make(1),
               [&](std::error_code ec, std::monostate) { record(0, ec); });
  for (int i = 1; i < requests; ++i)
    actor.submit<int>(
        {}, {}, [i](OpContext&) -> Result<int> { return i; },
        [&, i](std::error_code ec, int v) {
          record(i, ec.value() == 0 && v != i ? make_error_code(errc::internal) : ec);
        });

  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    {
      std::lock_guard lock(mu);
      if (replies.size() == requests) break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      out << "hung=1\n";
      break;
    }
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(50ms);  // a doubled reply would arrive here
  {
    std::lock_guard lock(mu);
    for (const auto& [i, codes] : replies) {
      out << "reply_" << i << "=";
      for (std::size_t k = 0; k < codes.size(); ++k) out << (k ? "," : "") << codes[k];
      out << "\n";
    }
  }
  const auto stale = old_ref_r.access();
  out << "old_ref_stale=" << (!stale.has_value() && stale.error() == errc::stale_handle) << "\n";
  const DeviceStats s = actor.stats();
  out << "generation=" << s.generation << "\npoisonings=" << s.poisonings << "\ncircuit=" << to_string(s.circuit)
      << "\nin_flight=" << s.in_flight << "\nqueue_depth=" << s.queue_depth << "\n";
  out << "escalations=" << escalations.load() << "\nescalation_code=" << escalation_code.load() << "\n";
  out << "poisoned_hooks=" << poisoned_hooks.load() << "\npoisoned_hook_code=" << poisoned_hook_code.load() << "\n";
  // A request after the incident: works on the rebuilt context, or circuit_open.
  std::error_code after_ec;
  auto [ec_a, ref] = actor.allocate<int>(16, asio::use_future).get();
  after_ec = ec_a;
  if (!after_ec) after_ec = std::get<0>(actor.fill(ref, 77, asio::use_future).get());
  if (!after_ec) {
    auto [ec_c, back] = actor.copy_to_host(ref, asio::use_future).get();
    after_ec = ec_c;
    out << "after_values_ok=" << (back == std::vector<int>(16, 77)) << "\n";
    out << "after_generation=" << ref.generation() << "\n";
  }
  out << "after_code=" << after_ec.value() << "\n";
  actor.shutdown();
  out << "done=1\n";
}

/// Re-executes this binary for `test_name` with the child variable set; returns the child's lines.
std::map<std::string, std::string> run_child(const std::string& test_name, const std::string& mode) {
  char path_template[] = "/tmp/cuactor_fault_XXXXXX";
  const int fd = mkstemp(path_template);
  EXPECT_GE(fd, 0);
  close(fd);
  const std::string out_path = path_template;
  const std::string filter = "--gtest_filter=" + test_name;
  const std::string env_value = std::string(child_env) + "=" + mode + ":" + out_path;
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  env_strings.push_back(env_value);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe";
  std::vector<char*> argv{self.data(), const_cast<char*>(filter.c_str()), nullptr};
  const pid_t pid = fork();
  if (pid == 0) {
    execve("/proc/self/exe", argv.data(), envp.data());
    _exit(127);
  }
  EXPECT_GT(pid, 0);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + 180s;
  bool exited = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    ADD_FAILURE() << "the fault child hung and was killed";
  }
  EXPECT_TRUE(WIFEXITED(status)) << "child status " << status;
  std::map<std::string, std::string> kv;
  std::ifstream in(out_path);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  std::remove(out_path.c_str());
  return kv;
}

/// Checks what the parent can assert for any outcome of recovery.
void check_common(std::map<std::string, std::string>& kv) {
  ASSERT_EQ(kv["done"], "1") << "child did not finish; create_failed=" << kv["create_failed"];
  EXPECT_EQ(kv.count("hung"), 0u) << "a caller never got its reply";
  const auto poisoned = std::to_string(static_cast<int>(errc::context_poisoned));
  // The faulting request got context_poisoned exactly once.
  EXPECT_EQ(kv["reply_0"], poisoned);
  for (int i = 0; i < requests; ++i) {
    const std::string& r = kv["reply_" + std::to_string(i)];
    ASSERT_FALSE(r.empty()) << "request " << i << " got no reply";
    EXPECT_EQ(r.find(','), std::string::npos) << "request " << i << " got several replies: " << r;
    // Requests that could never be in flight were queued: kept, never failed as poisoned.
    if (i >= max_in_flight) {
      EXPECT_NE(r, poisoned) << "queued request " << i << " was failed as in flight";
    }
  }
  EXPECT_EQ(kv["old_ref_stale"], "1");
  EXPECT_EQ(kv["poisonings"], "1");
  EXPECT_EQ(kv["poisoned_hooks"], "1") << "on_poisoned fires once per poisoning";
  EXPECT_EQ(kv["poisoned_hook_code"], poisoned);
  EXPECT_EQ(kv["generation"], "2");  // bumped once at the poisoning
  EXPECT_EQ(kv["in_flight"], "0");
  EXPECT_EQ(kv["queue_depth"], "0");
  EXPECT_EQ(kv.count("foreign_category_0"), 0u);
}

void check_open_circuit(std::map<std::string, std::string>& kv) {
  const auto open = std::to_string(static_cast<int>(errc::circuit_open));
  EXPECT_EQ(kv["circuit"], "open");
  EXPECT_EQ(kv["escalations"], "1");
  EXPECT_EQ(kv["escalation_code"], open);
  EXPECT_EQ(kv["after_code"], open);
  for (int i = max_in_flight; i < requests; ++i) EXPECT_EQ(kv["reply_" + std::to_string(i)], open) << i;
}

bool child_mode(std::string& mode, std::string& path) {
  const char* v = std::getenv(child_env);
  if (!v) return false;
  const std::string s = v;
  mode = s.substr(0, s.find(':'));
  path = s.substr(s.find(':') + 1);
  return true;
}

class RuntimeFaultGpu : public test_support::GpuTest {};

TEST_F(RuntimeFaultGpu, DeliberateFaultPoisonsInFlightOnceThenRecoversOrOpens) {
  std::string mode, path;
  if (child_mode(mode, path)) {
    child_scenario(path, true);
    return;
  }
  auto kv = run_child("RuntimeFaultGpu.DeliberateFaultPoisonsInFlightOnceThenRecoversOrOpens", "recover");
  check_common(kv);
  if (HasFatalFailure()) return;
  // [R8]: reset + canary either brings the device back (queued requests then run on the new context)
  // or opens the circuit with the escalation hook fired once.
  if (kv["circuit"] == "closed") {
    EXPECT_EQ(kv["escalations"], "0");
    EXPECT_EQ(kv["after_code"], "0");
    EXPECT_EQ(kv["after_values_ok"], "1");
    EXPECT_EQ(kv["after_generation"], "2");
    for (int i = max_in_flight; i < requests; ++i) EXPECT_EQ(kv["reply_" + std::to_string(i)], "0") << i;
  } else {
    check_open_circuit(kv);
  }
  std::cout << "fault child outcome: circuit=" << kv["circuit"] << " generation=" << kv["generation"] << "\n";
}

TEST_F(RuntimeFaultGpu, DeliberateFaultWithoutRecoveryOpensCircuit) {
  std::string mode, path;
  if (child_mode(mode, path)) {
    child_scenario(path, false);
    return;
  }
  auto kv = run_child("RuntimeFaultGpu.DeliberateFaultWithoutRecoveryOpensCircuit", "open");
  check_common(kv);
  if (HasFatalFailure()) return;
  check_open_circuit(kv);
}

}  // namespace
}  // namespace cuactor::runtime
