/// @file
/// cuactor's sm_90a implicit-GEMM convolution kernel: one producer warpgroup feeding consumer
/// warpgroups through TMA, in two layouts CUTLASS 4.2's only sm_90a conv kernel (one consumer
/// warpgroup, one CTA per multiprocessor) lacks:
/// - cooperative: two consumer warpgroups share a tile, each computing half of its rows. One
///   warpgroup's registers cap CUTLASS's tile at 128x128 and the kernel at about 630 TFLOP/s on an
///   H100; two hold 256x128 or 128x256 tiles.
/// - coresident: one consumer warpgroup, with registers and shared memory sized so that two CTAs
///   share a multiprocessor. One CTA's pipeline fill and epilogue then overlap the other's mainloop,
///   and a grid of up to twice the multiprocessor count runs as one wave, as cuDNN's sm_90 wgrad
///   kernels run two consumer warpgroups on separate tiles.
/// PingpongConvKernel (sm90_conv_pingpong.cuh) adds a third layout over the same mainloop.
#pragma once

#include <cutlass/arch/grid_dependency_control.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/gemm.h>

#include <algorithm>
#include <cute/arch/cluster_sm90.hpp>
#include <cute/tensor.hpp>
#include <cutlass/conv/collective/collective_builder.hpp>
#include <cutlass/conv/detail.hpp>
#include <cutlass/gemm/kernel/sm90_tile_scheduler.hpp>
#include <cutlass/kernel_hardware_info.hpp>
#include <cutlass/pipeline/pipeline.hpp>

