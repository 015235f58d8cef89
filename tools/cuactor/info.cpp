// `cuactor info [--json] [--stats]`: the report of cuactor/surfaces/info.hpp, as JSON or as text.
#include "cuactor/surfaces/info.hpp"

#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "json_output.hpp"

namespace cuactor::cli {
namespace {

void print_text(const nlohmann::json& j) {
  std::cout << "cuactor " CUACTOR_VERSION "\n";
  std::cout << "  CUDA driver:  "
            << (j["driver_cuda_version"].is_null() ? "not loaded" : j["driver_cuda_version"].get<std::string>())
            << "\n";
  std::cout << "  CUDA runtime: " << j["runtime_cuda_version"].get<std::string>() << "\n";
  std::cout << "  NCCL:         " << j.value("nccl", std::string("unknown")) << "\n";
  const auto& devs = j["devices"];
  if (devs.empty()) {
    std::cout << "  devices:      none (no CUDA GPU visible; CPU-only features and unit tests still work)\n";
  } else {
    for (const auto& d : devs) {
      if (d.contains("error")) {
        std::cout << fmt::format("  device {}: error: {}\n", d["ordinal"].get<int>(), d["error"].get<std::string>());
        continue;
      }
      std::cout << fmt::format(
          "  device {}: {} ({}, cc {}), {} SMs, {:.1f} GiB ({:.1f} GiB free), L2 {} MiB, SM {} MHz, memory {} MHz x {} "
          "bit, {}\n",
          d["ordinal"].get<int>(), d["name"].get<std::string>(), d["arch"].get<std::string>(),
          d["compute_capability"].get<std::string>(), d["multiprocessors"].get<int>(),
          static_cast<double>(d["total_memory_bytes"].get<std::size_t>()) / (1 << 30),
          static_cast<double>(d.value("free_memory_bytes", std::size_t{0})) / (1 << 30),
          d["l2_cache_bytes"].get<std::size_t>() >> 20, d["sm_clock_mhz"].get<int>(), d["memory_clock_mhz"].get<int>(),
          d["memory_bus_width_bits"].get<int>(), d["pci_bus_id"].get<std::string>());
      if (d.contains("actor_stats")) std::cout << "    actor stats: " << dump_json(d["actor_stats"]) << "\n";
    }
  }
  const auto& topo = j["topology"];
  if (topo.contains("error")) {
    std::cout << "  topology:     error: " << topo["error"].get<std::string>() << "\n";
  } else if (devs.size() > 1) {
    std::cout << "  topology:     "
              << (topo["nvml"].get<bool>() ? "NVLink per NVML"
                                           : "NVLink unknown (" + topo["nvml_note"].get<std::string>() + ")")
              << "\n";
    for (const auto& l : topo["links"])
      std::cout << fmt::format(
          "    {} -> {}: {}{}, {}{}\n", l["from"].get<int>(), l["to"].get<int>(), l["link"].get<std::string>(),
          l["nvlinks"].is_null() || l["nvlinks"].get<int>() == 0 ? std::string()
                                                                 : fmt::format(" x{}", l["nvlinks"].get<int>()),
          l["peer_access"].get<bool>() ? "peer access" : "no peer access",
          l["native_atomics"].get<bool>() ? ", native atomics" : "");
  }
  const auto& fam = j["kernel_families"];
  std::cout << "  kernel families compiled in: ";
  if (fam.empty()) std::cout << "none";
  for (std::size_t i = 0; i < fam.size(); ++i)
    std::cout << (i ? ", " : "")
              << fmt::format("{} {} {}x{}->{} ({})", fam[i]["family"].get<std::string>(),
                             fam[i]["arch"].get<std::string>(), fam[i]["a"].get<std::string>(),
                             fam[i]["b"].get<std::string>(), fam[i]["d"].get<std::string>(),
                             fam[i]["count"].get<int>());
  std::cout << "\n";
  std::cout << "  NVRTC:        " << (j["nvrtc"].is_null() ? "unavailable" : j["nvrtc"].get<std::string>()) << "\n";
  std::cout << "  nvcc:         " << (j["nvcc"].is_null() ? "not found" : j["nvcc"].get<std::string>()) << "\n";
  const auto& jc = j["jit_cache"];
  if (j["cache_root"].is_null()) {
    std::cout << "  cache root:   none: " << jc["error"].get<std::string>() << "\n";
    return;
  }
  std::cout << "  cache root:   " << j["cache_root"].get<std::string>() << "\n";
  std::cout << fmt::format("  JIT cache:    {} ({} files, {:.1f} MiB)\n", jc["directory"].get<std::string>(),
                           jc["files"].get<std::size_t>(),
                           static_cast<double>(jc["bytes"].get<std::size_t>()) / (1 << 20));
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show driver, devices, compiled kernels, compilers and cache locations");
  static bool json = false;
  static bool stats = false;
  cmd->add_flag("--json", json, "Machine-readable JSON output");
  cmd->add_flag("--stats", stats, "Open a device actor per device, run one request and show its stats");
  cmd->callback([] {
    const auto j = nlohmann::json::parse(surfaces::info_json(stats));
    if (json)
      std::cout << dump_json(j, 2) << "\n";
    else
      print_text(j);
  });
}

}  // namespace cuactor::cli
