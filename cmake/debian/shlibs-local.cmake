# CPACK_PRE_BUILD_SCRIPTS (cmake/install.cmake): run in the package's staging root before
# dpkg-shlibdeps. The drop-in librdmacm.so.1 needs libibverbs.so.1, which is the drop-in beside
# it, not rdma-core's libibverbs1: an empty dependency in debian/shlibs.local says so (CPack
# removes debian/ before it packs).
file(WRITE "${CPACK_TEMPORARY_DIRECTORY}/debian/shlibs.local" "libibverbs 1\n")
