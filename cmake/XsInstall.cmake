# The installable package: `cmake --install <build> --prefix P` puts the public
# headers in P/include, the static libraries in P/lib and the CMake package in
# P/lib/cmake/xstage, so that a downstream project can do
#   find_package(xstage REQUIRED COMPONENTS burstgap)
#   target_link_libraries(app PRIVATE xstage::burstgap)
# Every installed library is exported under xstage::<EXPORT_NAME>. A component is
# one of them; the others are there because a component links them (static
# libraries carry their whole dependency chain, private ones included).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(XSTAGE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/xstage)

# target -> exported name. Components first, then what they link.
set(_xs_export
  xs_burstgap=burstgap xs_probe_host=probe_host xs_common=common xs_xstage_headers=headers)
set(XSTAGE_COMPONENTS burstgap)
if(XSTAGE_HAVE_CUDA)
  list(APPEND _xs_export
    xs_comm=comm xs_attention=attention xs_moe=moe xs_ulysses=ulysses xs_dit=dit
    xs_sync=sync xs_hopper=hopper xs_common_cuda=common_cuda xs_bench=bench
    xs_attention_host=attention_host xs_moe_host=moe_host xs_ulysses_host=ulysses_host
    xs_dit_host=dit_host)
  list(APPEND XSTAGE_COMPONENTS comm attention moe ulysses dit)
endif()

set(_xs_targets)
foreach(_pair IN LISTS _xs_export)
  string(REPLACE "=" ";" _pair "${_pair}")
  list(GET _pair 0 _target)
  list(GET _pair 1 _name)
  set_target_properties(${_target} PROPERTIES EXPORT_NAME ${_name})
  list(APPEND _xs_targets ${_target})
endforeach()

# Include directories come from the targets' $<INSTALL_INTERFACE:include>.
install(TARGETS ${_xs_targets} EXPORT xstageTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# Both header trees: the xstage headers include common/*.hpp.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/xstage/include/xstage ${PROJECT_SOURCE_DIR}/common/include/common
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT xstageTargets NAMESPACE xstage:: DESTINATION ${XSTAGE_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/xstageConfig.cmake.in
  ${PROJECT_BINARY_DIR}/xstageConfig.cmake INSTALL_DESTINATION ${XSTAGE_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/xstageConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/xstageConfig.cmake ${PROJECT_BINARY_DIR}/xstageConfigVersion.cmake
  DESTINATION ${XSTAGE_INSTALL_CMAKEDIR})
if(XSTAGE_HAVE_CUDA)
  # NCCL has no CMake package of its own; the config finds it with ours.
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/FindNCCL.cmake DESTINATION ${XSTAGE_INSTALL_CMAKEDIR})
endif()

# Install this build into a temporary prefix, build examples/cpp_advisor against it, run it.
if(XSTAGE_BUILD_TESTS)
  add_test(NAME install_cpp_advisor
    COMMAND sh ${PROJECT_SOURCE_DIR}/examples/cpp_advisor/test_install.sh
            ${CMAKE_COMMAND} ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${CMAKE_CXX_COMPILER})
  set_tests_properties(install_cpp_advisor PROPERTIES LABELS cpu TIMEOUT 300)
endif()
