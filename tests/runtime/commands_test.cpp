// The built-in commands' argument rules that hold before any device is touched (no GPU needed).
#include "cuactor/runtime/commands.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>

namespace cuactor::runtime {
namespace {

TEST(EnqueueFill, RejectsElementSizesItDoesNotSupport) {
  const std::array<unsigned char, 16> pattern{};
  for (const std::size_t element : {0, 3, 5, 12, 32}) {
    const Status st = enqueue_fill(reinterpret_cast<void*>(0x10000), 4, pattern.data(), element, nullptr);
    ASSERT_FALSE(st.has_value()) << element;
    EXPECT_EQ(st.error().code(), make_error_code(errc::unsupported));
    EXPECT_NE(st.error().message().find("element size " + std::to_string(element) + " bytes"), std::string::npos)
        << st.error().message();
  }
}

TEST(EnqueueFill, RejectsADestinationNotAlignedToItsElements) {
  const std::array<unsigned char, 16> pattern{};
  // Every misaligned case is refused before the device is touched: the kernel would fault on it.
  for (const auto& [address, element] :
       {std::pair<std::uintptr_t, std::size_t>{0x10001, 2}, {0x10002, 4}, {0x10004, 8}, {0x10008, 16}, {0x1000c, 16}}) {
    const Status st = enqueue_fill(reinterpret_cast<void*>(address), 4, pattern.data(), element, nullptr);
    ASSERT_FALSE(st.has_value()) << address;
    EXPECT_EQ(st.error().code(), make_error_code(errc::invalid_argument));
    EXPECT_NE(st.error().message().find("not aligned to its " + std::to_string(element) + "-byte elements"),
              std::string::npos)
        << st.error().message();
  }
}

TEST(EnqueueFill, RejectsACountWhoseBytesOverflow) {
  const std::array<unsigned char, 16> pattern{};
  const std::size_t count = SIZE_MAX / 8 + 1;
  const Status st = enqueue_fill(reinterpret_cast<void*>(0x10000), count, pattern.data(), 8, nullptr);
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().code(), make_error_code(errc::invalid_argument));
  EXPECT_NE(st.error().message().find(std::to_string(count) + " elements of 8 bytes overflow"), std::string::npos)
      << st.error().message();
}

}  // namespace
}  // namespace cuactor::runtime
