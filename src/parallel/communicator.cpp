// NCCL communicators ([M2]). Every communicator is non-blocking (config.blocking = 0) so that no
// call can hang: initialisation polls with a deadline, and a call NCCL reports as still in progress
// is polled to completion the same way.
#include "cuactor/parallel/communicator.hpp"

#include <fmt/format.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>

#include "cuactor/core/files.hpp"
#include "cuactor/core/log.hpp"
#include "cuactor/core/no_throw.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"

namespace cuactor::parallel {
namespace {

class NcclCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "nccl"; }
  std::string message(int value) const override { return ncclGetErrorString(static_cast<ncclResult_t>(value)); }
};

Error nccl_error(ncclResult_t r, std::string_view what) {
  const char* last = ncclGetLastError(nullptr);
  return Error(std::error_code(static_cast<int>(r), nccl_category()),
               fmt::format("{}: {}{}{}", what, ncclGetErrorString(r), last && *last ? ": " : "", last ? last : ""));
}

Status nccl_check(ncclResult_t r, std::string_view what) {
  if (r == ncclSuccess || r == ncclInProgress) return ok();
  return fail(nccl_error(r, what));
}

std::optional<ncclDataType_t> nccl_type(DType t) noexcept {
  switch (t) {
    case DType::f64:
      return ncclFloat64;
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::e4m3:
      return ncclFloat8e4m3;
    case DType::e5m2:
      return ncclFloat8e5m2;
    case DType::i64:
      return ncclInt64;
    case DType::i32:
      return ncclInt32;
    case DType::i8:
      return ncclInt8;
    case DType::u8:
      return ncclUint8;
    default:
      return std::nullopt;
  }
}

// gpu::check_ordinal, its message prefixed with who asked.
Status check_device(int device, std::string_view who) {
  if (Status st = gpu::check_ordinal(device); !st)
    return fail(Error(st.error().code(), fmt::format("{}: {}", who, st.error().message())));
  return ok();
}

// How long a call NCCL reports in progress may take to be enqueued (the work itself is on the stream).
constexpr std::chrono::seconds kSettleDeadline{30};
// How long an initialisation waiting for its peers sleeps between polls (after its first millisecond).
constexpr std::chrono::microseconds kInitNap{200};

// The most CTAs (channels) an NCCL operation may take (NCCL's MAXCHANNELS).
constexpr int kMaxCtas = 64;
// Environment variables with which a user sets NCCL's channel count.
constexpr const char* kChannelVariables[] = {"NCCL_MIN_CTAS",      "NCCL_MAX_CTAS",   "NCCL_MIN_NCHANNELS",
                                             "NCCL_MAX_NCHANNELS", "NCCL_MIN_NRINGS", "NCCL_MAX_NRINGS"};

Status check_options(const CommunicatorOptions& options) {
  if (options.min_ctas < 0 || options.min_ctas > kMaxCtas)
    return fail(errc::invalid_argument,
                fmt::format("CommunicatorOptions::min_ctas={} must be in [0, {}] (0: NCCL's choice)", options.min_ctas,
                            kMaxCtas));
  return ok();
}

// NVLink multicast can put a shared host's GPUs out of service; it stays off unless the user chose.
void keep_multicast_off() {
  static std::once_flag once;
  std::call_once(once, [] { ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); });
}

ncclConfig_t nonblocking_config(const CommunicatorOptions& options) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  // The user's environment wins, as it does for multicast. NCCL takes a minimum only with a maximum.
  const bool user_chose = std::ranges::any_of(kChannelVariables, [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0';
  });
  if (options.min_ctas > 0 && !user_chose) {
    config.minCTAs = options.min_ctas;
    config.maxCTAs = kMaxCtas;
  }
  return config;
}

}  // namespace

std::string nccl_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100);
}

const std::error_category& nccl_category() noexcept {
  static const NcclCategory category;
  return category;
}

struct Communicator::State {
  ncclComm_t comm = nullptr;
  int rank = 0;
  int size = 0;
  int device = 0;
  std::atomic<bool> failed{false};  // an error was seen or abort() was called: no new calls
  // Every NCCL call on the handle holds it: NCCL forbids concurrent calls on one communicator (even
  // ncclCommGetAsyncError completes group jobs), and abort() must not free the handle under a call.
  // Recursive: grouped() holds it from ncclGroupStart to ncclGroupEnd around the calls it issues.
  std::recursive_mutex calls;
  bool aborted = false;  // guarded by `calls`: the handle is gone
  // The watcher (only with on_async_error): polls, aborts and reports once.
  std::function<void(int, const Error&)> on_async_error;
  std::chrono::milliseconds watch_interval{50};
  std::jthread watcher;

