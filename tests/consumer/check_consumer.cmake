# Package test (run by ctest in script mode): installs the llmtrain build into a fresh prefix, then
# configures, builds and runs tests/consumer against it with find_package(llmtrain).
# Inputs: LLMTRAIN_BUILD_DIR, CONSUMER_SOURCE_DIR, WORK_DIR, GENERATOR, CXX_LAUNCHER (may be empty).
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: ${what} failed (${rc})")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
run("install" "${CMAKE_COMMAND}" --install "${LLMTRAIN_BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
set(launcher)
if(CXX_LAUNCHER)
  set(launcher "-DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER}")
endif()
run("configure" "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/build" -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" ${launcher})
run("build" "${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
run("run" "${WORK_DIR}/build/consumer")
if(NOT last_output MATCHES "consumer: trained one step, loss [0-9.]+ -> [0-9.]+")
  message(FATAL_ERROR "consumer test: unexpected output: ${last_output}")
endif()
