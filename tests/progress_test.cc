// Progress lines stay one terminal line (issue 37, item 7): a failure is said in a few words,
// "oom (forward, 1.23 GiB asked)", the full message staying in the row and the worker's log.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sweeps/runner/progress.h"

namespace sweep {
namespace {

TEST(Progress, FailuresInAFewWords) {
  struct Case {
    Status status;
    const char *phase, *reason, *message, *brief;
  };
  const std::vector<Case> cases = {
      // The caching allocator's (CUDA, and an emulated card's) 400-character message.
      {Status::kOom, "forward", "",
       "CUDA out of memory. Tried to allocate 1.23 GiB. GPU 0 has a total capacity of 11.75 GiB of which "
       "512.00 MiB is free. Including non-PyTorch memory, this process has 11.24 GiB memory in use.",
       "forward, 1.23 GiB asked"},
      {Status::kOom, "backward", "", "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has",
       "backward, 20.0 MiB asked"},
      // The CPU tracking allocator's budget.
      {Status::kOom, "forward", "",
       "CPU budget exceeded: tried to allocate 3145728 bytes with 5000000 bytes allocated and a budget of 7301444 bytes",
       "forward, 3.0 MiB asked"},
      // Out of memory outside the allocator: no size, its reason.
      {Status::kOom, "backward", "cublas-alloc-failed",
       "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
       "backward, cublas-alloc-failed"},
      {Status::kCrash, "", "SIGSEGV", "worker killed by signal 11", "SIGSEGV"},
      {Status::kCrash, "", "",
       "a very long first line of a crash message that goes on and on well past the width of a line\nsecond",
       "a very long first line of a crash message that goes on an..."},
      {Status::kTimeout, "", "", "", ""},
  };
  for (const auto& c : cases) {
    const std::string brief = failure_brief(c.status, c.phase, c.reason, c.message);
    EXPECT_EQ(brief, c.brief) << c.message;
    EXPECT_LE(brief.size(), 64u) << brief;
  }
}

}  // namespace
}  // namespace sweep
