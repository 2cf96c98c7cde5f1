// A safetensors file's header, with the file's bytes after it.
#include "../../src/io/safetensors_header.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto h = llmtrain::io::detail::parse_safetensors_header("model.safetensors", data, size);
    for (const auto& [name, e] : h.entries)  // every range the header promises lies in the file
      fuzz::require(h.data_offset + e.end <= size && e.begin <= e.end &&
                    e.end - e.begin == uint64_t(e.numel) * uint64_t(e.element_size));
  } catch (const llmtrain::Error&) {
  }
  return 0;
}
