# Installs the build tree into a fresh PREFIX and imports modelcast from it with nothing but
# PYTHONPATH set (no LD_LIBRARY_PATH): the extension must find libmodelcast by its RPATH.
# -DBUILD_DIR -DPREFIX -DPYTHON -DPYTHON_DIR (relative to PREFIX, or absolute).
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
if(IS_ABSOLUTE "${PYTHON_DIR}")
  set(site "${PYTHON_DIR}")
else()
  set(site "${PREFIX}/${PYTHON_DIR}")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH PYTHONPATH=${site} PYTHONDONTWRITEBYTECODE=1
          ${PYTHON} -c "import modelcast, numpy; assert modelcast.__file__.startswith('${site}'), modelcast.__file__; p = modelcast.Producer(control_endpoint='tcp://127.0.0.1:0'); p.register('w', numpy.ones(4, dtype=numpy.float32)); print(p.publish(1).version); p.close()"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc OR NOT out MATCHES "^1")
  message(FATAL_ERROR "import from ${site} failed (${rc}): ${out}${err}")
endif()
message(STATUS "modelcast imported and published from ${site}")
