# Finds LibTorch. The supported LibTorch is the one inside PyPI's torch wheel, so unless Torch_DIR is
# given, the Python interpreter (Python3_EXECUTABLE, else python3) is asked where its torch keeps its
# CMake files; an entry already on CMAKE_PREFIX_PATH still comes first. Sets LLMTRAIN_TORCH_HAS_CUDA.
find_package(Python3 COMPONENTS Interpreter)
# LibTorch's CUDA set-up picks nvcc flags for a list of GPUs (every one it knows when none is present);
# llmtrain targets Hopper, so name it.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "9.0a")
endif()
if(NOT Torch_DIR AND Python3_Interpreter_FOUND)
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c "import torch; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _llmtrain_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _llmtrain_torch_rc ERROR_QUIET)
  if(_llmtrain_torch_rc EQUAL 0)
    list(APPEND CMAKE_PREFIX_PATH "${_llmtrain_torch_prefix}")
  endif()
endif()
find_package(Torch 2.11 CONFIG)
if(NOT Torch_FOUND)
  message(FATAL_ERROR
    "llmtrain needs LibTorch 2.11 (PyPI's torch wheel). Run scripts/setup.sh, or pass "
    "-DPython3_EXECUTABLE=<python with torch> or -DCMAKE_PREFIX_PATH=<torch.utils.cmake_prefix_path>.")
endif()
if(TARGET torch_cuda)
  set(LLMTRAIN_TORCH_HAS_CUDA ON)
else()
  set(LLMTRAIN_TORCH_HAS_CUDA OFF)
endif()
message(STATUS "llmtrain: LibTorch ${Torch_VERSION} from ${Torch_DIR} (CUDA: ${LLMTRAIN_TORCH_HAS_CUDA})")
