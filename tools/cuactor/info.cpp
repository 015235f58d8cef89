#include <fmt/format.h>
#include <nvrtc.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "cuactor/core/paths.hpp"
#include "cuactor/cuda/device.hpp"
#include "cuactor/kernels/catalog.hpp"

namespace cuactor::cli {
namespace {

std::string find_nvcc() {
  std::vector<std::filesystem::path> candidates;
  for (const char* var : {"CUACTOR_NVCC", "CUDACXX"})
    if (const char* p = std::getenv(var); p && *p) candidates.emplace_back(p);
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* p = std::getenv(var); p && *p) candidates.push_back(std::filesystem::path(p) / "bin" / "nvcc");
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string dir; std::getline(ss, dir, ':');)
      if (!dir.empty()) candidates.push_back(std::filesystem::path(dir) / "nvcc");
  }
  candidates.emplace_back("/usr/local/cuda/bin/nvcc");
  std::error_code ec;
  for (const auto& c : candidates)
    if (std::filesystem::is_regular_file(c, ec)) return c.string();
  return {};
}

nlohmann::json collect() {
  nlohmann::json j;
  const int drv = cuda::driver_version();
  j["driver_cuda_version"] = drv ? nlohmann::json(cuda::format_cuda_version(drv)) : nlohmann::json(nullptr);
  j["runtime_cuda_version"] = cuda::format_cuda_version(cuda::runtime_version());
  nlohmann::json devices = nlohmann::json::array();
  for (int i = 0; i < cuda::device_count(); ++i) {
    auto p = cuda::device_properties(i);
    if (!p) {
      devices.push_back({{"ordinal", i}, {"error", p.error().to_string()}});
      continue;
    }
    nlohmann::json d{{"ordinal", i},
                     {"name", p->name},
                     {"arch", p->arch.name()},
                     {"compute_capability", fmt::format("{}.{}", p->cc_major, p->cc_minor)},
                     {"multiprocessors", p->multiprocessors},
                     {"total_memory_bytes", p->total_memory},
                     {"l2_cache_bytes", p->l2_cache_bytes},
                     {"sm_clock_mhz", p->clock_khz / 1000},
                     {"memory_clock_mhz", p->memory_clock_khz / 1000},
                     {"memory_bus_width_bits", p->memory_bus_width_bits},
                     {"pci_bus_id", p->pci_bus_id}};
    if (auto m = cuda::memory_info(i)) d["free_memory_bytes"] = m->free;
    devices.push_back(std::move(d));
  }
  j["devices"] = devices;
  j["kernel_families"] = kernels::catalog_families();
  int major = 0, minor = 0;
  const bool nvrtc_ok = nvrtcVersion(&major, &minor) == NVRTC_SUCCESS;
  j["nvrtc"] = nvrtc_ok ? nlohmann::json(fmt::format("{}.{}", major, minor)) : nlohmann::json(nullptr);
  const std::string nvcc = find_nvcc();
  j["nvcc"] = nvcc.empty() ? nlohmann::json(nullptr) : nlohmann::json(nvcc);
  j["cache_root"] = cache_root().string();
  return j;
}

void print_text(const nlohmann::json& j) {
  std::cout << "cuactor " CUACTOR_VERSION "\n";
  std::cout << "  CUDA driver:  "
            << (j["driver_cuda_version"].is_null() ? "not loaded" : j["driver_cuda_version"].get<std::string>())
            << "\n";
  std::cout << "  CUDA runtime: " << j["runtime_cuda_version"].get<std::string>() << "\n";
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
    }
  }
  const auto& fam = j["kernel_families"];
  std::cout << "  kernel families compiled in: ";
  if (fam.empty()) std::cout << "none";
  for (std::size_t i = 0; i < fam.size(); ++i) std::cout << (i ? ", " : "") << fam[i].get<std::string>();
  std::cout << "\n";
  std::cout << "  NVRTC:        " << (j["nvrtc"].is_null() ? "unavailable" : j["nvrtc"].get<std::string>()) << "\n";
  std::cout << "  nvcc:         " << (j["nvcc"].is_null() ? "not found" : j["nvcc"].get<std::string>()) << "\n";
  std::cout << "  cache root:   " << j["cache_root"].get<std::string>() << "\n";
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show driver, devices, compiled kernels, compilers and cache locations");
  static bool json = false;
  cmd->add_flag("--json", json, "Machine-readable JSON output");
  cmd->callback([] {
    const auto j = collect();
    if (json)
      std::cout << j.dump(2) << "\n";
    else
      print_text(j);
  });
}

}  // namespace cuactor::cli
