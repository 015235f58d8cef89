/// @file
/// Instantiation template of one sm_90a CUTLASS 3.x implicit-GEMM convolution (TMA im2col loads,
/// wgmma, built through the conv and epilogue collective builders) and the C ABI entry points that
/// expose it (instance_abi.h with conv_instance_abi.h's arguments). Template arguments are the tag
/// types of gemm_tags.cuh, so the placeholders of conv_sm90_instance.cu.in are plain SKU tokens.
#pragma once

// Grid dependency control: the conv kernels tell a dependent grid when their mainloops are done, so
// that a split wgrad's slice sum, launched as a programmatic dependent launch, is already resident
// when they finish; its griddepcontrol.wait still waits for their completion and memory. (Without a
// programmatic dependent launch after them both instructions are no-ops.)
#ifndef CUTLASS_ENABLE_GDC_FOR_SM90
#define CUTLASS_ENABLE_GDC_FOR_SM90 1
#endif

#include <cutlass/cutlass.h>
#include <cutlass/kernel_hardware_info.h>
#include <cutlass/layout/tensor.h>

#include <algorithm>
#include <cstdint>
#include <cute/tensor.hpp>
#include <cutlass/conv/collective/collective_builder.hpp>
#include <cutlass/conv/convnd_problem_shape.hpp>
#include <cutlass/conv/device/conv_universal_adapter.hpp>
#include <cutlass/conv/dispatch_policy.hpp>
#include <cutlass/conv/kernel/conv_universal.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <type_traits>

#include "kernels/adapter_entries.cuh"
#include "kernels/conv_instance_abi.h"
#include "kernels/gemm_tags.cuh"
#include "kernels/sm90_conv_cooperative.cuh"
#include "kernels/sm90_conv_filter_epilogue.cuh"
#include "kernels/sm90_conv_pingpong.cuh"

namespace cuactor::kernels::sm90 {

/// The CUTLASS operator of a convolution family tag.
template <class Family>
struct ConvOperatorOf;
template <>
struct ConvOperatorOf<tags::conv_fprop> {
  static constexpr auto value = cutlass::conv::Operator::kFprop;
};
template <>
struct ConvOperatorOf<tags::conv_dgrad> {
  static constexpr auto value = cutlass::conv::Operator::kDgrad;
};
template <>
struct ConvOperatorOf<tags::conv_wgrad> {
  static constexpr auto value = cutlass::conv::Operator::kWgrad;
};

/// The mainloop schedule of a schedule tag: CUTLASS's one consumer warpgroup (warpspecialized),
/// cuactor's ProducerConsumerConvKernel with two consumer warpgroups sharing a tile (cooperative) or
/// one consumer warpgroup in each of two CTAs sharing a multiprocessor (coresident), or cuactor's
/// persistent PingpongConvKernel, two consumer warpgroups taking tiles in turn (pingpong).
template <class Schedule>
struct ConvSchedule;
template <>
struct ConvSchedule<tags::warpspecialized> {
  using epilogue = cutlass::epilogue::TmaWarpSpecialized;
  using warp_layout = void;  // CUTLASS's kernel
};
template <>
struct ConvSchedule<tags::cooperative> {
  using epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using warp_layout = CooperativeConvLayout;
};
template <>
struct ConvSchedule<tags::coresident> {
  using epilogue = cutlass::epilogue::TmaWarpSpecialized;
  using warp_layout = CoresidentConvLayout;
};
template <>
struct ConvSchedule<tags::pingpong> {
  using epilogue = cutlass::epilogue::TmaWarpSpecialized;
  using warp_layout = PingpongConvLayout;
};

/// The CUTLASS kernel of one 2-D convolution configuration: D = alpha * implicit_gemm(A, B) + beta * C,
/// fp32 accumulation. fprop and dgrad write an activation-shaped tensor through the TMA epilogue;
/// wgrad writes the filter (K x (R S C)) through the shared-memory-free epilogue, as CUTLASS's own
/// sm90 wgrad does, with FilterTileEpilogue's stores.
template <cutlass::conv::Operator Op, class ElementA, class ElementB, class ElementC, class ElementD,
          class ElementAccumulator, int TileM, int TileN, int TileK, int ClusterM, int ClusterN, int ClusterK,
          class Schedule>
struct ConvKernelOf {
  static constexpr bool kWgrad = Op == cutlass::conv::Operator::kWgrad;
  using ElementCompute = float;
  static constexpr int kAlignmentA = 128 / cutlass::sizeof_bits<ElementA>::value;
  static constexpr int kAlignmentB = 128 / cutlass::sizeof_bits<ElementB>::value;
  static constexpr int kAlignmentC = 128 / cutlass::sizeof_bits<ElementC>::value;
  static constexpr int kAlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;

