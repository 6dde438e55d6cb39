# Install rules (issue 42): `cmake --install BUILD --prefix P` gives a working tree without the
# build tree, and `cpack -G DEB` (scripts/package) a Debian package of it.
#   P/bin/uroce, P/bin/uroce-devd
#   P/lib/<triplet>/uroce/libibverbs.so.1, librdmacm.so.1: the drop-ins, in a directory of their
#     own so that they never shadow the distribution's rdma-core (`uroce run` puts it first)
#   P/lib/<triplet>/liburoce.so.0 and the native C++ API's headers in P/include/uroce/ (those
#     of src/ that it includes in P/include/uroce/internal/), with uroce.pc (pkg-config) and
#     a CMake package (find_package(uroce): the target uroce::uroce)
#   P/share/man/: uroce(1), uroce(7), uroce-devd(8) (docs/man)
# Two components, which the Debian package splits in two: `runtime` (the package uroce: the
# programs, the drop-ins, liburoce.so.0, the manual pages) and `dev` (uroce-dev: the headers, the
# liburoce.so link, uroce.pc and the CMake package). `cmake --install` installs both.
include(CMakePackageConfigHelpers)

install(TARGETS uroce uroce-devd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
# As rdma-core installs them: libibverbs.so.1.14.44.0 and its libibverbs.so.1 link, without the
# development link libibverbs.so (programs are linked against the distribution's).
foreach(dropin uroce_ibverbs uroce_rdmacm)
  if(TARGET ${dropin})
    install(TARGETS ${dropin} LIBRARY DESTINATION ${UROCE_INSTALL_DROPINDIR} NAMELINK_SKIP
            COMPONENT runtime)
  endif()
endforeach()

set_target_properties(uroce_lib PROPERTIES EXPORT_NAME uroce)
target_compile_features(uroce_lib INTERFACE cxx_std_20)
target_include_directories(uroce_lib INTERFACE
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/uroce/internal>)
install(TARGETS uroce_lib EXPORT uroce-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/uroce/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/uroce
        COMPONENT dev FILES_MATCHING PATTERN "*.h")
# The rooms of src/ whose headers the API's headers include (device/udp_device.h,
# edge/environment.h); tests/install compiles against the installed copy.
foreach(room base wire cc fault capture transport verbs engine datapath proto seal device edge)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/${room}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/uroce/internal/${room}
          COMPONENT dev FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
endforeach()

set(UROCE_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/uroce)
install(EXPORT uroce-targets NAMESPACE uroce:: DESTINATION ${UROCE_CMAKEDIR} COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/uroce-config.cmake.in
                              ${PROJECT_BINARY_DIR}/uroce-config.cmake
                              INSTALL_DESTINATION ${UROCE_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/uroce-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/uroce-config.cmake ${PROJECT_BINARY_DIR}/uroce-config-version.cmake
        DESTINATION ${UROCE_CMAKEDIR} COMPONENT dev)
# uroce.pc's paths relative to its own place (${pcfiledir}), so that the tree can move.
file(RELATIVE_PATH UROCE_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${CMAKE_CURRENT_LIST_DIR}/uroce.pc.in ${PROJECT_BINARY_DIR}/uroce.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/uroce.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT dev)

# The manual pages, written in roff (docs/man), compressed as Debian installs them.
foreach(page uroce.1 uroce.7 uroce-devd.8)
  string(REGEX REPLACE ".*\\." "" section ${page})
  configure_file(${PROJECT_SOURCE_DIR}/docs/man/${page} ${PROJECT_BINARY_DIR}/man/${page} COPYONLY)
  execute_process(COMMAND gzip -9nf ${PROJECT_BINARY_DIR}/man/${page})
  install(FILES ${PROJECT_BINARY_DIR}/man/${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section}
          COMPONENT runtime)
endforeach()

# The Debian package (scripts/package: `cpack -G DEB` in a Release tree): everything above, under
# /usr, its dependencies found by dpkg-shlibdeps (the libraries the programs link: libc,
# libstdc++, ISA-L, libpcap, OpenSSL's libcrypto; no ibverbs-providers, no rdma-core), with a
# copyright file and a changelog in /usr/share/doc/uroce. docs/PACKAGING.md explains what lintian says about it.
configure_file(${CMAKE_CURRENT_LIST_DIR}/debian/changelog.in ${PROJECT_BINARY_DIR}/changelog.Debian
               @ONLY)
execute_process(COMMAND gzip -9nf ${PROJECT_BINARY_DIR}/changelog.Debian)
foreach(component runtime dev)
  set(docdir ${CMAKE_INSTALL_DATAROOTDIR}/doc/uroce)  # each Debian package has its own
  if(component STREQUAL "dev")
    set(docdir ${CMAKE_INSTALL_DATAROOTDIR}/doc/uroce-dev)
  endif()
  install(FILES ${PROJECT_BINARY_DIR}/changelog.Debian.gz ${CMAKE_CURRENT_LIST_DIR}/debian/copyright
          DESTINATION ${docdir} COMPONENT ${component})
endforeach()

# /etc/uroce/devices.conf: a commented example, which names no device and so leaves the default
# list in place (src/device/device_config.h). The Debian package's only (EXCLUDE_FROM_ALL: a
# component's install, as CPack's, takes it; `cmake --install --prefix P` writes nothing under
# /etc), a conffile (debian/conffiles): an upgrade keeps the administrator's edits, a purge
# removes it.
install(FILES ${CMAKE_CURRENT_LIST_DIR}/debian/devices.conf DESTINATION /etc/uroce
        COMPONENT runtime EXCLUDE_FROM_ALL)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME uroce)
set(CPACK_PACKAGE_CONTACT "uroce developers <dev@uroce.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "RoCEv2 (RDMA over Converged Ethernet) in user space")
set(CPACK_PACKAGE_DESCRIPTION
    "uroce runs RDMA (RoCEv2, byte-exact on the wire) over plain UDP
sockets, with no kernel module and no RDMA NIC. It ships drop-in
libibverbs.so.1 and librdmacm.so.1 in a private directory, which
`uroce run -- PROGRAM` puts in front of the distribution's rdma-core,
the uroce tools, the per-device coordinator uroce-devd, and liburoce,
its native C++ API.")
# Two packages, one per component: uroce (runtime) and uroce-dev (dev).
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME uroce)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME uroce-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# Each package's long description (the summary line is CPACK_PACKAGE_DESCRIPTION_SUMMARY).
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION}")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "The development files of liburoce, uroce's native C++20 API: its
headers, the liburoce.so link, a pkg-config file (uroce.pc) and a CMake
package (find_package(uroce): the imported target uroce::uroce).")
# uroce-dev needs the same version of uroce's liburoce.so.0 (CPack passes no shlibs between
# the two packages; the dev package has no ELF file of its own).
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "uroce (= ${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE})")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# dpkg-shlibdeps would take the drop-in librdmacm.so.1's libibverbs.so.1 for rdma-core's
# (debian/shlibs-local.cmake says otherwise), and CPack's own shlibs file would offer the
# drop-ins' SONAMEs to other packages: the package's shlibs names liburoce only.
set(CPACK_PRE_BUILD_SCRIPTS ${CMAKE_CURRENT_LIST_DIR}/debian/shlibs-local.cmake)
file(WRITE ${PROJECT_BINARY_DIR}/debian/shlibs
     "liburoce ${PROJECT_VERSION_MAJOR} uroce (>= ${PROJECT_VERSION})\n")
# liburoce.so.0 is in the loader's path: the ldconfig trigger (CPack adds a postinst and a postrm
# that run ldconfig too).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
    ${PROJECT_BINARY_DIR}/debian/shlibs ${CMAKE_CURRENT_LIST_DIR}/debian/triggers
    ${CMAKE_CURRENT_LIST_DIR}/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
