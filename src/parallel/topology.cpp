// Device topology ([M1]): CUDA's P2P queries for every ordered pair, NVML's NVLink view on top.
#include "cuactor/parallel/topology.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#if CUACTOR_HAVE_NVML
#include <nvml.h>
#endif

#include <cuda_runtime_api.h>

#include <charconv>
#include <type_traits>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"

namespace cuactor::parallel {

std::string_view to_string(LinkKind kind) noexcept {
  switch (kind) {
    case LinkKind::none:
      return "none";
    case LinkKind::pcie:
      return "pcie";
    case LinkKind::nvlink:
      return "nvlink";
    case LinkKind::nvswitch:
      return "nvswitch";
  }
  return "unknown";
}

namespace detail {

std::optional<unsigned long long> parse_bus_id(std::string_view id) noexcept {
  // domain:bus:device.function, each hex: 32 + 8 + 5 + 3 bits.
  unsigned long long parts[4] = {};
  const char seps[4] = {':', ':', '.', '\0'};
  const char* p = id.data();
  const char* end = id.data() + id.size();
  for (int i = 0; i < 4; ++i) {
    const auto [next, ec] = std::from_chars(p, end, parts[i], 16);
    if (ec != std::errc() || next == p) return std::nullopt;
    p = next;
    if (seps[i] != '\0') {
      if (p == end || *p != seps[i]) return std::nullopt;
      ++p;
    }
  }
  if (p != end || parts[0] > 0xffffffffull || parts[1] > 0xff || parts[2] > 0x1f || parts[3] > 0x7) return std::nullopt;
  return (parts[0] << 16) | (parts[1] << 8) | (parts[2] << 3) | parts[3];
}

LinkKind classify_link(const std::vector<NvLinkEnd>& ends_of_from, std::string_view bus_of_to, bool nvml_nvlink_p2p,
                       bool peer_access, std::optional<int>& nvlinks) {
  const auto to = parse_bus_id(bus_of_to);
  int direct = 0, switched = 0;
  for (const NvLinkEnd& e : ends_of_from) {
    if (e.to_switch)
      ++switched;
    else if (to && parse_bus_id(e.remote_bus) == to)
      ++direct;
  }
  if (direct > 0) {
    nvlinks = direct;
    return LinkKind::nvlink;
  }
  if (switched > 0 && nvml_nvlink_p2p) {
    nvlinks = switched;
    return LinkKind::nvswitch;
  }
  nvlinks = 0;
  return peer_access ? LinkKind::pcie : LinkKind::none;
}

}  // namespace detail

namespace {

/// What NVML says about the NVLink links among the devices (bus ids in ordinal order).
struct NvlinkView {
  bool ok = false;
  std::string note;                                  ///< Why not, when !ok.
  std::vector<std::vector<detail::NvLinkEnd>> ends;  ///< Active links of each device.
  std::vector<std::vector<bool>> p2p;                ///< NVML's NVLink P2P status OK, [from][to].
};

#if CUACTOR_HAVE_NVML
/// The NVML entry points cuactor uses, from the driver's libnvidia-ml.so.1 (opened once, kept open:
/// no link-time dependency, so CPU-only machines run everything else).
struct Nvml {
  decltype(&::nvmlInit_v2) init = nullptr;
  decltype(&::nvmlShutdown) shutdown = nullptr;
  decltype(&::nvmlErrorString) error_string = nullptr;
  decltype(&::nvmlDeviceGetHandleByPciBusId_v2) by_bus_id = nullptr;
  decltype(&::nvmlDeviceGetNvLinkState) link_state = nullptr;
  decltype(&::nvmlDeviceGetNvLinkRemotePciInfo_v2) remote_pci = nullptr;
  decltype(&::nvmlDeviceGetNvLinkRemoteDeviceType) remote_type = nullptr;
  decltype(&::nvmlDeviceGetP2PStatus) p2p_status = nullptr;
  std::string note;  ///< Why it is unusable; empty when every entry point resolved.
};

const Nvml& nvml() {
  static const Nvml n = [] {
    Nvml r;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      r.note = "libnvidia-ml.so.1 not found (no NVIDIA driver here)";
      return r;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr && r.note.empty()) r.note = fmt::format("libnvidia-ml.so.1 lacks {}", name);
    };
    sym(r.init, "nvmlInit_v2");
    sym(r.shutdown, "nvmlShutdown");
    sym(r.error_string, "nvmlErrorString");
    sym(r.by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    sym(r.link_state, "nvmlDeviceGetNvLinkState");
    sym(r.remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    sym(r.remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
    sym(r.p2p_status, "nvmlDeviceGetP2PStatus");
    return r;
  }();
  return n;
}

NvlinkView read_nvlink(const std::vector<std::string>& bus) {
  NvlinkView v;
  const Nvml& n = nvml();
  if (!n.note.empty()) {
    v.note = n.note;
    return v;
  }
  if (const nvmlReturn_t r = n.init(); r != NVML_SUCCESS) {
    v.note = fmt::format("nvmlInit: {}", n.error_string(r));
    return v;
  }
  // nvmlInit / nvmlShutdown are reference counted: one session per call.
  struct Session {
    const Nvml& n;
    ~Session() { (void)n.shutdown(); }
  } session{n};
  std::vector<nvmlDevice_t> handles(bus.size(), nullptr);
  v.ends.resize(bus.size());
  for (std::size_t i = 0; i < bus.size(); ++i) {
    if (const nvmlReturn_t r = n.by_bus_id(bus[i].c_str(), &handles[i]); r != NVML_SUCCESS) {
      v.note = fmt::format("nvmlDeviceGetHandleByPciBusId({}): {}", bus[i], n.error_string(r));
      return v;
    }
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
      nvmlEnableState_t active = NVML_FEATURE_DISABLED;
      if (n.link_state(handles[i], link, &active) != NVML_SUCCESS || active != NVML_FEATURE_ENABLED) continue;
      detail::NvLinkEnd e;
      nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
      if (n.remote_type(handles[i], link, &type) == NVML_SUCCESS) e.to_switch = type == NVML_NVLINK_DEVICE_TYPE_SWITCH;
      nvmlPciInfo_t pci{};
      if (!e.to_switch && n.remote_pci(handles[i], link, &pci) == NVML_SUCCESS) e.remote_bus = pci.busId;
      v.ends[i].push_back(std::move(e));
    }
  }
  v.p2p.assign(bus.size(), std::vector<bool>(bus.size(), false));
  for (std::size_t i = 0; i < bus.size(); ++i)
    for (std::size_t j = 0; j < bus.size(); ++j) {
      nvmlGpuP2PStatus_t status = NVML_P2P_STATUS_UNKNOWN;
      v.p2p[i][j] = i != j &&
                    n.p2p_status(handles[i], handles[j], NVML_P2P_CAPS_INDEX_NVLINK, &status) == NVML_SUCCESS &&
                    status == NVML_P2P_STATUS_OK;
    }
  v.ok = true;
  return v;
}
#else
NvlinkView read_nvlink(const std::vector<std::string>&) {
  NvlinkView v;
  v.note = "built without nvml.h (scripts/setup installs it)";
  return v;
}
#endif

}  // namespace

Result<Topology> topology() {
  Topology t;
  t.device_count = gpu::device_count();
  if (t.device_count == 0) {
    t.nvml_note = "no devices";
    return t;
  }
  std::vector<std::string> bus(static_cast<std::size_t>(t.device_count));
  for (int i = 0; i < t.device_count; ++i) {
    auto props = gpu::device_properties(i);
    if (!props) return fail(props.error());
    bus[static_cast<std::size_t>(i)] = props->pci_bus_id;
  }
  const NvlinkView nv = read_nvlink(bus);
  t.nvml = nv.ok;
  t.nvml_note = nv.note;
  for (int from = 0; from < t.device_count; ++from) {
    for (int to = 0; to < t.device_count; ++to) {
      if (from == to) continue;
      PeerLink l;
      l.from = from;
      l.to = to;
      int can = 0;
      CUACTOR_CUDA_TRY(cudaDeviceCanAccessPeer(&can, from, to));
      l.peer_access = can != 0;
      if (l.peer_access) {
        int v = 0;
        CUACTOR_CUDA_TRY(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrPerformanceRank, from, to));
        l.performance_rank = v;
        CUACTOR_CUDA_TRY(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrNativeAtomicSupported, from, to));
        l.native_atomics = v != 0;
      }
      const auto f = static_cast<std::size_t>(from), d = static_cast<std::size_t>(to);
      if (nv.ok)
        l.kind = detail::classify_link(nv.ends[f], bus[d], nv.p2p[f][d], l.peer_access, l.nvlinks);
      else
        l.kind = l.peer_access ? LinkKind::pcie : LinkKind::none;  // NVLink unknown: what CUDA knows
      t.links.push_back(l);
    }
  }
  return t;
}

}  // namespace cuactor::parallel
