#include "cuactor/core/arch.hpp"

#include <charconv>

namespace cuactor {

std::string GpuArch::name() const {
  return "sm_" + std::to_string(major) + std::to_string(minor) + (arch_specific ? "a" : "");
}

GpuArch best_target_for(int major, int minor) noexcept {
  const int sm = major * 10 + minor;
  // Compute capabilities for which CUDA 13 defines an arch-specific ("a") target.
  switch (sm) {
    case 90:
    case 100:
    case 103:
    case 110:
    case 120:
    case 121:
      return {major, minor, true};
    default:
      return {major, minor, false};
  }
}

std::optional<GpuArch> parse_arch(std::string_view s) noexcept {
  if (s.starts_with("sm_"))
    s.remove_prefix(3);
  else if (s.starts_with("sm"))
    s.remove_prefix(2);
  bool specific = false;
  if (s.ends_with("a")) {
    specific = true;
    s.remove_suffix(1);
  }
  if (s.size() < 2 || s.size() > 3) return std::nullopt;
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  GpuArch a{v / 10, v % 10, specific};
  if (a.major < 5) return std::nullopt;
  if (specific && !best_target_for(a.major, a.minor).arch_specific) return std::nullopt;
  return a;
}

bool can_run(GpuArch target, GpuArch device) noexcept {
  if (target.arch_specific) return target.major == device.major && target.minor == device.minor;
  return target.major == device.major && target.minor <= device.minor;
}

}  // namespace cuactor
