/// @file
/// The expert-parallel mixture-of-experts layer ([M3]). R ranks (devices) each hold T tokens and an
/// equal share of the E experts (rank r owns experts [r E/R, (r+1) E/R)). One forward pass:
///   1. dispatch: every rank gathers all ranks' tokens, top-k expert ids and routing weights
///      (an all-gather by NCCL send / receive: each token crosses to each other rank once, however many
///      of its k experts live there, where an all-to-all of (token, expert) pairs would send it once
///      per expert);
///   2. on each rank, the (token, local expert) pairs are counted, laid out by expert and gathered on
///      the device, and its experts run as the fused expert FFN (kernels/moe_ffn.hpp: grouped GEMM,
///      SwiGLU, grouped GEMM scaled by the routing weight) with the group sizes in device memory;
///   3. combine: each rank sums, per token, its experts' weighted outputs, and an NCCL reduce-scatter
///      adds the ranks' sums and returns every token to the rank it came from.
/// No step reads a count on the host, so the whole forward is capturable: one captured graph serves
/// every routing. One rank runs no communication at all. The price of fixed sizes is memory: the
/// expert buffers are sized for the worst routing (every slot of every gathered token local: R T k
/// rows, since a token may repeat an expert), and a token none of whose experts lives on a rank still
/// crosses to it. A failure after the dispatch was issued aborts the communicator(s): with every rank
/// in this process (run_local) no rank then waits for another's part. NCCL does not carry an abort
/// to other processes, so with one process per GPU (run) the peers of a failed rank wait in the
/// combine until their launcher stops them or they abort their own communicator.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/dtype.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/kernels/moe_ffn.hpp"
#include "cuactor/parallel/communicator.hpp"

namespace cuactor::parallel {

/// What one rank's layer computes.
struct ExpertParallelSpec {
  DType dtype = DType::bf16;  ///< Tokens, weights and output (bf16 or f16).
  int hidden = 0;             ///< H (multiple of 8).
  int ffn = 0;                ///< F, each expert's intermediate width (multiple of 8).
  int experts = 0;            ///< E over all ranks (a multiple of `ranks`).
  int top_k = 0;              ///< k experts per token, 1 <= k <= E.
  int tokens_per_rank = 0;    ///< T rows of x on every rank (pad a short batch with expert id -1).
  int ranks = 1;              ///< R, the communicator's size.
  int rank = 0;               ///< This rank.
  GpuArch arch{9, 0, true};   ///< Best target of this rank's device.
  int sm_count = 0;           ///< Its multiprocessor count.
  int device = 0;             ///< Its ordinal.
  /// Row order of this rank's w_gate_up (a local choice: ranks may differ, and run_local's
  /// workspace_bytes must then cover the largest workspace_size() among them). Interleaved weights
  /// (kernels::interleave_gate_up converts at load time) let the local experts' FFN compute the SwiGLU
  /// in the gate/up GEMM's epilogue where the catalog has that kernel (MoeExpertFfn::fused_swiglu()).
  kernels::GateUpLayout gate_up_layout = kernels::GateUpLayout::stacked;
  friend bool operator==(const ExpertParallelSpec&, const ExpertParallelSpec&) = default;
};

/// Device pointers of one rank's forward pass.
struct ExpertParallelTensors {
  const void* x = nullptr;                   ///< T x H tokens, row-major.
  const std::int32_t* expert_ids = nullptr;  ///< T x k global expert ids; -1 leaves a slot empty.
  const float* routing_weights = nullptr;    ///< T x k weights of those slots.
  const void* w_gate_up = nullptr;           ///< (E/R) x 2F x H: this rank's experts, rows in the spec's GateUpLayout.
  const void* w_down = nullptr;              ///< (E/R) x H x F: this rank's experts.
  void* out = nullptr;                       ///< T x H: sum over slots of weight * FFN_expert(x).
};

/// One rank's expert-parallel MoE layer. Host only, cheap to copy; create() -> workspace_size() ->
/// run(...), which allocates nothing and does not synchronise.
class ExpertParallelMoe {
 public:
  /// How the dispatch gathers every rank's tokens, routing ids and weights: send / receive, as an
  /// all-to-all does, which beat NCCL's all-gather collective on every size measured (see
  /// GatherAlgorithm). The combine is NCCL's reduce-scatter.
  static constexpr GatherAlgorithm kDispatchGather = GatherAlgorithm::point_to_point;