  Error async_failure(ncclResult_t state) const {
    return nccl_error(state, fmt::format("asynchronous error of rank {} of {} (device {})", rank, size, device));
  }

  Error gone(std::string_view what) const {
    return Error(errc::context_poisoned,
                 fmt::format("{}: the communicator (rank {} of {}) failed or was aborted", what, rank, size));
  }

  // NCCL's asynchronous state (a failing query counts as the state); nullopt once aborted.
  std::optional<ncclResult_t> async_state() {
    std::lock_guard lock(calls);
    return async_state_locked();
  }
  std::optional<ncclResult_t> async_state_locked() {
    if (aborted) return std::nullopt;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    return r != ncclSuccess ? r : state;
  }

  // Polls until NCCL no longer reports the communicator's last call as in progress, up to `deadline`.
  // A call's own progress takes microseconds, so a settle only yields between polls (a nap would
  // delay every collective it follows). An initialisation waits for its peers, up to init_timeout:
  // there `nap` > 0 puts the thread to sleep between polls after the first millisecond, so that the
  // wait does not burn a core.
  Status settle(std::string_view what) { return wait_ready(std::chrono::steady_clock::now() + kSettleDeadline, what); }
  Status wait_ready(std::chrono::steady_clock::time_point deadline, std::string_view what,
                    std::chrono::microseconds nap = std::chrono::microseconds(0)) {
    const auto brisk_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
    for (;;) {
      const auto state = async_state();
      if (!state) return fail(gone(what));
      if (*state == ncclSuccess) return ok();
      if (*state != ncclInProgress) {
        failed.store(true, std::memory_order_release);
        return fail(nccl_error(*state, fmt::format("{} (rank {} of {}, device {})", what, rank, size, device)));
      }
      if (std::chrono::steady_clock::now() > deadline)
        return fail(errc::timeout, fmt::format("{} (rank {} of {}, device {}): still in progress at the deadline", what,
                                               rank, size, device));
      if (nap.count() == 0 || std::chrono::steady_clock::now() < brisk_until)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(nap);
    }
  }

  // Issues one NCCL call unless the communicator failed (an aborted handle never reaches NCCL again).
  // NCCL may report the call in progress; it completes in microseconds (the work itself is on the
  // stream), so the deadline only guards against a communicator that died meanwhile.
  template <class Call>
  Status call(std::string_view what, Call&& enqueue) {
    ncclResult_t r = ncclSuccess;
    {
      std::lock_guard lock(calls);
      if (failed.load(std::memory_order_acquire)) return fail(gone(what));  // abort() sets it first
      r = enqueue(comm);
    }
    CUACTOR_TRY(nccl_check(r, what));
    if (r == ncclInProgress) return settle(what);
    return ok();
  }

  void abort() noexcept {
    failed.store(true, std::memory_order_release);
    std::lock_guard lock(calls);
    if (aborted || comm == nullptr) return;
    (void)ncclCommAbort(comm);
    aborted = true;
  }

  void start_watcher() {
    if (!on_async_error) return;
    watcher = std::jthread([this](std::stop_token stop) {
      // Nothing thrown here may leave the thread (formatting the error can run out of memory).
      (void)result_or_error("communicator watcher", [&]() -> Status {
        while (!stop.stop_requested()) {
          std::optional<ncclResult_t> state = ncclSuccess;
          if (std::unique_lock lock(calls, std::try_to_lock); lock.owns_lock())  // busy: poll next round
            state = async_state_locked();
          if (!state) return ok();
          if (*state != ncclSuccess && *state != ncclInProgress) {
            abort();  // first: formatting the error below may throw (caught above), the abort may not wait
            const Error error = async_failure(*state);
            // The hook may destroy this communicator (and so this State): call a copy, touch nothing after.
            const auto hook = on_async_error;
            const int failed_rank = rank;
            (void)result_or_error("communicator error hook", [&]() -> Status {
              hook(failed_rank, error);
              return ok();
            });
            return ok();
          }
          std::this_thread::sleep_for(watch_interval);
        }
        return ok();
      });
    });
  }

