/* @file
 * The argument struct of convolution instances (families conv_fprop, conv_dgrad, conv_wgrad): the
 * same cuactor_gemm_instance object and entry points as GEMM (instance_abi.h), with this struct
 * behind `args`. Tensors are packed: activations N x H x W x C and filters K x R x S x C with the
 * channels contiguous. */
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
} cuactor_conv_args;

#ifdef __cplusplus
}
#endif

#endif /* CUACTOR_KERNELS_CONV_INSTANCE_ABI_H */