  // The GEMM K mode (and wgrad's N mode, R x S x C) is hierarchical in the conv collectives.
  using TileShape =
      std::conditional_t<kWgrad,
                         cute::Shape<cute::Int<TileM>, cute::Shape<cute::Int<TileN>>, cute::Shape<cute::Int<TileK>>>,
                         cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Shape<cute::Int<TileK>>>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::Int<ClusterK>>;
  using LayoutOut = std::conditional_t<kWgrad, cutlass::layout::TensorKCSR, cutlass::layout::TensorNHWC>;
  using EpilogueSchedule =
      std::conditional_t<kWgrad, cutlass::epilogue::NoSmemWarpSpecialized, typename ConvSchedule<Schedule>::epilogue>;

  // One-warpgroup and pingpong fprop / dgrad kernels store 16-bit outputs in 64x64 subtiles where the
  // tile's width allows, half the round trips (registers, shared memory, TMA store) of CUTLASS's
  // automatic 64x32: the pingpong kernel runs one epilogue at a time, and on short reductions those
  // round trips bound it. Measured on an H100 (bf16, session 22, 13 shapes, fprop and dgrad, 8 kernels
  // of this kind): 1.05x on geometric mean, 1.09x for pingpong 64x192 (fprop 16 x 56 x 56 x 64 -> 192
  // 1x1: 0.72x -> 0.88x cuDNN), 0.96x at worst but for the pingpong 64x256 tile on 64 or 128 output
  // channels (0.85-0.91x), which pads them 2-4x and which the plans do not take there. Cooperative tiles
  // keep the automatic 128x32: a 128x64 subtile would take a mainloop stage's shared memory from their
  // 256x128 tile.
  static constexpr bool kWideEpilogueTile = !kWgrad && TileN % 64 == 0 && cutlass::sizeof_bits<ElementD>::value == 16 &&
                                            std::is_same_v<EpilogueSchedule, cutlass::epilogue::TmaWarpSpecialized>;
  using EpilogueTile = std::conditional_t<kWideEpilogueTile, cute::Shape<cute::_64, cute::_64>,
                                          cutlass::epilogue::collective::EpilogueTileAuto>;
  using BuiltEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape, EpilogueTile, ElementAccumulator,
      ElementCompute, ElementC, LayoutOut, kAlignmentC, ElementD, LayoutOut, kAlignmentD,
      EpilogueSchedule>::CollectiveOp;
  using CollectiveEpilogue = std::conditional_t<kWgrad, FilterTileEpilogue<BuiltEpilogue>, BuiltEpilogue>;

