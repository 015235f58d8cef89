/* @file
 * The C ABI between one compiled CUTLASS kernel instance and the catalog / JIT loader. Plain C,
 * no CUTLASS or CUDA headers: an ahead-of-time instance is linked into cuactor_kernels and listed
 * in the generated catalog table, a run-time instance is a shared object loaded with dlopen; both
 * expose one `cuactor_gemm_instance` object whose symbol name the generator chose.
 *
 * Every entry point takes a pointer to its family's argument struct (cuactor_dense_args here,
 * cuactor_grouped_args in grouped_instance_abi.h) and checks `args_size` against its own build. */
#ifndef CUACTOR_KERNELS_INSTANCE_ABI_H
#define CUACTOR_KERNELS_INSTANCE_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Version of this ABI; a loader rejects an instance built against another one (4: dense
 *  arguments gain programmatic_launch). */
#define CUACTOR_KERNEL_ABI_VERSION 4u

/** Status codes returned by the entry points (0 is success). */
enum cuactor_kernel_status {
  CUACTOR_KERNEL_OK = 0,                  /**< Success. */
  CUACTOR_KERNEL_NOT_IMPLEMENTABLE = 1,   /**< CUTLASS rejected the problem (alignment, shape). */
  CUACTOR_KERNEL_WORKSPACE_TOO_SMALL = 2, /**< The workspace given is smaller than workspace_size(). */
  CUACTOR_KERNEL_INIT_FAILED = 3,         /**< Building the kernel parameters failed. */
  CUACTOR_KERNEL_LAUNCH_FAILED = 4,       /**< The launch failed (see cudaGetLastError semantics). */
  CUACTOR_KERNEL_BAD_ARGS = 5             /**< The argument struct's size does not match this build. */
};

/** Description of the SKU an instance implements, as the tokens GemmSku::parse understands
 *  (family "dense", arch "sm_90a", dtypes "bf16"/"f16"/"f32"/"e4m3", layouts "row"/"col",
 *  schedule "cooperative"/"pingpong"/..., epilogue "linear_combination"/...). */
typedef struct cuactor_gemm_sku_desc {
  const char* family;
  const char* arch;
  const char* element_a;
  const char* element_b;
  const char* element_c;
  const char* element_d;
  const char* element_accumulator;
  const char* layout_a;
  const char* layout_b;
  const char* layout_c;
  int tile_m, tile_n, tile_k;
  int cluster_m, cluster_n, cluster_k;
  int stages; /**< Mainloop stages; 0 means chosen by the collective builder. */
  const char* schedule;
  const char* epilogue;
} cuactor_gemm_sku_desc;

/** One compiled kernel configuration. `args` points to the family's argument struct. */
typedef struct cuactor_gemm_instance {
  uint32_t abi_version;      /**< CUACTOR_KERNEL_ABI_VERSION of the instance's build. */
  uint32_t args_size;        /**< sizeof of the family's argument struct in the instance's build. */
  cuactor_gemm_sku_desc sku; /**< What this instance computes. */
  /** CUACTOR_KERNEL_OK if the kernel can run this problem (host only, no device access). */
  int (*can_implement)(const void* args);
  /** Scratch bytes run() needs for this problem (host only). */
  size_t (*workspace_size)(const void* args);
  /** Builds the parameters on the host and enqueues the kernel on `stream` (a cudaStream_t);
   *  no allocation, no synchronisation, so it can be captured into a graph. */
  int (*run)(const void* args, void* workspace, size_t workspace_bytes, void* stream);
} cuactor_gemm_instance;

/** Run-time operands of an epilogue tree (EpilogueSpec); instances with a preset epilogue ignore
 *  them. Dense GEMM: each vector is one device pointer, shared by every batch. Grouped GEMM: each
 *  vector is a device array of group_count pointers (one vector per group). */
typedef struct cuactor_epilogue_args {
  const void* row_scale;  /**< rowscale: f32, one value per output row. */
  const void* col_scale;  /**< colscale: f32, one value per output column. */
  const void* row_bias;   /**< rowbias: element C, one value per output row. */
  const void* col_bias;   /**< colbias: element C, one value per output column. */
  float* amax;            /**< amax: f32 in device memory, max-reduced atomically (zeroed by the launch). */
  float clamp_lo;         /**< clamp: lower bound. */
  float clamp_hi;         /**< clamp: upper bound. */
  const float* alpha_ptr; /**< Dense trees: device alpha read instead of `alpha` when set. */
  const float* beta_ptr;  /**< Dense trees: device beta read instead of `beta` when set. */
  void* aux;              /**< aux (dense): element C, laid out like D (ldd, batch_stride_d). */
  float* row_sum;         /**< rowsum (dense): f32, m values per batch, sums added atomically (zeroed by the launch). */
} cuactor_epilogue_args;

/** Arguments of a dense (optionally batched) GEMM: D = alpha * scale_a * scale_b * A B + beta * C.
 *  A is M x K, B is K x N, C and D are M x N, each stored as its SKU's layout says; leading
 *  dimensions and batch strides count elements. */
typedef struct cuactor_dense_args {
  int m, n, k;
  int batch; /**< Number of GEMMs, at least 1. */
  const void* a;
  const void* b;
  const void* c; /**< May equal d; must be non-null (pass d when beta is 0). */
  void* d;
  int64_t lda, ldb, ldc, ldd;
  int64_t batch_stride_a, batch_stride_b, batch_stride_c, batch_stride_d;
  float alpha;
  float beta;
  const float* scale_a;           /**< Device pointer to A's per-tensor scale (scaled epilogues), or null for 1. */
  const float* scale_b;           /**< Device pointer to B's per-tensor scale (scaled epilogues), or null for 1. */
  int device;                     /**< Ordinal of the device the kernel runs on. */
  int sm_count;                   /**< Its multiprocessor count (0: queried by the instance). */
  int max_swizzle;                /**< sm_90a tile rasterisation swizzle (1, 2, 4, 8; 0: CUTLASS's default 1). */
  int raster_order;               /**< sm_90a raster order: 0 heuristic, 1 along M, 2 along N. */
  int programmatic_launch;        /**< sm_90a: nonzero launches the kernel as a programmatic dependent of the
                                       stream's previous kernel (its prologue overlaps that kernel's tail; its
                                       operands are read and written only after griddepcontrol.wait, device
                                       scalars excepted: set it only when scale_a, scale_b and the epilogue's
                                       alpha_ptr and beta_ptr are null).
                                       Kernels built without grid dependency control (stream-K, sm_80)
                                       launch plainly whatever it says. */
  cuactor_epilogue_args epilogue; /**< Operands of an epilogue tree. */
} cuactor_dense_args;

#ifdef __cplusplus
}
#endif

#endif /* CUACTOR_KERNELS_INSTANCE_ABI_H */
