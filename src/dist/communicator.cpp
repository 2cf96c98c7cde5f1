// The one setting every communicator shares: how long a rank waits for the others.
#include "llmtrain/dist/communicator.h"

#include "env.h"

namespace llmtrain::dist {

std::chrono::milliseconds timeout() {
  const long s = detail::env_long("LLMTRAIN_DIST_TIMEOUT", 600);
  LLMTRAIN_CHECK(s > 0 && s <= 10'000'000, "LLMTRAIN_DIST_TIMEOUT is ", s,
                 ": give the seconds a rank waits for the others, in [1, 10000000]");
  return std::chrono::seconds(s);
}

}  // namespace llmtrain::dist