  static constexpr int kEpilogueBytes = static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage));
  using WarpLayout = typename ConvSchedule<Schedule>::warp_layout;
  static constexpr bool kOwnKernel = !std::is_void_v<WarpLayout>;
  using CollectiveMainloop = typename std::conditional_t<
      kOwnKernel,
      ProducerConsumerConvMainloop<Op, ElementA, ElementB, ElementAccumulator, TileShape, ClusterShape, kEpilogueBytes,
                                   WarpLayout>,
      cutlass::conv::collective::CollectiveBuilder<
          cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Op, ElementA, cutlass::layout::TensorNHWC, kAlignmentA,
          ElementB, cutlass::layout::TensorNHWC, kAlignmentB, ElementAccumulator, TileShape, ClusterShape,
          cutlass::conv::collective::StageCountAutoCarveout<kEpilogueBytes>,
          cutlass::conv::KernelImplicitTmaWarpSpecializedSm90>>::CollectiveOp;

  using ProblemShape = cutlass::conv::ConvProblemShape<Op, CollectiveMainloop::DispatchPolicy::NumSpatialDimensions>;
  static constexpr bool kPingpong = std::is_same_v<WarpLayout, PingpongConvLayout>;
  using Kernel = std::conditional_t<
      kPingpong, PingpongConvKernel<ProblemShape, CollectiveMainloop, CollectiveEpilogue>,
      std::conditional_t<kOwnKernel,
                         ProducerConsumerConvKernel<ProblemShape, CollectiveMainloop, CollectiveEpilogue, WarpLayout>,
                         cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>>>;
  /// The device adapter (AdapterEntries calls it `Gemm`).
  using Adapter = cutlass::conv::device::ConvUniversalAdapter<Kernel>;

  /// A problem over activation N x H x W x C and filter K x R x S x C (both packed) with the given
  /// padding above and below (rows) and symmetric padding along the width.
  static ProblemShape problem_shape(const cuactor_conv_args& a, int n, int h, int pad_top, int pad_bottom) {
    using Extent = typename ProblemShape::TensorExtent;
    using Spatial = typename ProblemShape::SpatialExtent;
    return ProblemShape(cutlass::conv::Mode::kCrossCorrelation, Extent{n, h, a.w, a.c}, Extent{a.k, a.r, a.s, a.c},
                        Spatial{pad_top, a.pad_w}, Spatial{pad_bottom, a.pad_w}, Spatial{a.stride_h, a.stride_w},
                        Spatial{a.dilation_h, a.dilation_w}, 1);
  }

  /// The CuTe stride of the output-shaped tensors (C and D) from the problem's packed strides.
  template <class Stride>
  static Stride output_stride(const ProblemShape& shape) {
    Stride s{};
    if constexpr (kWgrad) {
      // (K, (C, S, R)): a filter per row; C is the unit stride, then S and R in reverse order of KRSC.
      cute::get<0>(s) = shape.stride_C[0];
      cute::for_each(cute::make_seq<cute::rank<1>(Stride{}) - 1>{}, [&](auto i) {
        cute::get<1, decltype(i)::value + 1>(s) = shape.stride_C[ProblemShape::RankT - 2 - i];
      });
    } else {
      // ((Q, P, N), K): the spatial and batch modes in reverse order of the NHWC strides.
      cute::for_each(cute::make_seq<cute::rank<0>(Stride{})>{},
                     [&](auto i) { cute::get<0, i>(s) = shape.stride_C[ProblemShape::RankT - 2 - i]; });
    }
    return s;
  }

  /// CUTLASS arguments of `shape` with the given operands (c_source may equal d).
  static typename Adapter::Arguments arguments(const ProblemShape& shape, const cuactor_conv_args& a, const void* pa,
                                               const void* pb, const void* c_source, void* d, float alpha, float beta) {
    typename Adapter::Arguments args{};
    args.problem_shape = shape;
    args.mainloop.ptr_A = static_cast<const ElementA*>(pa);
    args.mainloop.ptr_B = static_cast<const ElementB*>(pb);
    args.epilogue.ptr_C = static_cast<const ElementC*>(c_source);
    args.epilogue.dC = output_stride<typename Kernel::StrideC>(shape);
    args.epilogue.ptr_D = static_cast<ElementD*>(d);
    args.epilogue.dD = output_stride<typename Kernel::StrideD>(shape);
    args.epilogue.thread.alpha = alpha;
    args.epilogue.thread.beta = beta;
    args.hw_info.device_id = a.device;
    args.hw_info.sm_count =
        a.sm_count > 0 ? a.sm_count : cutlass::KernelHardwareInfo::query_device_multiprocessor_count(a.device);
    return args;
  }
};

/// One convolution computed by one CUTLASS kernel over the whole problem (fprop, dgrad, unsplit wgrad).
template <class Family, class A, class B, class C, class D, class Acc, int TileM, int TileN, int TileK, int ClusterM,
          int ClusterN, int ClusterK, class Schedule>
struct DirectConv
    : AdapterEntries<DirectConv<Family, A, B, C, D, Acc, TileM, TileN, TileK, ClusterM, ClusterN, ClusterK, Schedule>,
                     cuactor_conv_args> {
  using Config =
      ConvKernelOf<ConvOperatorOf<Family>::value, typename A::type, typename B::type, typename C::type,
                   typename D::type, typename Acc::type, TileM, TileN, TileK, ClusterM, ClusterN, ClusterK, Schedule>;
  using Gemm = typename Config::Adapter;

  static typename Gemm::Arguments make_arguments(const cuactor_conv_args& a) {
    return Config::arguments(Config::problem_shape(a, a.n, a.h, a.pad_h, a.pad_h), a, a.a, a.b, a.c_source, a.d,
                             a.alpha, a.beta);
  }

  /// ABI entry: as AdapterEntries', and a channel split (which only SlicedConv<FpropChannelSlicing> computes) is
  /// refused.
  static int can_implement(const void* p) {
    if (p != nullptr && static_cast<const cuactor_conv_args*>(p)->split_c > 1) return CUACTOR_KERNEL_NOT_IMPLEMENTABLE;
    return DirectConv::AdapterEntries::can_implement(p);
  }
};

/// A range of the wgrad reduction: images [n0, n0 + n) and, within each, output rows [p0, p0 + p),
/// which read input rows [h0, h0 + h) with `pad_top` / `pad_bottom` rows of padding around them.
struct WgradSlice {
  int n0, n, p0, p, h0, h, pad_top, pad_bottom;
};

/// Positions of a dilated filter of `taps` taps along one padded input extent:
/// (extent + 2 pad - dilation (taps - 1) - 1) / stride + 1.
inline int windows(int extent, int pad, int dilation, int taps, int stride) {
  return (extent + 2 * pad - dilation * (taps - 1) - 1) / stride + 1;
}
/// Output rows (P) of the problem.
inline int output_rows(const cuactor_conv_args& a) {
  return windows(a.h, a.pad_h, a.dilation_h, a.r, a.stride_h);
}

