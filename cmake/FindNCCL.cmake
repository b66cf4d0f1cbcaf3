# FindNCCL
# --------
# Finds the NVIDIA Collective Communications Library (nccl.h and libnccl).
#
# Hints (searched first): NCCL_ROOT (CMake or environment variable), CUDAToolkit_ROOT,
# CUDA_HOME / CUDA_PATH (environment), the CUDA toolkit found by FindCUDAToolkit, /usr/local/cuda.
#
# Result variables:
#   NCCL_FOUND, NCCL_VERSION (e.g. 2.28.9), NCCL_INCLUDE_DIRS, NCCL_LIBRARIES
# Cache variables:
#   NCCL_INCLUDE_DIR, NCCL_LIBRARY
# Imported target:
#   NCCL::NCCL

set(_nccl_hints)
foreach(_root IN ITEMS "${NCCL_ROOT}" "$ENV{NCCL_ROOT}" "${CUDAToolkit_ROOT}" "$ENV{CUDAToolkit_ROOT}"
                       "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}")
  if(_root)
    list(APPEND _nccl_hints "${_root}")
  endif()
endforeach()
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _nccl_hints "${CUDAToolkit_LIBRARY_ROOT}")
endif()
list(APPEND _nccl_hints /usr/local/cuda)

find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl
  HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_defines
       REGEX "^#define NCCL_(MAJOR|MINOR|PATCH)[ \t]+[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    set(NCCL_VERSION_${_part} "")
    foreach(_line IN LISTS _nccl_defines)
      if(_line MATCHES "^#define NCCL_${_part}[ \t]+([0-9]+)")
        set(NCCL_VERSION_${_part} "${CMAKE_MATCH_1}")
      endif()
    endforeach()
  endforeach()
  if(NOT NCCL_VERSION_MAJOR STREQUAL "")
    set(NCCL_VERSION "${NCCL_VERSION_MAJOR}.${NCCL_VERSION_MINOR}.${NCCL_VERSION_PATCH}")
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)

if(NCCL_FOUND)
  set(NCCL_INCLUDE_DIRS "${NCCL_INCLUDE_DIR}")
  set(NCCL_LIBRARIES "${NCCL_LIBRARY}")
  if(NOT TARGET NCCL::NCCL)
    add_library(NCCL::NCCL UNKNOWN IMPORTED)
    set_target_properties(NCCL::NCCL PROPERTIES
      IMPORTED_LOCATION "${NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  endif()
endif()

unset(_nccl_hints)
unset(_nccl_defines)
