# FindSentencePiece: Debian's libsentencepiece-dev has pkg-config files but no CMake config.
# Result: SentencePiece_FOUND, SentencePiece_VERSION, imported targets SentencePiece::sentencepiece
# and SentencePiece::train (the trainer library).
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_SentencePiece QUIET sentencepiece)
endif()
find_path(SentencePiece_INCLUDE_DIR sentencepiece_processor.h
  HINTS ${SentencePiece_ROOT} ${PC_SentencePiece_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(SentencePiece_LIBRARY NAMES sentencepiece
  HINTS ${SentencePiece_ROOT} ${PC_SentencePiece_LIBRARY_DIRS} PATH_SUFFIXES lib lib64)
find_library(SentencePiece_TRAIN_LIBRARY NAMES sentencepiece_train
  HINTS ${SentencePiece_ROOT} ${PC_SentencePiece_LIBRARY_DIRS} PATH_SUFFIXES lib lib64)
set(SentencePiece_VERSION "${PC_SentencePiece_VERSION}")
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(SentencePiece
  REQUIRED_VARS SentencePiece_LIBRARY SentencePiece_TRAIN_LIBRARY SentencePiece_INCLUDE_DIR
  VERSION_VAR SentencePiece_VERSION)
if(SentencePiece_FOUND AND NOT TARGET SentencePiece::sentencepiece)
  add_library(SentencePiece::sentencepiece UNKNOWN IMPORTED)
  set_target_properties(SentencePiece::sentencepiece PROPERTIES
    IMPORTED_LOCATION "${SentencePiece_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${SentencePiece_INCLUDE_DIR}")
  add_library(SentencePiece::train UNKNOWN IMPORTED)
  set_target_properties(SentencePiece::train PROPERTIES
    IMPORTED_LOCATION "${SentencePiece_TRAIN_LIBRARY}"
    INTERFACE_LINK_LIBRARIES SentencePiece::sentencepiece)
endif()
mark_as_advanced(SentencePiece_INCLUDE_DIR SentencePiece_LIBRARY SentencePiece_TRAIN_LIBRARY)
