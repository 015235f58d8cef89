/// @file
/// NCCL communicators ([M2]): one per device of a group, made for one process driving several GPUs or
/// for one process per GPU (the ranks meet through a unique id the launcher hands out by file or
/// environment). NCCL's result codes become typed errors of the "nccl" category; initialisation has a
/// deadline instead of hanging on a missing rank; asynchronous errors are polled (on demand, or by a
/// watcher that aborts the communicator and tells the owner's supervision through a hook); a failed
/// communicator is aborted, a healthy one finalised. NVLink multicast stays off (NCCL_NVLS_ENABLE=0
/// unless the user set it).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cuactor/core/dtype.hpp"
#include "cuactor/core/expected.hpp"

struct ncclComm;  // NCCL's opaque communicator (ncclComm_t is ncclComm*).

namespace cuactor::parallel {

/// Category whose values are NCCL's `ncclResult_t` (name "nccl").
const std::error_category& nccl_category() noexcept;

/// The version of the NCCL library in use ("2.28.9"), as ncclGetVersion reports it.
std::string nccl_version();

/// The id the ranks of one communicator share (NCCL's 128-byte unique id): made by one rank, read by
/// the others from wherever the launcher put it.
class UniqueId {
 public:
  static constexpr std::size_t kBytes = 128;

  /// A fresh id (ncclGetUniqueId; it opens the bootstrap listener of this process).
  static Result<UniqueId> create();
  /// An id from its hex text (256 hex digits); `invalid_argument` naming the length or the character.
  static Result<UniqueId> parse(std::string_view hex);
  /// Writes the id's hex text to `path`, which must not exist yet (an id left by an earlier run is
  /// refused, never overwritten): written to a private temporary next to it, then linked into place,
  /// so readers see all of it or nothing. `invalid_argument` if `path` exists, `io_error` otherwise.
  Status write_file(const std::filesystem::path& path) const;
  /// Waits up to `timeout` for `path` to appear and reads the id from it; `timeout` naming the path
  /// when it does not, `invalid_argument` when its text is not an id.
  static Result<UniqueId> read_file(const std::filesystem::path& path, std::chrono::milliseconds timeout);

  /// The id as 256 lower-case hex digits.
  [[nodiscard]] std::string to_hex() const;
  /// The raw bytes.
  [[nodiscard]] const std::array<char, kBytes>& bytes() const noexcept { return bytes_; }

 private:
  std::array<char, kBytes> bytes_{};
};

/// How a communicator is made and watched.
struct CommunicatorOptions {
  /// Initialisation waits this long for every rank to join, then fails with `timeout` (and aborts).
  std::chrono::milliseconds init_timeout{std::chrono::seconds(120)};
  /// Called once, from a watcher thread, when NCCL reports an asynchronous error (a peer died, a
  /// network failure): the communicator has been aborted, so its pending work ends instead of hanging.
  /// Hand it to the owner's supervision (e.g. fail the requests of the devices in the group). No
  /// exception may leave it (one that does is swallowed). Unset: no watcher; call check() instead.
  std::function<void(int rank, const Error&)> on_async_error;
  /// How often the watcher polls.
  std::chrono::milliseconds watch_interval{50};
  /// The fewest channels (CTAs) the communicator sets up (ncclConfig_t::minCTAs, with maxCTAs 64), in
  /// [0, 64]; 0 leaves the count to NCCL, which still runs small messages on fewer. More channels
  /// move large blocks faster but hold more NCCL buffers per peer (64 held about 670 MiB more per
  /// device than NCCL's count on two H100s) and take more SMs while they run.
  /// The expert-parallel layer's communication wants 64 (ExpertParallelMoe::communicator_options()).
  /// NCCL_{MIN,MAX}_CTAS, NCCL_{MIN,MAX}_NCHANNELS or NCCL_{MIN,MAX}_NRINGS in the environment win.
  int min_ctas = 0;
};

/// How Communicator::all_gather moves the blocks.
enum class GatherAlgorithm {
  /// NCCL's all-gather collective (its ring or tree).
  collective,
  /// Each rank sends its block to every rank, itself included, with NCCL send / receive in one group,
  /// as an all-to-all does. On two H100s over NVLink it took 21 us where the collective took 26 us
  /// for 1.8 MB blocks, and 237 against 260 us for 58.7 MB.
  point_to_point,
};

/// One rank of an NCCL communicator, bound to one device. Move-only; the destructor finalises a
/// healthy communicator (waiting for its work) and aborts a failed one.
class Communicator {
 public:
  /// One process driving `devices` (ordinals, no repeats): rank i on devices[i]. Every communicator
  /// of the group is made together (NCCL requires it from one thread).
  static Result<std::vector<Communicator>> create_local(std::span<const int> devices,
                                                        const CommunicatorOptions& options = {});
  /// One rank of `size` in a group spread over processes, on `device`, meeting the others through
  /// `id` (the same id everywhere; rank 0 usually creates it).
  static Result<Communicator> create_rank(const UniqueId& id, int size, int rank, int device,
                                          const CommunicatorOptions& options = {});
  /// One rank as a launcher describes it in the environment: WORLD_SIZE, RANK and LOCAL_RANK (the
  /// device; torchrun's names), and the id as CUACTOR_NCCL_ID (hex) or CUACTOR_NCCL_ID_FILE (rank 0
  /// creates the id and writes the file, the others wait for it up to init_timeout; once the group is
  /// made, or has failed, rank 0 removes the file if it still holds its id, so a rerun can publish).
  /// `invalid_argument` naming the variable that is missing or malformed.
  static Result<Communicator> from_environment(const CommunicatorOptions& options = {});

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();

