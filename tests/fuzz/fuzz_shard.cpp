// A token shard (header and tokens), read whole; or, for an input that starts with '{', a shard set's
// manifest.json checked against a shard beside it.
#include <vector>

#include "fuzz_util.h"
#include "llmtrain/data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    if (size > 0 && data[0] == '{') {
      const std::string dir = fuzz::scratch() + "/set";
      llmtrain::fs::make_dirs(dir);
      llmtrain::data::write_shard(dir + "/train_000000.bin", {1, 2, 3}, 256);
      llmtrain::fs::write_file_atomic(dir + "/manifest.json", {reinterpret_cast<const char*>(data), size});
      llmtrain::data::check_shard_set({dir + "/train_000000.bin"});
      return 0;
    }
    const llmtrain::data::Shard shard(fuzz::file("train_000000.bin", data, size));
    std::vector<int64_t> tokens(size_t(shard.num_tokens()));
    shard.read(0, shard.num_tokens(), tokens.data());
    for (const int64_t t : tokens) fuzz::require(t >= 0 && t < (int64_t(1) << 32));
  } catch (const llmtrain::Error&) {
  }
  return 0;
}
