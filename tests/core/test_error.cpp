#include <c10/util/Exception.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <new>

#include "llmtrain/config.h"
#include "llmtrain/core/cuda_check.h"
#include "llmtrain/core/error.h"

using ::testing::HasSubstr;

TEST(Error, CheckThrowsErrorWithTheMessageParts) {
  try {
    const int heads = 3;
    LLMTRAIN_CHECK(100 % heads == 0, "n_embd ", 100, " is not divisible by n_head ", heads);
    FAIL() << "LLMTRAIN_CHECK did not throw";
  } catch (const llmtrain::Error& e) {
    EXPECT_STREQ(e.what(), "n_embd 100 is not divisible by n_head 3");
  }
}

// describe() lives in llmtrain::text, without LibTorch; libllmtrain teaches it c10::Error when it loads.
TEST(Error, DescribeSaysLibTorchErrorsWithoutTheirBacktraceAndNamesOutOfMemory) {
  try {
    TORCH_CHECK(false, "a LibTorch check failed");
  } catch (const c10::Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("Exception raised from"));
    EXPECT_EQ(llmtrain::describe(e), "a LibTorch check failed");
  }
  EXPECT_THAT(llmtrain::describe(std::bad_alloc()), HasSubstr("out of memory"));
  EXPECT_EQ(llmtrain::describe(llmtrain::Error("plain")), "plain");
}

TEST(Error, CheckPassesWhenTrueAndEvaluatesOnce) {
  int calls = 0;
  EXPECT_NO_THROW(LLMTRAIN_CHECK(++calls == 1, "never shown"));
  EXPECT_EQ(calls, 1);
}

TEST(Error, IsAStdRuntimeError) { EXPECT_THROW(LLMTRAIN_CHECK(false, "x"), std::runtime_error); }

#if LLMTRAIN_WITH_CUDA
// Error codes are plain values: naming them needs the CUDA and NCCL libraries but no GPU.
TEST(CudaCheck, SuccessDoesNotThrow) {
  EXPECT_NO_THROW(LLMTRAIN_CUDA_CHECK(0));
  EXPECT_NO_THROW(LLMTRAIN_NCCL_CHECK(0));
}

TEST(CudaCheck, FailureNamesTheErrorTheCallAndThePlace) {
  const int cuda_error_invalid_value = 1;  // cudaErrorInvalidValue
  try {
    LLMTRAIN_CUDA_CHECK(cuda_error_invalid_value);
    FAIL() << "LLMTRAIN_CUDA_CHECK did not throw";
  } catch (const llmtrain::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cudaErrorInvalidValue"));
    EXPECT_THAT(e.what(), HasSubstr("invalid argument"));
    EXPECT_THAT(e.what(), HasSubstr("cuda_error_invalid_value"));
    EXPECT_THAT(e.what(), HasSubstr("test_error.cpp:"));
  }
}

TEST(NcclCheck, FailureNamesTheErrorTheCallAndThePlace) {
  const int nccl_invalid_argument = 4;  // ncclInvalidArgument
  try {
    LLMTRAIN_NCCL_CHECK(nccl_invalid_argument);
    FAIL() << "LLMTRAIN_NCCL_CHECK did not throw";
  } catch (const llmtrain::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("NCCL error 4"));
    EXPECT_THAT(e.what(), HasSubstr("invalid argument"));
    EXPECT_THAT(e.what(), HasSubstr("nccl_invalid_argument"));
  }
}
#endif
