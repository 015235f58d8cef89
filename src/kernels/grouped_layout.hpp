/// @file
/// Internal: where each piece of a grouped GEMM's metadata lives in the caller's workspace, the
/// validation rules of [K5], and the packing of host-known groups (pure host code, unit-tested
/// without a GPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "cuactor/kernels/grouped_gemm.hpp"

namespace cuactor::kernels::detail {

/// Byte offsets into the workspace. The first `upload_bytes` are the metadata image copied from
/// pinned memory (host-prepared groups) or written by build_device_sized_args (device-sized ones).
struct GroupedLayout {
  static constexpr std::size_t none = ~std::size_t{0};
  int group_count = 0;
  std::size_t shapes = 0;
  std::size_t ptr_a = 0, ptr_b = 0, ptr_c = 0, ptr_d = 0;
  std::size_t ld_a = 0, ld_b = 0, ld_c = 0, ld_d = 0;
  std::size_t k0_rows = none;     ///< Rows of K = 0 groups (D = beta * C), when any group has K = 0.
  std::size_t upload_bytes = 0;   ///< End of the metadata image.
  std::size_t alpha = none;       ///< alpha[g] folded from fp8 scales on the device.
  std::size_t error_flag = none;  ///< Device-sized groups: 1 + first group with bad rows.
  std::size_t row_scale = none, col_scale = none, row_bias = none, col_bias = none;  ///< Tree vectors per group.
  std::size_t scratch = 0;  ///< Kernel scratch (256-byte aligned).
  std::size_t scratch_bytes = 0;
  std::size_t total = 0;  ///< workspace_size().
};

/// Alignment of the workspace and of the kernel scratch inside it.
inline constexpr std::size_t kWorkspaceAlignment = 256;

/// The layout of `group_count` groups' metadata plus `scratch_bytes` of kernel scratch.
/// `vectors` names the epilogue tree's vectors (per-group pointer arrays built on the device).
GroupedLayout make_grouped_layout(int group_count, bool has_k0_groups, bool has_alpha, bool has_error_flag,
                                  std::size_t scratch_bytes, const EpilogueSpec& vectors = {}) noexcept;

/// Checks one host-known group against the rules of [K5] for the plan's element types and B layout;
/// `invalid_argument` naming the group, the value and the rule.
Status validate_group(int index, const GroupedProblem& p, const GroupedGemmSpec& spec, float beta);

/// Checks a device-sized grouped GEMM's host-known parts (pointers, leading dimensions, strides).
Status validate_device_sized(const DeviceSizedGroups& g, const GroupedGemmSpec& spec, float beta);

/// Writes the metadata image of validated `groups` into `image` (layout.upload_bytes bytes): empty
/// groups and K = 0 groups get M = 0 in the GEMM's shape list (K = 0 ones are listed in k0_rows),
/// and a missing C is replaced by D (C is not read when beta is 0).
void pack_grouped_metadata(std::span<const GroupedProblem> groups, const GroupedLayout& layout,
                           std::span<std::byte> image) noexcept;

}  // namespace cuactor::kernels::detail