/// The slices of split_n x split_p (see cuactor_conv_args), or 0 when the split is not one this
/// ABI allows. Ranges are as even as integer division makes them.
inline int wgrad_slices(const cuactor_conv_args& a, WgradSlice (&out)[CUACTOR_CONV_MAX_SLICES]) {
  const int images = a.split_n > 1 ? a.split_n : 1, rows = a.split_p > 1 ? a.split_p : 1;
  const int p_total = output_rows(a);
  if (images > a.n || rows > p_total || images * rows > CUACTOR_CONV_MAX_SLICES) return 0;
  if (rows > 1 && (images != a.n || a.pad_h > a.dilation_h * (a.r - 1))) return 0;
  int count = 0;
  for (int i = 0; i < images; ++i) {
    const int n0 = static_cast<int>(static_cast<long long>(a.n) * i / images);
    const int n1 = static_cast<int>(static_cast<long long>(a.n) * (i + 1) / images);
    for (int j = 0; j < rows; ++j) {
      WgradSlice s{};
      s.n0 = n0;
      s.n = n1 - n0;
      s.p0 = p_total * j / rows;
      s.p = p_total * (j + 1) / rows - s.p0;
      if (rows == 1) {  // whole images: the problem's own rows and padding (packed image stride)
        s.h0 = 0;
        s.h = a.h;
        s.pad_top = s.pad_bottom = a.pad_h;
        out[count++] = s;
        continue;
      }
      // One image, some rows: the input rows of the slice's first and last windows, clipped to the
      // image; what lies outside is padding (never more than the problem's own).
      const int first = s.p0 * a.stride_h - a.pad_h;
      const int last = (s.p0 + s.p - 1) * a.stride_h - a.pad_h + a.dilation_h * (a.r - 1);
      s.h0 = first > 0 ? first : 0;
      const int end = last < a.h - 1 ? last : a.h - 1;
      s.h = end - s.h0 + 1;
      s.pad_top = s.h0 - first;
      s.pad_bottom = last - end;
      out[count++] = s;
    }
  }
  return count;
}

/// Whether two argument structs give the same slice parameters: every field the slices read, compared
/// one by one (the struct has padding). C, D, alpha and beta reach only the sum kernel, so a training
/// loop that switches beta or the output between steps keeps its parameters.
inline bool same_slice_args(const cuactor_conv_args& x, const cuactor_conv_args& y) {
  return x.n == y.n && x.h == y.h && x.w == y.w && x.c == y.c && x.k == y.k && x.r == y.r && x.s == y.s &&
         x.pad_h == y.pad_h && x.pad_w == y.pad_w && x.stride_h == y.stride_h && x.stride_w == y.stride_w &&
         x.dilation_h == y.dilation_h && x.dilation_w == y.dilation_w && x.a == y.a && x.b == y.b &&
         x.device == y.device && x.sm_count == y.sm_count && x.split_n == y.split_n && x.split_p == y.split_p &&
         x.split_c == y.split_c;
}

/// The launch parameters of every slice, one kernel argument (indexed by blockIdx.z, or walked by the
/// persistent kernel's tiles).
template <class Kernel, int Count = CUACTOR_CONV_MAX_SLICES>
struct SliceParams {
  typename Kernel::Params slice[Count];
};

/// Runs CUTLASS's kernel on slice blockIdx.z: the conv kernel maps its tiles to blockIdx.x and y
/// only (its L mode is 1), so slices side by side in z are independent problems.
template <class Kernel, int Count>
__global__ void __launch_bounds__(Kernel::MaxThreadsPerBlock, Kernel::MinBlocksPerMultiprocessor)
    conv_slices_kernel(CUTLASS_GRID_CONSTANT const SliceParams<Kernel, Count> params) {
  extern __shared__ char smem[];
  Kernel op;
  op(params.slice[blockIdx.z], smem);
}

/// Runs the persistent PingpongConvKernel over the first `count` slices, their tiles one after another.
template <class Kernel, int Count>
__global__ void __launch_bounds__(Kernel::MaxThreadsPerBlock, Kernel::MinBlocksPerMultiprocessor)
    conv_persistent_slices_kernel(CUTLASS_GRID_CONSTANT const SliceParams<Kernel, Count> params, int count) {
  extern __shared__ char smem[];
  Kernel op;
  op.run(params.slice, count, smem);
}

/// Threads of a sum_slices_kernel block, and the most threads that add shares of one vector's slices.
inline constexpr int kSumThreads = 256;
inline constexpr int kMaxSumGroups = 8;

