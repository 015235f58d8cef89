// Fuzzes the small parsers of outside text in the JIT: the lowered-name table stored in cache
// entries' metadata and /proc/meminfo (compile slots). No crash; the name table round-trips.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cuactor/jit/nvrtc.hpp"
#include "jit/process.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)cuactor::jit::detail::parse_mem_available(text);
  const auto names = cuactor::jit::decode_lowered_names(text);
  if (cuactor::jit::decode_lowered_names(cuactor::jit::encode_lowered_names(names)) != names) std::abort();
  return 0;
}