namespace cuactor::kernels::sm90 {

/// How cuactor's conv kernels lay out their warpgroups: consumer warpgroups per CTA, CTAs resident per
/// multiprocessor (each holding its share of the registers and shared memory), and whether the
/// consumer warpgroups share a tile by rows (ProducerConsumerConvKernel) or take tiles of their own
/// in turn (PingpongConvKernel).
template <int ConsumerGroups, int ResidentCtas, bool SeparateTiles = false>
struct ConvWarpLayout {
  static_assert(
      (ConsumerGroups == 2 && ResidentCtas == 1) || (ConsumerGroups == 1 && ResidentCtas == 2 && !SeparateTiles),
      "cooperative or pingpong (two consumer warpgroups, one CTA per multiprocessor) or coresident (one, two)");
  static constexpr int kConsumerGroups = ConsumerGroups;
  static constexpr int kResidentCtas = ResidentCtas;
  static constexpr bool kSeparateTiles = SeparateTiles;
  /// Consumer warpgroups whose MMAs cover one tile together.
  static constexpr int kTileGroups = SeparateTiles ? 1 : ConsumerGroups;
  /// Shared memory of one CTA: CUTLASS's 227 KiB for one; for several, a multiprocessor's 228 KiB
  /// shared by the resident CTAs, less the 1 KiB the driver reserves for each.
  static constexpr int kSmemPerCta = ResidentCtas == 1 ? cutlass::gemm::collective::detail::sm90_smem_capacity_bytes
                                                       : (228 * 1024) / ResidentCtas - 1024;
  /// What the stage count may fill: all of it for one CTA (less 128 bytes for the barriers that order
  /// pingpong warpgroups); for several, 1 KiB less, for the pipelines' barriers and the layouts'
  /// alignment beside the stages.
  static constexpr int kStageCapacity =
      ResidentCtas == 1 ? kSmemPerCta - (SeparateTiles ? 128 : 0) : kSmemPerCta - 1024;
};
using CooperativeConvLayout = ConvWarpLayout<2, 1>;
using CoresidentConvLayout = ConvWarpLayout<1, 2>;
using PingpongConvLayout = ConvWarpLayout<2, 1, true>;

/// The kernel schedule tag of cuactor's conv mainloops. CUTLASS's conv dispatch policy rejects its
/// own cooperative tag (no CUTLASS conv kernel runs it), and nothing in the collective reads the
/// tag; ProducerConsumerConvKernel and PingpongConvKernel are what run these mainloops.
struct ProducerConsumerConvSchedule {};

/// The sm_90a implicit-GEMM conv mainloop collective of cuactor's conv kernels: what CUTLASS's conv
/// collective builder assembles, with the MMA atoms laid over the tile's rows (one per consumer
/// warpgroup sharing the tile) and as many pipeline stages as one CTA's shared memory holds beside `carveout_bytes`
/// of epilogue storage.
template <cutlass::conv::Operator Op, class ElementA, class ElementB, class ElementAccumulator, class TileShape,
          class ClusterShape, int carveout_bytes, class WarpLayout>
struct ProducerConsumerConvMainloop {
  static_assert(cute::size<0>(TileShape{}) >= 64 * WarpLayout::kTileGroups,
                "each consumer warpgroup takes 64 rows or more");
  // fp32 tensors run on tf32 tensor cores.
  using ElementAMma = cute::conditional_t<cute::is_same_v<ElementA, float>, cutlass::tfloat32_t, ElementA>;
  using ElementBMma = cute::conditional_t<cute::is_same_v<ElementB, float>, cutlass::tfloat32_t, ElementB>;
  // fprop reads both operands K-major; wgrad both MN-major; dgrad A K-major and B MN-major.
  static constexpr cute::GMMA::Major kMajorA =
      Op == cutlass::conv::Operator::kWgrad ? cute::GMMA::Major::MN : cute::GMMA::Major::K;
  static constexpr cute::GMMA::Major kMajorB =
      Op == cutlass::conv::Operator::kFprop ? cute::GMMA::Major::K : cute::GMMA::Major::MN;
  using TiledMma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<ElementAMma, ElementBMma, ElementAccumulator, TileShape, kMajorA, kMajorB>(),
      cute::Layout<cute::Shape<cute::Int<WarpLayout::kTileGroups>, cute::_1, cute::_1>>{}));
  // wgrad loads A (dy) with tiled TMA and B (x) with im2col TMA; fprop and dgrad the other way round.
  static constexpr bool kWgrad = Op == cutlass::conv::Operator::kWgrad;
  using GmemTiledCopyA =
      cute::conditional_t<kWgrad,
                          decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(
                              cute::shape<1>(ClusterShape{}))),
                          decltype(cutlass::conv::collective::detail::sm90_cluster_shape_to_im2col_tma_atom(
                              cute::shape<1>(ClusterShape{})))>;
  using GmemTiledCopyB =
      cute::conditional_t<kWgrad,
                          decltype(cutlass::conv::collective::detail::sm90_cluster_shape_to_im2col_tma_atom(
                              cute::shape<0>(ClusterShape{}))),
                          decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(
                              cute::shape<0>(ClusterShape{})))>;
  using SmemLayoutAtomA =
      decltype(cutlass::gemm::collective::detail::ss_smem_selector<
               kMajorA, ElementAMma, decltype(cute::get<0>(TileShape{})), decltype(cute::get<2>(TileShape{}))>());
  using SmemLayoutAtomB =
      decltype(cutlass::gemm::collective::detail::ss_smem_selector<
               kMajorB, ElementBMma, decltype(cute::get<1>(TileShape{})), decltype(cute::get<2>(TileShape{}))>());
  static constexpr int kStages =
      cutlass::conv::collective::detail::compute_stage_count_or_override<WarpLayout::kStageCapacity, ElementAMma,
                                                                         ElementBMma, TileShape>(
          cutlass::conv::collective::StageCountAutoCarveout<carveout_bytes>{});
  using SmemLayoutA = decltype(cute::tile_to_shape(
      SmemLayoutAtomA{},
      cute::make_shape(cute::shape<0>(TileShape{}), cute::shape<2>(TileShape{}), cute::Int<kStages>{}),
      cute::Step<cute::_2, cute::_1, cute::_3>{}));
  using SmemLayoutB = decltype(cute::tile_to_shape(
      SmemLayoutAtomB{},
      cute::make_shape(cute::shape<1>(TileShape{}), cute::shape<2>(TileShape{}), cute::Int<kStages>{}),
      cute::Step<cute::_2, cute::_1, cute::_3>{}));
  using DispatchPolicy = cutlass::conv::MainloopSm90TmaGmmaWarpSpecializedImplicitGemm<Op, kStages, 2, ClusterShape,
                                                                                       ProducerConsumerConvSchedule>;
  using CollectiveOp = cutlass::conv::collective::CollectiveConv<
      DispatchPolicy, TileShape, ElementA, ElementB, TiledMma,
      cutlass::conv::collective::detail::Sm90ImplicitGemmTileTraits<GmemTiledCopyA, SmemLayoutA>,
      cutlass::conv::collective::detail::Sm90ImplicitGemmTileTraits<GmemTiledCopyB, SmemLayoutB>>;
};

