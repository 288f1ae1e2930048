// Host launcher of the sm_90a flash forward kernel for any epilogue policy.
// xstage/attention/sm90_flash_fwd.cu instantiates it with LocalStoreEpilogue;
// the Ulysses layer instantiates it with its remote-store policy.
// Call validate() and choose_config() first (attention.hpp).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "xstage/attention/sm90_flash_fwd.cuh"
#include "xstage/attention/attention.hpp"
#include "common/cuda_check.hpp"
#include "xstage/hopper/tensor_map.hpp"
#include "xstage/sync/report.hpp"

namespace xstage::attention::sm90 {

// TMA view of a [B, S, H, D] bf16 tensor: dims (D, S, H, B), box (64, rows, 1, 1).
inline CUtensorMap make_bshd_map(const Tensor4& t, int box_rows) {
  auto stride_bytes = [](int64_t stride, int64_t extent) -> uint64_t {
    // A stride of an extent-1 dimension is never followed; give TMA a legal one.
    return extent == 1 ? 16 : static_cast<uint64_t>(stride) * 2;
  };
  hopper::TiledMapSpec s;
  s.base = t.data;
  s.rank = 4;
  s.dims[0] = static_cast<uint64_t>(t.D);
  s.dims[1] = static_cast<uint64_t>(t.S);
  s.dims[2] = static_cast<uint64_t>(t.H);
  s.dims[3] = static_cast<uint64_t>(t.B);
  s.strides_bytes[0] = 2;
  s.strides_bytes[1] = stride_bytes(t.stride_s, t.S);
  s.strides_bytes[2] = stride_bytes(t.stride_h, t.H);
  s.strides_bytes[3] = stride_bytes(t.stride_b, t.B);
  s.box[0] = 64;
  s.box[1] = static_cast<uint32_t>(box_rows);
  s.box[2] = 1;
  s.box[3] = 1;
  s.swizzle_128b = true;
  return hopper::make_tiled_map_bf16(s);
}

// rank: named in a timed-out wait's report (-1: a kernel of no rank).
template <class T, class Epilogue>
void launch_flash_fwd_traits(const FwdArgs& a, const Problem& prob, const FwdConfig& cfg,
                             const typename Epilogue::Params& epi, cudaStream_t stream, int rank) {
  XS_CHECK_MSG(cfg.smem_bytes == T::kSmemBytes && cfg.block_m == T::kBlockM && cfg.block_n == T::kBlockN &&
                   cfg.stages == T::kStages && cfg.threads == T::kThreads,
               "attention: host config disagrees with the kernel traits (smem_bytes_for / choose_config)");
  FlashFwdParams<Epilogue> p{};
  p.tma_q = make_bshd_map(a.q, T::kBlockM);
  p.tma_k = make_bshd_map(a.k, T::kBlockN);
  p.tma_v = make_bshd_map(a.v, T::kBlockN);
  p.mask = MaskInfo{static_cast<int>(prob.Sq), static_cast<int>(prob.Skv), prob.causal};
  p.scale_log2 = static_cast<float>(prob.scale * 1.4426950408889634);
  p.scheduler.space = cfg.tiles;
  p.scheduler.snake = cfg.snake;
  p.epilogue = epi;
  sync::register_sites(kAttentionSites);
  p.wait = sync::wait_context(sync::Kernel::attention, rank);
  auto kernel = flash_fwd_kernel<T, Epilogue>;
  // The shared-memory opt-in is per device: once per instantiation and device
  // (Ulysses runs one rank per device from threads of one process).
  static std::atomic<uint64_t> smem_set_on{0};
  int dev = 0;
  XS_CHECK_CUDA(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (!(smem_set_on.load(std::memory_order_acquire) & bit)) {
    XS_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
    smem_set_on.fetch_or(bit, std::memory_order_acq_rel);
  }
  kernel<<<cfg.grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  XS_CHECK_LAUNCH();
}

template <class Epilogue>
void launch_flash_fwd(const FwdArgs& a, const Problem& prob, const FwdConfig& cfg,
                      const typename Epilogue::Params& epi, cudaStream_t stream, int rank = -1) {
  XS_CHECK_MSG((cfg.head_dim == 64 || cfg.head_dim == 128) && cfg.consumer_wgs == 2,
               "attention: no kernel for this head dim / consumer warpgroup count (64/2, 128/2)");
  if (cfg.head_dim == 64) {
    if (cfg.pingpong) launch_flash_fwd_traits<FlashFwdTraits<64, 2, true>, Epilogue>(a, prob, cfg, epi, stream, rank);
    else launch_flash_fwd_traits<FlashFwdTraits<64, 2, false>, Epilogue>(a, prob, cfg, epi, stream, rank);
  } else {
    if (cfg.pingpong)
      launch_flash_fwd_traits<FlashFwdTraits<128, 2, true>, Epilogue>(a, prob, cfg, epi, stream, rank);
    else
      launch_flash_fwd_traits<FlashFwdTraits<128, 2, false>, Epilogue>(a, prob, cfg, epi, stream, rank);
  }
}

}  // namespace xstage::attention::sm90
