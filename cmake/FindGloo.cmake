# FindGloo: Gloo's headers, which LibTorch's ProcessGroupGloo.hpp includes (the wheel ships the compiled
# Gloo inside libtorch_cpu but not its headers): Debian's libgloo-dev, or a copy unpacked under
# GLOO_ROOT. Nothing of Gloo is linked. Result: Gloo_FOUND, imported target Gloo::headers.
find_path(GLOO_INCLUDE_DIR gloo/context.h HINTS ${GLOO_ROOT} PATH_SUFFIXES include)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Gloo REQUIRED_VARS GLOO_INCLUDE_DIR)
if(Gloo_FOUND AND NOT TARGET Gloo::headers)
  add_library(Gloo::headers INTERFACE IMPORTED)
  set_target_properties(Gloo::headers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${GLOO_INCLUDE_DIR}")
endif()
mark_as_advanced(GLOO_INCLUDE_DIR)
