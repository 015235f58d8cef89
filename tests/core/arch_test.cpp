#include "cuactor/core/arch.hpp"

#include <gtest/gtest.h>

namespace cuactor {
namespace {

TEST(GpuArch, BestTargetUsesArchSpecificVariants) {
  EXPECT_EQ(best_target_for(9, 0).name(), "sm_90a");
  EXPECT_EQ(best_target_for(10, 0).name(), "sm_100a");
  EXPECT_EQ(best_target_for(12, 0).name(), "sm_120a");
  EXPECT_EQ(best_target_for(8, 0).name(), "sm_80");
  EXPECT_EQ(best_target_for(8, 9).name(), "sm_89");
  EXPECT_EQ(best_target_for(8, 6).name(), "sm_86");
}

TEST(GpuArch, Parse) {
  EXPECT_EQ(parse_arch("sm_90a"), (GpuArch{9, 0, true}));
  EXPECT_EQ(parse_arch("90a"), (GpuArch{9, 0, true}));
  EXPECT_EQ(parse_arch("sm80"), (GpuArch{8, 0, false}));
  EXPECT_EQ(parse_arch("sm_120a"), (GpuArch{12, 0, true}));
  EXPECT_FALSE(parse_arch("sm_80a"));  // no arch-specific variant for Ampere
  EXPECT_FALSE(parse_arch("sm_9x"));
  EXPECT_FALSE(parse_arch(""));
  EXPECT_FALSE(parse_arch("sm_30"));
}

TEST(GpuArch, CompatibilityRules) {
  const GpuArch h100 = best_target_for(9, 0);
  EXPECT_TRUE(can_run({9, 0, true}, h100));
  EXPECT_TRUE(can_run({9, 0, false}, h100));
  EXPECT_FALSE(can_run({8, 0, false}, h100));  // SASS does not cross majors; PTX does
  EXPECT_TRUE(can_run({8, 0, false}, best_target_for(8, 6)));
  EXPECT_FALSE(can_run({9, 0, true}, best_target_for(10, 0)));
  EXPECT_TRUE((GpuArch{8, 0, false} < GpuArch{9, 0, false}));
}

}  // namespace
}  // namespace cuactor