  ~State() {
    if (watcher.joinable()) {
      watcher.request_stop();
      if (watcher.get_id() == std::this_thread::get_id())
        watcher.detach();  // destroyed from on_async_error: the watcher returns right after the hook
      else
        watcher.join();
    }
    if (comm == nullptr) return;
    if (!failed.load(std::memory_order_acquire)) {
      // Finalise flushes this rank's pending operations; the deadline keeps a dead peer from hanging
      // the destructor (the communicator is aborted instead).
      auto device_guard = gpu::ScopedDevice::make(device);
      const ncclResult_t finalized = device_guard ? ncclCommFinalize(comm) : ncclInvalidUsage;
      if ((finalized == ncclSuccess || finalized == ncclInProgress) && settle("ncclCommFinalize")) {
        (void)ncclCommDestroy(comm);
        return;
      }
    }
    abort();
  }
};

Communicator::Communicator(std::unique_ptr<State> state) : state_(std::move(state)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

int Communicator::rank() const noexcept {
  return state_->rank;
}
int Communicator::size() const noexcept {
  return state_->size;
}
int Communicator::device() const noexcept {
  return state_->device;
}
ncclComm* Communicator::native() const noexcept {
  return state_->comm;
}

Status Communicator::check() {
  State& s = *state_;
  if (s.failed.load(std::memory_order_acquire)) return fail(s.gone("check"));
  const auto state = s.async_state();
  if (!state) return fail(s.gone("check"));
  if (*state == ncclSuccess || *state == ncclInProgress) return ok();
  s.abort();
  return fail(s.async_failure(*state));
}

void Communicator::abort() noexcept {
  state_->abort();
}

namespace {

// Creates the states of `ranks` (rank, device) of a group of `size` meeting through `id`, all inside
// one NCCL group, and waits for all of them up to the deadline.
Result<std::vector<std::unique_ptr<Communicator::State>>> init_ranks(const UniqueId& id, int size,
                                                                     std::span<const std::pair<int, int>> ranks,
                                                                     const CommunicatorOptions& options) {
  keep_multicast_off();
  CUACTOR_TRY(check_options(options));
  for (const auto& [rank, device] : ranks) {
    if (size < 1) return fail(errc::invalid_argument, fmt::format("communicator size={} must be at least 1", size));
    if (rank < 0 || rank >= size)
      return fail(errc::invalid_argument, fmt::format("rank={} must be in [0, size={})", rank, size));
    CUACTOR_TRY(check_device(device, fmt::format("rank {}", rank)));
  }
  ncclUniqueId nccl_id;
  static_assert(sizeof(nccl_id.internal) == UniqueId::kBytes);
  std::memcpy(nccl_id.internal, id.bytes().data(), UniqueId::kBytes);

  std::vector<std::unique_ptr<Communicator::State>> states;
  for (const auto& [rank, device] : ranks) {
    auto s = std::make_unique<Communicator::State>();
    s->rank = rank;
    s->size = size;
    s->device = device;
    s->on_async_error = options.on_async_error;
    s->watch_interval = options.watch_interval;
    states.push_back(std::move(s));
  }
  const auto deadline = std::chrono::steady_clock::now() + options.init_timeout;
  Status issued = ok();
  {
    CUACTOR_TRY(nccl_check(ncclGroupStart(), "ncclGroupStart"));
    for (auto& s : states) {
      auto guard = gpu::ScopedDevice::make(s->device);
      if (!guard) {
        issued = fail(guard.error());
        break;
      }
      ncclConfig_t config = nonblocking_config(options);
      if (Status st =
              nccl_check(ncclCommInitRankConfig(&s->comm, size, nccl_id, s->rank, &config),
                         fmt::format("ncclCommInitRankConfig(rank {} of {}, device {})", s->rank, size, s->device));
          !st) {
        issued = st;
        break;
      }
    }
    if (Status st = nccl_check(ncclGroupEnd(), "ncclGroupEnd (communicator init)"); !st && issued) issued = st;
  }
  for (auto& s : states) {
    if (!issued) break;
    if (s->comm == nullptr) continue;
    issued = s->wait_ready(
        deadline, fmt::format("communicator init (waited {} ms for {} ranks)", options.init_timeout.count(), size),
        kInitNap);
  }
  if (!issued) {
    for (auto& s : states) s->abort();  // the destructors see failed and do not finalise
    return fail(issued.error());
  }
  for (auto& s : states) s->start_watcher();
  return states;
}

}  // namespace

Result<std::vector<Communicator>> Communicator::create_local(std::span<const int> devices,
                                                             const CommunicatorOptions& options) {
  if (devices.empty()) return fail(errc::invalid_argument, "create_local: devices is empty (need at least one)");
  CUACTOR_TRY(check_options(options));
  std::unordered_set<int> seen;
  std::vector<std::pair<int, int>> ranks;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (!seen.insert(devices[i]).second)
      return fail(errc::invalid_argument,
                  fmt::format("create_local: device {} appears twice (NCCL needs one rank per device)", devices[i]));
    ranks.emplace_back(static_cast<int>(i), devices[i]);
  }
  // Before the id: creating it starts NCCL's bootstrap listener, which waits for ranks that would never come.
  for (const int device : devices) CUACTOR_TRY(check_device(device, "create_local"));
  auto id = UniqueId::create();
  if (!id) return fail(id.error());
  auto states = init_ranks(*id, static_cast<int>(devices.size()), ranks, options);
  if (!states) return fail(states.error());
  std::vector<Communicator> out;
  for (auto& s : *states) out.push_back(Communicator(std::move(s)));
  return out;
}

