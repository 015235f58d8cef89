# The ahead-of-time kernel catalog ([J1] Strategy B): each cuactor_gemm_instance() call below is one
# matrix entry. It renders an instantiation template (kernels/*.cu.in, the same text the JIT renders
# at run time) with SKU tokens, compiles it as its own object library for its architectures, and
# registers its C ABI object in the generated catalog table (catalog_table.cpp).
#
# Budget: one sm_90a configuration costs 85-105 s of nvcc on one core of the CI machine (cicc about half,
# host code the rest) and ~3.3 GB; the whole matrix (111 instances; 142 now) took 90 minutes on its 2 cores. CI has
# no GPU, so scripts/test compiles there only the 15 entries marked SAMPLE (CUACTOR_CATALOG=sample): a
# compile check of each instance template, of cuactor's conv kernels, of the cooperative and pingpong
# mainloops, of fp8, an epilogue tree and the SwiGLU store (not of every tile, f16 twin or grouped fp8);
# scripts/gpu-check compiles and runs the whole matrix. Mark a new template's or kernel's first entry
# SAMPLE. Stream-K configurations (cooperative_streamk) come through the JIT when the tuning database
# picks them.
# CUACTOR_KERNEL_ARCHS ("sm90a;sm80") selects which architecture families are compiled at all, and
# CUACTOR_CATALOG_FILTER (a regular expression on the symbol) which instances, for targeted builds.

set(CUACTOR_KERNELS_TEMPLATE_DIR ${CMAKE_CURRENT_LIST_DIR})

