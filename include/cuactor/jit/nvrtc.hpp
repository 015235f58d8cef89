/// @file
/// NVRTC back end ([J2]) for kernels whose launch ABI cuactor owns (user kernels, argument-packing
/// kernels, CUTLASS 2.x families whose parameters are built ahead of time): source in, cubin (SASS
/// for one real architecture, never only PTX) out. Needs no GPU.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/expected.hpp"
#include "cuactor/jit/hash.hpp"

namespace cuactor::jit {

/// One NVRTC compilation.
struct NvrtcRequest {
  /// The translation unit.
  std::string source;
  /// File name shown in diagnostics.
  std::string program_name = "cuactor_jit.cu";
  /// Target; SASS is produced for exactly this architecture (sm_90a, sm_80, ...).
  GpuArch arch{9, 0, true};
  /// Extra options (e.g. "-DTILE=128", "--use_fast_math"); "-std=c++20" and the architecture are added.
  std::vector<std::string> options;
  /// In-memory headers as (include name, contents).
  std::vector<std::pair<std::string, std::string>> headers;
  /// Kernel name expressions (e.g. "scale<float>") whose lowered (mangled) names are wanted; extern
  /// "C" kernels need none.
  std::vector<std::string> name_expressions;
};

/// What NVRTC produced.
struct NvrtcOutput {
  std::vector<std::byte> cubin;
  /// (name expression, lowered name) for each requested expression.
  std::vector<std::pair<std::string, std::string>> lowered_names;
  std::string log;
};

/// "major.minor" of the linked NVRTC.
std::string nvrtc_version();

/// Compiles to cubin. Failures are `compile_failed` carrying the start of NVRTC's log; an
/// `invalid_argument` for an empty source.
Result<NvrtcOutput> nvrtc_compile(const NvrtcRequest& request);

/// Cache key of a request: its source, headers, options, name expressions, architecture and the
/// NVRTC version. The driver version is left out on purpose: the entry is SASS, which the driver
/// loads as is, so entries warmed on a machine without a driver stay valid on one with ([J5]).
Digest cache_key(const NvrtcRequest& request);

/// Serialises lowered names as cache-entry metadata, and parses them back.
std::string encode_lowered_names(const std::vector<std::pair<std::string, std::string>>& names);
/// Inverse of encode_lowered_names.
std::vector<std::pair<std::string, std::string>> decode_lowered_names(const std::string& metadata);

}  // namespace cuactor::jit
