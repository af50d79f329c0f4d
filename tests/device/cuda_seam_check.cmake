# Checks the device seam holds: device/ is the only code that includes a CUDA header, names a
# CUDA runtime call or type, or links the CUDA runtime, and transports/ (which core/ builds on)
# includes nothing of core/. Run by ctest (tests/device/CMakeLists.txt):
#   cmake -DROOT=<source tree> -P tests/device/cuda_seam_check.cmake
# It names each offending file and fails (grep it for the lines); comments count too (say "the device runtime's copy",
# not a CUDA call's name, outside device/).
if(NOT ROOT)
  message(FATAL_ERROR "cuda_seam_check: pass -DROOT=<source tree>")
endif()

# Everything checked in but the device layer, build trees, the GPU bundle and hidden folders.
file(GLOB _tops RELATIVE ${ROOT} ${ROOT}/*)
set(_files)
foreach(_top IN LISTS _tops)
  if(NOT IS_DIRECTORY ${ROOT}/${_top} OR _top MATCHES "^(device|build.*|gpu-bundle|\\..*)$")
    continue()
  endif()
  file(GLOB_RECURSE _found ${ROOT}/${_top}/*.h ${ROOT}/${_top}/*.hpp ${ROOT}/${_top}/*.c ${ROOT}/${_top}/*.cc
                            ${ROOT}/${_top}/*.cpp ${ROOT}/${_top}/*.cu ${ROOT}/${_top}/*.cuh ${ROOT}/${_top}/*.f90
                            ${ROOT}/${_top}/*.F90 ${ROOT}/${_top}/*.py ${ROOT}/${_top}/CMakeLists.txt
                            ${ROOT}/${_top}/*.cmake)
  list(APPEND _files ${_found})
endforeach()
list(APPEND _files ${ROOT}/CMakeLists.txt)

# A CUDA header, a runtime or driver call (cudaMalloc(, cuMemAlloc(), a declaration of CUDA's
# stream type (CUstream_st), or the CUDA targets other than through the variable cmake/cuda.cmake
# sets. Naming a handle's CUDA type in prose (the public API says a StreamHandle is a
# cudaStream_t) is no call.
set(_cuda "#[ \t]*include[ \t]*[<\"](cuda|cublas|cufft|curand|cusparse|nvrtc|nvml|driver_types)[A-Za-z0-9_]*\\.h|(^|[^A-Za-z0-9_.])(cuda[A-Z][A-Za-z0-9_]*|cu[A-Z][a-z][A-Za-z0-9_]*)[ \t]*\\(|CUstream_st|CUDA::cudart|CUDA::cuda_driver")
set(_core_include "#[ \t]*include[ \t]*\"core/")
set(_bad)
foreach(_file IN LISTS _files)
  file(RELATIVE_PATH _rel ${ROOT} ${_file})
  if(_rel STREQUAL "cmake/cuda.cmake" OR _rel STREQUAL "tests/device/cuda_seam_check.cmake")
    continue()  # finds the toolkit for device/; this file names what it looks for
  endif()
  file(STRINGS ${_file} _lines REGEX "${_cuda}")
  list(LENGTH _lines _n)
  if(_n GREATER 0)
    list(APPEND _bad "${_rel}: ${_n} line(s) use CUDA outside device/")
  endif()
  if(_rel MATCHES "^transports/")
    file(STRINGS ${_file} _lines REGEX "${_core_include}")
    list(LENGTH _lines _n)
    if(_n GREATER 0)
      list(APPEND _bad "${_rel}: includes core/, which builds on transports/")
    endif()
  endif()
endforeach()

list(LENGTH _files _count)
if(_bad)
  list(JOIN _bad "\n" _text)
  message(FATAL_ERROR "cuda_seam_check: the device seam is crossed:\n${_text}")
endif()
message(STATUS "cuda_seam_check: ${_count} files outside device/ call no CUDA; transports/ includes no core/")
