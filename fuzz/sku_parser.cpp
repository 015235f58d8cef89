// Fuzzes GemmSku::parse and parse_arch (text from the command line and from tuning files): no
// crash, and whatever parses prints back to text that parses to the same SKU.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "cuactor/core/arch.hpp"
#include "cuactor/kernels/sku.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)cuactor::parse_arch(text);
  auto sku = cuactor::kernels::GemmSku::parse(text);
  if (!sku) return 0;
  auto again = cuactor::kernels::GemmSku::parse(sku->to_string());
  if (!again || again->to_string() != sku->to_string()) std::abort();  // the printed form must round-trip
  return 0;
}
