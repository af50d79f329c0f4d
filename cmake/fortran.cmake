# The Fortran module (fortran/) and its test, built when a Fortran compiler is found
# (Debian's gfortran; scripts/install-deps.sh installs it). Without one they are skipped, with a
# message, and the rest of modelcast builds as before.
include(CheckLanguage)
check_language(Fortran)
if(CMAKE_Fortran_COMPILER)
  enable_language(Fortran)
  add_subdirectory(${PROJECT_SOURCE_DIR}/fortran ${PROJECT_BINARY_DIR}/fortran)
  set(MODELCAST_HAS_FORTRAN ON)
else()
  message(STATUS "modelcast: no Fortran compiler found: the Fortran module and its test are not built")
  set(MODELCAST_HAS_FORTRAN OFF)
endif()
