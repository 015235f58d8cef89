/// @file
/// Epilogue trees ([K8]) as CUTLASS sm_90a visitor trees: each node tag of gemm_tags.cuh maps to
/// one Sm90EVT node, and the same recursion builds the node's run-time arguments from the ABI's
/// cuactor_epilogue_args, so the C++ type and its arguments cannot drift apart. Inner nodes compute
/// in f32; the root converts to D's element type. Used by the dense (sm90_gemm.cuh) and grouped
/// (sm90_grouped_gemm.cuh) instantiation templates.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/functional.h>

#include <cstdint>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_store_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp>
#include <type_traits>

#include "kernels/activations.cuh"
#include "kernels/gemm_tags.cuh"
#include "kernels/instance_abi.h"
#include "kernels/sm90_swiglu_store.cuh"

namespace cuactor::kernels::sm90 {

/// A CuTe (M|N, K|N, L) stride with the leading dimension `ld` in the dynamic one of the first two
/// modes (the other is the static unit stride) and `batch_stride` in the third.
template <class Stride>
Stride make_stride(int64_t ld, int64_t batch_stride) {
  Stride s{};
  if constexpr (cute::is_static_v<std::remove_cvref_t<decltype(cute::get<0>(s))>>)
    cute::get<1>(s) = ld;
  else
    cute::get<0>(s) = ld;
  cute::get<2>(s) = batch_stride;
  return s;
}

}  // namespace cuactor::kernels::sm90

