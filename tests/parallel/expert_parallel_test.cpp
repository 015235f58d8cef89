// The expert-parallel layer's rules without a device: every field of the spec that create() rejects,
// each error naming the value and the rule.
#include "cuactor/parallel/expert_parallel.hpp"

#include <gtest/gtest.h>

#include "support/plan_checks.hpp"

namespace cuactor::parallel {
namespace {

using test_support::expect_error;

ExpertParallelSpec valid() {
  ExpertParallelSpec s;
  s.hidden = 128;
  s.ffn = 64;
  s.experts = 16;
  s.top_k = 4;
  s.tokens_per_rank = 33;
  s.ranks = 4;
  s.rank = 3;
  s.sm_count = 132;
  return s;
}

TEST(ExpertParallelRules, RejectsRanksOutsideTheGroup) {
  ExpertParallelSpec s = valid();
  s.rank = 4;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "rank=4 must be in [0, ranks=4)");
  s = valid();
  s.ranks = 0;
  s.rank = 0;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "ranks >= 1");
}

TEST(ExpertParallelRules, ExpertsSplitEvenlyAndTopKFits) {
  ExpertParallelSpec s = valid();
  s.experts = 18;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument,
               "experts=18 must be a positive multiple of ranks=4");
  s = valid();
  s.top_k = 17;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "top_k=17 must be in [1, experts=16]");
  s.top_k = 0;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "top_k=0");
  s = valid();
  s.experts = 4 * 8193;
  expect_error(ExpertParallelMoe::create(s), errc::unsupported, "8193 experts per rank, at most 8192");
}

TEST(ExpertParallelRules, TokensAndHiddenAreChecked) {
  ExpertParallelSpec s = valid();
  s.tokens_per_rank = 0;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "tokens_per_rank=0 must be at least 1");
  s = valid();
  s.hidden = 100;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "hidden=100 must be a positive multiple of 8");
  s = valid();
  s.tokens_per_rank = 1 << 28;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "must fit in int32");
}

TEST(ExpertParallelRules, TheExpertFfnRulesApplyToTheLocalExperts) {
  ExpertParallelSpec s = valid();
  s.ffn = 60;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "ffn=60 must be multiples of 8");
  s = valid();
  s.dtype = DType::f32;
  expect_error(ExpertParallelMoe::create(s), errc::unsupported, "dtype=f32");
}

}  // namespace
}  // namespace cuactor::parallel
