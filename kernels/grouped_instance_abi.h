/* @file
 * Argument struct of the grouped-GEMM family ("grouped" SKUs) for the instance ABI of
 * instance_abi.h. Every per-group quantity is a device pointer: no host shapes cross this ABI, so
 * a launch needs no host synchronisation and shapes may be written by an earlier kernel. */
#ifndef CUACTOR_KERNELS_GROUPED_INSTANCE_ABI_H
#define CUACTOR_KERNELS_GROUPED_INSTANCE_ABI_H

#include "kernels/instance_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Arguments of one grouped launch: D[g] = alpha[g] * A[g] B[g] + beta * C[g]. Every array holds
 *  group_count entries in device memory; leading dimensions count elements. */
typedef struct cuactor_grouped_args {
  int group_count;                /**< Number of groups (groups with M = 0 are skipped). */
  const int32_t* problem_shapes;  /**< {M, N, K} per group; K must be >= 1 (K = 0 is done apart). */
  const void* const* ptr_a;       /**< A[g], row-major M x K. */
  const void* const* ptr_b;       /**< B[g], N x K row-major (layout "col") or K x N row-major ("row"). */
  const void* const* ptr_c;       /**< C[g], row-major M x N, read only when beta != 0 (pass D otherwise). */
  void* const* ptr_d;             /**< D[g], row-major M x N (M x N/2 under a swiglu root). */
  const int64_t* ld_a;            /**< Leading dimension of A[g]. */
  const int64_t* ld_b;            /**< Leading dimension of B[g]. */
  const int64_t* ld_c;            /**< Leading dimension of C[g]. */
  const int64_t* ld_d;            /**< Leading dimension of D[g]. */
  float alpha;                    /**< Alpha of every group unless alpha_per_group is set. */
  float beta;                     /**< Beta of every group. */
  const float* alpha_per_group;   /**< Optional alpha[g] in device memory (fp8 scales folded in). */
  int device;                     /**< Ordinal of the device the kernel runs on. */
  int sm_count;                   /**< Its multiprocessor count: persistent grid and scratch size. */
  cuactor_epilogue_args epilogue; /**< Operands of an epilogue tree (vectors: one pointer per group). */
} cuactor_grouped_args;

#ifdef __cplusplus
}
#endif

#endif /* CUACTOR_KERNELS_GROUPED_INSTANCE_ABI_H */