namespace cuactor::kernels::sm90::evt {

namespace fusion = cutlass::epilogue::fusion;
inline constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

/// True for the preset epilogue tags (false for trees).
template <class Epilogue>
inline constexpr bool kIsPreset =
    std::is_same_v<Epilogue, tags::linear_combination> || std::is_same_v<Epilogue, tags::scaled_linear_combination>;

/// What the leaves of a tree read: C's element type (C, the bias vectors and the aux matrix), the CTA
/// tile (per-column vectors are staged per tile in shared memory), D's CuTe stride (the aux matrix
/// shares it), and whether vectors and alpha/beta are per group (grouped GEMM: a device array of one
/// vector pointer per group, scalars indexed by group).
template <class ElementC_, class TileShape_, class StrideD_, bool PerGroup_>
struct Context {
  using ElementC = ElementC_;
  using TileShape = TileShape_;
  using StrideD = StrideD_;
  static constexpr bool kPerGroup = PerGroup_;
};

/// The run-time values a tree reads, gathered from a family's ABI arguments.
struct Operands {
  const cuactor_epilogue_args* e = nullptr;
  float alpha = 1.0f;
  float beta = 0.0f;
  const float* alpha_ptr = nullptr;
  const float* beta_ptr = nullptr;
  int64_t m = 0;                       ///< Rows per batch (dense): the batch stride of the row sums.
  int64_t ldd = 0;                     ///< D's leading dimension (dense), shared by the aux matrix.
  int64_t batch_stride_d = 0;          ///< D's batch stride (dense), shared by the aux matrix.
  void* const* group_d = nullptr;      ///< D of each group (grouped): swiglu roots store it themselves.
  const int64_t* group_ldd = nullptr;  ///< D's leading dimension per group (grouped).
};

/// Node<Tag, Ctx>::type is the CUTLASS visitor of a tag; Node<Tag, Ctx>::args(o) its arguments.
template <class Tag, class Ctx>
struct Node;

template <class Ctx>
struct Node<tags::acc, Ctx> {
  using type = fusion::Sm90AccFetch;
  static typename type::Arguments args(const Operands&) { return {}; }
};
template <class Ctx>
struct Node<tags::c, Ctx> {
  using type = fusion::Sm90SrcFetch<typename Ctx::ElementC>;
  static typename type::Arguments args(const Operands&) { return {}; }
};

/// alpha or beta: a host value, or a device value (per group for grouped GEMM) when its pointer is set.
template <class Ctx>
struct ScalarLeaf {
  using type = fusion::Sm90ScalarBroadcast<float, cute::Stride<cute::_0, cute::_0, int64_t>>;
  static typename type::Arguments make(float value, const float* ptr) {
    typename type::Arguments a{};
    a.scalars[0] = value;
    a.scalar_ptrs[0] = ptr;
    a.dScalar[0] = {cute::_0{}, cute::_0{}, (Ctx::kPerGroup && ptr != nullptr) ? 1 : 0};
    return a;
  }
};
template <class Ctx>
struct Node<tags::alpha, Ctx> : ScalarLeaf<Ctx> {
  static typename ScalarLeaf<Ctx>::type::Arguments args(const Operands& o) {
    return ScalarLeaf<Ctx>::make(o.alpha, o.alpha_ptr);
  }
};
template <class Ctx>
struct Node<tags::beta, Ctx> : ScalarLeaf<Ctx> {
  static typename ScalarLeaf<Ctx>::type::Arguments args(const Operands& o) {
    return ScalarLeaf<Ctx>::make(o.beta, o.beta_ptr);
  }
};

/// A vector with one value per output row (CUTLASS's column broadcast: indexed by M). Dense: one
/// vector shared by every batch; grouped: one pointer per group.
template <class Element, class Ctx>
struct PerRowVector {
  using Input = std::conditional_t<Ctx::kPerGroup, Element*, Element>;
  using type =
      fusion::Sm90ColBroadcast<0, typename Ctx::TileShape, Input, float, cute::Stride<cute::_1, cute::_0, int64_t>>;
  static typename type::Arguments make(const void* ptr) {
    typename type::Arguments a{};
    a.ptr_col = static_cast<decltype(a.ptr_col)>(ptr);
    return a;
  }
};
/// A vector with one value per output column (CUTLASS's row broadcast: indexed by N).
template <class Element, class Ctx>
struct PerColumnVector {
  using Input = std::conditional_t<Ctx::kPerGroup, Element*, Element>;
  using type =
      fusion::Sm90RowBroadcast<0, typename Ctx::TileShape, Input, float, cute::Stride<cute::_0, cute::_1, int64_t>>;
  static typename type::Arguments make(const void* ptr) {
    typename type::Arguments a{};
    a.ptr_row = static_cast<decltype(a.ptr_row)>(ptr);
    return a;
  }
};
template <class Ctx>
struct Node<tags::rowscale, Ctx> : PerRowVector<float, Ctx> {
  static auto args(const Operands& o) { return PerRowVector<float, Ctx>::make(o.e->row_scale); }
};
template <class Ctx>
struct Node<tags::rowbias, Ctx> : PerRowVector<typename Ctx::ElementC, Ctx> {
  static auto args(const Operands& o) { return PerRowVector<typename Ctx::ElementC, Ctx>::make(o.e->row_bias); }
};
template <class Ctx>
struct Node<tags::colscale, Ctx> : PerColumnVector<float, Ctx> {
  static auto args(const Operands& o) { return PerColumnVector<float, Ctx>::make(o.e->col_scale); }
};
template <class Ctx>
struct Node<tags::colbias, Ctx> : PerColumnVector<typename Ctx::ElementC, Ctx> {
  static auto args(const Operands& o) { return PerColumnVector<typename Ctx::ElementC, Ctx>::make(o.e->col_bias); }
};

/// An Sm90Compute function of a float or a fragment of floats: `Fn` (activations.cuh) on each value.
template <class Fn>
struct Unary {
  template <class T>
  struct Op {
    CUTLASS_DEVICE T operator()(const T& x) const {
      if constexpr (std::is_same_v<T, float>) {
        return Fn{}(x);
      } else {
        T y;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < static_cast<int>(T::kElements); ++i) y[i] = Fn{}(x[i]);
        return y;
      }
    }
  };
};
struct SiluFn {
  CUTLASS_DEVICE float operator()(float x) const { return fast_silu(x); }
};
struct SigmoidFn {
  CUTLASS_DEVICE float operator()(float x) const { return fast_sigmoid(x); }
};
struct GeluFn {
  CUTLASS_DEVICE float operator()(float x) const { return fast_gelu(x); }
};

