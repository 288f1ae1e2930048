# Decide whether CUDA targets are built and configure them for Hopper.
include(CheckLanguage)
set(XSTAGE_HAVE_CUDA OFF)
if(NOT XSTAGE_CUDA STREQUAL "OFF")
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # sm_90a: wgmma, setmaxnreg and the TMA/mbarrier forms we use are Hopper-only;
    # the "a" target is required for wgmma (a plain sm_90 pass rejects it).
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90a)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know that nvcc >= 12 accepts C++20: teach it the flag.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    string(APPEND CMAKE_CUDA_FLAGS " --expt-relaxed-constexpr")
    # nvcc's front end rejects fmt's consteval format strings, so .cu files never
    # include fmt: they report errors through common/cuda_check.hpp (no fmt).
    find_package(CUDAToolkit REQUIRED)
    find_package(NCCL 2.28)
    if(NCCL_FOUND)
      set(XSTAGE_HAVE_CUDA ON)
    elseif(XSTAGE_CUDA STREQUAL "ON")
      message(FATAL_ERROR "XSTAGE_CUDA=ON but NCCL >= 2.28 (device API) was not found; set NCCL_ROOT")
    else()
      message(STATUS "nvcc found but NCCL >= 2.28 not found: CUDA targets skipped")
    endif()
  elseif(XSTAGE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "XSTAGE_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
