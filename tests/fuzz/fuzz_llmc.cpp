// An llm.c model file's header, checked against the size of the file it starts (the input's size, or
// one read from its last 8 bytes, so that large claimed files are tried too).
#include <cstring>

#include "../../src/io/llmc_header.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t file_size = size;
  if (size >= 1024 + 8) std::memcpy(&file_size, data + size - 8, 8);
  try {
    const auto h = llmtrain::io::detail::parse_llmc_header("model.bin", data, size, file_size);
    fuzz::require(h.num_parameters > 0 && uint64_t(1024 + h.num_parameters * h.element_bytes) == file_size);
  } catch (const llmtrain::Error&) {
  }
  return 0;
}
