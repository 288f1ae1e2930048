// The fused EP MoE kernel's one entry point (device code: sm90_moe_fused.cuh).
#include "sm90_moe_fused.cuh"
#include "common/cuda_check.hpp"

namespace xstage::moe {

void launch_fused(const FusedArgs& args, int blocks, cudaStream_t stream) {
  XS_CHECK_MSG(blocks >= 1, "moe fused: need at least one block");
  XS_CHECK_MSG(args.ranks >= 1 && args.ranks <= kMaxRanks, "moe fused: ranks must be in 1..8");
  XS_CHECK_MSG(args.experts_local >= 1 && args.experts_local <= kMaxLocalExperts,
               "moe fused: experts per rank must be in 1..512");
  XS_CHECK_MSG(args.hidden % kHiddenQuantum == 0 && args.inter % kInterQuantum == 0,
               "moe fused: hidden must be a multiple of 256 and intermediate of 128");
  // Per device and cheap; set on every launch because ranks run on several devices.
  // The profiled kernel is a separate instantiation: NoProfile has no clock reads.
  auto* kernel = args.profile != nullptr ? device::moe_fused_kernel<device::CycleProfile>
                                         : device::moe_fused_kernel<device::NoProfile>;
  XS_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, FusedKernelShape::kSmemBytes));
  kernel<<<blocks, kFusedThreads, FusedKernelShape::kSmemBytes, stream>>>(args);
  XS_CHECK_LAUNCH();
}

}  // namespace xstage::moe
