# run(COMMAND...): runs a command in a `cmake -P` test script, fails the test with its output
# when it exits non-zero, and leaves its stdout in run_output. Shared by the install tests.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "FAILED (${rc}): ${cmd}\n--- stdout ---\n${out}\n--- stderr ---\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
  set(run_error "${err}" PARENT_SCOPE)
endfunction()
