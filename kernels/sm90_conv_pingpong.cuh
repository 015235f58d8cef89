/// @file
/// cuactor's persistent sm_90a implicit-GEMM convolution kernel with pingpong consumers: one
/// producer warpgroup loads the tiles of a CTA one after another into one pipeline, and two consumer
/// warpgroups take those tiles in turn, each with accumulators of its own. Ordered barriers let one
/// warpgroup's MMAs run while the other runs its epilogue, so a tile's epilogue and the pipeline's
/// refill hide behind the other tile's mainloop: what short reductions (a few k-tiles a tile) lose
/// in the one-tile-per-CTA kernels. This is how cuDNN's sm_90 wgrad kernels run (two consumer
/// warpgroups on separate tiles over a grid of at most one CTA per multiprocessor).
///
/// The grid covers a list of problems (SlicedConv's slices of one reduction, or one problem):
/// their tiles are numbered one problem after another, M tiles fastest, and CTA b takes tiles b,
/// b + G, b + 2G, ... of a grid of G CTAs, its consumer warpgroups alternating.
#pragma once

#include <cutlass/arch/grid_dependency_control.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>

#include <algorithm>
#include <cute/tensor.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include "kernels/sm90_conv_cooperative.cuh"

namespace cuactor::kernels::sm90 {

/// The persistent pingpong kernel over ProducerConsumerConvMainloop of PingpongConvLayout.
template <class ProblemShape_, class CollectiveMainloop_, class CollectiveEpilogue_>
class PingpongConvKernel
    : public ConvKernelBase<ProblemShape_, CollectiveMainloop_, CollectiveEpilogue_, PingpongConvLayout> {
  using Base = ConvKernelBase<ProblemShape_, CollectiveMainloop_, CollectiveEpilogue_, PingpongConvLayout>;

 public:
  using typename Base::Arguments;
  using typename Base::ClusterShape;
  using typename Base::CollectiveEpilogue;
  using typename Base::CollectiveMainloop;
  using typename Base::ProblemShapeMNKL;
  using typename Base::TiledMma;
  using typename Base::TileShape;
  static_assert(cute::size(ClusterShape{}) == 1, "pingpong conv kernels run without clusters");
  static_assert(cute::size(TiledMma{}) == cutlass::NumThreadsPerWarpGroup, "each consumer warpgroup owns its tile");

  /// Two ordered stages per warpgroup and tile: its MMAs, then its epilogue.
  using MathOrderBarrier = cutlass::OrderedSequenceBarrier<2, 2>;

  /// The mainloop's stages, and one epilogue's storage that the warpgroups use in turn (the order
  /// barrier's epilogue stage, and store_tail waiting for the TMA stores, keep them apart).
  struct SharedStorage {
    typename Base::TensorStorage tensors;
    struct PipelineStorage : cute::aligned_struct<16, cute::_1> {
      alignas(16) typename CollectiveMainloop::PipelineStorage mainloop;
      alignas(16) typename CollectiveEpilogue::PipelineStorage epi_load;
      alignas(16) typename MathOrderBarrier::SharedStorage math_order;
    } pipelines;
  };
  static constexpr int SharedStorageSize = sizeof(SharedStorage);
  static_assert(SharedStorageSize <= PingpongConvLayout::kSmemPerCta, "the shared storage fits a multiprocessor");

  /// One problem: its collectives' parameters, its tile counts, and the most CTAs a grid of it takes.
  struct Params {
    ProblemShapeMNKL problem_shape{};
    typename Base::MainloopParams mainloop{};
    typename Base::EpilogueParams epilogue{};
    int tiles_m = 0;
    int tiles = 0;
    int max_ctas = 0;
  };

  static Params to_underlying_arguments(const Arguments& args, void* workspace) {
    Params p{Base::problem_shape_mnkl(args), Base::mainloop_params(args, workspace),
             Base::epilogue_params(args, workspace)};
    const dim3 tiles = Base::tiles_of(p.problem_shape);
    p.tiles_m = static_cast<int>(tiles.x);
    p.tiles = static_cast<int>(tiles.x * tiles.y);
    p.max_ctas = std::max(1, args.hw_info.sm_count);
    return p;
  }

  /// A persistent grid over `count` problems: one CTA per tile up to one per multiprocessor.
  static dim3 grid_of(const Params* problems, int count) {
    long long tiles = 0;
    for (int i = 0; i < count; ++i) tiles += problems[i].tiles;
    return dim3(static_cast<unsigned>(std::max(1LL, std::min<long long>(tiles, problems[0].max_ctas))), 1, 1);
  }
  static dim3 get_grid_shape(const Params& params) { return grid_of(&params, 1); }

  CUTLASS_DEVICE
  void operator()(const Params& params, char* smem) { run(&params, 1, smem); }

  /// Computes every tile of `count` problems (parameters in the kernel's parameter space: the TMA
  /// descriptors are read from there).
  CUTLASS_DEVICE
  void run(const Params* problems, int count, char* smem) {
    using namespace cute;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    SharedStorage& shared = *reinterpret_cast<SharedStorage*>(smem);
    const int thread_idx = int(threadIdx.x);
    const int lane_idx = cutlass::canonical_lane_idx();
    const int warp_idx = cutlass::canonical_warp_idx_sync();
    const int warp_in_group = warp_idx % cutlass::NumWarpsPerWarpGroup;
    const int thread_in_group = thread_idx % cutlass::NumThreadsPerWarpGroup;
    const int group = cutlass::canonical_warp_group_idx();  // 0: producer; 1, 2: consumers
    const bool producer_group = group == 0;
    const bool mainloop_warp = producer_group && warp_in_group == 0;
    const bool epilogue_warp = producer_group && warp_in_group == 1;
    const int lane_predicate = cute::elect_one_sync();

    if (warp_idx == 0 && lane_predicate) {
      for (int i = 0; i < count; ++i) {
        CollectiveMainloop::prefetch_tma_descriptors(problems[i].mainloop);
        CollectiveEpilogue::prefetch_tma_descriptors(problems[i].epilogue);
      }
    }

    // Each mainloop stage feeds one warpgroup; every problem's tiles load the same bytes.
    using MainloopPipeline = typename Base::MainloopPipeline;
    MainloopPipeline mainloop_pipeline(
        shared.pipelines.mainloop,
        Base::mainloop_pipeline_params(mainloop_warp, !producer_group, thread_in_group == 0,
                                       cutlass::NumThreadsPerWarpGroup, problems[0].mainloop.tma_transaction_bytes),
        ClusterShape{});
    using EpiLoadPipeline = typename Base::EpiLoadPipeline;
    EpiLoadPipeline epi_load_pipeline(
        shared.pipelines.epi_load,
        Base::epi_load_pipeline_params(epilogue_warp, !producer_group, 0, cutlass::NumThreadsPerWarpGroup,
                                       problems[0].epilogue));

    using EpiStorePipeline = typename CollectiveEpilogue::StorePipeline;
    typename EpiStorePipeline::Params epi_store_params;
    epi_store_params.always_wait = true;
    EpiStorePipeline epi_store_pipeline(epi_store_params);

    typename MathOrderBarrier::Params order_params;
    order_params.group_id = producer_group ? 0 : group - 1;  // the producer never waits or arrives
    order_params.group_size = cutlass::NumThreadsPerWarpGroup;
    MathOrderBarrier math_order(shared.pipelines.math_order, order_params);

    __syncthreads();  // the barriers' initialisation is visible to every warp

    int total = 0;
    for (int i = 0; i < count; ++i) total += problems[i].tiles;
    const int ctas = int(gridDim.x);
    CollectiveMainloop mainloop;

    // Tile t: its problem's index, the problem's shape and TMA tensors, and the tile's coordinate.
    auto tile_at = [&](int t) {
      int problem = 0;
      while (problem + 1 < count && t >= problems[problem].tiles) {
        t -= problems[problem].tiles;
        ++problem;
      }
      const Params& p = problems[problem];
      const auto shape_mnkl = append<4>(p.problem_shape, Int<1>{});
      auto load_inputs = mainloop.load_init(shape_mnkl, p.mainloop);
      const auto blk_coord = make_coord(idx2crd(t % p.tiles_m, shape<2>(get<0>(load_inputs))),
                                        idx2crd(t / p.tiles_m, shape<2>(get<1>(load_inputs))), _, Int<0>{});
      return cute::make_tuple(problem, shape_mnkl, load_inputs, blk_coord);
    };
    auto k_tiles = [&](const auto& load_inputs) { return int(size<3>(get<0>(load_inputs))); };

    if (producer_group) {
      cutlass::arch::warpgroup_reg_dealloc<Base::kProducerRegisters>();
      if (mainloop_warp) {
        cutlass::arch::wait_on_dependent_grids();
        auto state = cutlass::make_producer_start_state<MainloopPipeline>();
        for (int t = int(blockIdx.x); t < total; t += ctas) {
          auto [problem, shape_mnkl, load_inputs, blk_coord] = tile_at(t);
          const int k_tile_count = k_tiles(load_inputs);
          mainloop.load(problems[problem].mainloop, mainloop_pipeline, state, load_inputs, blk_coord,
                        make_coord_iterator(shape<3>(get<0>(load_inputs))), k_tile_count, lane_idx, 0,
                        shared.tensors.mainloop);
          state.advance(k_tile_count);
        }
        mainloop.load_tail(mainloop_pipeline, state);
      } else if (epilogue_warp) {
        cutlass::arch::wait_on_dependent_grids();  // C may be the previous kernel's output
        auto state = cutlass::make_producer_start_state<EpiLoadPipeline>();
        bool loaded = false;
        for (int t = int(blockIdx.x); t < total; t += ctas) {
          auto [problem, shape_mnkl, load_inputs, blk_coord] = tile_at(t);
          CollectiveEpilogue epilogue(problems[problem].epilogue, shared.tensors.epilogue);
          if (!epilogue.is_producer_load_needed()) continue;
          state = epilogue.load(epi_load_pipeline, state, shape_mnkl, TileShape{}, blk_coord, TiledMma{}, lane_idx,
                                shared.tensors.epilogue);
          loaded = true;
        }
        if (loaded) {
          CollectiveEpilogue epilogue(problems[0].epilogue, shared.tensors.epilogue);
          epilogue.load_tail(epi_load_pipeline, state);
        }
      }
    } else {
      cutlass::arch::warpgroup_reg_alloc<Base::kConsumerRegisters>();
      constexpr int kLoadIncrement = CollectiveEpilogue::get_load_pipe_increment(TileShape{});
      constexpr int kStoreIncrement = CollectiveEpilogue::get_store_pipe_increment(TileShape{});
      typename CollectiveMainloop::PipelineState mainloop_state;
      typename CollectiveEpilogue::LoadPipelineState epi_load_state;
      auto epi_store_state = cutlass::make_producer_start_state<EpiStorePipeline>();
      TiledMma tiled_mma;
      int t = int(blockIdx.x);
      if (group == 2 && t + ctas >= total) cutlass::arch::launch_dependent_grids();  // no tile of its own
      if (group == 2) {  // the second warpgroup starts after the first one's tile
        mainloop_state.advance(k_tiles(get<2>(tile_at(t))));
        epi_load_state.advance(kLoadIncrement);
        epi_store_state.advance(kStoreIncrement);
        t += ctas;
      }
      for (; t < total; t += 2 * ctas) {
        auto [problem, shape_mnkl, load_inputs, blk_coord] = tile_at(t);
        const Params& p = problems[problem];
        const int k_tile_count = k_tiles(load_inputs);
        Tensor accumulators = partition_fragment_C(tiled_mma, take<0, 2>(TileShape{}));

        math_order.wait();  // the other warpgroup's MMAs of the previous tile are issued
        mainloop.mma(mainloop_pipeline, mainloop_state, accumulators, k_tile_count, thread_in_group,
                     shared.tensors.mainloop, p.mainloop);
        math_order.arrive();
        mainloop.mma_tail(mainloop_pipeline, mainloop_state, k_tile_count);
        // Past this tile's stages and the other warpgroup's next tile's.
        mainloop_state.advance(k_tile_count);
        if (t + ctas < total) mainloop_state.advance(k_tiles(get<2>(tile_at(t + ctas))));
        if (t + 2 * ctas >= total) cutlass::arch::launch_dependent_grids();

        math_order.wait();  // the other warpgroup's epilogue is done with the shared storage
        CollectiveEpilogue epilogue(p.epilogue, shared.tensors.epilogue);
        auto [load_next, store_next] =
            epilogue.store(epi_load_pipeline, epi_load_state, epi_store_pipeline, epi_store_state, shape_mnkl,
                           TileShape{}, blk_coord, accumulators, tiled_mma, thread_in_group, shared.tensors.epilogue);
        // store_tail waits for this warpgroup's TMA stores before the other one may reuse the storage.
        auto [load_after, store_after] =
            epilogue.store_tail(epi_load_pipeline, load_next, epi_store_pipeline, store_next);
        epi_load_state = load_after;
        epi_store_state = store_after;
        epi_load_state.advance(kLoadIncrement);
        epi_store_state.advance(kStoreIncrement);
        math_order.arrive();
      }
    }
#else
    (void)problems;
    (void)count;
    (void)smem;
    __trap();  // wgmma and TMA need sm_90a
#endif
  }
};

}  // namespace cuactor::kernels::sm90
