# CPACK_PRE_BUILD_SCRIPTS (cmake/install.cmake): run in the package's staging root before
# dpkg-shlibdeps. The drop-in librdmacm.so.1 needs libibverbs.so.1, which is the drop-in beside
# it, not rdma-core's libibverbs1: an empty dependency in debian/shlibs.local says so (CPack
# removes debian/ after dpkg-shlibdeps ran). dpkg-shlibdeps runs in the staging directory of
# each component that has ELF files: the drop-ins are in `runtime` (uroce-dev has none, so a
# debian/ there would be packed).
if(IS_DIRECTORY "${CPACK_TEMPORARY_DIRECTORY}/runtime")
  file(WRITE "${CPACK_TEMPORARY_DIRECTORY}/runtime/debian/shlibs.local" "libibverbs 1\n")
else()
  file(WRITE "${CPACK_TEMPORARY_DIRECTORY}/debian/shlibs.local" "libibverbs 1\n")
endif()
