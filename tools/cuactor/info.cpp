#include <fmt/format.h>
#include <nvrtc.h>

#include <boost/asio/use_future.hpp>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "cuactor/core/paths.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/jit/nvcc.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/runtime/device_actor.hpp"
#include "json_output.hpp"

namespace cuactor::cli {
namespace {

/// Opens an actor on `ordinal`, runs one small request through it and returns its stats ([O2]).
nlohmann::json actor_stats(int ordinal) {
  auto actor = runtime::DeviceActor::create(ordinal);
  if (!actor) return {{"error", actor.error().to_string()}};
  auto [ec, buf] = actor->allocate<int>(256, boost::asio::use_future).get();
  if (!ec) (void)actor->fill(buf, 1, boost::asio::use_future).get();
  return nlohmann::json::parse(runtime::to_json(actor->stats()));
}

nlohmann::json collect(bool with_stats) {
  nlohmann::json j;
  const int drv = gpu::driver_version();
  j["driver_cuda_version"] = drv ? nlohmann::json(gpu::format_cuda_version(drv)) : nlohmann::json(nullptr);
  j["runtime_cuda_version"] = gpu::format_cuda_version(gpu::runtime_version());
  nlohmann::json devices = nlohmann::json::array();
  for (int i = 0; i < gpu::device_count(); ++i) {
    auto p = gpu::device_properties(i);
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
    if (auto m = gpu::memory_info(i)) d["free_memory_bytes"] = m->free;
    if (with_stats) d["actor_stats"] = actor_stats(i);
    devices.push_back(std::move(d));
  }
  j["devices"] = devices;
  j["kernel_families"] = kernels::catalog_families();
  int major = 0, minor = 0;
  const bool nvrtc_ok = nvrtcVersion(&major, &minor) == NVRTC_SUCCESS;
  j["nvrtc"] = nvrtc_ok ? nlohmann::json(fmt::format("{}.{}", major, minor)) : nlohmann::json(nullptr);
  const auto nvcc = jit::find_nvcc();
  j["nvcc"] = nvcc ? nlohmann::json(nvcc->string()) : nlohmann::json(nullptr);
  const auto root = cache_root();
  if (!root) {  // HOME unset and TMPDIR missing: say so instead of a cache location
    j["cache_root"] = nullptr;
    j["jit_cache"] = {{"directory", nullptr}, {"error", root.error().message()}};
    return j;
  }
  j["cache_root"] = root->string();
  // Count the JIT cache's entries without creating the directory.
  const auto jit_dir = *root / "jit";
  std::size_t entries = 0, bytes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(jit_dir, ec))
    if (e.is_regular_file(ec) && e.path().extension() == ".cjit") {
      ++entries;
      bytes += static_cast<std::size_t>(e.file_size(ec));
    }
  j["jit_cache"] = {{"directory", jit_dir.string()}, {"files", entries}, {"bytes", bytes}};
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
      if (d.contains("actor_stats")) std::cout << "    actor stats: " << dump_json(d["actor_stats"]) << "\n";
    }
  }
  const auto& fam = j["kernel_families"];
  std::cout << "  kernel families compiled in: ";
  if (fam.empty()) std::cout << "none";
  for (std::size_t i = 0; i < fam.size(); ++i) std::cout << (i ? ", " : "") << fam[i].get<std::string>();
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
    const auto j = collect(stats);
    if (json)
      std::cout << dump_json(j, 2) << "\n";
    else
      print_text(j);
  });
}

}  // namespace cuactor::cli