Result<Communicator> Communicator::create_rank(const UniqueId& id, int size, int rank, int device,
                                               const CommunicatorOptions& options) {
  const std::pair<int, int> one{rank, device};
  auto states = init_ranks(id, size, std::span(&one, 1), options);
  if (!states) return fail(states.error());
  return Communicator(std::move(states->front()));
}

namespace {

Result<int> env_int(const char* name, int min) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0')
    return fail(errc::invalid_argument, fmt::format("environment variable {} is not set", name));
  int value = 0;
  const auto [end, ec] = std::from_chars(v, v + std::strlen(v), value);
  if (ec != std::errc() || *end != '\0' || value < min)
    return fail(errc::invalid_argument,
                fmt::format("environment variable {}='{}' is not an integer of at least {}", name, v, min));
  return value;
}

/// Removes the unique id file at `path` if it still holds `id` (a file someone else put there stays).
void remove_id_file_if_ours(const std::filesystem::path& path, const UniqueId& id) {
  auto held = UniqueId::read_file(path, std::chrono::milliseconds(0));
  if (!held || held->bytes() != id.bytes()) return;
  if (::unlink(path.c_str()) != 0)
    log(LogLevel::warn, fmt::format("could not remove the spent unique id file '{}': {}; remove it before the next run",
                                    path.string(), std::strerror(errno)));
}

/// The id this process last took from each id file. A rank that makes a second communicator from
/// the same file must not take the spent id again, which rank 0 may not have removed yet.
struct TakenIds {
  std::mutex mutex;
  std::map<std::string, UniqueId> last;
};

TakenIds& taken_ids() {
  static TakenIds ids;
  return ids;
}

