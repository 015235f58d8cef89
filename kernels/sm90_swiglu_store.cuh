/// @file
/// The root visitor of swiglu epilogue trees ([K8]): it pairs adjacent output columns of a grouped
/// GEMM, D[m, j] = silu(x[m, 2j]) * x[m, 2j + 1], and stores D (N / 2 columns) itself, so the
/// collective runs with a void D (no shared-memory D stage, no TMA store). With gate and up weight
/// rows interleaved (row 2j gate j, row 2j + 1 up j), this is the expert FFN's SwiGLU fused into its
/// first GEMM: the T x 2F intermediate is never written.
///
/// Why the pairs are in one thread: a warpgroup MMA accumulator gives each thread its values as
/// pairs of adjacent columns of one row (one 32-bit register of two 16-bit outputs after
/// conversion), and the epilogue's register-to-shared copy keeps those pairs as elements 2i and
/// 2i + 1 of the fragment a visitor sees. get_consumer_store_callbacks() asserts that statically.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/numeric_conversion.h>

#include <cstdint>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp>

#include "kernels/swiglu_math.cuh"

namespace cuactor::kernels::sm90::evt {

/// Stores silu(x[m, 2j]) * x[m, 2j + 1] to D[m, j] of each group, D's pointer and leading dimension
/// read per group from device arrays (the grouped ABI's ptr_d and ld_d; the tile's l coordinate is
/// the group). Registers only: visit() converts each pair, end_loop() stores the subtile's results,
/// predicated on the group's M and N.
template <class Element, cutlass::FloatRoundStyle Round>
struct SwigluStore {
  /// The element the collective takes for its (void) D's register and copy types.
  using ElementAux = Element;

  struct SharedStorage {};
  struct Arguments {
    void* const* group_d = nullptr;      ///< D of each group (N / 2 columns).
    const int64_t* group_ldd = nullptr;  ///< D's leading dimension per group.
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.group_d != nullptr && args.group_ldd != nullptr;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE SwigluStore() {}
  CUTLASS_HOST_DEVICE SwigluStore(Params const& params, SharedStorage const&) : params_ptr(&params) {}

  Params const* params_ptr = nullptr;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }

  template <class CoordTensor, int Pairs>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(CoordTensor&& coords, Element* d, int64_t ldd, int m, int n)
        : coords(cute::forward<CoordTensor>(coords)), d(d), ldd(ldd), m(m), n(n) {}

    CoordTensor coords;                  ///< (CPY,CPY_M,CPY_N,EPI_M,EPI_N): (m, n, l) of each value.
    cutlass::Array<Element, Pairs> out;  ///< One subtile's results, pair i from values 2i and 2i + 1.
    Element* d;
    int64_t ldd;
    int m, n;

    template <class ElementAccumulator, class ElementInput, int FragmentSize>
    CUTLASS_DEVICE auto visit(cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int, int,
                              cutlass::Array<ElementInput, FragmentSize> const& x) {
      static_assert(FragmentSize % 2 == 0, "swiglu pairs fragment values 2i and 2i + 1");
      cutlass::NumericConverter<Element, float, Round> convert;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize / 2; ++i) {
        const float g = static_cast<float>(x[2 * i]), u = static_cast<float>(x[2 * i + 1]);
        out[epi_v * (FragmentSize / 2) + i] = convert(fast_silu(g) * u);
      }
      return x;
    }

    CUTLASS_DEVICE void end_loop(int epi_m, int epi_n) {
      auto subtile = cute::coalesce(coords(cute::_, cute::_, cute::_, epi_m, epi_n));
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < Pairs; ++i) {
        const auto c = subtile(2 * i);
        const int row = cute::get<0>(c), col = cute::get<1>(c);
        if (row < m && col < n) d[row * ldd + col / 2] = out[i];
      }
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    auto [M, N, K, L] = args.problem_shape_mnkl;
    const int group = static_cast<int>(cute::get<3>(args.tile_coord_mnkl));
    auto coords = cutlass::epilogue::fusion::detail::sm90_partition_for_epilogue<ReferenceSrc>(
        cute::make_identity_tensor(cute::make_shape(M, N, L)), args.tile_shape_mnk, args.tile_coord_mnkl, args.epi_tile,
        args.tiled_copy, args.thread_idx);
    // The pairing rule of the file comment, checked on the layout: the first mode of a subtile's
    // values steps one column (E<1>) over an even count, so values 2i and 2i + 1 are (m, n), (m, n + 1).
    using Subtile = decltype(cute::coalesce(coords(cute::_, cute::_, cute::_, cute::_0{}, cute::_0{})).layout());
    static_assert(decltype(cute::size<0>(Subtile{}))::value % 2 == 0 &&
                      cute::is_same_v<cute::remove_cvref_t<decltype(cute::stride<0>(Subtile{}))>, cute::E<1>>,
                  "the epilogue fragment does not hold adjacent column pairs");
    constexpr int kPairs = decltype(cute::size(Subtile{}))::value / 2;
    auto* d = static_cast<Element*>(params_ptr->group_d[group]);
    return ConsumerStoreCallbacks<decltype(coords), kPairs>(std::move(coords), d, params_ptr->group_ldd[group],
                                                            static_cast<int>(M), static_cast<int>(N));
  }
};

}  // namespace cuactor::kernels::sm90::evt
