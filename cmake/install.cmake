# Install rules (issue 42): `cmake --install BUILD --prefix P` gives a working tree without the
# build tree, and `cpack -G DEB` (scripts/package) a Debian package of it.
#   P/bin/uroce, P/bin/uroce-devd
#   P/lib/<triplet>/uroce/libibverbs.so.1, librdmacm.so.1: the drop-ins, in a directory of their
#     own so that they never shadow the distribution's rdma-core (`uroce run` puts it first)
#   P/lib/<triplet>/liburoce.so.0 and the native C++ API's headers in P/include/uroce/ (those
#     of src/ that it includes in P/include/uroce/internal/), with uroce.pc (pkg-config) and
#     a CMake package (find_package(uroce): the target uroce::uroce)
include(CMakePackageConfigHelpers)

install(TARGETS uroce uroce-devd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# As rdma-core installs them: libibverbs.so.1.14.44.0 and its libibverbs.so.1 link, without the
# development link libibverbs.so (programs are linked against the distribution's).
foreach(dropin uroce_ibverbs uroce_rdmacm)
  if(TARGET ${dropin})
    install(TARGETS ${dropin} LIBRARY DESTINATION ${UROCE_INSTALL_DROPINDIR} NAMELINK_SKIP)
  endif()
endforeach()

set_target_properties(uroce_lib PROPERTIES EXPORT_NAME uroce)
target_compile_features(uroce_lib INTERFACE cxx_std_20)
target_include_directories(uroce_lib INTERFACE
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/uroce/internal>)
install(TARGETS uroce_lib EXPORT uroce-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/uroce/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/uroce
        FILES_MATCHING PATTERN "*.h")
# The rooms of src/ whose headers the API's headers include (device/udp_device.h,
# edge/environment.h); tests/install compiles against the installed copy.
foreach(room base wire cc fault capture transport verbs engine datapath proto device edge)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/${room}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/uroce/internal/${room}
          FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
endforeach()

set(UROCE_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/uroce)
install(EXPORT uroce-targets NAMESPACE uroce:: DESTINATION ${UROCE_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/uroce-config.cmake.in
                              ${PROJECT_BINARY_DIR}/uroce-config.cmake
                              INSTALL_DESTINATION ${UROCE_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/uroce-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/uroce-config.cmake ${PROJECT_BINARY_DIR}/uroce-config-version.cmake
        DESTINATION ${UROCE_CMAKEDIR})
# uroce.pc's paths relative to its own place (${pcfiledir}), so that the tree can move.
file(RELATIVE_PATH UROCE_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${CMAKE_CURRENT_LIST_DIR}/uroce.pc.in ${PROJECT_BINARY_DIR}/uroce.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/uroce.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