/// The id in `path` once it is not the one this process took from it last, waiting up to `timeout`.
Result<UniqueId> take_fresh_id(const std::filesystem::path& path, std::chrono::milliseconds timeout) {
  TakenIds& taken = taken_ids();
  std::optional<UniqueId> spent;
  {
    std::lock_guard lock(taken.mutex);
    if (auto it = taken.last.find(path.string()); it != taken.last.end()) spent = it->second;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto id = UniqueId::read_file(path, std::max(left, std::chrono::milliseconds(0)));
    if (!id) return fail(id.error());
    if (!spent || id->bytes() != spent->bytes()) {
      std::lock_guard lock(taken.mutex);
      taken.last.insert_or_assign(path.string(), *id);
      return *id;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return fail(errc::timeout,
                  fmt::format("unique id file '{}' still held the id this process used before after {} ms "
                              "(rank 0 publishes a new one for each communicator)",
                              path.string(), timeout.count()));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

Result<Communicator> Communicator::from_environment(const CommunicatorOptions& options) {
  auto size = env_int("WORLD_SIZE", 1);
  if (!size) return fail(size.error());
  auto rank = env_int("RANK", 0);
  if (!rank) return fail(rank.error());
  auto device = env_int("LOCAL_RANK", 0);
  if (!device) return fail(device.error());
  if (*rank >= *size)
    return fail(errc::invalid_argument, fmt::format("RANK={} must be below WORLD_SIZE={}", *rank, *size));
  CUACTOR_TRY(check_options(options));  // before an id file is published that no rank could use
  std::optional<UniqueId> id;
  const char* file_variable = std::getenv("CUACTOR_NCCL_ID_FILE");
  const std::string id_file = file_variable != nullptr ? file_variable : "";
  bool published = false;
  if (const char* hex = std::getenv("CUACTOR_NCCL_ID"); hex != nullptr && *hex != '\0') {
    auto parsed = UniqueId::parse(hex);
    if (!parsed) return fail(errc::invalid_argument, fmt::format("CUACTOR_NCCL_ID: {}", parsed.error().message()));
    id = *parsed;
  } else if (!id_file.empty()) {
    if (*rank == 0) {
      CUACTOR_TRY(check_device(*device, "LOCAL_RANK"));  // before the id starts NCCL's bootstrap listener
      auto made = UniqueId::create();
      if (!made) return fail(made.error());
      CUACTOR_TRY(made->write_file(id_file));
      id = *made;
      published = true;
    } else {
      auto read = take_fresh_id(id_file, options.init_timeout);
      if (!read) return fail(read.error());
      id = *read;
    }
  } else {
    return fail(errc::invalid_argument, "neither CUACTOR_NCCL_ID nor CUACTOR_NCCL_ID_FILE is set");
  }
  auto comm = create_rank(*id, *size, *rank, *device, options);
  // Once the group is made every rank has read the id (after a failure none will need it): the file
  // is spent, and left behind it would stop the next run's rank 0 from publishing its own.
  if (published)
    (void)result_or_error("removing the unique id file", [&]() -> Status {
      remove_id_file_if_ours(id_file, *id);
      return ok();
    });
  return comm;
}

// ---- unique ids ----

Result<UniqueId> UniqueId::create() {
  keep_multicast_off();
  ncclUniqueId nccl_id;
  CUACTOR_TRY(nccl_check(ncclGetUniqueId(&nccl_id), "ncclGetUniqueId"));
  UniqueId id;
  std::memcpy(id.bytes_.data(), nccl_id.internal, kBytes);
  return id;
}

std::string UniqueId::to_hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * kBytes, '0');
  for (std::size_t i = 0; i < kBytes; ++i) {
    const auto b = static_cast<unsigned char>(bytes_[i]);
    out[2 * i] = kDigits[b >> 4];
    out[2 * i + 1] = kDigits[b & 15];
  }
  return out;
}

Result<UniqueId> UniqueId::parse(std::string_view hex) {
  while (!hex.empty() && (hex.back() == '\n' || hex.back() == '\r')) hex.remove_suffix(1);
  if (hex.size() != 2 * kBytes)
    return fail(errc::invalid_argument,
                fmt::format("an NCCL unique id is {} hex digits, got {} characters", 2 * kBytes, hex.size()));
  UniqueId id;
  for (std::size_t i = 0; i < kBytes; ++i) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, value, 16);
    if (ec != std::errc() || end != hex.data() + 2 * i + 2)
      return fail(errc::invalid_argument,
                  fmt::format("unique id: '{}' at position {} is not a hex digit pair", hex.substr(2 * i, 2), 2 * i));
    id.bytes_[i] = static_cast<char>(value);
  }
  return id;
}

Status UniqueId::write_file(const std::filesystem::path& path) const {
  std::error_code ec;
  if (std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found)
    return fail(
        errc::invalid_argument,
        fmt::format("unique id file '{}' already exists (left by an earlier run?): remove it first", path.string()));
  const std::string text = to_hex() + "\n";
  std::filesystem::path tmp = path;
  tmp += fmt::format(".{}.tmp", ::getpid());
  CUACTOR_TRY(write_new_private_file(tmp, std::as_bytes(std::span(text))));
  // link() publishes the complete file and, unlike rename(), never replaces one that appeared meanwhile.
  const int linked = ::link(tmp.c_str(), path.c_str());
  const int link_errno = errno;
  ::unlink(tmp.c_str());
  if (linked != 0)
    return fail(link_errno == EEXIST ? errc::invalid_argument : errc::io_error,
                fmt::format("publishing unique id file '{}': {}", path.string(), std::strerror(link_errno)));
  return ok();
}

