#include "cuactor/jit/render.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

namespace cuactor::jit {
namespace {

// The characters CMake's configure_file accepts in an @VAR@ reference.
bool is_name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '/' || c == '+' || c == '-';
}

}  // namespace

Result<std::string> render_template(std::string_view text, const Placeholders& values) {
  std::string out;
  out.reserve(text.size() + 256);
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t at = text.find('@', i);
    if (at == std::string_view::npos) {
      out.append(text.substr(i));
      break;
    }
    out.append(text.substr(i, at - i));
    std::size_t j = at + 1;
    while (j < text.size() && is_name_char(text[j])) ++j;
    if (j < text.size() && text[j] == '@' && j > at + 1) {
      const std::string_view var = text.substr(at + 1, j - at - 1);
      const auto it = values.find(var);
      if (it == values.end())
        return fail(errc::invalid_argument, fmt::format("template placeholder @{}@ has no value", var));
      out.append(it->second);
      i = j + 1;
    } else {
      // A lone '@' (e.g. in a comment or an e-mail address) stays, as in configure_file.
      out.push_back('@');
      i = at + 1;
    }
  }
  return out;
}

Result<std::string> render_template_file(const std::filesystem::path& path, const Placeholders& values) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(errc::invalid_argument, fmt::format("cannot read instantiation template '{}'", path.string()));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto r = render_template(text, values);
  if (!r) return fail(Error(r.error().code(), fmt::format("{}: {}", path.string(), r.error().message())));
  return r;
}

std::filesystem::path kernels_dir() {
  if (const char* p = std::getenv("CUACTOR_KERNELS_DIR"); p && *p) return p;
  return CUACTOR_KERNELS_SOURCE_DIR;
}

std::filesystem::path cutlass_dir() {
  if (const char* p = std::getenv("CUACTOR_CUTLASS_DIR"); p && *p) return p;
  return CUACTOR_CUTLASS_DEFAULT_DIR;
}

}  // namespace cuactor::jit