  /// Options for the communicators the layer runs on: 64 channels. With NCCL's own count two H100s
  /// on NVLink moved the layer's dispatch and combine at 0.86 of all_to_all_single's bandwidth on
  /// equal bytes; with 64 and the send / receive gather, at 1.01-1.10 of it.
  static CommunicatorOptions communicator_options() {
    CommunicatorOptions options;
    options.min_ctas = 64;
    return options;
  }

  /// Checks `spec` (`invalid_argument` naming the field and the rule) and plans the local experts'
  /// FFN (`unsupported` without kernels for the dtype on the device).
  static Result<ExpertParallelMoe> create(const ExpertParallelSpec& spec);

  /// The specification.
  [[nodiscard]] const ExpertParallelSpec& spec() const noexcept { return spec_; }
  /// Experts on this rank (E / R) and the first one's global id.
  [[nodiscard]] int local_experts() const noexcept { return spec_.experts / spec_.ranks; }
  [[nodiscard]] int first_local_expert() const noexcept { return spec_.rank * local_experts(); }
  /// Rows of the local experts' buffers: the most (token, local expert) pairs any routing makes.
  [[nodiscard]] std::int64_t capacity_rows() const noexcept { return capacity_rows_; }
  /// Device workspace bytes (256-byte aligned) a forward pass needs.
  [[nodiscard]] std::size_t workspace_size() const noexcept { return workspace_size_; }
  /// The local experts' FFN plan.
  [[nodiscard]] const kernels::MoeExpertFfn& ffn() const noexcept { return ffn_; }
  /// A device int32 in `workspace` counting the slots of the last forward whose expert id was
  /// neither -1 nor in [0, E) (they are skipped); zero when the routing was valid.
  [[nodiscard]] const std::int32_t* routing_error_count(const void* workspace) const noexcept;

  /// One rank's forward pass on `stream`, for one process (or thread) per rank: every rank of `comm`
  /// must call it with the same spec apart from `rank`. Validates the tensors (`invalid_argument`
  /// naming one) and `comm` against the spec.
  Status run(Communicator& comm, const ExpertParallelTensors& tensors, void* workspace, std::size_t workspace_bytes,
             cudaStream_t stream) const;

  /// The forward pass of every rank, for one thread driving them all: layers[i], tensors[i],
  /// workspaces[i] and streams[i] belong to comms[i], which must be rank i. The communication of
  /// all ranks is issued as NCCL groups.
  static Status run_local(std::span<const ExpertParallelMoe> layers, std::span<Communicator> comms,
                          std::span<const ExpertParallelTensors> tensors, std::span<void* const> workspaces,
                          std::size_t workspace_bytes, std::span<const cudaStream_t> streams);

 private:
  /// Where the buffers of one forward pass live in the workspace.
  struct Buffers;
  ExpertParallelMoe(ExpertParallelSpec spec, kernels::MoeExpertFfn ffn);
  [[nodiscard]] Status check(const Communicator& comm, const ExpertParallelTensors& tensors, const void* workspace,
                             std::size_t workspace_bytes) const;
  [[nodiscard]] Buffers buffers(void* workspace, const ExpertParallelTensors& tensors) const;
  Status dispatch(Communicator& comm, const ExpertParallelTensors& tensors, const Buffers& b,
                  cudaStream_t stream) const;
  Status compute(const ExpertParallelTensors& tensors, const Buffers& b, cudaStream_t stream) const;
  Status combine(Communicator& comm, const ExpertParallelTensors& tensors, const Buffers& b, cudaStream_t stream) const;

  ExpertParallelSpec spec_;
  kernels::MoeExpertFfn ffn_;
  std::int64_t capacity_rows_ = 0;
  // Byte offsets in the workspace (256-aligned).
  std::size_t gathered_x_ = 0, gathered_ids_ = 0, gathered_weights_ = 0, meta_ = 0, pair_rows_ = 0, row_tokens_ = 0,
              row_weights_ = 0, expert_x_ = 0, expert_y_ = 0, partial_ = 0, ffn_workspace_ = 0, workspace_size_ = 0;
};

}  // namespace cuactor::parallel
