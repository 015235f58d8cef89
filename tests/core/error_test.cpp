#include "cuactor/core/error.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "cuactor/core/driver_api.hpp"
#include "cuactor/core/expected.hpp"

namespace cuactor {
namespace {

TEST(Error, CuactorCodesAreTypedAndNamed) {
  std::error_code ec = errc::queue_full;
  EXPECT_EQ(ec.category(), cuactor_category());
  EXPECT_STREQ(ec.category().name(), "cuactor");
  EXPECT_EQ(ec.message(), "queue full");
  EXPECT_NE(std::error_code(errc::stale_handle), std::error_code(errc::circuit_open));
}

TEST(Error, CudaCategoriesNameTheCode) {
  std::error_code rt(cudaErrorIllegalAddress, cuda_runtime_category());
  EXPECT_NE(rt.message().find("cudaErrorIllegalAddress"), std::string::npos);
  std::error_code drv(CUDA_ERROR_OUT_OF_MEMORY, cuda_driver_category());
  // Without a driver the name table is unavailable and the message falls back to the number.
  const char* expected = driver_api().available ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUresult 2";
  EXPECT_NE(drv.message().find(expected), std::string::npos) << drv.message();
  EXPECT_NE(rt.category(), drv.category());
}

TEST(Error, ClassifiesStickyErrorsAsPoisoning) {
  EXPECT_EQ(classify({}), FailureClass::none);
  EXPECT_EQ(classify({cudaErrorIllegalAddress, cuda_runtime_category()}), FailureClass::context_poisoned);
  EXPECT_EQ(classify({cudaErrorLaunchFailure, cuda_runtime_category()}), FailureClass::context_poisoned);
  EXPECT_EQ(classify({CUDA_ERROR_ILLEGAL_ADDRESS, cuda_driver_category()}), FailureClass::context_poisoned);
  EXPECT_EQ(classify({cudaErrorMemoryAllocation, cuda_runtime_category()}), FailureClass::request);
  EXPECT_EQ(classify({cudaErrorInvalidValue, cuda_runtime_category()}), FailureClass::request);
  EXPECT_EQ(classify(errc::invalid_argument), FailureClass::request);
  EXPECT_EQ(classify(errc::context_poisoned), FailureClass::context_poisoned);
  EXPECT_EQ(classify(errc::worker_lost), FailureClass::context_poisoned);
  EXPECT_EQ(classify(errc::protocol_error), FailureClass::request);
}

TEST(Error, ToStringCarriesMessageAndCode) {
  Error e(errc::invalid_argument, "group 7: lda=1001 is not a multiple of 8 for bf16");
  EXPECT_TRUE(e == errc::invalid_argument);
  const std::string s = e.to_string();
  EXPECT_NE(s.find("lda=1001"), std::string::npos);
  EXPECT_NE(s.find("cuactor"), std::string::npos);
}

Status fails_then_stops(int& reached) {
  CUACTOR_TRY(Status(fail(errc::unsupported, "fp4 needs sm_100")));
  reached = 1;
  return ok();
}

TEST(Expected, TryPropagatesTheFirstError) {
  int reached = 0;
  Status s = fails_then_stops(reached);
  ASSERT_FALSE(s);
  EXPECT_TRUE(s.error() == errc::unsupported);
  EXPECT_EQ(s.error().message(), "fp4 needs sm_100");
  EXPECT_EQ(reached, 0);
}

}  // namespace
}  // namespace cuactor
