# Package test (run by ctest in script mode): installs the llmtrain build into a fresh prefix, then
# configures, builds and runs tests/consumer against it with find_package(llmtrain).
# Then tests/consumer_text: find_package(llmtrain COMPONENTS text) where no LibTorch can be found, a
# program that links llmtrain::text, and no LibTorch library among what it or libllmtrain_text needs.
# Inputs: LLMTRAIN_BUILD_DIR, CONSUMER_SOURCE_DIR, TEXT_CONSUMER_SOURCE_DIR, WORK_DIR, GENERATOR, CXX_LAUNCHER (may be empty),
# PYTHON (the consumer's Python with torch, as a user names it), TORCH_DIR (where the build found LibTorch).
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: ${what} failed (${rc})")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
run("install" "${CMAKE_COMMAND}" --install "${LLMTRAIN_BUILD_DIR}" --prefix "${WORK_DIR}/installed")
# Relocatable: the prefix moved after installing still works, nothing in it points into the build tree
# (CMake files, RUNPATH), and its CMake files find LibTorch on the consumer's side, not where the build did.
file(RENAME "${WORK_DIR}/installed" "${WORK_DIR}/prefix")
file(GLOB_RECURSE installed_files "${WORK_DIR}/prefix/*")
foreach(f IN LISTS installed_files)
  set(forbidden "${LLMTRAIN_BUILD_DIR}|${WORK_DIR}/installed")
  if(f MATCHES "\\.cmake$")
    string(APPEND forbidden "|${TORCH_DIR}")
  elseif(NOT f MATCHES "\\.h$" AND NOT f MATCHES "\\.so")
    continue()
  endif()
  file(STRINGS "${f}" hits REGEX "${forbidden}")
  if(hits)
    message(FATAL_ERROR "consumer test: ${f} names the build tree, the prefix it was installed to or "
                        "the build's LibTorch: ${hits}")
  endif()
endforeach()
set(launcher)
if(CXX_LAUNCHER)
  set(launcher "-DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER}")
endif()
run("configure" "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/build" -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DPython3_EXECUTABLE=${PYTHON}" ${launcher})
run("build" "${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
run("run" "${WORK_DIR}/build/consumer")
if(NOT last_output MATCHES "consumer: trained one step, loss [0-9.]+ -> [0-9.]+")
  message(FATAL_ERROR "consumer test: unexpected output: ${last_output}")
endif()
run("run the trainer" "${WORK_DIR}/build/trainer")
if(NOT last_output MATCHES "trainer: 30 steps, loss [0-9.]+ -> [0-9.]+")
  message(FATAL_ERROR "consumer test: unexpected output of the trainer example: ${last_output}")
endif()

# The text side alone: Torch_DIR is pointed at nothing, so a lookup of LibTorch would fail the configure.
run("configure the text consumer" "${CMAKE_COMMAND}" -S "${TEXT_CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/build_text"
    -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix"
    "-DTorch_DIR=${WORK_DIR}/no-torch-here" ${launcher})
run("build the text consumer" "${CMAKE_COMMAND}" --build "${WORK_DIR}/build_text")
file(GLOB text_lib "${WORK_DIR}/prefix/lib*/libllmtrain_text.so")
foreach(binary "${WORK_DIR}/build_text/text_consumer" ${text_lib})
  run("ldd ${binary}" ldd "${binary}")
  if(last_output MATCHES "(libtorch|libc10)[^ ]*")
    message(FATAL_ERROR "consumer test: ${binary} loads LibTorch (${CMAKE_MATCH_0})")
  endif()
  if(NOT last_output MATCHES "libllmtrain_text")
    if(NOT binary MATCHES "libllmtrain_text.so$")
      message(FATAL_ERROR "consumer test: ${binary} does not load libllmtrain_text:\n${last_output}")
    endif()
  endif()
endforeach()
run("run the text consumer" "${WORK_DIR}/build_text/text_consumer")
if(NOT last_output MATCHES "text consumer: [0-9]+-piece tokenizer, [0-9]+ tokens in a shard, round trip ok, shard ok")
  message(FATAL_ERROR "consumer test: unexpected output of the text consumer: ${last_output}")
endif()
