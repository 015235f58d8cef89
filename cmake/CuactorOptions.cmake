# Warning flags for project code; third-party headers come in as SYSTEM includes.
function(cuactor_target_warnings target)
  set(cxx_warnings -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wconversion -Wno-sign-conversion)
  if(CUACTOR_WERROR)
    list(APPEND cxx_warnings -Werror)
  endif()
  string(JOIN "," host_warnings ${cxx_warnings})
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${cxx_warnings}>
    $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings -Xcompiler=-Wall,-Wextra>)
endfunction()

# A project library of one layer: object code plus public headers under include/.
function(cuactor_add_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(cuactor_${name} STATIC ${ARG_SOURCES})
  add_library(cuactor::${name} ALIAS cuactor_${name})
  target_include_directories(cuactor_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(cuactor_${name} PUBLIC ${ARG_DEPS})
  target_compile_features(cuactor_${name} PUBLIC cxx_std_20)
  set_target_properties(cuactor_${name} PROPERTIES EXPORT_NAME ${name} CUDA_SEPARABLE_COMPILATION OFF)
  cuactor_target_warnings(cuactor_${name})
  set_property(GLOBAL APPEND PROPERTY CUACTOR_LAYERS cuactor_${name})
endfunction()
