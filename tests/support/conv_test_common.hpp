/// @file
/// Shared by the convolution plan tests (tests/kernels/conv_plan_test.cpp, no device) and the GPU
/// tests (conv_gpu_test.cpp): a valid spec, the family/operation map and the catalog's conv entries.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/conv_plan.hpp"

namespace cuactor::kernels::conv_test {

inline constexpr GpuArch kHopper{9, 0, true};
inline constexpr GpuArch kAmpere{8, 0, false};
inline constexpr Shape3 kTile{128, 128, 64};
inline constexpr ConvOperation kOperations[] = {ConvOperation::fprop, ConvOperation::dgrad, ConvOperation::wgrad};

/// A valid spec: 2 x 16 x 16 x 64 activations, 64 filters of 3 x 3, "same" padding.
inline ConvSpec base_spec(ConvOperation op = ConvOperation::fprop, DType t = DType::bf16) {
  ConvSpec spec;
  spec.operation = op;
  spec.element = spec.output = t;
  spec.n = 2;
  spec.h = spec.w = 16;
  spec.c = spec.k = 64;
  spec.r = spec.s = 3;
  spec.pad_h = spec.pad_w = 1;
  return spec;
}

/// The operation a convolution SKU family computes.
inline ConvOperation operation_of(GemmFamily f) {
  for (ConvOperation op : kOperations)
    if (family_of(op) == f) return op;
  ADD_FAILURE() << name(f) << " is not a convolution family";
  return ConvOperation::fprop;
}

/// Conv entries of the catalog (every family) that run on `arch`.
inline std::vector<const CatalogEntry*> conv_entries(GpuArch arch) {
  std::vector<const CatalogEntry*> out;
  for (ConvOperation op : kOperations)
    for (const CatalogEntry* e : catalog_entries(family_of(op)))
      if (runs_on(e->sku, arch)) out.push_back(e);
  return out;
}

}  // namespace cuactor::kernels::conv_test