/// Threads summing each vector: the power of two up to kMaxSumGroups and up to `slices`. Many slices
/// of a small filter then still spread over many threads (one thread per vector, adding all 32
/// slices of a 64 x 256 filter, took 3.9 us on an H100), and few slices leave no thread idle.
inline int sum_groups(int slices) {
  int groups = 1;
  while (groups * 2 <= slices && groups * 2 <= kMaxSumGroups) groups *= 2;
  return groups;
}

/// D = alpha * (sum of the slices' fp32 partials) + beta * C over `count` elements (a multiple of 4).
/// A block covers kSumThreads / groups consecutive float4 vectors; each of its `groups` thread groups
/// adds every groups-th slice of them (a warp reads 512 contiguous bytes per slice), shared memory
/// adds the groups' shares, and the first group writes 4 elements per thread with one vector store
/// (C and D are 16-byte aligned). Each element is read and written by one thread, so C may alias D.
/// Launched as a programmatic dependent launch of the slices' kernel: it waits for that grid's
/// completion before it reads the partials.
template <class ElementC, class ElementD>
__global__ void __launch_bounds__(kSumThreads)
    sum_slices_kernel(const float* __restrict__ partials, int slices, int groups, long long count, float alpha,
                      float beta, const ElementC* source, ElementD* d) {
  __shared__ float4 shares[kSumThreads];
  const int per_block = kSumThreads / groups;
  const int lane = static_cast<int>(threadIdx.x) % per_block, group = static_cast<int>(threadIdx.x) / per_block;
  const long long v = static_cast<long long>(blockIdx.x) * per_block + lane;
  const bool active = v < count / 4;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The slices' grid has completed and its writes are visible (spelled out rather than through
  // CUTLASS's helper, which compiles to nothing unless its GDC macro was defined before its header).
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (active)
    for (int s = group; s < slices; s += groups) {
      const float4 p = reinterpret_cast<const float4*>(partials + s * count)[v];
      sum.x += p.x;
      sum.y += p.y;
      sum.z += p.z;
      sum.w += p.w;
    }
  if (groups > 1) {
    shares[threadIdx.x] = sum;
    __syncthreads();
  }
  if (group != 0 || !active) return;
  for (int g = 1; g < groups; ++g) {
    const float4 p = shares[g * per_block + lane];
    sum.x += p.x;
    sum.y += p.y;
    sum.z += p.z;
    sum.w += p.w;
  }
  const float acc[4] = {sum.x, sum.y, sum.z, sum.w};
  cutlass::AlignedArray<ElementC, 4> c{};
  if (beta != 0.0f) c = reinterpret_cast<const cutlass::AlignedArray<ElementC, 4>*>(source)[v];
  cutlass::AlignedArray<ElementD, 4> out;
  for (int i = 0; i < 4; ++i) {
    float value = alpha * acc[i];
    if (beta != 0.0f) value += beta * static_cast<float>(c[i]);
    out[i] = static_cast<ElementD>(value);
  }
  reinterpret_cast<cutlass::AlignedArray<ElementD, 4>*>(d)[v] = out;
}

/// A convolution split into slices of its reduction: one launch computes every slice's fp32 partial
/// output into the workspace, a second adds them and applies alpha and beta, so that problems whose
/// output has too few tiles for the device still fill it. An unsplit problem runs one kernel writing D
/// directly (`Slicing::Direct`), without partials. `Slicing` says how the reduction is cut: its
/// `Config` (the fp32-output kernel), `Direct`, `Slice`, `kMaxSlices`, `unsplit(a)`, `slices(a, out)`
/// (0: a split the ABI does not allow), `elements(a)` (of the output) and `slice_arguments(a, slice,
/// partial)`.
template <class Slicing>
struct SlicedConv {
  using Config = typename Slicing::Config;
  using Kernel = typename Config::Kernel;
  using Direct = typename Slicing::Direct;
  using Slice = typename Slicing::Slice;
  using ElementC = typename Slicing::ElementC;
  using ElementD = typename Slicing::ElementD;
  static constexpr int kMaxSlices = Slicing::kMaxSlices;
  using Params = SliceParams<Kernel, kMaxSlices>;
  static_assert(sizeof(Params) <= 32764, "slice parameters exceed the 32764-byte kernel argument limit");

  /// ABI entry: CUACTOR_KERNEL_OK if the split is allowed and CUTLASS accepts every slice.
  static int can_implement(const void* p) {
    if (p == nullptr) return CUACTOR_KERNEL_BAD_ARGS;
    const auto& a = *static_cast<const cuactor_conv_args*>(p);
    if (Slicing::unsplit(a)) return Direct::can_implement(p);
    Slice slices[kMaxSlices];
    const int count = Slicing::slices(a, slices);
    if (count == 0 || Slicing::elements(a) % 4 != 0) return CUACTOR_KERNEL_NOT_IMPLEMENTABLE;
    for (int i = 0; i < count; ++i)
      if (Config::Adapter::can_implement(Slicing::slice_arguments(a, slices[i], nullptr)) != cutlass::Status::kSuccess)
        return CUACTOR_KERNEL_NOT_IMPLEMENTABLE;
    return CUACTOR_KERNEL_OK;
  }

