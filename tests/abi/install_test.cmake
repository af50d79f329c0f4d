# Install test, run by ctest as `cmake -P`: install the build tree into WORK_DIR/prefix, check
# the installed package is self-contained, build examples/ out of tree against it with
# find_package(modelcast) and run the examples from there.
# Inputs: MODELCAST_BUILD_DIR MODELCAST_SOURCE_DIR WORK_DIR GENERATOR C_COMPILER CXX_COMPILER BUILD_TYPE
cmake_minimum_required(VERSION 3.25)

foreach(var MODELCAST_BUILD_DIR MODELCAST_SOURCE_DIR WORK_DIR GENERATOR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_test.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE RelWithDebInfo)
endif()

set(prefix ${WORK_DIR}/prefix)
set(examples_build ${WORK_DIR}/examples-build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

include(${CMAKE_CURRENT_LIST_DIR}/run_checked.cmake)

# ---- 1. install --------------------------------------------------------------------------
message(STATUS "installing ${MODELCAST_BUILD_DIR} into ${prefix}")
execute_process(COMMAND ${CMAKE_COMMAND} --install ${MODELCAST_BUILD_DIR} --prefix ${prefix} --config ${BUILD_TYPE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${MODELCAST_BUILD_DIR} failed: it installs every installable target, so "
                      "build the whole tree first (cmake --build ${MODELCAST_BUILD_DIR}).\n${out}\n${err}")
endif()

file(GLOB_RECURSE config_files ${prefix}/*/modelcastConfig.cmake)
list(LENGTH config_files n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one installed modelcastConfig.cmake under ${prefix}, found: ${config_files}")
endif()
get_filename_component(package_dir ${config_files} DIRECTORY)

# ---- 2. the installed package refers to nothing in the build or source tree ----------------
file(GLOB package_files ${package_dir}/*.cmake)
foreach(f IN LISTS package_files)
  file(READ ${f} text)
  foreach(tree ${MODELCAST_BUILD_DIR} ${MODELCAST_SOURCE_DIR})
    string(FIND "${text}" "${tree}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${f} refers to ${tree}: the installed package is not relocatable")
    endif()
  endforeach()
endforeach()

# ---- 3. public headers include only the standard library and each other ------------------
set(c_std_headers assert.h complex.h ctype.h errno.h fenv.h float.h inttypes.h iso646.h limits.h
    locale.h math.h setjmp.h signal.h stdalign.h stdarg.h stdatomic.h stdbool.h stddef.h stdint.h
    stdio.h stdlib.h stdnoreturn.h string.h tgmath.h threads.h time.h uchar.h wchar.h wctype.h)
file(GLOB_RECURSE headers ${prefix}/include/*)
if(NOT headers)
  message(FATAL_ERROR "no headers installed under ${prefix}/include")
endif()
if(NOT EXISTS ${prefix}/include/modelcast/modelcast.h)
  message(FATAL_ERROR "modelcast/modelcast.h (the C ABI) is not installed")
endif()
foreach(h IN LISTS headers)
  file(STRINGS ${h} includes REGEX "^[ \t]*#[ \t]*include")
  foreach(line IN LISTS includes)
    if(line MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"")
      set(target ${CMAKE_MATCH_1})
      if(NOT target MATCHES "^modelcast/" OR NOT EXISTS ${prefix}/include/${target})
        message(FATAL_ERROR "${h}: includes \"${target}\", which is not an installed public header")
      endif()
    elseif(line MATCHES "#[ \t]*include[ \t]*<([^>]+)>")
      set(target ${CMAKE_MATCH_1})
      # C++ standard headers have no '.' or '/'; C ones are listed above. Anything else
      # (zmq.hpp, spdlog/..., ucp/..., xxhash.h, Eigen/...) is a third-party dependency.
      if(target MATCHES "[./]" AND NOT target IN_LIST c_std_headers)
        message(FATAL_ERROR "${h}: includes <${target}>: public headers must not need third-party headers")
      endif()
    else()
      message(FATAL_ERROR "${h}: cannot parse '${line}'")
    endif()
  endforeach()
endforeach()

# ---- 4. the installed library finds its dependencies without the build tree ---------------
file(GLOB libs ${prefix}/*/libmodelcast.so.*.*.* ${prefix}/*/*/libmodelcast.so.*.*.*)
if(NOT libs)
  message(FATAL_ERROR "libmodelcast.so.* not installed under ${prefix}")
endif()
list(GET libs 0 lib)
run(readelf -d ${lib})
foreach(tree ${MODELCAST_BUILD_DIR} ${MODELCAST_SOURCE_DIR})
  string(FIND "${run_output}" "${tree}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "${lib} has an RPATH/RUNPATH into ${tree}:\n${run_output}")
  endif()
endforeach()
run(ldd ${lib})
if(run_output MATCHES "not found")
  message(FATAL_ERROR "${lib} has unresolved dependencies:\n${run_output}")
endif()

# ---- 5. build examples/ out of tree against the installed package ----------------------------
# Strict warnings on the user's side too, and the package's include directory not treated as
# a system one, so that warnings in the public headers would fail this build.
set(strict "-Wall -Wextra -Wpedantic -Werror")
set(configure ${CMAKE_COMMAND} -S ${MODELCAST_SOURCE_DIR}/examples -B ${examples_build} -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
    -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
    -DCMAKE_NO_SYSTEM_FROM_IMPORTED=ON
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
    -DCMAKE_C_FLAGS=${strict}
    -DCMAKE_CXX_FLAGS=${strict})
if(C_COMPILER)
  list(APPEND configure -DCMAKE_C_COMPILER=${C_COMPILER})
endif()
if(CXX_COMPILER)
  list(APPEND configure -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
run(${configure})
file(STRINGS ${examples_build}/CMakeCache.txt found_dir REGEX "^modelcast_DIR:")
if(NOT found_dir STREQUAL "modelcast_DIR:PATH=${package_dir}")
  message(FATAL_ERROR "find_package(modelcast) found '${found_dir}', not the installed ${package_dir}")
endif()
run(${CMAKE_COMMAND} --build ${examples_build} -j2)

file(READ ${examples_build}/compile_commands.json commands)
string(FIND "${commands}" "${MODELCAST_SOURCE_DIR}/include" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "the out-of-tree build used the source tree's headers")
endif()
string(FIND "${commands}" "-I${prefix}/include" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the out-of-tree build did not use ${prefix}/include:\n${commands}")
endif()

# ---- 6. run the examples built against the installed copy --------------------------------
foreach(example modelcast_c_exchange modelcast_cpp_exchange)
  set(exe ${examples_build}/${example})
  run(ldd ${exe})
  if(NOT run_output MATCHES "libmodelcast\\.so\\.[0-9.]+ => ${prefix}/")
    message(FATAL_ERROR "${exe} does not load the installed libmodelcast:\n${run_output}")
  endif()
  message(STATUS "running ${exe}")
  run(${exe})
  message(STATUS "${run_output}")
  if(NOT run_output MATCHES "ok: 3 versions received intact")
    message(FATAL_ERROR "${example} did not report success")
  endif()
endforeach()
# ---- 7. a C-only project (as a C or Fortran simulation code would have) finds and links it ----
set(c_only ${WORK_DIR}/c-only)
file(MAKE_DIRECTORY ${c_only})
file(WRITE ${c_only}/CMakeLists.txt "cmake_minimum_required(VERSION 3.25)
project(modelcast_c_only LANGUAGES C)
find_package(modelcast REQUIRED)
add_executable(c_only_exchange \"${MODELCAST_SOURCE_DIR}/examples/c_exchange.c\")
target_link_libraries(c_only_exchange PRIVATE modelcast::modelcast)
")
set(configure ${CMAKE_COMMAND} -S ${c_only} -B ${c_only}/build -G ${GENERATOR} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF -DCMAKE_NO_SYSTEM_FROM_IMPORTED=ON -DCMAKE_C_FLAGS=${strict})
if(C_COMPILER)
  list(APPEND configure -DCMAKE_C_COMPILER=${C_COMPILER})
endif()
run(${configure})
run(${CMAKE_COMMAND} --build ${c_only}/build)
run(${c_only}/build/c_only_exchange)
if(NOT run_output MATCHES "ok: 3 versions received intact")
  message(FATAL_ERROR "the C-only build of c_exchange did not report success")
endif()
message(STATUS "install test passed")