Result<UniqueId> UniqueId::read_file(const std::filesystem::path& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
      auto bytes = cuactor::read_file(path, "unique id file", FileTrust::any);
      if (!bytes) return fail(bytes.error());
      auto id = parse(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
      if (!id)
        return fail(errc::invalid_argument,
                    fmt::format("unique id file '{}': {}", path.string(), id.error().message()));
      return id;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return fail(errc::timeout,
                  fmt::format("unique id file '{}' did not appear within {} ms", path.string(), timeout.count()));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// ---- collectives ----

// Each collective: the dtype, then the communicator's health, then the call (never on an aborted handle).
template <class Enqueue>
Status Communicator::collective(std::string_view what, DType dtype, Enqueue&& enqueue) {
  const auto t = nccl_type(dtype);
  if (!t) return fail(errc::unsupported, fmt::format("{}: NCCL has no type for dtype {}", what, name(dtype)));
  return state_->call(what, [&](ncclComm_t c) { return enqueue(*t, c); });
}

Status Communicator::all_gather(const void* send, void* recv, std::size_t count, DType dtype, cudaStream_t stream,
                                GatherAlgorithm algorithm) {
  if (algorithm == GatherAlgorithm::collective)
    return collective("ncclAllGather", dtype,
                      [&](ncclDataType_t t, ncclComm_t c) { return ncclAllGather(send, recv, count, t, c, stream); });
  const std::size_t block_bytes = storage_bytes(dtype, count);
  return collective("all_gather (ncclSend/ncclRecv)", dtype, [&](ncclDataType_t t, ncclComm_t c) {
    // A nested group: inside Communicator::grouped it joins the caller's. A non-blocking
    // communicator's calls may answer ncclInProgress (its state), which is no reason to stop issuing:
    // a peer would wait for the rest.
    if (ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return r;
    ncclResult_t failed = ncclSuccess;
    bool in_progress = false;
    auto note = [&](ncclResult_t r) {
      if (r == ncclInProgress)
        in_progress = true;
      else if (r != ncclSuccess && failed == ncclSuccess)
        failed = r;
    };
    for (int peer = 0; peer < size() && failed == ncclSuccess; ++peer) {
      note(ncclSend(send, count, t, peer, c, stream));
      if (failed == ncclSuccess)
        note(ncclRecv(static_cast<std::byte*>(recv) + static_cast<std::size_t>(peer) * block_bytes, count, t, peer, c,
                      stream));
    }
    note(ncclGroupEnd());
    if (failed != ncclSuccess) return failed;
    return in_progress ? ncclInProgress : ncclSuccess;
  });
}

Status Communicator::reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype, cudaStream_t stream) {
  return collective("ncclReduceScatter", dtype, [&](ncclDataType_t t, ncclComm_t c) {
    return ncclReduceScatter(send, recv, count, t, ncclSum, c, stream);
  });
}

Status Communicator::all_reduce(const void* send, void* recv, std::size_t count, DType dtype, cudaStream_t stream) {
  return collective("ncclAllReduce", dtype, [&](ncclDataType_t t, ncclComm_t c) {
    return ncclAllReduce(send, recv, count, t, ncclSum, c, stream);
  });
}

Status Communicator::all_to_all(const void* send, void* recv, std::size_t count, DType dtype, cudaStream_t stream) {
  return collective("ncclAlltoAll", dtype,
                    [&](ncclDataType_t t, ncclComm_t c) { return ncclAlltoAll(send, recv, count, t, c, stream); });
}

Status Communicator::grouped(std::span<Communicator> group, const std::function<Status(Communicator&)>& op) {
  // Issued collectives cannot be taken back, so every member must be healthy before anything is issued,
  // and no abort() may free a member between ncclGroupStart and ncclGroupEnd: the members' locks are
  // held across the group (in address order, so two groups over the same members cannot deadlock).
  std::vector<State*> members;
  for (Communicator& c : group) members.push_back(c.state_.get());
  std::sort(members.begin(), members.end());
  std::vector<std::unique_lock<std::recursive_mutex>> locks;
  for (State* m : members) {
    locks.emplace_back(m->calls);
    if (m->failed.load(std::memory_order_acquire)) return fail(m->gone("Communicator::grouped"));
  }
  CUACTOR_TRY(nccl_check(ncclGroupStart(), "ncclGroupStart"));
  Status first = ok();
  for (Communicator& c : group) {
    first = result_or_error("Communicator::grouped", [&] { return op(c); });
    if (!first) break;
  }
  const ncclResult_t ended = ncclGroupEnd();
  locks.clear();
  if (first) first = nccl_check(ended, "ncclGroupEnd");
  if (!first) {
    // Some members' calls may be out while others' are not: their peers would wait forever.
    for (State* m : members) m->abort();
    return first;
  }
  if (ended == ncclInProgress)
    for (State* m : members)
      if (Status settled = m->settle("ncclGroupEnd"); !settled) {
        for (State* other : members) other->abort();  // the others' kernels would wait for this member
        return settled;
      }
  return ok();
}

}  // namespace cuactor::parallel
