// The system report shared by `cuactor info --json` and `cuactor.info()` (moved here from the CLI).
#include "cuactor/surfaces/info.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <boost/asio/use_future.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cuactor/core/paths.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/jit/nvcc.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/parallel/communicator.hpp"
#include "cuactor/parallel/topology.hpp"
#include "cuactor/runtime/device_actor.hpp"

namespace cuactor::surfaces {
namespace {

/// Opens an actor on `ordinal`, runs one small request through it and returns its stats ([O2]).
nlohmann::json actor_stats(int ordinal) {
  auto actor = runtime::DeviceActor::create(ordinal);
  if (!actor) return {{"error", actor.error().to_string()}};
  auto [ec, buf] = actor->allocate<int>(256, boost::asio::use_future).get();
  if (!ec) (void)actor->fill(buf, 1, boost::asio::use_future).get();
  return nlohmann::json::parse(runtime::to_json(actor->stats()));
}

/// Every ordered device pair ([M1]): peer access, CUDA's P2P attributes, NVLink per NVML.
nlohmann::json topology_json() {
  auto t = parallel::topology();
  if (!t) return {{"error", t.error().to_string()}};
  nlohmann::json links = nlohmann::json::array();
  for (const parallel::PeerLink& l : t->links)
    links.push_back({{"from", l.from},
                     {"to", l.to},
                     {"peer_access", l.peer_access},
                     {"native_atomics", l.native_atomics},
                     {"performance_rank", l.performance_rank},
                     {"link", std::string(parallel::to_string(l.kind))},
                     {"nvlinks", l.nvlinks ? nlohmann::json(*l.nvlinks) : nlohmann::json(nullptr)}});
  return {{"nvml", t->nvml},
          {"nvml_note", t->nvml ? nlohmann::json(nullptr) : nlohmann::json(t->nvml_note)},
          {"links", links}};
}

nlohmann::json collect(bool with_stats) {
  nlohmann::json j;
  j["version"] = version();
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
  j["topology"] = topology_json();
  j["nccl"] = parallel::nccl_version();
  j["catalog_scope"] = kernels::name(kernels::catalog_scope());  // full, sample or filtered
  j["kernel_families"] = nlohmann::json::array();
  for (const auto& f : kernels::catalog_families())
    j["kernel_families"].push_back({{"family", kernels::name(f.family)},
                                    {"arch", f.arch.name()},
                                    {"a", name(f.a)},
                                    {"b", name(f.b)},
                                    {"d", name(f.d)},
                                    {"count", f.count}});
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

}  // namespace

std::string version() {
  return CUACTOR_VERSION;
}

std::string info_json(bool with_actor_stats, int indent) {
  nlohmann::json j;
  try {
    j = collect(with_actor_stats);
  } catch (const std::exception& e) {  // nlohmann or the standard library; the report says so
    j = {{"error", e.what()}};
  }
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace cuactor::surfaces
