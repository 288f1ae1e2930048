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

# The PyTorch operators (xstage/torch): a shared library, exported as xstage::torch for
# C++ programs that load it beside their own LibTorch, and the Python package beside it.
if(TARGET xstage_torch)
  list(APPEND _xs_export xstage_torch=torch)
  list(APPEND XSTAGE_COMPONENTS torch)
endif()

# gait where LibTorch was found: xstage::gait, also reachable as gait::gait (the config
# file names it so); its libraries link LibTorch's imported targets, which the config
# finds again (find_dependency(Torch)) when the gait component is asked for.
if(TARGET xs_gait)
  list(APPEND _xs_export
    xs_gait=gait gait_eval=gait_eval gait_eval_core=gait_eval_core gait_train=gait_train
    gait_train_core=gait_train_core gait_nets=gait_nets gait_nets_core=gait_nets_core gait_data=gait_data
    xs_gait_headers=gait_headers gait_torch=gait_torch)
  list(APPEND XSTAGE_COMPONENTS gait)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/gait/include/gait DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
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
install(TARGETS ${_xs_targets} EXPORT xstageTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
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

# The Python package: PYTHONPATH=P/${XSTAGE_PYTHON_INSTALL_DIR}. It finds the library
# through _libpath.py (relative, so the prefix may move) and the shipped Burst-Gap fits
# in its data/ folder.
if(TARGET xstage_torch)
  set(XSTAGE_PYTHON_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/python CACHE STRING
    "Where `cmake --install` puts the Python package xstage (relative to the prefix)")
  file(RELATIVE_PATH _xs_lib_rel /prefix/${XSTAGE_PYTHON_INSTALL_DIR}/xstage /prefix/${CMAKE_INSTALL_LIBDIR})
  file(WRITE ${PROJECT_BINARY_DIR}/python/install/_libpath.py
    "# Written by cmake --install: the library, relative to this package.\n"
    "LIB_RELATIVE = \"${_xs_lib_rel}/libxstage_torch.so\"\n")
  file(GLOB _xs_py_files ${PROJECT_SOURCE_DIR}/python/xstage/*.py)
  install(FILES ${_xs_py_files} ${PROJECT_BINARY_DIR}/python/install/_libpath.py
    DESTINATION ${XSTAGE_PYTHON_INSTALL_DIR}/xstage)
  install(FILES ${PROJECT_SOURCE_DIR}/xstage/data/h200_params.json ${PROJECT_SOURCE_DIR}/xstage/data/h200x4_params.json
                ${PROJECT_SOURCE_DIR}/xstage/data/h200_host_params.json
    DESTINATION ${XSTAGE_PYTHON_INSTALL_DIR}/xstage/data)
endif()

# The tests of the install: each installs this build into a temporary prefix and uses it
# from outside, as a downstream user would (`sh script args...`, label cpu).
if(XSTAGE_BUILD_TESTS)
  # examples/cpp_advisor built against the installed package, and run.
  add_test(NAME install_cpp_advisor
    COMMAND sh ${PROJECT_SOURCE_DIR}/examples/cpp_advisor/test_install.sh
            ${CMAKE_COMMAND} ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${CMAKE_CXX_COMPILER})
  set(_xs_install_tests install_cpp_advisor)
  if(TARGET xstage_torch)  # the installed Python package, its library and data
    add_test(NAME install_torch_python
      COMMAND sh ${PROJECT_SOURCE_DIR}/python/tests/test_install.sh
              ${CMAKE_COMMAND} ${PROJECT_BINARY_DIR} ${XSTAGE_PYTHON_INSTALL_DIR} ${XSTAGE_TORCH_PYTHON})
    list(APPEND _xs_install_tests install_torch_python)
  endif()
  if(TARGET xs_gait)  # examples/cpp_gait: gait::gait with LibTorch found through the package
    add_test(NAME install_cpp_gait
      COMMAND sh ${PROJECT_SOURCE_DIR}/examples/cpp_gait/test_install.sh
              ${CMAKE_COMMAND} ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${CMAKE_CXX_COMPILER})
    list(APPEND _xs_install_tests install_cpp_gait)
  endif()
  set_tests_properties(${_xs_install_tests} PROPERTIES LABELS cpu TIMEOUT 300)
endif()
