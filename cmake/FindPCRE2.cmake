# FindPCRE2: the 8-bit PCRE2 library (GPT-2 pre-tokenisation), through pkg-config where present and a
# plain header/library search otherwise (Debian's libpcre2-dev, or a copy unpacked under PCRE2_ROOT).
# Result: PCRE2_FOUND, PCRE2_VERSION, imported target PCRE2::8.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_PCRE2 QUIET libpcre2-8)
endif()
find_path(PCRE2_INCLUDE_DIR pcre2.h HINTS ${PCRE2_ROOT} ${PC_PCRE2_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(PCRE2_LIBRARY NAMES pcre2-8 libpcre2-8.so.0
  HINTS ${PCRE2_ROOT} ${PC_PCRE2_LIBRARY_DIRS} PATH_SUFFIXES lib lib/x86_64-linux-gnu lib64)
if(PCRE2_INCLUDE_DIR AND EXISTS "${PCRE2_INCLUDE_DIR}/pcre2.h")
  file(STRINGS "${PCRE2_INCLUDE_DIR}/pcre2.h" _pcre2_defs REGEX "^#define PCRE2_(MAJOR|MINOR)[ \t]")
  string(REGEX REPLACE ".*#define PCRE2_MAJOR[ \t]+([0-9]+).*" "\\1" _pcre2_major "${_pcre2_defs}")
  string(REGEX REPLACE ".*#define PCRE2_MINOR[ \t]+([0-9]+).*" "\\1" _pcre2_minor "${_pcre2_defs}")
  set(PCRE2_VERSION "${_pcre2_major}.${_pcre2_minor}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(PCRE2 REQUIRED_VARS PCRE2_LIBRARY PCRE2_INCLUDE_DIR VERSION_VAR PCRE2_VERSION)
if(PCRE2_FOUND AND NOT TARGET PCRE2::8)
  add_library(PCRE2::8 UNKNOWN IMPORTED)
  set_target_properties(PCRE2::8 PROPERTIES
    IMPORTED_LOCATION "${PCRE2_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${PCRE2_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS PCRE2_CODE_UNIT_WIDTH=8)
endif()
mark_as_advanced(PCRE2_INCLUDE_DIR PCRE2_LIBRARY)