/// What cuactor's sm_90a conv kernels share: the collectives' types, the arguments, the checks, and
/// the warpgroups' registers (one producer warpgroup issuing TMA, WarpLayout's consumer warpgroups).
template <class ProblemShape_, class CollectiveMainloop_, class CollectiveEpilogue_, class WarpLayout>
struct ConvKernelBase {
  using ProblemShape = ProblemShape_;
  using CollectiveMainloop = CollectiveMainloop_;
  using CollectiveEpilogue = CollectiveEpilogue_;
  using TileShape = typename CollectiveMainloop::TileShape;
  using TiledMma = typename CollectiveMainloop::TiledMma;
  using ArchTag = typename CollectiveMainloop::ArchTag;
  using ElementA = typename CollectiveMainloop::ElementA;
  using StrideA = typename CollectiveMainloop::StrideA;
  using ElementB = typename CollectiveMainloop::ElementB;
  using StrideB = typename CollectiveMainloop::StrideB;
  using DispatchPolicy = typename CollectiveMainloop::DispatchPolicy;
  using ElementAccumulator = typename CollectiveMainloop::ElementAccumulator;
  using ClusterShape = typename DispatchPolicy::ClusterShape;
  using MainloopArguments = typename CollectiveMainloop::Arguments;
  using MainloopParams = typename CollectiveMainloop::Params;
  using ElementC = typename CollectiveEpilogue::ElementC;
  using StrideC = typename CollectiveEpilogue::StrideC;
  using ElementD = typename CollectiveEpilogue::ElementD;
  using StrideD = typename CollectiveEpilogue::StrideD;
  using EpilogueArguments = typename CollectiveEpilogue::Arguments;
  using EpilogueParams = typename CollectiveEpilogue::Params;
  // Tile counts come from the sm_90 tile scheduler's helper (M tiles in x, N tiles in y).
  using GridHelper = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;
  using ProblemShapeMNKL = decltype(cutlass::conv::detail::get_problem_shape_MNKL_helper<CollectiveMainloop>(
      ProblemShape{}, cute::true_type{}));

  static constexpr uint32_t kConsumerThreads = WarpLayout::kConsumerGroups * cutlass::NumThreadsPerWarpGroup;
  static_assert(cute::size(TiledMma{}) == WarpLayout::kTileGroups * cutlass::NumThreadsPerWarpGroup,
                "one MMA warpgroup per consumer warpgroup of a tile");
  static constexpr uint32_t MaxThreadsPerBlock = kConsumerThreads + cutlass::NumThreadsPerWarpGroup;
  static constexpr uint32_t MinBlocksPerMultiprocessor = WarpLayout::kResidentCtas;
  // Registers moved from the producer (TMA issue only) to the consumers (the accumulators): a CTA
  // owns 64 Ki registers over its resident count, launched evenly over its threads; the producer
  // keeps 40 a thread and the consumers take the rest (232 for two, 216 for one of two CTAs).
  static constexpr uint32_t kProducerRegisters = 40;
  static constexpr uint32_t kCtaRegisters = 65536 / WarpLayout::kResidentCtas;
  static constexpr uint32_t kConsumerRegisters =
      std::min<uint32_t>(256, (kCtaRegisters / cutlass::NumThreadsPerWarpGroup - kProducerRegisters) /
                                  WarpLayout::kConsumerGroups / 8 * 8);
  static_assert(kCtaRegisters / MaxThreadsPerBlock >= kProducerRegisters,
                "the launch gives each thread at least the producer's registers");
  // setmaxnreg.inc waits for registers the producer released: what the warpgroups take must fit what
  // the launch gave (per thread, rounded down to 8) times the threads.
  static_assert(kProducerRegisters * cutlass::NumThreadsPerWarpGroup + kConsumerRegisters * kConsumerThreads <=
                    kCtaRegisters / MaxThreadsPerBlock / 8 * 8 * MaxThreadsPerBlock,
                "the warpgroups' registers fit the launch's");

