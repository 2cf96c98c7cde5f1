# The parsers' fuzz targets (tests/fuzz): a project of its own, built with clang's libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer as part of this build, and a short run of each
# registered with ctest (fuzz.<name>, LLMTRAIN_FUZZ_SECONDS each). `make fuzz` runs them longer.
# LLMTRAIN_BUILD_FUZZERS is on by default where a clang++ that links -fsanitize=fuzzer exists.
include(ExternalProject)
find_program(LLMTRAIN_CLANGXX NAMES clang++ clang++-14 clang++-15 clang++-16 clang++-17 clang++-18)
set(_llmtrain_fuzz_default OFF)
if(LLMTRAIN_CLANGXX)
  set(_probe "${CMAKE_BINARY_DIR}/CMakeFiles/fuzz_probe.cpp")
  file(WRITE "${_probe}" "#include <cstddef>\n#include <cstdint>\nextern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(COMMAND "${LLMTRAIN_CLANGXX}" -fsanitize=fuzzer,address,undefined "${_probe}"
                          -o "${CMAKE_BINARY_DIR}/CMakeFiles/fuzz_probe"
                  RESULT_VARIABLE _probe_rc OUTPUT_QUIET ERROR_QUIET)
  if(_probe_rc EQUAL 0)
    set(_llmtrain_fuzz_default ON)
  endif()
endif()
option(LLMTRAIN_BUILD_FUZZERS "Build the parsers' libFuzzer targets with clang and run each briefly in ctest"
       ${_llmtrain_fuzz_default})
set(LLMTRAIN_FUZZ_SECONDS 15 CACHE STRING "seconds each fuzz target runs in ctest")
message(STATUS "llmtrain: LLMTRAIN_BUILD_FUZZERS=${LLMTRAIN_BUILD_FUZZERS} (clang++: ${LLMTRAIN_CLANGXX})")
if(NOT LLMTRAIN_BUILD_FUZZERS)
  return()
endif()
if(NOT _llmtrain_fuzz_default)
  message(FATAL_ERROR "LLMTRAIN_BUILD_FUZZERS=ON needs a clang++ with libFuzzer and the sanitizers "
                      "(Debian: clang and libclang-rt-14-dev)")
endif()

find_path(LLMTRAIN_TORCH_ARG_INCLUDE_DIR torch/arg.h HINTS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
set(_fuzz_bin "${CMAKE_BINARY_DIR}/fuzz")
set(_fuzz_args -DCMAKE_CXX_COMPILER=${LLMTRAIN_CLANGXX} -DCMAKE_BUILD_TYPE=RelWithDebInfo
               -DTORCH_ARG_INCLUDE_DIR=${LLMTRAIN_TORCH_ARG_INCLUDE_DIR})
foreach(var CMAKE_CXX_COMPILER_LAUNCHER PCRE2_ROOT SentencePiece_ROOT nlohmann_json_DIR)
  if(${var})
    list(APPEND _fuzz_args -D${var}=${${var}})
  endif()
endforeach()
ExternalProject_Add(llmtrain_fuzzers
  SOURCE_DIR "${PROJECT_SOURCE_DIR}/tests/fuzz"
  BINARY_DIR "${_fuzz_bin}"
  CMAKE_ARGS ${_fuzz_args}
  BUILD_ALWAYS ON
  INSTALL_COMMAND ""
  USES_TERMINAL_BUILD ON)

set(LLMTRAIN_FUZZ_TARGETS bpe_encode chat checkpoint_state config decode gpt2_bpe hf_config llmc safetensors sentencepiece sft
    shard)
foreach(name ${LLMTRAIN_FUZZ_TARGETS})
  add_test(NAME fuzz.${name}
           COMMAND bash "${PROJECT_SOURCE_DIR}/tests/fuzz/run.sh" "${_fuzz_bin}/fuzz_${name}" ${name} ${LLMTRAIN_FUZZ_SECONDS})
  set_tests_properties(fuzz.${name} PROPERTIES TIMEOUT 300)
endforeach()
