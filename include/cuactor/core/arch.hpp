/// @file
/// GPU architectures (compute capability plus the arch-specific "a" feature set).
#pragma once

#include <compare>
#include <optional>
#include <string>
#include <string_view>

#include "cuactor/core/cxx20.hpp"

namespace cuactor {

/// A compilation / dispatch target such as sm_80, sm_90a or sm_120a.
struct GpuArch {
  int major = 0;
  int minor = 0;
  /// True for the arch-specific feature set ("a" suffix: wgmma and setmaxnreg on sm_90a, tcgen05 on
  /// sm_100a, ...). Code built for it runs only on exactly that compute capability.
  bool arch_specific = false;

  /// Compute capability as major*10+minor (90 for sm_90a).
  [[nodiscard]] constexpr int sm() const noexcept { return major * 10 + minor; }
  /// "sm_90a", "sm_80", ...
  [[nodiscard]] std::string name() const;

  friend constexpr auto operator<=>(const GpuArch&, const GpuArch&) = default;
};

/// The best target for a device of compute capability major.minor: the "a" variant where CUDA 13
/// defines one (sm_90a, sm_100a, sm_101a/sm_110a, sm_103a, sm_120a, sm_121a), else the plain one.
GpuArch best_target_for(int major, int minor) noexcept;

/// Parses "sm_90a", "sm90a", "90a", "sm_80", ... Returns nullopt for anything else.
std::optional<GpuArch> parse_arch(std::string_view s) noexcept;

/// True if code compiled for `target` can run on a device whose best target is `device`:
/// arch-specific code needs the exact compute capability, plain SASS the same major version and a
/// minor at least as high.
bool can_run(GpuArch target, GpuArch device) noexcept;

}  // namespace cuactor
