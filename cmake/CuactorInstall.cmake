include(CMakePackageConfigHelpers)
get_property(layers GLOBAL PROPERTY CUACTOR_LAYERS)
install(TARGETS cuactor ${layers} EXPORT cuactorTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS cuactor_cli cuactor_worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/cuactor DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT cuactorTargets NAMESPACE cuactor:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cuactor)
configure_package_config_file(cmake/cuactorConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/cuactorConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cuactor)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/cuactorConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cuactorConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/cuactorConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cuactor)
