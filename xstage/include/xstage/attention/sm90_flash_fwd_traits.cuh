// Compile-time shape of the attention forward kernel (tiles, stages, shared-memory map,
// register split), its parameters, its barriers and its wait sites.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <iterator>

#include "xstage/attention/tiles.hpp"
#include "xstage/sync/report.hpp"

namespace xstage::attention::sm90 {

template <int kHeadDim_, int kConsumerWGs_ = 2, bool kPingpong_ = false>
struct FlashFwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dim 64 or 128");
  static constexpr int kConsumerWGs = kConsumerWGs_;     // 64 query rows each (wgmma M)
  // Three consumer warpgroups (192-row tiles, FA3's choice at D = 64) leave
  // 152-160 registers each, where ptxas spills: only two are instantiated.
  static_assert(kConsumerWGs == 2 || kConsumerWGs == 3, "2 or 3 consumer warpgroups");
  // Pingpong is a compile-time choice: as a run-time flag its (never taken)
  // branches around the MMA issue cost the default path 6-16% (measured A/B
  // against v1, docs/xstage-attention.md), so each setting is its own kernel.
  static constexpr bool kPingpong = kPingpong_;
  static constexpr int kBlockM = 64 * kConsumerWGs;      // query rows per CTA tile
  static constexpr int kBlockN = 128;                    // keys per K/V stage
  static constexpr int kStages = kHeadDim == 64 ? 4 : 2; // what 227 KB of shared memory holds
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  static constexpr int kPanelCols = 64;                  // bf16 columns per 128-byte swizzle panel
  static constexpr int kPanels = kHeadDim / kPanelCols;
  static constexpr int kRowBytes = 128;                  // bytes of one row of one panel
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
  static constexpr int kOPitch = kHeadDim + 8;           // staging pitch (elements): +16 B per row avoids bank conflicts
  static constexpr int kOBytesPerWG = 64 * kOPitch * 2;
  // Shared memory map (offsets from a 1024-byte aligned base: the 128-byte
  // swizzle pattern repeats every 1024 bytes and wgmma descriptors assume it).
  static constexpr int kOffQ = 0;                        // [panel][kBlockM rows][128 B]
  static constexpr int kOffK = kOffQ + kQBytes;          // [stage][panel][kBlockN rows][128 B]
  static constexpr int kOffV = kOffK + kStages * kKVBytes;
  static constexpr int kOffO = kOffV + kStages * kKVBytes;  // [consumer wg][64][kOPitch] bf16
  static constexpr int kOffBar = kOffO + kConsumerWGs * kOBytesPerWG;
  static constexpr int kBarBytes = 256;
  static constexpr int kSmemBytes = 1024 + kOffBar + kBarBytes;  // + alignment slack
  static_assert(kQBytes % 1024 == 0 && kKVBytes % 1024 == 0, "tiles must keep 1024-byte alignment");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 per-block limit");
  // Register split (setmaxnreg). Two consumer warpgroups: 128 x 32 + 256 x 232 =
  // 63488 <= 65536; three would leave 152 each. The producer spilled at 24 (64-bit
  // tile arithmetic). A consumer holds S (64) + O (D/2) + P (32) + softmax state
  // + the work tile; ptxas allocates up to 230 for it (no spills: -Xptxas -v).
  static constexpr int kProducerRegs = 32;
  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? 232 : 152;
  static_assert(128 * kProducerRegs + 128 * kConsumerWGs * kConsumerRegs <= 65536, "register file");
};

template <class Epilogue>
struct FlashFwdParams {
  CUtensorMap tma_q;                   // Q as (D, Sq, H, B), box (64, kBlockM, 1, 1), 128-B swizzle
  CUtensorMap tma_k;                   // K as (D, Skv, H, B), box (64, kBlockN, 1, 1), 128-B swizzle
  CUtensorMap tma_v;                   // V likewise
  MaskInfo mask;                       // Sq, Skv, causal
  float scale_log2;                    // softmax scale · log2(e)
  StaticPersistentScheduler scheduler; // tile space, order, snake rounds
  typename Epilogue::Params epilogue;  // where finished slices go
  sync::WaitContext wait;              // budget, rank, the host-mapped report of a timed-out wait
};

// Which wait timed out (WaitReport::site), and the names the host gives them.
enum class AttentionSite : int { q_full, q_empty, k_full, k_empty, v_full, v_empty, mma_turn, agent };
inline constexpr const char* kAttentionSiteNames[] = {
    "mbarrier Q full (consumer waits for the Q tile)",
    "mbarrier Q empty (producer waits for the consumers to release Q)",
    "mbarrier K full (consumer waits for K block stage {index})",
    "mbarrier K empty (producer waits for K stage {index} to be free)",
    "mbarrier V full (consumer waits for V block stage {index})",
    "mbarrier V empty (producer waits for V stage {index} to be free)",
    "mbarrier MMA turn (pingpong: consumer warpgroup {index} waits for its turn to issue)",
    "release agent (no new finished slice; expected = slices released + 1, seen = the lowest count)",
};
inline constexpr sync::SiteNames kAttentionSites{sync::Kernel::attention, "attention", kAttentionSiteNames,
                                                 static_cast<int>(std::size(kAttentionSiteNames))};

// Barriers in shared memory ("empty" barriers count one arrival per consumer warp).
template <class T>
struct PipelineBarriers {
  uint64_t q_full, q_empty;
  uint64_t k_full[T::kStages], k_empty[T::kStages];
  uint64_t v_full[T::kStages], v_empty[T::kStages];
  uint64_t mma_turn[T::kConsumerWGs];     // pingpong: warpgroup w may issue when its phase completes
  uint32_t slices_done[T::kConsumerWGs];  // Signal::by_agent: slices warpgroup w has stored
};

// Named CTA barriers (id 0 is __syncthreads).
enum class NamedBarrier : int { epilogue_wg0 = 1 };  // + consumer warpgroup index

}  // namespace xstage::attention::sm90
