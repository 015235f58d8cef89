/* @file
 * The argument struct of convolution instances (families conv_fprop, conv_dgrad, conv_wgrad): the
 * same cuactor_gemm_instance object and entry points as GEMM (instance_abi.h), with this struct
 * behind `args`. Tensors are packed: activations N x H x W x C and filters K x R x S x C with the
 * channels contiguous.
 *
 * sm_90a wgrad instances split their reduction (over N x P x Q) into slices that one launch
 * computes side by side, each writing fp32 partial sums to the workspace, and a second kernel adds
 * the slices and applies alpha and beta: a filter gradient has few output tiles (K x R S C), often
 * fewer than the device has multiprocessors, and CUTLASS's sm_90a conv kernel has no split-K of its
 * own. Fprop instances of small-grid tiles split their input channels the same way (split_c). sm_80
 * instances (CUTLASS 2.x) are never split and refuse split_n, split_p or split_c above 1. */
#ifndef CUACTOR_KERNELS_CONV_INSTANCE_ABI_H
#define CUACTOR_KERNELS_CONV_INSTANCE_ABI_H

#include "kernels/instance_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One 2-D cross-correlation. Operands by implicit-GEMM role:
 *  fprop: A = x (NHWC), B = w (KRSC), C/D = y (N x P x Q x K);
 *  dgrad: A = dy (N x P x Q x K), B = w (KRSC), C/D = dx (NHWC);
 *  wgrad: A = dy (N x P x Q x K), B = x (NHWC), C/D = dw (KRSC).
 *  D = alpha * acc + beta * C. */
/** The most slices one wgrad launch computes (its CUTLASS parameters travel as one kernel argument
 *  of at most 32 KiB). */
#define CUACTOR_CONV_MAX_SLICES 32
/** The most slices one fprop channel split computes (an fprop slice's parameters are larger: they
 *  hold the TMA epilogue's descriptors too). */
#define CUACTOR_CONV_MAX_CHANNEL_SLICES 16

typedef struct cuactor_conv_args {
  int n, h, w, c; /**< Activation extents. */
  int k, r, s;    /**< Filter extents (its channel count is c). */
  int pad_h, pad_w;
  int stride_h, stride_w;
  int dilation_h, dilation_w;
  const void* a;
  const void* b;
  const void* c_source; /**< Must be non-null (pass d when beta is 0); may equal d. */
  void* d;
  float alpha;
  float beta;
  int device;   /**< Ordinal of the device the kernel runs on. */
  int sm_count; /**< Its multiprocessor count (0: queried by the instance). */
  /** Wgrad only: the reduction is split into split_n ranges of images times split_p ranges of
   *  output rows per image (values below 1 count as 1). split_p > 1 needs split_n == n and
   *  pad_h <= dilation_h (R - 1), so that every slice reads at least one input row. */
  int split_n;
  int split_p;
  /** Fprop only, on instances that split channels (see SlicedConv<FpropChannelSlicing>): the reduced input channels
   *  split into split_c ranges of whole K steps (values below 1 count as 1; at most one range per K
   *  step), each range's partial output summed by the second kernel as wgrad's slices are. */
  int split_c;
} cuactor_conv_args;

#ifdef __cplusplus
}
#endif

#endif /* CUACTOR_KERNELS_CONV_INSTANCE_ABI_H */
