/// @file
/// How the visible devices reach each other ([M1]): peer access and the CUDA P2P attributes for
/// every ordered pair, and the NVLink links between them as NVML reports them where the driver
/// provides NVML (opened at run time; without it the NVLink fields stay unknown).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cuactor/core/expected.hpp"

namespace cuactor::parallel {

/// What carries peer traffic from one device to another.
enum class LinkKind {
  none,      ///< No peer access: copies stage through the host.
  pcie,      ///< Peer access without NVLink between the two (PCIe, or a link NVML could not see).
  nvlink,    ///< Direct NVLink links between the two GPUs.
  nvswitch,  ///< NVLink through NVSwitches (every GPU of the fabric reachable at full link count).
};
/// "none", "pcie", "nvlink", "nvswitch".
std::string_view to_string(LinkKind kind) noexcept;

/// The link from device `from` to device `to` (ordinals).
struct PeerLink {
  int from = 0;
  int to = 0;
  bool peer_access = false;     ///< cudaDeviceCanAccessPeer(from, to).
  bool native_atomics = false;  ///< cudaDevP2PAttrNativeAtomicSupported.
  int performance_rank = -1;    ///< cudaDevP2PAttrPerformanceRank (lower is faster), -1 without access.
  LinkKind kind = LinkKind::none;
  std::optional<int> nvlinks;  ///< Active NVLink links carrying the traffic; unknown without NVML.
};

/// Every ordered pair of visible devices, and whether NVML answered.
struct Topology {
  int device_count = 0;
  std::vector<PeerLink> links;  ///< device_count * (device_count - 1) entries, `from`-major.
  bool nvml = false;            ///< NVML was opened and answered for every device.
  std::string nvml_note;        ///< Why not, when it did not ("libnvidia-ml.so.1 not found", ...).
};

/// Reads the topology of the visible devices (none: an empty Topology, not an error). CUDA errors
/// of the P2P queries are returned; NVML's are only noted (the NVLink fields stay unknown).
Result<Topology> topology();

namespace detail {
/// One active NVLink link of a device, as NVML reports its far end.
struct NvLinkEnd {
  bool to_switch = false;  ///< Ends at an NVSwitch.
  std::string remote_bus;  ///< The far GPU's PCI bus id (when not a switch).
};
/// A PCI bus id "domain:bus:device.function" (hex; NVML writes 8 domain digits, CUDA 4) as a
/// comparable number; nullopt when it does not parse.
std::optional<unsigned long long> parse_bus_id(std::string_view id) noexcept;
/// Classifies the pair given the NVLink ends of `from`, the PCI bus id of `to`, whether NVML says
/// NVLink P2P works between them, and CUDA's peer access; sets `nvlinks` to the links used.
LinkKind classify_link(const std::vector<NvLinkEnd>& ends_of_from, std::string_view bus_of_to, bool nvml_nvlink_p2p,
                       bool peer_access, std::optional<int>& nvlinks);
}  // namespace detail

}  // namespace cuactor::parallel
