// XS_HD: a small function callable from host and device code (inline on the host
// compiler, __host__ __device__ __forceinline__ under nvcc), for the integer maps
// that CPU tests check and kernels use.
#pragma once

#if defined(__CUDACC__)
#define XS_HD __host__ __device__ __forceinline__
#else
#define XS_HD inline
#endif