  struct Arguments {
    cutlass::gemm::GemmUniversalMode mode{cutlass::gemm::GemmUniversalMode::kGemm};
    ProblemShape problem_shape{};
    MainloopArguments mainloop{};
    EpilogueArguments epilogue{};
    cutlass::KernelHardwareInfo hw_info{};
  };

  static ProblemShapeMNKL problem_shape_mnkl(const Arguments& args) {
    return cutlass::conv::detail::get_problem_shape_MNKL_helper<CollectiveMainloop>(args.problem_shape,
                                                                                    cute::true_type{});
  }
  static MainloopParams mainloop_params(const Arguments& args, void* workspace) {
    return CollectiveMainloop::to_underlying_arguments(args.problem_shape, args.mainloop, workspace);
  }
  static EpilogueParams epilogue_params(const Arguments& args, void* workspace) {
    return CollectiveEpilogue::to_underlying_arguments(
        cutlass::conv::detail::get_transformed_problem_shape_MNKL(args.problem_shape), args.epilogue, workspace);
  }
  /// Output tiles of a problem: M tiles in x, N tiles in y, rounded up to whole clusters.
  static dim3 tiles_of(const ProblemShapeMNKL& shape) {
    return GridHelper::get_tiled_cta_shape_mnl(cute::append<4>(shape, cute::Int<1>{}), TileShape{}, ClusterShape{});
  }

  /// Mainloop and epilogue storage side by side (never a union: one cooperative consumer warpgroup may
  /// start its epilogue while the other still reads the last mainloop stage, and a pingpong one while
  /// the other runs its mainloop).
  struct TensorStorage {
    typename CollectiveMainloop::TensorStorage mainloop;
    typename CollectiveEpilogue::TensorStorage epilogue;
  };

  using MainloopPipeline = typename CollectiveMainloop::MainloopPipeline;
  using EpiLoadPipeline = typename CollectiveEpilogue::LoadPipeline;
  /// The mainloop pipeline's parameters for a thread that issues its loads (`loads`), consumes its
  /// stages (`consumes`) or neither; `consumers` threads consume each stage.
  CUTLASS_DEVICE static typename MainloopPipeline::Params mainloop_pipeline_params(bool loads, bool consumes,
                                                                                   bool leader, uint32_t consumers,
                                                                                   uint32_t transaction_bytes) {
    typename MainloopPipeline::Params p;
    if (loads) p.role = MainloopPipeline::ThreadCategory::Producer;
    if (consumes) p.role = MainloopPipeline::ThreadCategory::Consumer;
    p.is_leader = leader;
    p.num_consumers = consumers;
    p.transaction_bytes = transaction_bytes;
    return p;
  }
  /// The epilogue source pipeline's parameters, likewise (one warp loads).
  CUTLASS_DEVICE static typename EpiLoadPipeline::Params epi_load_pipeline_params(bool loads, bool consumes,
                                                                                  uint32_t block_rank,
                                                                                  uint32_t consumers,
                                                                                  const EpilogueParams& epilogue) {
    typename EpiLoadPipeline::Params p;
    if (loads) p.role = EpiLoadPipeline::ThreadCategory::Producer;
    if (consumes) p.role = EpiLoadPipeline::ThreadCategory::Consumer;
    p.dst_blockid = block_rank;
    p.producer_arv_count = cutlass::NumThreadsPerWarp;
    p.consumer_arv_count = consumers;
    if constexpr (CollectiveEpilogue::RequiresTransactionBytes) p.transaction_bytes = epilogue.tma_transaction_bytes;
    return p;
  }

  static bool can_implement(const Arguments& args) {
    return CollectiveMainloop::can_implement(args.problem_shape, args.mainloop) &&
           CollectiveEpilogue::can_implement(
               cutlass::conv::detail::get_transformed_problem_shape_MNKL(args.problem_shape), args.epilogue);
  }

