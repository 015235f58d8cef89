// Topology rules that need no device: PCI bus ids in CUDA's and NVML's spellings, and how a pair's
// NVLink ends classify it ([M1]).
#include "cuactor/parallel/topology.hpp"

#include <gtest/gtest.h>

#include "cuactor/gpu/device.hpp"

namespace cuactor::parallel {
namespace {

using detail::classify_link;
using detail::NvLinkEnd;
using detail::parse_bus_id;

TEST(TopologyBusId, CudaAndNvmlSpellingsOfOneDeviceAreEqual) {
  const auto cuda = parse_bus_id("0000:18:00.0");
  const auto nvml = parse_bus_id("00000000:18:00.0");
  ASSERT_TRUE(cuda && nvml);
  EXPECT_EQ(*cuda, *nvml);
  EXPECT_NE(parse_bus_id("0000:19:00.0"), cuda);
  EXPECT_NE(parse_bus_id("0001:18:00.0"), cuda);
  EXPECT_NE(parse_bus_id("0000:18:01.0"), cuda);
  EXPECT_NE(parse_bus_id("0000:18:00.1"), cuda);
  EXPECT_TRUE(parse_bus_id("0000:AB:1f.7"));
}

TEST(TopologyBusId, MalformedIdsAreRejected) {
  for (const char* bad : {"", "0000:18:00", "0000-18-00.0", "0000:18:00.0x", "zz:18:00.0", "0000:100:00.0",
                          "0000:18:20.0", "0000:18:00.8", "0000:18:00.0 ", ":18:00.0"})
    EXPECT_FALSE(parse_bus_id(bad)) << bad;
}

TEST(TopologyClassify, DirectLinksToThePeerCount) {
  const std::vector<NvLinkEnd> ends{{false, "00000000:19:00.0"},
                                    {false, "00000000:19:00.0"},
                                    {false, "00000000:2A:00.0"},
                                    {false, "00000000:19:00.0"}};
  std::optional<int> n;
  EXPECT_EQ(classify_link(ends, "0000:19:00.0", false, true, n), LinkKind::nvlink);
  EXPECT_EQ(n, 3);
  EXPECT_EQ(classify_link(ends, "0000:2a:00.0", false, true, n), LinkKind::nvlink);
  EXPECT_EQ(n, 1);
}

TEST(TopologyClassify, SwitchedLinksNeedNvmlsNvlinkP2p) {
  const std::vector<NvLinkEnd> ends(18, NvLinkEnd{true, ""});
  std::optional<int> n;
  EXPECT_EQ(classify_link(ends, "0000:19:00.0", true, true, n), LinkKind::nvswitch);
  EXPECT_EQ(n, 18);
  EXPECT_EQ(classify_link(ends, "0000:19:00.0", false, true, n), LinkKind::pcie);  // another fabric
  EXPECT_EQ(n, 0);
}

TEST(TopologyClassify, WithoutNvlinkPeerAccessDecides) {
  std::optional<int> n;
  EXPECT_EQ(classify_link({}, "0000:19:00.0", false, true, n), LinkKind::pcie);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(classify_link({}, "0000:19:00.0", false, false, n), LinkKind::none);
  const std::vector<NvLinkEnd> elsewhere{{false, "00000000:2A:00.0"}};
  EXPECT_EQ(classify_link(elsewhere, "0000:19:00.0", false, false, n), LinkKind::none);
  EXPECT_EQ(classify_link(elsewhere, "not a bus id", false, true, n), LinkKind::pcie);
}

TEST(Topology, CoversEveryOrderedPairOfTheVisibleDevices) {
  auto t = topology();
  ASSERT_TRUE(t) << t.error().to_string();
  const int n = gpu::device_count();
  EXPECT_EQ(t->device_count, n);
  ASSERT_EQ(t->links.size(), static_cast<std::size_t>(n > 1 ? n * (n - 1) : 0));
  if (!t->nvml) {
    EXPECT_FALSE(t->nvml_note.empty());
  }
  for (const PeerLink& l : t->links) {
    EXPECT_NE(l.from, l.to);
    EXPECT_EQ(l.kind == LinkKind::none, !l.peer_access);
    if (!l.peer_access) {
      EXPECT_EQ(l.performance_rank, -1);
    }
    EXPECT_EQ(l.nvlinks.has_value(), t->nvml);
  }
  if (n <= 1) GTEST_SKIP() << n << " CUDA device(s) visible: no pairs to check beyond the empty list";
}

}  // namespace
}  // namespace cuactor::parallel
