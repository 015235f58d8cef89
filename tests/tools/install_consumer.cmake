# Installs the build tree into a scratch prefix, then configures, builds and runs a consumer project
# that uses find_package(cuactor). Variables: BUILD_DIR, SOURCE_DIR, WORK_DIR, CUDA_COMPILER.
file(REMOVE_RECURSE ${WORK_DIR})
foreach(step
    "${CMAKE_COMMAND};--install;${BUILD_DIR};--prefix;${WORK_DIR}/prefix"
    "${CMAKE_COMMAND};-S;${SOURCE_DIR};-B;${WORK_DIR}/build;-G;Ninja;-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix;-DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}"
    "${CMAKE_COMMAND};--build;${WORK_DIR}/build"
    "${WORK_DIR}/build/consumer")
  execute_process(COMMAND ${step} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${step}\n${out}")
  endif()
endforeach()
message(STATUS "find_package(cuactor) consumer built and ran: ${out}")
