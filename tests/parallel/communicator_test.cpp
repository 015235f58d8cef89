// NCCL communicators: ids, files and the environment without a device; collectives, deadlines and
// aborts on the visible devices.
#include "cuactor/parallel/communicator.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "support/gpu_test.hpp"
#include "support/plan_checks.hpp"

namespace cuactor::parallel {
namespace {

using test_support::expect_error;
using namespace std::chrono_literals;

std::string hex_of(char digit) {
  return std::string(2 * UniqueId::kBytes, digit);
}

/// Sets environment variables for one test and restores them after.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      set(name, value);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) set(name, value);
  }

 private:
  static void set(const std::string& name, const std::optional<std::string>& value) {
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

std::filesystem::path fresh_dir() {
  auto dir = std::filesystem::temp_directory_path() / ("cuactor-comm-test-" + std::to_string(::getpid()) + "-" +
                                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(UniqueId, HexRoundTrips) {
  std::string hex = hex_of('0');
  hex.replace(0, 6, "00ff7A");
  auto id = UniqueId::parse(hex + "\n");
  ASSERT_TRUE(id.has_value()) << id.error().to_string();
  EXPECT_EQ(id->bytes()[1], static_cast<char>(0xff));
  EXPECT_EQ(id->bytes()[2], static_cast<char>(0x7a));
  EXPECT_EQ(id->to_hex().substr(0, 6), "00ff7a");
  EXPECT_EQ(id->to_hex().size(), 2 * UniqueId::kBytes);
}

TEST(UniqueId, ParseNamesLengthAndBadCharacter) {
  expect_error(UniqueId::parse("abc"), errc::invalid_argument, "256 hex digits, got 3 characters");
  std::string hex = hex_of('1');
  hex[10] = 'g';
  expect_error(UniqueId::parse(hex), errc::invalid_argument, "'g1' at position 10");
}

TEST(UniqueId, FileRoundTripsAndNeverReplacesAFile) {
  const auto dir = fresh_dir();
  auto id = UniqueId::parse(hex_of('a'));
  ASSERT_TRUE(id.has_value());
  const auto path = dir / "id";
  ASSERT_TRUE(id->write_file(path).has_value());
  auto read = UniqueId::read_file(path, 0ms);
  ASSERT_TRUE(read.has_value()) << read.error().to_string();
  EXPECT_EQ(read->bytes(), id->bytes());
  // A second writer (or a file of the user's) is refused and left as it was.
  auto other = UniqueId::parse(hex_of('b'));
  expect_error(other->write_file(path), errc::invalid_argument, "already exists");
  EXPECT_EQ(UniqueId::read_file(path, 0ms)->bytes(), id->bytes());
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1)
      << "no temporary file may be left behind";
  std::filesystem::remove_all(dir);
}

TEST(UniqueId, ReadFileTimesOutAndRejectsGarbage) {
  const auto dir = fresh_dir();
  const auto start = std::chrono::steady_clock::now();
  expect_error(UniqueId::read_file(dir / "missing", 100ms), errc::timeout, "did not appear within 100 ms");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  std::ofstream(dir / "garbage") << "not an id";
  expect_error(UniqueId::read_file(dir / "garbage", 0ms), errc::invalid_argument, "garbage");
  std::filesystem::remove_all(dir);
}

TEST(CommunicatorRules, EnvironmentNamesTheMissingOrMalformedVariable) {
  {
    ScopedEnv env({{"WORLD_SIZE", std::nullopt}, {"RANK", "0"}, {"LOCAL_RANK", "0"}});
    expect_error(Communicator::from_environment(), errc::invalid_argument, "WORLD_SIZE is not set");
  }
  {
    ScopedEnv env({{"WORLD_SIZE", "2"}, {"RANK", "x1"}, {"LOCAL_RANK", "0"}});
    expect_error(Communicator::from_environment(), errc::invalid_argument, "RANK='x1' is not an integer");
  }
  {
    ScopedEnv env({{"WORLD_SIZE", "2"}, {"RANK", "2"}, {"LOCAL_RANK", "0"}});
    expect_error(Communicator::from_environment(), errc::invalid_argument, "RANK=2 must be below WORLD_SIZE=2");
  }
  {
    ScopedEnv env({{"WORLD_SIZE", "2"},
                   {"RANK", "1"},
                   {"LOCAL_RANK", "0"},
                   {"CUACTOR_NCCL_ID", std::nullopt},
                   {"CUACTOR_NCCL_ID_FILE", std::nullopt}});
    expect_error(Communicator::from_environment(), errc::invalid_argument,
                 "neither CUACTOR_NCCL_ID nor CUACTOR_NCCL_ID_FILE");
  }
  {
    ScopedEnv env({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"LOCAL_RANK", "0"}, {"CUACTOR_NCCL_ID", "zz"}});
    expect_error(Communicator::from_environment(), errc::invalid_argument, "CUACTOR_NCCL_ID: an NCCL unique id");
  }
  {  // Bad options are refused before rank 0 publishes an id file no rank could use.
    const auto dir = fresh_dir();
    ScopedEnv env({{"WORLD_SIZE", "2"},
                   {"RANK", "0"},
                   {"LOCAL_RANK", "0"},
                   {"CUACTOR_NCCL_ID", std::nullopt},
                   {"CUACTOR_NCCL_ID_FILE", (dir / "id").string()}});
    CommunicatorOptions options;
    options.min_ctas = 65;
    expect_error(Communicator::from_environment(options), errc::invalid_argument, "min_ctas=65");
    EXPECT_FALSE(std::filesystem::exists(dir / "id"));
    std::filesystem::remove_all(dir);
  }
}

TEST(CommunicatorRules, RejectsBadGroupsBeforeTouchingNccl) {
  expect_error(Communicator::create_local({}), errc::invalid_argument, "devices is empty");
  const int twice[] = {0, 0};
  expect_error(Communicator::create_local(twice), errc::invalid_argument, "device 0 appears twice");
  auto id = UniqueId::parse(hex_of('0'));
  expect_error(Communicator::create_rank(*id, 0, 0, 0), errc::invalid_argument, "size=0");
  expect_error(Communicator::create_rank(*id, 2, 2, 0), errc::invalid_argument, "rank=2 must be in [0, size=2)");
  expect_error(Communicator::create_rank(*id, 1, 0, 4096), errc::no_device,
               "rank 0: device ordinal 4096 does not exist");
  for (int bad : {-1, 65}) {
    CommunicatorOptions options;
    options.min_ctas = bad;
    expect_error(Communicator::create_rank(*id, 1, 0, 0, options), errc::invalid_argument,
                 fmt::format("CommunicatorOptions::min_ctas={} must be in [0, 64]", bad));
  }
}

TEST(CommunicatorRules, NcclCategoryNamesItsCodes) {
  const std::error_code ec(4, nccl_category());  // ncclInvalidArgument
  EXPECT_STREQ(nccl_category().name(), "nccl");
  EXPECT_NE(ec.message().find("invalid argument"), std::string::npos) << ec.message();
}

// ---- on the visible devices ----

class CommunicatorGpuTest : public test_support::GpuTest {};

/// One communicator per visible device in this process, one stream each.
struct LocalGroup {
  std::vector<Communicator> comms;
  std::vector<gpu::Stream> streams;
  std::vector<gpu::MemPool> pools;
};

LocalGroup make_group(const CommunicatorOptions& options = {}, int ranks = gpu::device_count()) {
  LocalGroup g;
  std::vector<int> devices(static_cast<std::size_t>(ranks));
  std::iota(devices.begin(), devices.end(), 0);
  auto comms = Communicator::create_local(devices, options);
  EXPECT_TRUE(comms.has_value()) << comms.error().to_string();
  if (!comms) return g;
  g.comms = std::move(*comms);
  for (int d : devices) {
    g.streams.push_back(std::move(*gpu::Stream::create(d)));
    g.pools.push_back(std::move(*gpu::MemPool::device_default(d)));
  }
  return g;
}

/// Device 0's used memory in MiB.
double used_mib() {
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return static_cast<double>(total - free) / (1 << 20);
}

class CommunicatorChannelsTest : public CommunicatorGpuTest, public ::testing::WithParamInterface<int> {};

INSTANTIATE_TEST_SUITE_P(MinCtas, CommunicatorChannelsTest, ::testing::Values(0, 64));

TEST_P(CommunicatorChannelsTest, CollectivesOverEveryVisibleDevice) {
  CommunicatorOptions options;
  options.min_ctas = GetParam();
  const double before = used_mib();
  LocalGroup g = make_group(options);
  ASSERT_FALSE(g.comms.empty());
  const int ranks = static_cast<int>(g.comms.size());
  constexpr std::size_t kCount = 1000;  // not a multiple of any chunk size
  struct Buffers {
    gpu::DeviceBuffer send, gathered, gathered_p2p, reduced, scattered, exchanged;
  };
  std::vector<Buffers> bufs(static_cast<std::size_t>(ranks));
  const std::size_t total = kCount * static_cast<std::size_t>(ranks);
  for (int r = 0; r < ranks; ++r) {
    // A pageable copy must be issued with the stream's device current (CUDA refuses it otherwise).
    auto device = gpu::ScopedDevice::make(r);
    ASSERT_TRUE(device.has_value());
    auto& b = bufs[static_cast<std::size_t>(r)];
    const cudaStream_t s = g.streams[static_cast<std::size_t>(r)].get();
    const auto& pool = g.pools[static_cast<std::size_t>(r)];
    b.send = std::move(*gpu::DeviceBuffer::allocate(pool, total * sizeof(std::int32_t), s));
    b.gathered = std::move(*gpu::DeviceBuffer::allocate(pool, total * sizeof(std::int32_t), s));
    b.gathered_p2p = std::move(*gpu::DeviceBuffer::allocate(pool, total * sizeof(std::int32_t), s));
    b.reduced = std::move(*gpu::DeviceBuffer::allocate(pool, total * sizeof(std::int32_t), s));
    b.scattered = std::move(*gpu::DeviceBuffer::allocate(pool, kCount * sizeof(std::int32_t), s));
    b.exchanged = std::move(*gpu::DeviceBuffer::allocate(pool, total * sizeof(std::int32_t), s));
    // send[i] = 1000000 * (r + 1) + i; every output is poisoned first.
    std::vector<std::int32_t> host(total);
    for (std::size_t i = 0; i < total; ++i) host[i] = 1000000 * (r + 1) + static_cast<std::int32_t>(i);
    ASSERT_TRUE(gpu::copy_async(b.send.data(), host.data(), total * sizeof(std::int32_t), s).has_value());
    for (auto* out : {&b.gathered, &b.gathered_p2p, &b.reduced, &b.scattered, &b.exchanged})
      ASSERT_TRUE(gpu::memset_async(out->data(), 0xA5, out->size(), s).has_value());
    ASSERT_TRUE(g.streams[static_cast<std::size_t>(r)].synchronize().has_value());
  }
  auto status = Communicator::grouped(g.comms, [&](Communicator& c) -> Status {
    auto& b = bufs[static_cast<std::size_t>(c.rank())];
    const cudaStream_t s = g.streams[static_cast<std::size_t>(c.rank())].get();
    CUACTOR_TRY(c.all_gather(b.send.data(), b.gathered.data(), kCount, DType::i32, s));
    CUACTOR_TRY(
        c.all_gather(b.send.data(), b.gathered_p2p.data(), kCount, DType::i32, s, GatherAlgorithm::point_to_point));
    CUACTOR_TRY(c.all_reduce(b.send.data(), b.reduced.data(), total, DType::i32, s));
    CUACTOR_TRY(c.reduce_scatter(b.send.data(), b.scattered.data(), kCount, DType::i32, s));
    return c.all_to_all(b.send.data(), b.exchanged.data(), kCount, DType::i32, s);
  });
  ASSERT_TRUE(status.has_value()) << status.error().to_string();
  const std::int32_t rank_sum = ranks * (ranks + 1) / 2;
  for (int r = 0; r < ranks; ++r) {
    auto device = gpu::ScopedDevice::make(r);
    ASSERT_TRUE(device.has_value());
    auto& b = bufs[static_cast<std::size_t>(r)];
    ASSERT_TRUE(g.streams[static_cast<std::size_t>(r)].synchronize().has_value());
    auto download = [&](const gpu::DeviceBuffer& d) {
      std::vector<std::int32_t> h(d.size() / sizeof(std::int32_t));
      EXPECT_EQ(cudaMemcpy(h.data(), d.data(), d.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      return h;
    };
    const auto gathered = download(b.gathered), gathered_p2p = download(b.gathered_p2p), reduced = download(b.reduced),
               scattered = download(b.scattered), exchanged = download(b.exchanged);
    for (std::size_t i = 0; i < total; ++i) {
      const auto p = static_cast<std::int32_t>(i / kCount), j = static_cast<std::int32_t>(i % kCount);
      ASSERT_EQ(gathered[i], 1000000 * (p + 1) + j) << "all_gather, rank " << r << ", element " << i;
      ASSERT_EQ(gathered_p2p[i], 1000000 * (p + 1) + j) << "point-to-point all_gather, rank " << r << ", element " << i;
      ASSERT_EQ(reduced[i], 1000000 * rank_sum + ranks * static_cast<std::int32_t>(i)) << "all_reduce " << i;
      // Block r of peer p's send comes to rank r as block p.
      ASSERT_EQ(exchanged[i], 1000000 * (p + 1) + r * static_cast<std::int32_t>(kCount) + j) << "all_to_all " << i;
    }
    for (std::size_t j = 0; j < kCount; ++j)
      ASSERT_EQ(scattered[j], 1000000 * rank_sum + ranks * static_cast<std::int32_t>(r * kCount + j))
          << "reduce_scatter " << j;
    EXPECT_TRUE(g.comms[static_cast<std::size_t>(r)].check().has_value());
  }
  // Not a check: what the channel floor costs, for the docs.
  std::cout << "min_ctas=" << GetParam() << ": device 0 holds " << used_mib() - before
            << " MiB more after the collectives on " << ranks << " rank(s)\n";
}

TEST_F(CommunicatorGpuTest, PointToPointGatherOutsideAGroupSettles) {
  // One rank, no Communicator::grouped around it: the gather's own group ends non-blocking.
  LocalGroup g = make_group({}, 1);
  ASSERT_EQ(g.comms.size(), 1u);
  constexpr std::size_t kCount = 4099;
  const cudaStream_t s = g.streams[0].get();
  auto send = gpu::DeviceBuffer::allocate(g.pools[0], kCount * sizeof(float), s);
  auto recv = gpu::DeviceBuffer::allocate(g.pools[0], kCount * sizeof(float), s);
  ASSERT_TRUE(send && recv);
  std::vector<float> host(kCount);
  for (std::size_t i = 0; i < kCount; ++i) host[i] = 0.5f + static_cast<float>(i);
  ASSERT_TRUE(gpu::copy_async(send->data(), host.data(), kCount * sizeof(float), s).has_value());
  ASSERT_TRUE(gpu::memset_async(recv->data(), 0xFF, kCount * sizeof(float), s).has_value());  // NaN
  auto status =
      g.comms[0].all_gather(send->data(), recv->data(), kCount, DType::f32, s, GatherAlgorithm::point_to_point);
  ASSERT_TRUE(status.has_value()) << status.error().to_string();
  ASSERT_TRUE(g.streams[0].synchronize().has_value());
  std::vector<float> out(kCount);
  ASSERT_EQ(cudaMemcpy(out.data(), recv->data(), kCount * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(out, host);
  EXPECT_TRUE(g.comms[0].check().has_value());
}

TEST_F(CommunicatorGpuTest, UnsupportedDtypeIsRejected) {
  LocalGroup g = make_group();
  ASSERT_FALSE(g.comms.empty());
  if (g.comms.size() > 1) GTEST_SKIP() << "one rank suffices (a lone call on one of several ranks would wait)";
  expect_error(g.comms[0].all_reduce(nullptr, nullptr, 0, DType::e2m1, g.streams[0].get()), errc::unsupported,
               "no type for dtype");
}

TEST_F(CommunicatorGpuTest, InitWaitsForMissingRanksOnlyUntilTheDeadline) {
  auto id = UniqueId::create();
  ASSERT_TRUE(id.has_value()) << id.error().to_string();
  CommunicatorOptions options;
  options.init_timeout = 2s;
  const auto start = std::chrono::steady_clock::now();
  // Rank 1 of 2 never comes.
  expect_error(Communicator::create_rank(*id, 2, 0, 0, options), errc::timeout, "still in progress at the deadline");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

TEST_F(CommunicatorGpuTest, AbortedCommunicatorFailsTypedInsteadOfHanging) {
  auto id = UniqueId::create();
  ASSERT_TRUE(id.has_value());
  auto comm = Communicator::create_rank(*id, 1, 0, 0);
  ASSERT_TRUE(comm.has_value()) << comm.error().to_string();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_NE(comm->native(), nullptr);
  EXPECT_TRUE(comm->check().has_value());
  comm->abort();
  comm->abort();  // idempotent
  expect_error(comm->check(), errc::context_poisoned, "failed or was aborted");
  auto stream = gpu::Stream::create(0);
  expect_error(comm->all_reduce(nullptr, nullptr, 0, DType::f32, stream->get()), errc::context_poisoned,
               "ncclAllReduce");
}

TEST_F(CommunicatorGpuTest, AGroupThatFailsPartWayAbortsEveryMember) {
  LocalGroup g = make_group();
  ASSERT_FALSE(g.comms.empty());
  auto failing = Communicator::grouped(g.comms, [](Communicator& c) -> Status {
    return fail(errc::invalid_argument, "rank " + std::to_string(c.rank()) + " refuses");
  });
  expect_error(failing, errc::invalid_argument, "rank 0 refuses");
  for (Communicator& c : g.comms) expect_error(c.check(), errc::context_poisoned, "failed or was aborted");
  // A group with an aborted member issues nothing.
  int calls = 0;
  auto refused = Communicator::grouped(g.comms, [&](Communicator&) -> Status {
    ++calls;
    return ok();
  });
  expect_error(refused, errc::context_poisoned, "Communicator::grouped");
  EXPECT_EQ(calls, 0);
}

TEST_F(CommunicatorGpuTest, RankFromEnvironmentPublishesItsIdFile) {
  const auto dir = fresh_dir();
  ScopedEnv env({{"WORLD_SIZE", "1"},
                 {"RANK", "0"},
                 {"LOCAL_RANK", "0"},
                 {"CUACTOR_NCCL_ID", std::nullopt},
                 {"CUACTOR_NCCL_ID_FILE", (dir / "id").string()}});
  auto comm = Communicator::from_environment();
  ASSERT_TRUE(comm.has_value()) << comm.error().to_string();
  EXPECT_EQ(comm->size(), 1);
  // Every rank has joined, so rank 0 took its spent id file away: the next run can publish again.
  EXPECT_FALSE(std::filesystem::exists(dir / "id"));
  auto again = Communicator::from_environment();
  ASSERT_TRUE(again.has_value()) << again.error().to_string();
  EXPECT_FALSE(std::filesystem::exists(dir / "id"));
  // A file rank 0 did not publish is never replaced nor removed.
  std::ofstream(dir / "id") << "someone else's\n";
  expect_error(Communicator::from_environment(), errc::invalid_argument, "already exists");
  std::string kept;
  std::getline(std::ifstream(dir / "id"), kept);
  EXPECT_EQ(kept, "someone else's");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cuactor::parallel