  static size_t get_workspace_size(const Arguments&) { return 0; }
  static cutlass::Status initialize_workspace(const Arguments&, void* = nullptr, cudaStream_t = nullptr,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  static dim3 get_block_shape() { return dim3(MaxThreadsPerBlock, 1, 1); }
};

/// The kernel over ProducerConsumerConvMainloop of the same WarpLayout: non-persistent, one CTA per
/// output tile on a grid of (M tiles, N tiles), so its blockIdx.z is free (SlicedConv uses it).
template <class ProblemShape_, class CollectiveMainloop_, class CollectiveEpilogue_, class WarpLayout>
class ProducerConsumerConvKernel
    : public ConvKernelBase<ProblemShape_, CollectiveMainloop_, CollectiveEpilogue_, WarpLayout> {
  using Base = ConvKernelBase<ProblemShape_, CollectiveMainloop_, CollectiveEpilogue_, WarpLayout>;

 public:
  using typename Base::Arguments;
  using typename Base::ClusterShape;
  using typename Base::CollectiveEpilogue;
  using typename Base::CollectiveMainloop;
  using typename Base::ProblemShapeMNKL;
  using typename Base::TiledMma;
  using typename Base::TileShape;
  static_assert(!WarpLayout::kSeparateTiles, "consumer warpgroups on tiles of their own: PingpongConvKernel");
  static constexpr uint32_t kMmaThreads = Base::kConsumerThreads;

  /// The tensors side by side (a coresident kernel could overlay them, but its wgrad epilogue holds
  /// no shared memory), and the pipelines' barriers.
  struct SharedStorage {
    typename Base::TensorStorage tensors;
    struct PipelineStorage : cute::aligned_struct<16, cute::_1> {
      alignas(16) typename CollectiveMainloop::PipelineStorage mainloop;
      alignas(16) typename CollectiveEpilogue::PipelineStorage epi_load;
    } pipelines;
  };
  static constexpr int SharedStorageSize = sizeof(SharedStorage);
  static_assert(SharedStorageSize <= WarpLayout::kSmemPerCta, "the resident CTAs' shared memory fits a multiprocessor");

  struct Params {
    ProblemShapeMNKL problem_shape{};
    typename Base::MainloopParams mainloop{};
    typename Base::EpilogueParams epilogue{};
  };

  static Params to_underlying_arguments(const Arguments& args, void* workspace) {
    return {Base::problem_shape_mnkl(args), Base::mainloop_params(args, workspace),
            Base::epilogue_params(args, workspace)};
  }

  /// One CTA per output tile.
  static dim3 get_grid_shape(const Params& params) { return Base::tiles_of(params.problem_shape); }

  CUTLASS_DEVICE
  void operator()(const Params& params, char* smem) {
    using namespace cute;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    SharedStorage& shared = *reinterpret_cast<SharedStorage*>(smem);
    const int thread_idx = int(threadIdx.x);
    const int lane_idx = cutlass::canonical_lane_idx();
    const int warp_idx = cutlass::canonical_warp_idx_sync();
    const int warp_in_group = warp_idx % cutlass::NumWarpsPerWarpGroup;
    const int thread_in_group = thread_idx % cutlass::NumThreadsPerWarpGroup;
    const bool producer_group = cutlass::canonical_warp_group_idx() == 0;
    const bool load_warp = producer_group && warp_in_group == 0;                   // mainloop and epilogue source loads
    const int mma_thread_idx = thread_idx - int(cutlass::NumThreadsPerWarpGroup);  // [0, kMmaThreads) in the consumers
    const int lane_predicate = cute::elect_one_sync();
    const uint32_t block_rank_in_cluster = cute::block_rank_in_cluster();

    if (warp_idx == 0 && lane_predicate) {
      CollectiveMainloop::prefetch_tma_descriptors(params.mainloop);
      CollectiveEpilogue::prefetch_tma_descriptors(params.epilogue);
    }

    using MainloopPipeline = typename Base::MainloopPipeline;
    MainloopPipeline mainloop_pipeline(
        shared.pipelines.mainloop,
        Base::mainloop_pipeline_params(load_warp, !producer_group, thread_in_group == 0, kMmaThreads,
                                       params.mainloop.tma_transaction_bytes),
        ClusterShape{});
    using EpiLoadPipeline = typename Base::EpiLoadPipeline;
    EpiLoadPipeline epi_load_pipeline(shared.pipelines.epi_load,
                                      Base::epi_load_pipeline_params(load_warp, !producer_group, block_rank_in_cluster,
                                                                     kMmaThreads, params.epilogue));

    using EpiStorePipeline = typename CollectiveEpilogue::StorePipeline;
    typename EpiStorePipeline::Params epi_store_params;
    epi_store_params.always_wait = true;
    EpiStorePipeline epi_store_pipeline(epi_store_params);

    typename CollectiveMainloop::PipelineState mainloop_consumer_state;
    typename CollectiveEpilogue::LoadPipelineState epi_load_consumer_state;
    auto mainloop_producer_state = cutlass::make_producer_start_state<MainloopPipeline>();
    auto epi_load_producer_state = cutlass::make_producer_start_state<EpiLoadPipeline>();
    auto epi_store_producer_state = cutlass::make_producer_start_state<EpiStorePipeline>();

    // The pipelines' barrier initialisation must be visible to every CTA of the cluster.
    if constexpr (size(ClusterShape{}) > 1) {
      cute::cluster_arrive_relaxed();
    } else {
      __syncthreads();
    }

    const auto problem_shape_mnkl = append<4>(params.problem_shape, Int<1>{});
    CollectiveMainloop mainloop;
    CollectiveEpilogue epilogue(params.epilogue, shared.tensors.epilogue);
    auto load_inputs = mainloop.load_init(problem_shape_mnkl, params.mainloop);
    Tensor gA_mkl = get<0>(load_inputs);
    Tensor gB_nkl = get<1>(load_inputs);
    const auto m_coord = idx2crd(int(blockIdx.x), shape<2>(gA_mkl));
    const auto n_coord = idx2crd(int(blockIdx.y), shape<2>(gB_nkl));
    const auto blk_coord = make_coord(m_coord, n_coord, _, Int<0>{});
    auto k_tile_iter = make_coord_iterator(shape<3>(gA_mkl));
    const int k_tile_count = size<3>(gA_mkl);

    if constexpr (size(ClusterShape{}) > 1) cute::cluster_wait();

    if (producer_group) {
      cutlass::arch::warpgroup_reg_dealloc<Base::kProducerRegisters>();
      if (load_warp) {
        cutlass::arch::wait_on_dependent_grids();
        mainloop.load(params.mainloop, mainloop_pipeline, mainloop_producer_state, load_inputs, blk_coord, k_tile_iter,
                      k_tile_count, lane_idx, block_rank_in_cluster, shared.tensors.mainloop);
        mainloop_producer_state.advance(k_tile_count);
        mainloop.load_tail(mainloop_pipeline, mainloop_producer_state);
        if (epilogue.is_producer_load_needed()) {
          __syncwarp();
          epi_load_producer_state =
              epilogue.load(epi_load_pipeline, epi_load_producer_state, problem_shape_mnkl, TileShape{}, blk_coord,
                            TiledMma{}, lane_idx, shared.tensors.epilogue);
          epilogue.load_tail(epi_load_pipeline, epi_load_producer_state);
        }
      }
    } else {
      cutlass::arch::warpgroup_reg_alloc<Base::kConsumerRegisters>();
      TiledMma tiled_mma;
      Tensor accumulators = partition_fragment_C(tiled_mma, take<0, 2>(TileShape{}));
      mainloop.mma(mainloop_pipeline, mainloop_consumer_state, accumulators, k_tile_count, mma_thread_idx,
                   shared.tensors.mainloop, params.mainloop);
      mainloop.mma_tail(mainloop_pipeline, mainloop_consumer_state, k_tile_count);
      cutlass::arch::launch_dependent_grids();
      auto [epi_load_state_next, epi_store_state_next] = epilogue.store(
          epi_load_pipeline, epi_load_consumer_state, epi_store_pipeline, epi_store_producer_state, problem_shape_mnkl,
          TileShape{}, blk_coord, accumulators, tiled_mma, mma_thread_idx, shared.tensors.epilogue);
      epilogue.store_tail(epi_load_pipeline, epi_load_state_next, epi_store_pipeline, epi_store_state_next);
    }
#else
    (void)params;
    (void)smem;
    __trap();  // wgmma and TMA need sm_90a
#endif
  }
};

}  // namespace cuactor::kernels::sm90
