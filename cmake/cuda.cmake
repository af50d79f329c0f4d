# Optional CUDA support for modelcast (GPU-resident weights). Included once from the top-level CMakeLists.txt,
# after the dependency section:   include(cmake/cuda.cmake)
#
# MODELCAST_WITH_CUDA = AUTO (default) | ON | OFF
#   AUTO: on when a CUDA compiler is found (/usr/local/cuda/bin/nvcc, CUDACXX, CMAKE_CUDA_COMPILER
#         or nvcc on PATH, via check_language(CUDA)); off otherwise, with a status line.
#   ON:   as AUTO, but a missing toolkit is a configure error.
#   OFF:  never looks for CUDA; the device layer (device/) still builds, with the simulated
#         device and the host reference of the GPU digest.
#
# Defines:
#   MODELCAST_HAVE_CUDA          ON/OFF, the outcome
#   MODELCAST_CUDA_LIBRARIES     CUDA::cudart when on, empty when off: what a target built from
#                                $<TARGET_OBJECTS:modelcast_device> must link
# The device layer itself, the only code that calls CUDA, is device/CMakeLists.txt.
#
# CUDA::cuda_driver is found (the VMM export path, cuMemExportToShareableHandle, will need it)
# but deliberately NOT linked: the toolkit only ships a stub libcuda.so whose SONAME is
# libcuda.so.1, which exists only where a driver is installed. Linking it would make every test
# binary fail to start on CI (no driver). Driver entry points, when needed, are to be reached
# through cudaGetDriverEntryPoint from the runtime, which loads the driver lazily.
#
# Architectures: CMAKE_CUDA_ARCHITECTURES defaults to "90-real;75-virtual":
#   90-real     SASS for sm_90 (H100/H200): what the GPU machine runs, no JIT at load.
#   75-virtual  compute_75 PTX, the oldest virtual architecture CUDA 13 still emits; the driver
#               JIT-compiles it for any other GPU (T4, A100, L4/L40S, Blackwell, ...). Our kernel
#               uses nothing newer than sm_75 needs. Only two device compilations: short CI builds.
# A cache value given with -DCMAKE_CUDA_ARCHITECTURES=... wins.

include_guard(GLOBAL)

set(MODELCAST_WITH_CUDA AUTO CACHE STRING "Build the CUDA parts (AUTO, ON, OFF)")
set_property(CACHE MODELCAST_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${MODELCAST_WITH_CUDA}" _mc_cuda_mode)
if(NOT _mc_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "MODELCAST_WITH_CUDA must be AUTO, ON or OFF (got '${MODELCAST_WITH_CUDA}')")
endif()

set(MODELCAST_HAVE_CUDA OFF)
set(MODELCAST_CUDA_LIBRARIES "")
if(NOT _mc_cuda_mode STREQUAL "OFF")
  # The toolkit's usual home wins over whatever nvcc is first on PATH, unless the user chose one.
  # (check_language(CUDA) honours CUDACXX; it does nothing when CMAKE_CUDA_COMPILER is set.)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
      set(CMAKE_CUDA_ARCHITECTURES "90-real;75-virtual" CACHE STRING "CUDA architectures (see cmake/cuda.cmake)")
    endif()
    enable_language(CUDA)
    # CMake 3.25 knows no "CUDA20" dialect for nvcc, and a target whose CUDA_STANDARD is unset
    # takes its CXX_STANDARD (20 here) for CUDA: every target that links CUDA objects would fail
    # to generate. The .cu code is C++17; this initialises CUDA_STANDARD for every target
    # created after this include (so include it before add_subdirectory(core)).
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(CMAKE_CUDA_EXTENSIONS OFF)
    if(_mc_cuda_mode STREQUAL "ON")
      find_package(CUDAToolkit REQUIRED)
    else()
      find_package(CUDAToolkit)
    endif()
    if(CUDAToolkit_FOUND AND TARGET CUDA::cudart)
      set(MODELCAST_HAVE_CUDA ON)
      set(MODELCAST_CUDA_LIBRARIES CUDA::cudart)
      message(STATUS "modelcast: CUDA on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
                     "architectures ${CMAKE_CUDA_ARCHITECTURES}, toolkit ${CUDAToolkit_LIBRARY_DIR})")
    elseif(_mc_cuda_mode STREQUAL "ON")
      message(FATAL_ERROR "MODELCAST_WITH_CUDA=ON but the CUDA runtime (CUDA::cudart) was not found")
    else()
      message(STATUS "modelcast: CUDA off (nvcc found but not the CUDA runtime library)")
    endif()
  elseif(_mc_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "MODELCAST_WITH_CUDA=ON but no CUDA compiler was found "
                        "(looked at /usr/local/cuda/bin/nvcc, CUDACXX, CMAKE_CUDA_COMPILER and PATH)")
  else()
    message(STATUS "modelcast: CUDA off (no CUDA compiler found; MODELCAST_WITH_CUDA=AUTO)")
  endif()
else()
  message(STATUS "modelcast: CUDA off (MODELCAST_WITH_CUDA=OFF)")
endif()

unset(_mc_cuda_mode)