# cuactor_gemm_instance(FAMILY <dense|grouped|...> ARCH <sm_90a|sm_80> TEMPLATE <file.cu.in>
#   TYPES <a> <b> <c> <d> <accumulator> LAYOUTS <a> <b> <c> TILE <m> <n> <k> CLUSTER <m> <n> <k>
#   [STAGES <n>] SCHEDULE <token> EPILOGUE <token> [VARS NAME=VALUE ...] [SAMPLE])
# SAMPLE: also compiled by a CUACTOR_CATALOG=sample build.
# Placeholders set for the template: @FAMILY@ @ARCH@ @ELEMENT_A@ @ELEMENT_B@ @ELEMENT_C@ @ELEMENT_D@
# @ELEMENT_ACC@ @LAYOUT_A@ @LAYOUT_B@ @LAYOUT_C@ @TILE_M@ @TILE_N@ @TILE_K@ @CLUSTER_M@ @CLUSTER_N@
# @CLUSTER_K@ @STAGES@ @SCHEDULE@ @EPILOGUE@ @SYMBOL@, plus any VARS.
function(cuactor_gemm_instance)
  cmake_parse_arguments(ARG "SAMPLE" "FAMILY;ARCH;TEMPLATE;STAGES;SCHEDULE;EPILOGUE"
                        "TYPES;LAYOUTS;TILE;CLUSTER;VARS" ${ARGN})
  string(REPLACE "_" "" arch_key "${ARG_ARCH}")
  if(NOT arch_key IN_LIST CUACTOR_KERNEL_ARCHS)
    return()
  endif()
  if(ARG_ARCH STREQUAL "sm_90a")
    set(cuda_archs 90a-real)
  elseif(ARG_ARCH STREQUAL "sm_80")
    set(cuda_archs 80-real 90-real)  # Ampere/Ada path; also runs (and is tested) on Hopper
  else()
    message(FATAL_ERROR "cuactor_gemm_instance: no CUDA architectures known for ${ARG_ARCH}")
  endif()
  if(NOT DEFINED ARG_STAGES)
    set(ARG_STAGES 0)
  endif()
  set(FAMILY ${ARG_FAMILY})
  set(ARCH ${ARG_ARCH})
  list(GET ARG_TYPES 0 ELEMENT_A)
  list(GET ARG_TYPES 1 ELEMENT_B)
  list(GET ARG_TYPES 2 ELEMENT_C)
  list(GET ARG_TYPES 3 ELEMENT_D)
  list(GET ARG_TYPES 4 ELEMENT_ACC)
  list(GET ARG_LAYOUTS 0 LAYOUT_A)
  list(GET ARG_LAYOUTS 1 LAYOUT_B)
  list(GET ARG_LAYOUTS 2 LAYOUT_C)
  list(GET ARG_TILE 0 TILE_M)
  list(GET ARG_TILE 1 TILE_N)
  list(GET ARG_TILE 2 TILE_K)
  list(GET ARG_CLUSTER 0 CLUSTER_M)
  list(GET ARG_CLUSTER 1 CLUSTER_N)
  list(GET ARG_CLUSTER 2 CLUSTER_K)
  set(STAGES ${ARG_STAGES})
  set(SCHEDULE ${ARG_SCHEDULE})
  set(EPILOGUE "${ARG_EPILOGUE}")
  # An epilogue tree "silu(add(acc,colbias))" names the C++ type silu<add<acc,colbias>> of
  # gemm_tags.cuh and the symbol fragment silu_add_acc_colbias (EpilogueSpec::cxx_type/symbol_key).
  string(REGEX REPLACE "([a-z0-9_]+)" "cuactor::kernels::tags::\\1" EPILOGUE_TYPE "${EPILOGUE}")
  string(REPLACE "(" "<" EPILOGUE_TYPE "${EPILOGUE_TYPE}")
  string(REPLACE ")" ">" EPILOGUE_TYPE "${EPILOGUE_TYPE}")
  string(REGEX REPLACE "[(),]+" "_" epilogue_key "${EPILOGUE}")
  string(REGEX REPLACE "_$" "" epilogue_key "${epilogue_key}")
  foreach(var IN LISTS ARG_VARS)
    string(REGEX MATCH "^([A-Za-z0-9_]+)=(.*)$" _ "${var}")
    set(${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
  endforeach()
  string(SUBSTRING ${LAYOUT_A} 0 1 la)
  string(SUBSTRING ${LAYOUT_B} 0 1 lb)
  string(SUBSTRING ${LAYOUT_C} 0 1 lc)
  # Must stay equal to GemmSku::symbol_name() (tested), so the JIT can name the same configuration.
  set(SYMBOL "cuactor_gemm_${FAMILY}_${arch_key}_${ELEMENT_A}_${ELEMENT_B}_${ELEMENT_C}_${ELEMENT_D}_${ELEMENT_ACC}")
  string(APPEND SYMBOL "_${la}${lb}${lc}_${TILE_M}x${TILE_N}x${TILE_K}_${CLUSTER_M}x${CLUSTER_N}x${CLUSTER_K}")
  string(APPEND SYMBOL "_s${STAGES}_${SCHEDULE}_${epilogue_key}")
  if(NOT CUACTOR_CATALOG_FILTER STREQUAL "" AND NOT SYMBOL MATCHES "${CUACTOR_CATALOG_FILTER}")
    return()
  endif()
  if(CUACTOR_CATALOG STREQUAL "sample" AND NOT ARG_SAMPLE)
    return()
  endif()
  set(source ${CMAKE_CURRENT_BINARY_DIR}/instances/${SYMBOL}.cu)
  configure_file(${CUACTOR_KERNELS_TEMPLATE_DIR}/${ARG_TEMPLATE} ${source} @ONLY)
  add_library(${SYMBOL} OBJECT ${source})
  set_target_properties(${SYMBOL} PROPERTIES CUDA_ARCHITECTURES "${cuda_archs}" POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${SYMBOL} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${SYMBOL} PRIVATE cuactor_cutlass)
  set_property(GLOBAL APPEND PROPERTY CUACTOR_GEMM_INSTANCES ${SYMBOL})
endfunction()

# cuactor_sample_if(<out> <condition>...): sets <out> to SAMPLE where the if() condition holds (evaluated
# in the caller's variables, e.g. a foreach variable), else to nothing; pass ${<out>} to cuactor_gemm_instance.
function(cuactor_sample_if out)
  if(${ARGN})
    set(${out} SAMPLE PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# Generates the catalog table (every registered instance's ABI object) and links the instances into
# `target`.
function(cuactor_gemm_catalog_finalize target)
  get_property(instances GLOBAL PROPERTY CUACTOR_GEMM_INSTANCES)
  set(decls "")
  set(entries "")
  foreach(symbol IN LISTS instances)
    string(APPEND decls "extern const cuactor_gemm_instance ${symbol};\n")
    string(APPEND entries "    &${symbol},\n")
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:${symbol}>)
  endforeach()
  set(table ${CMAKE_CURRENT_BINARY_DIR}/catalog_table.cpp)
  file(CONFIGURE OUTPUT ${table} CONTENT [=[
// Generated by kernels/catalog.cmake: the ahead-of-time kernel instances compiled into this build.
#include "cuactor/kernels/catalog.hpp"
#include "kernels/instance_abi.h"

extern "C" {
@decls@}

namespace cuactor::kernels::detail {
// Null-terminated so that an empty catalog is still a valid array.
extern const cuactor_gemm_instance* const catalog_instances[];
const cuactor_gemm_instance* const catalog_instances[] = {
@entries@    nullptr,
};
// Which part of the matrix this build compiled.
extern const CatalogScope catalog_scope;
const CatalogScope catalog_scope = CatalogScope::@CUACTOR_CATALOG_SCOPE@;
}  // namespace cuactor::kernels::detail
]=] @ONLY)
  target_sources(${target} PRIVATE ${table})
endfunction()

# ---- The matrix: dense GEMM (sm_90a: tokens of kernels/gemm_tags.cuh) ----
set(dense90 FAMILY dense ARCH sm_90a TEMPLATE dense_sm90_instance.cu.in)
# bf16, large M: cooperative 128x256x64, cluster 2x1; A row-major, B as N x K ("TN") or K x N.
cuactor_gemm_instance(${dense90} TYPES bf16 bf16 bf16 bf16 f32 LAYOUTS row col row TILE 128 256 64 CLUSTER 2 1 1
                      SCHEDULE cooperative EPILOGUE linear_combination SAMPLE)
cuactor_gemm_instance(${dense90} TYPES bf16 bf16 bf16 bf16 f32 LAYOUTS row row row TILE 128 256 64 CLUSTER 2 1 1
                      SCHEDULE cooperative EPILOGUE linear_combination)
# bf16 in, fp32 out.
cuactor_gemm_instance(${dense90} TYPES bf16 bf16 f32 f32 f32 LAYOUTS row col row TILE 128 256 64 CLUSTER 2 1 1
                      SCHEDULE cooperative EPILOGUE linear_combination)
# bf16 and fp16, large M: pingpong 128x128x64, cluster 2x1, both B layouts. Each consumer warpgroup
# holds a 128x128 accumulator (as in the cooperative 128x256 tile) and runs its epilogue while the other
# runs its mainloop: 2-12% ahead of the cooperative tile on 6 of 7 large bf16 shapes (H200, session 36),
# and the schedule that hides an epilogue tree's arithmetic (GemmPlan's estimated_cost prefers it, except
# over K > 8192 and on M*N*K >= 1.5e12, where the cooperative tile held up and it did not).
foreach(t bf16 f16)
  foreach(lb col row)
    cuactor_gemm_instance(${dense90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS row ${lb} row TILE 128 128 64 CLUSTER 2 1 1
                          SCHEDULE pingpong EPILOGUE linear_combination)
  endforeach()
endforeach()
# bf16, small M (decode): pingpong 64x128x128.
cuactor_gemm_instance(${dense90} TYPES bf16 bf16 bf16 bf16 f32 LAYOUTS row col row TILE 64 128 128 CLUSTER 1 1 1
                      SCHEDULE pingpong EPILOGUE linear_combination)
# fp16, small M (decode): pingpong 64x128x128 (without it f16 decode ran the large tile at 0.62x cuBLAS).
cuactor_gemm_instance(${dense90} TYPES f16 f16 f16 f16 f32 LAYOUTS row col row TILE 64 128 128 CLUSTER 1 1 1
                      SCHEDULE pingpong EPILOGUE linear_combination)
# bf16 and fp16, small M on grids of at most half the SMs in 64x128 tiles: the 64-deep pingpong tile
# (more stages in flight per CTA over a long K; GemmPlan's small_m_tile_k says where).
# And on such grids the 64x64x64 tile (GemmPlan's heuristic_candidate): twice the CTAs streaming B; its
# float32-output twin writes the K slices of a split-K plan on the smallest grids.
foreach(t bf16 f16)
  cuactor_gemm_instance(${dense90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS row col row TILE 64 128 64 CLUSTER 1 1 1
                        SCHEDULE pingpong EPILOGUE linear_combination)
  cuactor_gemm_instance(${dense90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS row col row TILE 64 64 64 CLUSTER 1 1 1
                        SCHEDULE pingpong EPILOGUE linear_combination)
  cuactor_gemm_instance(${dense90} TYPES ${t} ${t} f32 f32 f32 LAYOUTS row col row TILE 64 64 64 CLUSTER 1 1 1
                        SCHEDULE pingpong EPILOGUE linear_combination)
endforeach()
# bf16 and fp16 decode of up to 32 rows, swapped (GemmPlan's swap_ab): D^T = B^T A^T with 64 rows of the
# weight over N and 16 or 32 columns over the rows, D read column-major, 128 deep; 64-deep float32 twins
# for split-K slices.
foreach(t bf16 f16)
  foreach(tn 16 32)
    cuactor_gemm_instance(${dense90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS row col col TILE 64 ${tn} 128
                          CLUSTER 1 1 1 SCHEDULE pingpong EPILOGUE linear_combination)
    cuactor_gemm_instance(${dense90} TYPES ${t} ${t} f32 f32 f32 LAYOUTS row col col TILE 64 ${tn} 64
                          CLUSTER 1 1 1 SCHEDULE pingpong EPILOGUE linear_combination)
  endforeach()
endforeach()
# bf16 and fp16 problems of at most 32 columns (GemmPlan's narrow_kernel: router logits, low-rank
# projections): the swapped decode tiles above with D row-major, 64x16x128 and 64x32x128; 64-deep
# float32 twins for their split-K slices (narrow_split_for).
foreach(t bf16 f16)
  foreach(tn 16 32)
    cuactor_sample_if(sample t STREQUAL bf16 AND tn EQUAL 16)
    cuactor_gemm_instance(${dense90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS row col row TILE 64 ${tn} 128
                          CLUSTER 1 1 1 SCHEDULE pingpong EPILOGUE linear_combination ${sample})
    cuactor_gemm_instance(${dense90} TYPES ${t} ${t} f32 f32 f32 LAYOUTS row col row TILE 64 ${tn} 64
                          CLUSTER 1 1 1 SCHEDULE pingpong EPILOGUE linear_combination)
  endforeach()
endforeach()
# bf16 and fp16 pingpong 64x32x64: pointwise convolutions (1x1, unit stride, unpadded fprop) on grids of
# few tiles over long reductions, which ConvPlan runs as this GEMM (1.03-1.14x its conv kernels there);
# GemmPlan's heuristic leaves this tile alone (its narrow-column plans take the 128-deep ones above).
cuactor_gemm_instance(${dense90} TYPES bf16 bf16 bf16 bf16 f32 LAYOUTS row col row TILE 64 32 64 CLUSTER 1 1 1
                      SCHEDULE pingpong EPILOGUE linear_combination)
cuactor_gemm_instance(${dense90} TYPES f16 f16 f16 f16 f32 LAYOUTS row col row TILE 64 32 64 CLUSTER 1 1 1
                      SCHEDULE pingpong EPILOGUE linear_combination)
# fp16, large M, both B layouts.
cuactor_gemm_instance(${dense90} TYPES f16 f16 f16 f16 f32 LAYOUTS row col row TILE 128 256 64 CLUSTER 2 1 1
                      SCHEDULE cooperative EPILOGUE linear_combination)
cuactor_gemm_instance(${dense90} TYPES f16 f16 f16 f16 f32 LAYOUTS row row row TILE 128 256 64 CLUSTER 2 1 1
                      SCHEDULE cooperative EPILOGUE linear_combination)
# fp8 e4m3 (TN only), per-tensor scales, fast accumulation, bf16 out: large M and decode.
cuactor_gemm_instance(${dense90} TYPES e4m3 e4m3 bf16 bf16 f32 LAYOUTS row col row TILE 256 128 128 CLUSTER 1 2 1
                      SCHEDULE cooperative_fp8_fast_accum EPILOGUE scaled_linear_combination)
cuactor_gemm_instance(${dense90} TYPES e4m3 e4m3 bf16 bf16 f32 LAYOUTS row col row TILE 64 128 128 CLUSTER 1 1 1
                      SCHEDULE pingpong_fp8_fast_accum EPILOGUE scaled_linear_combination SAMPLE)
# e4m3 decode of up to 32 rows (64 on grids of few tiles), swapped like the 16-bit ones above: 64 rows of the weight over N, 16 or 32
# columns over the rows, bf16 D read column-major, 256 deep (the bytes of their 128-deep tile). Unswapped,
# 16 rows over N = 8192 ran on 64 CTAs of the 64x128 tile at 0.80x cuBLASLt (H200).
foreach(tn 16 32)
  cuactor_sample_if(sample tn EQUAL 16)
  cuactor_gemm_instance(${dense90} TYPES e4m3 e4m3 bf16 bf16 f32 LAYOUTS row col col TILE 64 ${tn} 256 CLUSTER 1 1 1
                        SCHEDULE pingpong_fp8_fast_accum EPILOGUE scaled_linear_combination ${sample})
endforeach()

# ---- dense GEMM, sm_80 (CUTLASS 2.x; 96 KiB of shared memory so it fits Ada/GA10x too) ----
# Epilogue trees ([K8]) ahead of time for the common layers: Linear bias + activation (bf16), and
# fp8 row-wise scaling (per-token x per-channel scales) + bias. Any other tree goes through the JIT.
# Pingpong 128x128 (above): one warpgroup's epilogue runs under the other's mainloop.
foreach(act silu gelu relu)
  cuactor_sample_if(sample act STREQUAL silu)
  cuactor_gemm_instance(${dense90} TYPES bf16 bf16 bf16 bf16 f32 LAYOUTS row col row TILE 128 128 64 CLUSTER 2 1 1
                        SCHEDULE pingpong EPILOGUE "${act}(add(acc,colbias))" ${sample})
endforeach()
cuactor_gemm_instance(${dense90} TYPES e4m3 e4m3 bf16 bf16 f32 LAYOUTS row col row TILE 256 128 128 CLUSTER 1 2 1
                      SCHEDULE cooperative_fp8_fast_accum EPILOGUE "add(mul(mul(acc,rowscale),colscale),colbias)")

set(dense80 FAMILY dense ARCH sm_80 TEMPLATE dense_sm80_instance.cu.in CLUSTER 1 1 1 STAGES 3
            SCHEDULE multistage EPILOGUE linear_combination)
cuactor_gemm_instance(${dense80} TYPES bf16 bf16 bf16 bf16 f32 LAYOUTS row col row TILE 128 128 64 SAMPLE)
cuactor_gemm_instance(${dense80} TYPES bf16 bf16 bf16 bf16 f32 LAYOUTS row row row TILE 128 128 64)
cuactor_gemm_instance(${dense80} TYPES f16 f16 f16 f16 f32 LAYOUTS row col row TILE 128 128 64)

# ---- The matrix: grouped GEMM (sm_90a ptr-array kernels, launched without host problem shapes) ----
set(grouped90 FAMILY grouped ARCH sm_90a TEMPLATE grouped_instance.cu.in)
# The expert FFN's down projection: each row scaled by its routing weight in the epilogue ([K8]).
foreach(t bf16 f16)
  cuactor_sample_if(sample t STREQUAL bf16)  # so that a sample build can plan the expert FFN
  cuactor_gemm_instance(${grouped90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS row col row TILE 128 256 64 CLUSTER 1 1 1
                        SCHEDULE cooperative EPILOGUE "mul(acc,rowscale)" ${sample})
endforeach()
cuactor_gemm_instance(${grouped90} TYPES bf16 bf16 bf16 bf16 f32 LAYOUTS row col row TILE 64 128 128 CLUSTER 1 1 1
                      SCHEDULE pingpong EPILOGUE "mul(acc,rowscale)")
# The expert FFN's gate/up projection with the SwiGLU fused (interleaved gate/up weights, GateUpLayout):
# the root swiglu pairs columns 2j and 2j + 1 and writes D at half width. The FFN fuses it where the
# swiglu form of its size class's kernel is here (MoeExpertFfn::create): decode and medium in bf16 and
# f16, large (cooperative) in bf16 only, to keep the catalog's build time; other tiles and trees through
# the JIT. Also the medium-class down projection.
cuactor_gemm_instance(${grouped90} TYPES bf16 bf16 bf16 bf16 f32 LAYOUTS row col row TILE 64 256 64 CLUSTER 1 1 1
                      SCHEDULE pingpong EPILOGUE "mul(acc,rowscale)")
foreach(t bf16 f16)
  cuactor_sample_if(sample t STREQUAL bf16)
  cuactor_gemm_instance(${grouped90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS row col row TILE 64 256 64 CLUSTER 1 1 1
                        SCHEDULE pingpong EPILOGUE "swiglu(acc)" ${sample})
  cuactor_gemm_instance(${grouped90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS row col row TILE 64 128 128 CLUSTER 1 1 1
                        SCHEDULE pingpong EPILOGUE "swiglu(acc)")
endforeach()
cuactor_gemm_instance(${grouped90} TYPES bf16 bf16 bf16 bf16 f32 LAYOUTS row col row TILE 128 256 64 CLUSTER 1 1 1
                      SCHEDULE cooperative EPILOGUE "swiglu(acc)")
# 16-bit, large M: cooperative 128x256x64 without a cluster (the 2x1 cluster measured 0.86-1.03x of it
# in session 15's sweeps); medium M (65..128 rows, N and K <= 4096): pingpong 64x256x64; small M
# (decode): pingpong 64x128x128 (GroupedSizeClass).
foreach(t bf16 f16)
  cuactor_sample_if(sample t STREQUAL bf16)
  cuactor_gemm_instance(${grouped90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS row col row TILE 128 256 64 CLUSTER 1 1 1
                        SCHEDULE cooperative EPILOGUE linear_combination ${sample})
  cuactor_gemm_instance(${grouped90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS row col row TILE 64 256 64 CLUSTER 1 1 1
                        SCHEDULE pingpong EPILOGUE linear_combination)
  cuactor_gemm_instance(${grouped90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS row col row TILE 64 128 128 CLUSTER 1 1 1
                        SCHEDULE pingpong EPILOGUE linear_combination)
endforeach()
# bf16 with B as K x N row-major, and bf16 inputs with f32 output.
cuactor_gemm_instance(${grouped90} TYPES bf16 bf16 bf16 bf16 f32 LAYOUTS row row row TILE 128 256 64 CLUSTER 1 1 1
                      SCHEDULE cooperative EPILOGUE linear_combination)
cuactor_gemm_instance(${grouped90} TYPES bf16 bf16 f32 f32 f32 LAYOUTS row col row TILE 128 256 64 CLUSTER 1 1 1
                      SCHEDULE cooperative EPILOGUE linear_combination)
# fp8 e4m3, TN only, bf16 out, per-tensor scales folded into alpha[g]: 256x128x128 cluster 1x2 / pingpong.
cuactor_gemm_instance(${grouped90} TYPES e4m3 e4m3 bf16 bf16 f32 LAYOUTS row col row TILE 256 128 128 CLUSTER 1 2 1
                      SCHEDULE cooperative_fp8_fast_accum EPILOGUE scaled_linear_combination)
cuactor_gemm_instance(${grouped90} TYPES e4m3 e4m3 bf16 bf16 f32 LAYOUTS row col row TILE 64 256 128 CLUSTER 1 1 1
                      SCHEDULE pingpong_fp8_fast_accum EPILOGUE scaled_linear_combination)
cuactor_gemm_instance(${grouped90} TYPES e4m3 e4m3 bf16 bf16 f32 LAYOUTS row col row TILE 64 128 128 CLUSTER 1 1 1
                      SCHEDULE pingpong_fp8_fast_accum EPILOGUE scaled_linear_combination)
# fp8 e4m3 with row-wise scales, torch._scaled_grouped_mm's form: D[m, n] = acc * scale_a[m] * scale_b[g, n]
# (rowscale: one float per packed row; colscale: one row of N per group), in each size class's tile.
foreach(tile "256 128 128 CLUSTER 1 2 1 SCHEDULE cooperative_fp8_fast_accum"
             "64 256 128 CLUSTER 1 1 1 SCHEDULE pingpong_fp8_fast_accum"
             "64 128 128 CLUSTER 1 1 1 SCHEDULE pingpong_fp8_fast_accum")
  separate_arguments(tile)
  cuactor_gemm_instance(${grouped90} TYPES e4m3 e4m3 bf16 bf16 f32 LAYOUTS row col row TILE ${tile}
                        EPILOGUE "mul(mul(acc,rowscale),colscale)")
endforeach()
# sm_80 (CUTLASS 2.x, Ampere/Ada; also runs on Hopper): 16-bit TN grouped, 128x128x32, 4 stages.
foreach(t bf16 f16)
  cuactor_sample_if(sample t STREQUAL bf16)
  cuactor_gemm_instance(FAMILY grouped ARCH sm_80 TEMPLATE grouped_sm80_instance.cu.in TYPES ${t} ${t} ${t} ${t} f32
                        LAYOUTS row col row TILE 128 128 32 CLUSTER 1 1 1 STAGES 4 SCHEDULE multistage
                        EPILOGUE linear_combination ${sample})
endforeach()

# ---- The matrix: 2-D convolution, sm_90a implicit GEMM (TMA im2col; CUTLASS 4.2's one sm_90a conv
# schedule). 128x128 tiles, K step 64 for 16-bit and 32 for fp32 (tf32); fprop and dgrad also
# 128x64 for narrow outputs (K resp. C <= 64 filled half a 128-wide tile: 0.57x cuDNN at C=K=64 on an
# H100), wgrad 64x128 for few filters (K <= 64, or K a multiple of 64 that 128 rows would leave a
# wave short) and 64x64 for few filters of few channels: wgrad tiles cover the channels of one filter
# tap, so C = 64 half-fills a 128-wide tile (64x64 ran 1.37-1.61x faster than 64x128 at C = K = 64,
# bf16 on an H100). Wgrad instances hold two kernels: the direct one and the fp32-partial one of a
# split reduction. Other tiles come through the JIT (cuactor jit warm --conv SKU).
set(conv90 ARCH sm_90a TEMPLATE conv_sm90_instance.cu.in CLUSTER 1 1 1 SCHEDULE warpspecialized
           EPILOGUE linear_combination)
foreach(t bf16 f16)
  cuactor_sample_if(sample t STREQUAL bf16)
  cuactor_gemm_instance(FAMILY conv_fprop ${conv90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc krsc nhwc
                        TILE 128 128 64 ${sample})
  cuactor_gemm_instance(FAMILY conv_dgrad ${conv90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc krsc nhwc
                        TILE 128 128 64)
  cuactor_gemm_instance(FAMILY conv_wgrad ${conv90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc nhwc krsc
                        TILE 128 128 64)
  cuactor_gemm_instance(FAMILY conv_fprop ${conv90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc krsc nhwc
                        TILE 128 64 64)
  cuactor_gemm_instance(FAMILY conv_dgrad ${conv90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc krsc nhwc
                        TILE 128 64 64)
  cuactor_gemm_instance(FAMILY conv_wgrad ${conv90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc nhwc krsc
                        TILE 64 128 64)
  cuactor_gemm_instance(FAMILY conv_wgrad ${conv90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc nhwc krsc
                        TILE 64 64 64)
  # fprop grids that leave most multiprocessors idle even in 64x128 tiles (few pixels, many channels).
  cuactor_gemm_instance(FAMILY conv_fprop ${conv90} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc krsc nhwc
                        TILE 64 64 64)
endforeach()
# Two consumer warpgroups per tile (cuactor's cooperative ProducerConsumerConvKernel): 256x128 tiles for large outputs;
# for fprop and dgrad also in 1x2 clusters (the two CTAs of a row band share the activation tile by
# multicast) and 256x64 tiles. Measured on an H100 (bf16, beside cuDNN): the 1x2 cluster lifts 256x128
# fprop and dgrad by 1.10-1.13x on grids of two waves or more and loses when the grid is a wave or
# less; 256x64 lifts fprop and dgrad with 64 output channels by 1.11-1.21x over 128x64. (A 2x1
# cluster gained nothing, nor did these wgrad tiles: cooperative 128x256, 0.30-1.01x of the plan's
# choice; cooperative 128x128, as fast as one warpgroup's 128x128; 128x64, one warpgroup or two, at
# most 1.13x the plan's choice on one of 15 shapes and never chosen by its cost model. None is
# compiled.)
# Channel counts between the power-of-two widths (96, 160, 192, 288): 256x96 tiles where 96-wide
# columns pad the output channels enough less than 128-wide ones, and K steps of 32 where the reduced
# channels are an odd multiple of 32 (a 64-wide step half-empties each filter tap's last step); the
# plan's fits_channel_class says where. Measured on an H100 (bf16, session 21; the former plan's
# kernel, then the new tile, in one run beside cuDNN): 16x56x56x96 -> 96 3x3 fprop 0.73x -> 1.26x and
# dgrad 0.62x -> 1.02x (256x96x32), 8x64x64x160 -> 160 3x3 fprop 0.83x -> 0.95x, 16x28x28x224 -> 224
# dgrad 0.88x -> 1.02x (256x128x32). 128x96 and 128x128x32 tiles, one consumer warpgroup or pingpong,
# ran 0.52-1.22x the best of these (faster in 8 of 80 kernel-shape pairs) and are not compiled.
set(conv90coop ARCH sm_90a TEMPLATE conv_sm90_instance.cu.in CLUSTER 1 1 1 SCHEDULE cooperative
               EPILOGUE linear_combination)
set(conv90coop_pair ARCH sm_90a TEMPLATE conv_sm90_instance.cu.in CLUSTER 1 2 1 SCHEDULE cooperative
                    EPILOGUE linear_combination)
foreach(t bf16 f16)
  foreach(op conv_fprop conv_dgrad)
    cuactor_sample_if(sample t STREQUAL bf16 AND op STREQUAL conv_dgrad)
    cuactor_gemm_instance(FAMILY ${op} ${conv90coop} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc krsc nhwc
                          TILE 256 128 64)
    cuactor_gemm_instance(FAMILY ${op} ${conv90coop_pair} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc krsc nhwc
                          TILE 256 128 64 ${sample})
    cuactor_gemm_instance(FAMILY ${op} ${conv90coop} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc krsc nhwc
                          TILE 256 64 64)
    foreach(tile "256 96 64" "256 128 32" "256 96 32")
      separate_arguments(mnk UNIX_COMMAND "${tile}")
      cuactor_gemm_instance(FAMILY ${op} ${conv90coop} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc krsc nhwc
                            TILE ${mnk})
    endforeach()
  endforeach()
  cuactor_gemm_instance(FAMILY conv_wgrad ${conv90coop} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc nhwc krsc
                        TILE 256 128 64)
endforeach()
# Wgrad, coresident (cuactor's kernel: one producer and one consumer warpgroup per CTA, registers and
# shared memory for two CTAs per multiprocessor): grids of one to two waves of lone CTAs run as one
# wave. Beside cuDNN on an H100 (bf16): 2x64x64x320 -> 320 3x3 0.76x -> 0.85x (64x64), 4x32x32x640 ->
# 640 3x3 0.71x -> 0.80x (128x128). 64x128 never won; as fprop and dgrad kernels coresident tiles ran
# 0.58-1.04x the plans' choices, so none is compiled.
set(conv90cores ARCH sm_90a TEMPLATE conv_sm90_instance.cu.in CLUSTER 1 1 1 SCHEDULE coresident
                EPILOGUE linear_combination)
foreach(t bf16 f16)
  cuactor_sample_if(sample t STREQUAL bf16)
  cuactor_gemm_instance(FAMILY conv_wgrad ${conv90cores} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc nhwc krsc
                        TILE 128 128 64)
  cuactor_gemm_instance(FAMILY conv_wgrad ${conv90cores} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc nhwc krsc
                        TILE 64 64 64 ${sample})
endforeach()
# Pingpong (cuactor's persistent kernel: two consumer warpgroups take tiles in turn, one's epilogue
# hiding behind the other's mainloop). Beside cuDNN on an H100 (bf16, session 19): fprop and dgrad
# with short reductions over two tiles a multiprocessor or more, 32x56x56x64 -> 64 3x3 0.91x ->
# 1.12x (fprop, 128x64) and 0.81x -> 1.03x (dgrad), 64x28x28x128 -> 128 3x3 0.97x -> 1.20x (128x128);
# fprop and dgrad on one wave of 64x128 tiles, 8x14x14x512 -> 512 3x3 0.72x -> 1.09x (fprop) and
# 0.68x -> 0.91x (dgrad), 8x28x28x256 -> 512 s2 1.03x -> 1.26x (fprop); wgrad 4x32x32x640 -> 640
# 3x3 0.80x -> 0.91x (128x128). Wgrad 64x64, 64x128 and 128x64 never beat the plans' choices.
# 64x192 and 64x256 tiles (session 21) cover 192 or 256 output channels in one tile, so that each
# activation tile is loaded once (the former choice, then the new tile, in one run beside cuDNN):
# fprop 16x56x56x192 -> 192 1x1 0.74x -> 0.86x, 16x56x56x256 -> 256 1x1 0.85x -> 1.05x (dgrad 0.98x
# -> 1.19x), 8x28x28x192 -> 192 3x3 (one wave) 0.98x -> 1.41x. Cooperative 128x192 and 128x256 tiles
# ran 0.76-0.99x these where these win, and are not compiled.
set(conv90ping ARCH sm_90a TEMPLATE conv_sm90_instance.cu.in CLUSTER 1 1 1 SCHEDULE pingpong
               EPILOGUE linear_combination)
foreach(t bf16 f16)
  foreach(op conv_fprop conv_dgrad)
    foreach(tile "128 128" "128 64" "64 128" "64 192" "64 256")
      cuactor_sample_if(sample t STREQUAL bf16 AND op STREQUAL conv_fprop AND tile STREQUAL "128 64")
      separate_arguments(mn UNIX_COMMAND "${tile}")
      cuactor_gemm_instance(FAMILY ${op} ${conv90ping} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc krsc nhwc
                            TILE ${mn} 64 ${sample})
    endforeach()
  endforeach()
  cuactor_gemm_instance(FAMILY conv_wgrad ${conv90ping} TYPES ${t} ${t} ${t} ${t} f32 LAYOUTS nhwc nhwc krsc
                        TILE 128 128 64)
endforeach()
cuactor_gemm_instance(FAMILY conv_fprop ${conv90} TYPES f32 f32 f32 f32 f32 LAYOUTS nhwc krsc nhwc TILE 128 128 32)
# sm_80 (CUTLASS 2.x implicit GEMM; also runs on Hopper): strided dgrad, which the sm_90a kernels do
# not compute (CUTLASS's strided-dgrad kernel visits each output phase's filter taps), 128x128x64 with
# 3 stages (96 KiB of shared memory: Ampere and Ada too). The template also instantiates fprop and
# wgrad, through the JIT only (ConvPlan::with_instance; cuactor jit warm --conv ... --target).
foreach(t bf16 f16)
  cuactor_sample_if(sample t STREQUAL bf16)
  cuactor_gemm_instance(FAMILY conv_dgrad ARCH sm_80 TEMPLATE conv_sm80_instance.cu.in TYPES ${t} ${t} ${t} ${t} f32
                        LAYOUTS nhwc krsc nhwc TILE 128 128 64 CLUSTER 1 1 1 STAGES 3 SCHEDULE multistage
                        EPILOGUE linear_combination ${sample})
endforeach()
