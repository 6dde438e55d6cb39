# uroce_drop_in(TARGET OUTPUT_NAME VERSION MAP SOURCES...): one of the drop-in shared libraries
# (src/compat/ibverbs, src/compat/rdmacm). lib<OUTPUT_NAME>.so.1 in build/compat/, linked with
# the device and the edge, exporting the real library's symbol versions (the version script MAP,
# in the calling folder) and nothing else; every symbol it uses must resolve at link time.
function(uroce_drop_in target output_name version map)
  add_library(${target} SHARED ${ARGN})
  target_link_libraries(${target} PRIVATE uroce_device uroce_edge)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME ${output_name}
    VERSION ${version}
    SOVERSION 1
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/compat
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${map})
  target_link_options(${target} PRIVATE
    -Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/${map}
    -Wl,--no-undefined
    -Wl,-z,defs)
endfunction()
