/// @file
/// Translation of CUDA runtime/driver/NVRTC/cuBLAS status codes into cuactor Errors ([E1]).
#pragma once

#include <cublas_api.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>

#include "cuactor/core/expected.hpp"

namespace cuactor::gpu {

/// An Error in the CUDA runtime category whose message is "<what>: <cudaErrorName>: <text>".
Error make_error(cudaError_t e, std::string_view what);
/// An Error in the CUDA driver category.
Error make_error(CUresult e, std::string_view what);
/// An Error in the NVRTC category.
Error make_error(nvrtcResult e, std::string_view what);
/// An Error in the cuBLAS category.
Error make_error(cublasStatus_t e, std::string_view what);

/// Status of a CUDA runtime call; `what` names the call and its salient arguments.
inline Status check(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return ok();
  return fail(make_error(e, what));
}
/// Status of a CUDA driver call.
inline Status check(CUresult e, std::string_view what) {
  if (e == CUDA_SUCCESS) return ok();
  return fail(make_error(e, what));
}
/// Status of an NVRTC call.
inline Status check(nvrtcResult e, std::string_view what) {
  if (e == NVRTC_SUCCESS) return ok();
  return fail(make_error(e, what));
}
/// Status of a cuBLAS call.
inline Status check(cublasStatus_t e, std::string_view what) {
  if (e == CUBLAS_STATUS_SUCCESS) return ok();
  return fail(make_error(e, what));
}

/// True when `e` reports success (one overload per status type).
constexpr bool succeeded(cudaError_t e) noexcept { return e == cudaSuccess; }
constexpr bool succeeded(CUresult e) noexcept { return e == CUDA_SUCCESS; }
constexpr bool succeeded(nvrtcResult e) noexcept { return e == NVRTC_SUCCESS; }
constexpr bool succeeded(cublasStatus_t e) noexcept { return e == CUBLAS_STATUS_SUCCESS; }

/// As check(e, what), with the description built by `describe()` only on failure: for calls on a
/// hot path (every launch, copy or completion), where formatting a message per call costs more
/// than the call's own host overhead.
template <class Code, class Describe>
  requires std::is_invocable_r_v<std::string, Describe&>
Status check(Code e, Describe&& describe) {
  if (succeeded(e)) return ok();
  return fail(make_error(e, describe()));
}

}  // namespace cuactor::gpu

/// Runs a CUDA/driver/NVRTC/cuBLAS call; on failure returns its Error (message = the call's text).
#define CUACTOR_CUDA_TRY(call) CUACTOR_TRY(::cuactor::gpu::check((call), #call))