  /// ABI entry: the fp32 partials, one output per slice.
  static size_t workspace_size(const void* p) {
    if (p == nullptr) return 0;
    const auto& a = *static_cast<const cuactor_conv_args*>(p);
    if (Slicing::unsplit(a)) return Direct::workspace_size(p);
    Slice slices[kMaxSlices];
    return static_cast<size_t>(Slicing::slices(a, slices)) * static_cast<size_t>(Slicing::elements(a)) * sizeof(float);
  }

  /// ABI entry: the slice launch, then the sum; no allocation, no synchronisation.
  static int run(const void* p, void* workspace, size_t workspace_bytes, void* stream) {
    if (p == nullptr) return CUACTOR_KERNEL_BAD_ARGS;
    const auto& a = *static_cast<const cuactor_conv_args*>(p);
    if (Slicing::unsplit(a)) return Direct::run(p, workspace, workspace_bytes, stream);
    Slice slices[kMaxSlices];
    const int count = Slicing::slices(a, slices);
    if (count == 0) return CUACTOR_KERNEL_NOT_IMPLEMENTABLE;
    const long long elements = Slicing::elements(a);
    if (workspace == nullptr || workspace_bytes < static_cast<size_t>(count) * elements * sizeof(float))
      return CUACTOR_KERNEL_WORKSPACE_TOO_SMALL;
    bool configured = false;
    if constexpr (Config::kPingpong)
      configured = configure_shared_memory<Kernel, conv_persistent_slices_kernel<Kernel, kMaxSlices>>();
    else
      configured = configure_shared_memory<Kernel, conv_slices_kernel<Kernel, kMaxSlices>>();
    if (!configured) return CUACTOR_KERNEL_INIT_FAILED;
    auto* partials = static_cast<float*>(workspace);
    // 32 KiB of parameters: static storage per thread rather than the stack (they are copied into the
    // launch), reused by every launch of this instance on the thread. Each slice's parameters hold
    // two TMA descriptors that the driver encodes on the host (up to 64 per launch): a launch whose
    // slices read what the thread's previous launch read and write the same workspace (a training
    // loop's tensors, reused by a caching allocator) keeps them.
    static thread_local Params params;
    static thread_local cuactor_conv_args params_args{};
    static thread_local const void* params_workspace = nullptr;
    if (params_workspace != workspace || !same_slice_args(params_args, a)) {
      for (int i = 0; i < count; ++i)
        params.slice[i] =
            Kernel::to_underlying_arguments(Slicing::slice_arguments(a, slices[i], partials + i * elements), nullptr);
      params_args = a;
      params_workspace = workspace;
    }
    const auto s = static_cast<cudaStream_t>(stream);
    cudaLaunchConfig_t config{};
    if constexpr (Config::kPingpong) {
      config.gridDim = Kernel::grid_of(params.slice, count);
    } else {
      config.gridDim = Kernel::get_grid_shape(params.slice[0]);
      config.gridDim.z = static_cast<unsigned>(count);
    }
    config.blockDim = Kernel::get_block_shape();
    config.dynamicSmemBytes = Kernel::SharedStorageSize;
    config.stream = s;
    cudaLaunchAttribute cluster[1]{};
    constexpr auto kCluster = typename Config::ClusterShape{};
    if constexpr (cute::size(kCluster) > 1) {
      cluster[0].id = cudaLaunchAttributeClusterDimension;
      cluster[0].val.clusterDim = {static_cast<unsigned>(cute::get<0>(kCluster)),
                                   static_cast<unsigned>(cute::get<1>(kCluster)),
                                   static_cast<unsigned>(cute::get<2>(kCluster))};
      config.attrs = cluster;
      config.numAttrs = 1;
    }
    cudaError_t launched = cudaSuccess;
    if constexpr (Config::kPingpong)
      launched = cudaLaunchKernelEx(&config, conv_persistent_slices_kernel<Kernel, kMaxSlices>, params, count);
    else
      launched = cudaLaunchKernelEx(&config, conv_slices_kernel<Kernel, kMaxSlices>, params);
    if (launched != cudaSuccess) return CUACTOR_KERNEL_LAUNCH_FAILED;
    // The sum, launched while the slices finish (programmatic dependent launch; see sum_slices_kernel).
    const int groups = sum_groups(count);
    const long long per_block = kSumThreads / groups;
    cudaLaunchConfig_t sum_config{};
    sum_config.gridDim = dim3(static_cast<unsigned>((elements / 4 + per_block - 1) / per_block), 1, 1);
    sum_config.blockDim = dim3(kSumThreads, 1, 1);
    sum_config.stream = s;
    cudaLaunchAttribute early[1]{};
    early[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    early[0].val.programmaticStreamSerializationAllowed = 1;
    sum_config.attrs = early;
    sum_config.numAttrs = 1;
    launched = cudaLaunchKernelEx(&sum_config, sum_slices_kernel<ElementC, ElementD>,
                                  static_cast<const float*>(partials), count, groups, elements, a.alpha, a.beta,
                                  static_cast<const ElementC*>(a.c_source), static_cast<ElementD*>(a.d));
    return launched == cudaSuccess ? CUACTOR_KERNEL_OK : CUACTOR_KERNEL_LAUNCH_FAILED;
  }
};

/// Wgrad split into slices of its reduction over N x P x Q (cuactor_conv_args::split_n / split_p): a
/// filter gradient has few output tiles (K x R S C), often fewer than the device has multiprocessors.
template <class A, class B, class C, class D, class Acc, int TileM, int TileN, int TileK, int ClusterM, int ClusterN,
          int ClusterK, class Schedule>
struct WgradSlicing {
  using ElementC = typename C::type;
  using ElementD = typename D::type;
  using Config = ConvKernelOf<cutlass::conv::Operator::kWgrad, typename A::type, typename B::type, float, float,
                              typename Acc::type, TileM, TileN, TileK, ClusterM, ClusterN, ClusterK, Schedule>;
  using Direct =
      DirectConv<tags::conv_wgrad, A, B, C, D, Acc, TileM, TileN, TileK, ClusterM, ClusterN, ClusterK, Schedule>;
  using Slice = WgradSlice;
  static constexpr int kMaxSlices = CUACTOR_CONV_MAX_SLICES;