/// An elementwise f32 function of the children's values.
template <template <class> class Fn, class Ctx, class... Children>
struct Compute {
  using type = fusion::Sm90EVT<fusion::Sm90Compute<Fn, float, float, kRound>, typename Node<Children, Ctx>::type...>;
  static typename type::Arguments args(const Operands& o) { return {Node<Children, Ctx>::args(o)..., {}}; }
};
template <class X, class Y, class Ctx>
struct Node<tags::add<X, Y>, Ctx> : Compute<cutlass::plus, Ctx, X, Y> {};
template <class X, class Y, class Ctx>
struct Node<tags::mul<X, Y>, Ctx> : Compute<cutlass::multiplies, Ctx, X, Y> {};
template <class X, class Y, class Z, class Ctx>
struct Node<tags::fma<X, Y, Z>, Ctx> : Compute<cutlass::homogeneous_multiply_add, Ctx, X, Y, Z> {};
template <class X, class Ctx>
struct Node<tags::relu<X>, Ctx> : Compute<cutlass::epilogue::thread::ReLu, Ctx, X> {};
template <class X, class Ctx>
struct Node<tags::gelu<X>, Ctx> : Compute<Unary<GeluFn>::template Op, Ctx, X> {};
template <class X, class Ctx>
struct Node<tags::gelutanh<X>, Ctx> : Compute<cutlass::epilogue::thread::GELU_taylor, Ctx, X> {};
template <class X, class Ctx>
struct Node<tags::silu<X>, Ctx> : Compute<Unary<SiluFn>::template Op, Ctx, X> {};
template <class X, class Ctx>
struct Node<tags::sigmoid<X>, Ctx> : Compute<Unary<SigmoidFn>::template Op, Ctx, X> {};
template <class X, class Ctx>
struct Node<tags::clamp<X>, Ctx> {
  using type = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::epilogue::thread::Clamp, float, float, kRound>,
                               typename Node<X, Ctx>::type>;
  static typename type::Arguments args(const Operands& o) {
    return {Node<X, Ctx>::args(o), {o.e->clamp_lo, o.e->clamp_hi}};
  }
};
/// Passes x through and max-reduces |x| into *amax (atomically, across CTAs; the caller zeroes it).
template <class X, class Ctx>
struct Node<tags::amax<X>, Ctx> {
  using type = fusion::Sm90EVT<fusion::Sm90ScalarReduction<cutlass::maximum_absolute_value_reduction,
                                                           cutlass::atomic_maximum, float, float, kRound>,
                               typename Node<X, Ctx>::type>;
  static typename type::Arguments args(const Operands& o) { return {Node<X, Ctx>::args(o), {o.e->amax, 0.0f, {}}}; }
};

/// Passes x through and stores it, converted to C's element type, into the aux matrix (D's shape and
/// strides). The no-shared-memory store (stage count 0) writes predicated vectors straight from
/// registers, so it adds no shared memory and works for every tile and epilogue subtile.
template <class X, class Ctx>
struct Node<tags::aux<X>, Ctx> {
  static_assert(!Ctx::kPerGroup, "aux outputs are dense-only (grouped GEMM rejects them at plan time)");
  using Store = fusion::Sm90AuxStore<0, typename Ctx::TileShape, typename Ctx::ElementC, kRound, typename Ctx::StrideD,
                                     void, void>;
  using type = fusion::Sm90EVT<Store, typename Node<X, Ctx>::type>;
  static typename type::Arguments args(const Operands& o) {
    return {
        Node<X, Ctx>::args(o),
        {static_cast<typename Ctx::ElementC*>(o.e->aux), make_stride<typename Ctx::StrideD>(o.ldd, o.batch_stride_d)}};
  }
};
/// Passes x through and sums it over each row: warp shuffles, then one f32 atomic add per row and
/// CTA into row_sum[batch * m + row], which the launch zeroes first (CUTLASS's workspace fill).
template <class X, class Ctx>
struct Node<tags::rowsum<X>, Ctx> {
  static_assert(!Ctx::kPerGroup, "row sums are dense-only (grouped GEMM rejects them at plan time)");
  using Reduce = fusion::Sm90ColReduction<cutlass::plus, cutlass::plus, cutlass::atomic_add, 0, typename Ctx::TileShape,
                                          float, float, kRound, cute::Stride<cute::_1, cute::_0, int64_t>>;
  using type = fusion::Sm90EVT<Reduce, typename Node<X, Ctx>::type>;
  static typename type::Arguments args(const Operands& o) {
    return {Node<X, Ctx>::args(o), {o.e->row_sum, 0.0f, {cute::_1{}, cute::_0{}, o.m}}};
  }
};

/// A whole tree: its root converted to D's element type.
template <class Tree, class ElementD, class Ctx>
struct Root {
  using type = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::epilogue::thread::Identity, ElementD, float, kRound>,
                               typename Node<Tree, Ctx>::type>;
  static typename type::Arguments args(const Operands& o) { return {Node<Tree, Ctx>::args(o), {}}; }
};

/// A swiglu tree: the pairing store is the root (the collective's D is void; kWritesD is false), and
/// it writes D in D's element type.
template <class X, class ElementD, class Ctx>
struct Root<tags::swiglu<X>, ElementD, Ctx> {
  static_assert(Ctx::kPerGroup, "swiglu is grouped-only (dense plans reject it)");
  using type = fusion::Sm90EVT<SwigluStore<ElementD, kRound>, typename Node<X, Ctx>::type>;
  static typename type::Arguments args(const Operands& o) { return {Node<X, Ctx>::args(o), {o.group_d, o.group_ldd}}; }
};

/// False when the tree's root stores D itself (swiglu): the collective then gets a void D.
template <class Epilogue>
inline constexpr bool kWritesD = true;
template <class X>
inline constexpr bool kWritesD<tags::swiglu<X>> = false;

}  // namespace cuactor::kernels::sm90::evt
