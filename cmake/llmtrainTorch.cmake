# Finds LibTorch: the supported one is inside PyPI's torch wheel, found through Python
# (llmtrainTorchPrefix.cmake, which the installed package uses too). Sets LLMTRAIN_TORCH_HAS_CUDA.
find_package(Python3 COMPONENTS Interpreter)
# LibTorch's CUDA set-up picks nvcc flags for a list of GPUs (every one it knows when none is present);
# llmtrain targets Hopper, so name it.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "9.0a")
endif()
include(llmtrainTorchPrefix)
llmtrain_add_torch_prefix()
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
