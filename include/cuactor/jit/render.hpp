/// @file
/// Renders instantiation templates (kernels/*_instance.cu.in) at run time exactly as CMake's
/// `configure_file(... @ONLY)` does at build time ([J1]: one source of truth for AOT and JIT).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "cuactor/core/expected.hpp"

namespace cuactor::jit {

/// Placeholder name → value.
using Placeholders = std::map<std::string, std::string, std::less<>>;

/// Replaces every `@NAME@` (NAME made of letters, digits and `_ . / + -`, as CMake's @ONLY mode
/// accepts) by its value. Stricter than CMake in one way: a placeholder with no value is
/// `invalid_argument` naming it, instead of silently becoming empty.
Result<std::string> render_template(std::string_view text, const Placeholders& values);

/// Reads a template file and renders it; `invalid_argument` naming the path if it cannot be read.
Result<std::string> render_template_file(const std::filesystem::path& path, const Placeholders& values);

/// Directory holding the instantiation templates: $CUACTOR_KERNELS_DIR, else the source tree's
/// kernels/ directory recorded at build time.
std::filesystem::path kernels_dir();
/// The CUTLASS include directories the JIT compiles against: $CUACTOR_CUTLASS_DIR/{include,
/// tools/util/include}, else those recorded at build time.
std::filesystem::path cutlass_dir();

}  // namespace cuactor::jit
