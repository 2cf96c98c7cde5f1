# FindNCCL: NCCL has no CMake config. Looks first beside the LibTorch in use (PyPI's nvidia-nccl wheel,
# the NCCL that LibTorch itself loads), then in NCCL_ROOT and the CUDA toolkit. The wheel ships only
# libnccl.so.2, so that name is accepted too.
# Result: NCCL_FOUND, NCCL_VERSION, imported target NCCL::NCCL.
set(_nccl_hints)
if(NCCL_ROOT)
  list(APPEND _nccl_hints "${NCCL_ROOT}")
endif()
if(Torch_DIR)  # .../site-packages/torch/share/cmake/Torch -> .../site-packages/nvidia/nccl
  get_filename_component(_nccl_site "${Torch_DIR}/../../../.." ABSOLUTE)
  list(APPEND _nccl_hints "${_nccl_site}/nvidia/nccl")
endif()
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _nccl_hints "${CUDAToolkit_LIBRARY_ROOT}")
endif()
list(APPEND _nccl_hints /usr/local/cuda)

find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints} PATH_SUFFIXES lib lib64)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define NCCL_${_part} ([0-9]+).*" "\\1" NCCL_${_part} "${_nccl_defs}")
  endforeach()
  set(NCCL_VERSION "${NCCL_MAJOR}.${NCCL_MINOR}.${NCCL_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::NCCL)
  add_library(NCCL::NCCL SHARED IMPORTED)
  set_target_properties(NCCL::NCCL PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    IMPORTED_NO_SONAME FALSE
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
