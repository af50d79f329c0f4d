# The sidecar client library links only what a client needs: `ldd` of LIBRARY names none of
# libmodelcast, UCX, ZeroMQ, libsodium or CUDA. Run by ctest as `cmake -DLIBRARY=... -P`.
execute_process(COMMAND ldd ${LIBRARY} OUTPUT_VARIABLE linked RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ldd ${LIBRARY} failed:\n${linked}")
endif()
foreach(unwanted libmodelcast\\.so libucp libucs libuct libzmq libsodium libcudart libspdlog)
  if(linked MATCHES "${unwanted}")
    message(FATAL_ERROR "${LIBRARY} links ${unwanted}, which a client of modelcastd does not need:\n${linked}")
  endif()
endforeach()
message(STATUS "${LIBRARY} links:\n${linked}")
