/// @file
/// The wgrad epilogue: CUTLASS's shared-memory-free sm_90 epilogue (the one CUTLASS's own sm_90 wgrad
/// uses) with a cheaper store of the filter gradient's tiles.
///
/// A wgrad tile covers output channels [k0, k0 + tile M) and input channels [c0, c0 + tile N) of one
/// filter tap, so in a packed KRSC filter it is a plain row-major block: rows a filter apart, columns
/// contiguous. CUTLASS addresses each element through the hierarchical (K, (C, S, R)) layout and
/// predicates each one; measured on an H100 that made a lone wgrad kernel's fixed cost (its time at
/// zero reduction steps) about 3 us above cuDNN's at 64x128 tiles, growing with the tile. Here the
/// tile's base address is computed once, elements are addressed with one dynamic stride, pairs of
/// adjacent columns (the wgmma accumulator layout holds them in consecutive registers) go out as one
/// store, and only tiles at the filter's edges are predicated.
#pragma once

#include <cutlass/cutlass.h>

#include <cute/tensor.hpp>

namespace cuactor::kernels::sm90 {

/// `Direct` (CUTLASS's Sm90TmaWarpSpecializedAdapter over DefaultEpilogue) storing wgrad tiles.
template <class Direct>
class FilterTileEpilogue : public Direct {
 public:
  using typename Direct::LoadPipeline;
  using typename Direct::LoadPipelineState;
  using typename Direct::Params;
  using typename Direct::StorePipeline;
  using typename Direct::StorePipelineState;
  using typename Direct::TensorStorage;
  using typename Direct::ThreadEpilogueOp;
  using ElementC = typename Direct::GmemElementC;
  using ElementD = typename Direct::ElementD;

  CUTLASS_HOST_DEVICE
  FilterTileEpilogue(const Params& params, TensorStorage& shared)
      : Direct(params, shared), params_(params), op_(params.thread) {}

  template <class ProblemShapeMNKL, class TileShapeMNK, class TileCoordMNKL, class AccEngine, class AccLayout,
            class TiledMma>
  CUTLASS_DEVICE auto store(LoadPipeline, LoadPipelineState load_state, StorePipeline, StorePipelineState store_state,
                            ProblemShapeMNKL problem_shape_mnkl, TileShapeMNK, TileCoordMNKL tile_coord,
                            const cute::Tensor<AccEngine, AccLayout>& accumulators, TiledMma tiled_mma, int thread_idx,
                            TensorStorage&) {
    using namespace cute;
    constexpr int kTileM = size<0>(TileShapeMNK{});
    constexpr int kTileN = size<1>(TileShapeMNK{});
    // (K, (C, S, R)): the tile's output channels, input channels and tap.
    const int k0 = static_cast<int>(get<0>(tile_coord)) * kTileM;
    const auto n = get<1>(tile_coord);
    const int c0 = static_cast<int>(get<0>(n)) * kTileN;
    const int rows = static_cast<int>(get<0>(problem_shape_mnkl)) - k0;
    const int cols = static_cast<int>(get<1, 0>(problem_shape_mnkl)) - c0;
    if (rows <= 0 || cols <= 0) return make_tuple(load_state, store_state);
    const auto tile_offset = [&](const auto& stride) {
      return static_cast<int64_t>(k0) * get<0>(stride) + static_cast<int64_t>(get<1>(n)) * get<1, 1>(stride) +
             static_cast<int64_t>(get<2>(n)) * get<1, 2>(stride) + c0;
    };
    const auto tile_layout = [&](const auto& stride) {
      return make_layout(make_shape(Int<kTileM>{}, Int<kTileN>{}), make_stride(get<0>(stride), Int<1>{}));
    };
    auto thread_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor tDgD = thread_mma.partition_C(
        make_tensor(make_gmem_ptr(params_.ptr_D + tile_offset(params_.dD)), tile_layout(params_.dD)));
    Tensor tDcD = thread_mma.partition_C(make_identity_tensor(make_shape(Int<kTileM>{}, Int<kTileN>{})));
    static_assert(decltype(size(accumulators))::value % 2 == 0, "accumulators in column pairs");
    static_assert(is_constant<1, decltype(stride<0, 0>(tDgD.layout()))>::value,
                  "a thread's consecutive accumulators are adjacent columns");
    const bool whole = rows >= kTileM && cols >= kTileN;
    const bool source = op_.is_source_needed();
    Tensor tDgC = thread_mma.partition_C(
        make_tensor(make_gmem_ptr(params_.ptr_C + (source ? tile_offset(params_.dC) : 0)), tile_layout(params_.dC)));
    using PairD = cutlass::Array<ElementD, 2>;
    using PairC = cutlass::Array<ElementC, 2>;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accumulators); i += 2) {
      // Elements i and i + 1 are adjacent columns of one row; C is a multiple of 8, so both lie
      // inside the filter or both outside, and the pair is aligned.
      if (!whole && !(get<0>(tDcD(i)) < rows && get<1>(tDcD(i)) < cols)) continue;
      PairD out;
      if (source) {
        const PairC c = *reinterpret_cast<const PairC*>(&tDgC(i));
        out[0] = op_(accumulators(i), c[0]);
        out[1] = op_(accumulators(i + 1), c[1]);
      } else {
        out[0] = op_(accumulators(i));
        out[1] = op_(accumulators(i + 1));
      }
      *reinterpret_cast<PairD*>(&tDgD(i)) = out;
    }
    return make_tuple(load_state, store_state);
  }

 private:
  Params params_;
  ThreadEpilogueOp op_;
};

}  // namespace cuactor::kernels::sm90
