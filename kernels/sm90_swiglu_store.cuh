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

#include "kernels/activations.cuh"

namespace cuactor::kernels::sm90::evt {

/// Whether a subtile's coordinate layout is the warpgroup MMA accumulator's, (2, 2, J) : (1 column,
/// 8 rows, 8 columns) with J a multiple of 4, and D 16-bit: the quad-transposed 8-byte stores of
/// SwigluStore rely on both (and on the hardware's lane order within a quad, fixed for sm_90).
template <class SubtileLayout, class Element>
inline constexpr bool kQuadStores = [] {
  using S = SubtileLayout;
  if constexpr (sizeof(Element) != 2 || decltype(cute::rank(S{}))::value != 3) {
    return false;
  } else {
    return decltype(cute::size<0>(S{}))::value == 2 && decltype(cute::size<1>(S{}))::value == 2 &&
           decltype(cute::size<2>(S{}))::value % 4 == 0 &&
           cute::is_same_v<cute::remove_cvref_t<decltype(cute::stride<0>(S{}))>, cute::ScaledBasis<cute::C<1>, 1>> &&
           cute::is_same_v<cute::remove_cvref_t<decltype(cute::stride<1>(S{}))>, cute::ScaledBasis<cute::C<8>, 0>> &&
           cute::is_same_v<cute::remove_cvref_t<decltype(cute::stride<2>(S{}))>, cute::ScaledBasis<cute::C<8>, 1>>;
  }
}();

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
      if constexpr (kQuadStores<decltype(subtile.layout()), Element>) {
        store_quad_transposed(subtile);
      } else {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < Pairs; ++i) {
          const auto c = subtile(2 * i);
          const int row = cute::get<0>(c), col = cute::get<1>(c);
          if (row < m && col < n) d[row * ldd + col / 2] = out[i];
        }
      }
    }

    /// Pair i = h + 2 * j holds row half h (rows r, r + 8) and column group j (columns 8j + 2t,
    /// 8j + 2t + 1 for quad lane t = lane % 4), so thread t holds the outputs 4j + t of each row:
    /// a 2-byte store each, four rows of a warp per 32-byte sector. Transposing 4 x 4 blocks within
    /// the quad (two shuffles of packed pairs) gives lane t the outputs 16a + 4t .. 16a + 4t + 3 of
    /// block a: one 8-byte store, and a quad writes one whole sector per row.
    template <class Subtile>
    CUTLASS_DEVICE void store_quad_transposed(Subtile const& subtile) {
      const int t = static_cast<int>(threadIdx.x) % 4;
      const bool t_bit1 = (t & 2) != 0, t_bit0 = (t & 1) != 0;
      const int half_n = n / 2;
      CUTLASS_PRAGMA_UNROLL
      for (int h = 0; h < 2; ++h) {
        CUTLASS_PRAGMA_UNROLL
        for (int a = 0; a < Pairs / 8; ++a) {
          // m_k: this lane's output 16a + 4k + t (pair h + 2(4a + k)).
          uint32_t m_k[4];
          CUTLASS_PRAGMA_UNROLL
          for (int k = 0; k < 4; ++k) m_k[k] = static_cast<Element>(out[h + 2 * (4 * a + k)]).raw();
          // Stage 1, lanes t and t ^ 2: keep the pair of k with bit 1 equal to t's, send the other.
          const uint32_t low = m_k[0] | m_k[1] << 16, high = m_k[2] | m_k[3] << 16;
          const uint32_t keep = t_bit1 ? high : low;
          const uint32_t from2 = __shfl_xor_sync(0xffffffffu, t_bit1 ? low : high, 2);
          // Now keep = M[t][2 t_1 + c] and from2 = M[t ^ 2][2 t_1 + c], c = 0, 1 (M[s][k]: lane s's m_k).
          // Stage 2, lanes t and t ^ 1: keep column k = t, send column t ^ 1.
          const uint32_t mine = t_bit0 ? keep >> 16 : keep & 0xffffu;     // M[t][t]
          const uint32_t mine2 = t_bit0 ? from2 >> 16 : from2 & 0xffffu;  // M[t ^ 2][t]
          const uint32_t send = t_bit0 ? (keep & 0xffffu) | (from2 << 16) : (keep >> 16) | (from2 & 0xffff0000u);
          const uint32_t from1 = __shfl_xor_sync(0xffffffffu, send, 1);  // M[t ^ 1][t] | M[t ^ 3][t] << 16
          // Lane t's outputs 16a + 4t + s are M[s][t], s = 0..3.
          const uint32_t own_half = t_bit0 ? (from1 & 0xffffu) | (mine << 16) : mine | (from1 << 16);
          const uint32_t other_half = t_bit0 ? (from1 >> 16) | (mine2 << 16) : mine2 | (from1 & 0xffff0000u);
          const uint2 four = t_bit1 ? make_uint2(other_half, own_half) : make_uint2(own_half, other_half);
          const auto c = subtile(2 * (h + 2 * (4 * a)));  // lane t's pair of k = 0: output 16a + t
          const int row = cute::get<0>(c), first = cute::get<1>(c) / 2 + 3 * t;
          if (row >= m || first >= half_n) continue;
          Element* at = d + row * ldd + first;
          // The plan's rules make D rows 16-byte aligned and N / 2 a multiple of 8 (validate_device_sized
          // and check_operand, grouped_gemm.cpp), so four outputs from a multiple of 4 are whole and
          // aligned; the element-wise path is a guard, unreachable through a validated plan.
          if (first + 4 <= half_n && reinterpret_cast<uintptr_t>(at) % 8 == 0) {
            *reinterpret_cast<uint2*>(at) = four;
          } else {
            const uint32_t words[2] = {four.x, four.y};
            for (int s = 0; s < 4 && first + s < half_n; ++s)
              at[s] = Element::bitcast(static_cast<uint16_t>(words[s / 2] >> (16 * (s % 2))));
          }
        }
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