  static bool unsplit(const cuactor_conv_args& a) { return a.split_n <= 1 && a.split_p <= 1; }
  static int slices(const cuactor_conv_args& a, Slice (&out)[kMaxSlices]) {
    return a.split_c > 1 ? 0 : wgrad_slices(a, out);
  }
  /// Elements of the filter gradient, K x R x S x C.
  static long long elements(const cuactor_conv_args& a) { return static_cast<long long>(a.k) * a.r * a.s * a.c; }

  /// CUTLASS arguments of one slice writing its partials to `partial`.
  static typename Config::Adapter::Arguments slice_arguments(const cuactor_conv_args& a, const Slice& s,
                                                             float* partial) {
    const int p_total = output_rows(a);
    const int q = windows(a.w, a.pad_w, a.dilation_w, a.s, a.stride_w);
    const long long dy_offset = (static_cast<long long>(s.n0) * p_total + s.p0) * q * a.k;
    const long long x_offset = (static_cast<long long>(s.n0) * a.h + s.h0) * a.w * a.c;
    // can_implement probes with null operands: no offset applied to those.
    const auto* dy = static_cast<const typename A::type*>(a.a);
    const auto* x = static_cast<const typename B::type*>(a.b);
    if (dy != nullptr) dy += dy_offset;
    if (x != nullptr) x += x_offset;
    return Config::arguments(Config::problem_shape(a, s.n, s.h, s.pad_top, s.pad_bottom), a, dy, x, partial, partial,
                             1.0f, 0.0f);
  }
};

/// A range of fprop's reduced input channels, [c0, c0 + c).
struct ChannelSlice {
  int c0, c;
};

/// The channel slices of split_c (see cuactor_conv_args): whole `step`-channel K steps per slice, as
/// even as integer division makes them (the last slice ends at C), or 0 when the split is not one
/// this ABI allows (more slices than K steps, or than CUACTOR_CONV_MAX_CHANNEL_SLICES).
inline int channel_slices(const cuactor_conv_args& a, int step, ChannelSlice (&out)[CUACTOR_CONV_MAX_CHANNEL_SLICES]) {
  const int count = a.split_c > 1 ? a.split_c : 1;
  const int steps = (a.c + step - 1) / step;
  if (count > steps || count > CUACTOR_CONV_MAX_CHANNEL_SLICES) return 0;
  for (int i = 0; i < count; ++i) {
    const int first = steps * i / count, last = steps * (i + 1) / count;
    out[i].c0 = first * step;
    out[i].c = std::min(a.c, last * step) - out[i].c0;
  }
  return count;
}

/// Fprop split into ranges of its input channels (cuactor_conv_args::split_c): each slice reads the
/// activations' and filters' channels [c0, c0 + c) in place (their rows keep the tensors' strides)
/// and writes a packed fp32 N x P x Q x K partial. For grids with few output tiles and long
/// reductions (a few pixels, many channels), which leave most multiprocessors idle unsplit.
template <class A, class B, class C, class D, class Acc, int TileM, int TileN, int TileK, int ClusterM, int ClusterN,
          int ClusterK, class Schedule>
struct FpropChannelSlicing {
  using ElementC = typename C::type;
  using ElementD = typename D::type;
  using Config = ConvKernelOf<cutlass::conv::Operator::kFprop, typename A::type, typename B::type, float, float,
                              typename Acc::type, TileM, TileN, TileK, ClusterM, ClusterN, ClusterK, Schedule>;
  using Direct =
      DirectConv<tags::conv_fprop, A, B, C, D, Acc, TileM, TileN, TileK, ClusterM, ClusterN, ClusterK, Schedule>;
  using Slice = ChannelSlice;
  static constexpr int kMaxSlices = CUACTOR_CONV_MAX_CHANNEL_SLICES;
  using ProblemShape = typename Config::ProblemShape;

