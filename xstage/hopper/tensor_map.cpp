#include "xstage/hopper/tensor_map.hpp"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <fmt/format.h>


#include "common/check.hpp"
#include "common/cuda_check.hpp"

namespace xstage::hopper {

namespace {

// The 12.0 signature's ABI, the one PFN_cuTensorMapEncodeTiled_v12000 names.
PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static const auto fn =
      reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(common::driver_function("cuTensorMapEncodeTiled"));
  return fn;
}

}  // namespace

CUtensorMap make_tiled_map_bf16(const TiledMapSpec& s) {
  XS_ASSERT(s.rank >= 2 && s.rank <= 5, "tensor map rank {} (need 2..5)", s.rank);
  XS_ASSERT(reinterpret_cast<uintptr_t>(s.base) % 16 == 0, "tensor map base {} is not 16-byte aligned", s.base);
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], elem_strides[5];
  for (int i = 0; i < s.rank; ++i) {
    dims[i] = s.dims[i];
    box[i] = s.box[i];
    elem_strides[i] = 1;
    XS_ASSERT(s.box[i] >= 1 && s.box[i] <= 256, "tensor map box[{}] = {} (need 1..256)", i, s.box[i]);
    if (i > 0) {
      strides[i - 1] = s.strides_bytes[i];
      XS_ASSERT(s.strides_bytes[i] % 16 == 0, "tensor map stride of dim {} is {} bytes, not a multiple of 16", i,
                s.strides_bytes[i]);
    }
  }
  CUtensorMap map{};
  const CUresult r = encode_fn()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, static_cast<cuuint32_t>(s.rank),
                                 const_cast<void*>(s.base), dims, strides, box, elem_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 s.swizzle_128b ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  XS_ASSERT(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (CUresult {}) for rank {} dims [{}, {}, {}, {}] box [{}, {}]",
            static_cast<int>(r), s.rank, s.dims[0], s.dims[1], s.dims[2], s.dims[3], s.box[0], s.box[1]);
  return map;
}

}  // namespace xstage::hopper
