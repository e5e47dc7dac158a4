// Test main: GPU tests are named *_CUDA and filtered out when no GPU is present, so ctest
// passes on CPU machines and runs everything on a GPU host (as pytorch's test/cpp main).
#include <gtest/gtest.h>
#include <torch/cuda.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!torch::cuda::is_available()) {
    auto& filter = ::testing::GTEST_FLAG(filter);
    filter.append(filter.find('-') == std::string::npos ? "-" : ":").append("*_CUDA");
  }
  return RUN_ALL_TESTS();
}
