/// @file
/// Test support for plan rules checked without a device: fake device addresses that validation
/// reads but never dereferences, and an assertion that a Status / Result failed with a given code
/// and a message naming the rule.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cuactor/core/expected.hpp"
#include "cuactor/kernels/catalog.hpp"

namespace cuactor::test_support {

/// A fake device address with the given misalignment; nothing dereferences it.
inline const void* fake(std::uintptr_t offset = 0) {
  return reinterpret_cast<const void*>(0x7f0000000000ull + offset);
}
/// A second fake address (for outputs), apart from fake()'s.
inline void* fake_mut(std::uintptr_t offset = 0) {
  return reinterpret_cast<void*>(0x7f0000100000ull + offset);
}

/// `s` failed with `code` and a message containing `mentions`.
inline void expect_error(const Status& s, errc code, const std::string& mentions) {
  ASSERT_FALSE(s.has_value()) << "expected an error mentioning '" << mentions << "'";
  EXPECT_EQ(s.error(), code) << s.error().to_string();
  EXPECT_NE(s.error().message().find(mentions), std::string::npos) << s.error().message();
}

/// `r` failed with `code` and a message containing `mentions`.
template <class T>
void expect_error(const Result<T>& r, errc code, const std::string& mentions) {
  expect_error(r.has_value() ? Status{} : Status{::cuda::std::unexpected<Error>(r.error())}, code, mentions);
}

/// Empty when the build's catalog has a bf16 kernel of `family` that runs on `arch`, else why a test
/// that runs one is skipped (builds select families with CUACTOR_KERNEL_ARCHS and instances with
/// CUACTOR_CATALOG_FILTER).
inline std::string missing_bf16_kernel(kernels::GemmFamily family, GpuArch arch) {
  for (const kernels::CatalogEntry* e : kernels::catalog_entries(family))
    if (kernels::runs_on(e->sku, arch) && e->sku.a == DType::bf16 && e->sku.d == DType::bf16) return {};
  return "no bf16 " + std::string(kernels::name(family)) + " kernel for " + arch.name() + " in this build's catalog (" +
         std::string(kernels::name(kernels::catalog_scope())) +
         " scope; CUACTOR_KERNEL_ARCHS and CUACTOR_CATALOG_FILTER select what is compiled)";
}

}  // namespace cuactor::test_support

/// Skips a test that expects a heuristic's choice among the whole catalog when this build compiled only
/// part of it (its sample, CUACTOR_CATALOG=sample, scripts/test without a GPU; or CUACTOR_CATALOG_FILTER):
/// a plan there settles for another kernel or finds none. scripts/gpu-check builds the whole catalog and
/// runs it.
#define CUACTOR_SKIP_IF_PARTIAL_CATALOG()                                                                 \
  do {                                                                                                    \
    if (const auto cuactor_catalog_scope_ = ::cuactor::kernels::catalog_scope();                          \
        cuactor_catalog_scope_ != ::cuactor::kernels::CatalogScope::full)                                 \
      GTEST_SKIP() << "expects choices among the whole kernel catalog; this build compiled part of "      \
                      "it ("                                                                              \
                   << ::cuactor::kernels::name(cuactor_catalog_scope_) << "): scripts/gpu-check runs it"; \
  } while (false)
