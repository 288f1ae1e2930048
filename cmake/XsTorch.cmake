# Decides GAIT_HAVE_TORCH from GAIT_TORCH (AUTO|ON|OFF) and, when LibTorch is found,
# defines `gait_torch`: an interface target carrying its include directories
# (as system headers), libraries and ABI flag.
#
# Where LibTorch is looked for, in order:
#   1. Torch_DIR or CMAKE_PREFIX_PATH, when the user sets them;
#   2. the cmake prefix of python3's `torch` package (a PyTorch wheel, e.g. PyTorch
#      2.11 with CUDA on the accelerator machine);
#   3. Debian's libtorch-dev (/usr/lib/<triplet>/cmake/Torch; 1.13.1, CPU only).
# The gait code uses only APIs present in both 1.13 and 2.x; the few that moved
# (autocast) are selected by TORCH_VERSION_* in gait/train/amp.cpp.
set(GAIT_HAVE_TORCH OFF)
if(NOT GAIT_TORCH MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "GAIT_TORCH must be AUTO, ON or OFF (got '${GAIT_TORCH}')")
endif()

if(NOT GAIT_TORCH STREQUAL "OFF")
  set(_gait_torch_hints)
  if(NOT Torch_DIR)
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
      execute_process(COMMAND ${Python3_EXECUTABLE} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
        OUTPUT_VARIABLE _gait_torch_py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _gait_torch_rc)
      if(_gait_torch_rc EQUAL 0 AND _gait_torch_py)
        list(APPEND _gait_torch_hints "${_gait_torch_py}/Torch")
      endif()
    endif()
  endif()
  find_package(Torch QUIET HINTS ${_gait_torch_hints})
  if(Torch_FOUND)
    set(GAIT_HAVE_TORCH ON)
    # xstage/torch binds the gait library only when it finds this same LibTorch.
    set_property(GLOBAL PROPERTY GAIT_TORCH_DIR "${Torch_DIR}")
    add_library(gait_torch INTERFACE)
    target_link_libraries(gait_torch INTERFACE ${TORCH_LIBRARIES})
    # A LibTorch with CUDA (its torch_cuda target): the trainer can capture CUDA graphs
    # (gait/train/graph_step.cpp); Debian's CPU-only build ships the headers but not the library.
    if(TARGET torch_cuda)
      target_compile_definitions(gait_torch INTERFACE GAIT_TORCH_CUDA=1)
    endif()
    # PyTorch wheels ship their own {fmt} headers (v12 in 2.11) among Torch's
    # include directories, which come before the system's: code that sees both
    # compiles against the wheel's fmt but would link the system libfmt (9.x on
    # Ubuntu 24.04) and fail with undefined fmt::v12 symbols. Use the wheel's fmt
    # header-only there (its namespace differs, so it coexists with libfmt).
    foreach(_gait_torch_inc IN LISTS TORCH_INCLUDE_DIRS)
      if(EXISTS "${_gait_torch_inc}/fmt/format-inl.h")
        target_compile_definitions(gait_torch INTERFACE FMT_HEADER_ONLY=1)
        message(STATUS "gait: LibTorch bundles {fmt} (${_gait_torch_inc}/fmt): header-only there")
        break()
      endif()
    endforeach()
    message(STATUS "gait: LibTorch ${Torch_VERSION} at ${Torch_DIR}")
  elseif(GAIT_TORCH STREQUAL "ON")
    message(FATAL_ERROR "GAIT_TORCH=ON but LibTorch was not found: install libtorch-dev "
      "(./run deps), or set Torch_DIR to <libtorch>/share/cmake/Torch")
  else()
    message(STATUS "gait: LibTorch not found; networks, training and evaluation are skipped")
  endif()
endif()

# gait_torch_pch(target): compile `target` against the one precompiled LibTorch
# header (gait/include/gait/nets/torch.hpp). The first target creates it; the others
# reuse it, so <torch/torch.h> is parsed once per build, not once per file.
function(gait_torch_pch target)
  get_property(_owner GLOBAL PROPERTY GAIT_TORCH_PCH_OWNER)
  if(NOT _owner)
    target_precompile_headers(${target} PRIVATE "${PROJECT_SOURCE_DIR}/gait/include/gait/nets/torch.hpp")
    set_property(GLOBAL PROPERTY GAIT_TORCH_PCH_OWNER ${target})
  else()
    target_precompile_headers(${target} REUSE_FROM ${_owner})
  endif()
endfunction()