  /// This rank.
  [[nodiscard]] int rank() const noexcept;
  /// Ranks in the group.
  [[nodiscard]] int size() const noexcept;
  /// The device (ordinal) this rank runs on.
  [[nodiscard]] int device() const noexcept;
  /// NCCL's handle, for calls cuactor does not wrap (do not destroy it).
  [[nodiscard]] ncclComm* native() const noexcept;

  /// NCCL's asynchronous error state: ok while healthy; otherwise the error (and the communicator is
  /// aborted, so later calls fail instead of hanging).
  Status check();
  /// Aborts the communicator: pending and future operations fail. Idempotent. Call it from the
  /// device actor's runtime::ActorOptions::on_poisoned for the communicators of that device: a
  /// poisoned context is reset, and NCCL's resources on it go with it.
  void abort() noexcept;

  /// Every rank's `count` elements of `send`, concatenated in rank order into `recv` (size * count),
  /// moved as `algorithm` says.
  Status all_gather(const void* send, void* recv, std::size_t count, DType dtype, cudaStream_t stream,
                    GatherAlgorithm algorithm = GatherAlgorithm::collective);
  /// Sums `send` (size * count elements) over ranks; this rank gets its `count` block in `recv`.
  Status reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype, cudaStream_t stream);
  /// Sums `send` over ranks into `recv` (count elements each; they may alias).
  Status all_reduce(const void* send, void* recv, std::size_t count, DType dtype, cudaStream_t stream);
  /// Block p (`count` elements) of `send` goes to rank p; block p of `recv` comes from rank p.
  Status all_to_all(const void* send, void* recv, std::size_t count, DType dtype, cudaStream_t stream);

  /// Calls `op` on every communicator of `group` (ranks driven by this thread) inside one NCCL group,
  /// which one thread driving several ranks needs (each rank's call would otherwise wait for the
  /// others'). Every member must be healthy first (else `context_poisoned`, nothing issued). When an
  /// `op` or the group fails, every member is aborted (some calls may be out, and their peers would
  /// wait for the rest forever) and the first error is returned.
  static Status grouped(std::span<Communicator> group, const std::function<Status(Communicator&)>& op);

  struct State;  // defined in communicator.cpp

 private:
  explicit Communicator(std::unique_ptr<State> state);
  template <class Enqueue>
  Status collective(std::string_view what, DType dtype, Enqueue&& enqueue);
  std::unique_ptr<State> state_;
};

}  // namespace cuactor::parallel