  static bool unsplit(const cuactor_conv_args& a) { return a.split_c <= 1; }
  static int slices(const cuactor_conv_args& a, Slice (&out)[kMaxSlices]) {
    return a.split_n > 1 || a.split_p > 1 ? 0 : channel_slices(a, TileK, out);
  }
  /// Elements of the output, N x P x Q x K.
  static long long elements(const cuactor_conv_args& a) {
    const long long p = output_rows(a), q = windows(a.w, a.pad_w, a.dilation_w, a.s, a.stride_w);
    return static_cast<long long>(a.n) * p * q * a.k;
  }

  /// CUTLASS arguments of one slice writing its partials to `partial`.
  static typename Config::Adapter::Arguments slice_arguments(const cuactor_conv_args& a, const Slice& s,
                                                             float* partial) {
    using Extent = typename ProblemShape::TensorExtent;
    using Stride = typename ProblemShape::TensorStride;
    using Spatial = typename ProblemShape::SpatialExtent;
    const std::int64_t row = static_cast<std::int64_t>(a.w) * a.c, tap_row = static_cast<std::int64_t>(a.s) * a.c;
    const ProblemShape shape(
        cutlass::conv::Mode::kCrossCorrelation, Extent{a.n, a.h, a.w, s.c}, Stride{a.h * row, row, a.c, 1},
        Extent{a.k, a.r, a.s, s.c}, Stride{a.r * tap_row, tap_row, a.c, 1}, Spatial{a.pad_h, a.pad_w},
        Spatial{a.pad_h, a.pad_w}, Spatial{a.stride_h, a.stride_w}, Spatial{a.dilation_h, a.dilation_w}, 1);
    // can_implement probes with null operands: no offset applied to those.
    const auto* x = static_cast<const typename A::type*>(a.a);
    const auto* w = static_cast<const typename B::type*>(a.b);
    if (x != nullptr) x += s.c0;
    if (w != nullptr) w += s.c0;
    return Config::arguments(shape, a, x, w, partial, partial, 1.0f, 0.0f);
  }
};

/// Fprop tiles whose instances also split their input channels (FpropChannelSlicing): the
/// one-warpgroup 64x64 tile with 16-bit tensors, which plans take for grids of at most half a wave
/// (conv_plan.cpp's `splits_channels` names the same tiles).
template <class Family, class D, int TileM, int TileN, class Schedule>
inline constexpr bool kSplitsChannels =
    std::is_same_v<Family, tags::conv_fprop>&& std::is_same_v<Schedule, tags::warpspecialized>&& TileM == 64 &&
    TileN == 64 && cutlass::sizeof_bits<typename D::type>::value == 16;

/// The instance of a convolution SKU: wgrad splits its reduction over pixels, fprop on the tiles of
/// kSplitsChannels its input channels (SlicedConv); other fprop and dgrad instances run one kernel
/// (DirectConv). sm_90a convolution instances compute D = alpha * acc + beta * C.
template <class Family, class A, class B, class C, class D, class Acc, int TileM, int TileN, int TileK, int ClusterM,
          int ClusterN, int ClusterK, class Schedule, class Epilogue>
requires std::is_same_v<Epilogue, tags::linear_combination>
using ImplicitGemmConv = std::conditional_t<
    std::is_same_v<Family, tags::conv_wgrad>,
    SlicedConv<WgradSlicing<A, B, C, D, Acc, TileM, TileN, TileK, ClusterM, ClusterN, ClusterK, Schedule>>,
    std::conditional_t<
        kSplitsChannels<Family, D, TileM, TileN, Schedule>,
        SlicedConv<FpropChannelSlicing<A, B, C, D, Acc, TileM, TileN, TileK, ClusterM, ClusterN, ClusterK, Schedule>>,
        DirectConv<Family, A, B, C, D, Acc, TileM, TileN, TileK, ClusterM, ClusterN, ClusterK, Schedule>>>;

}  // namespace cuactor::kernels::sm90
