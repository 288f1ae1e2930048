// Shape of the fused QKV kernel (sm90_qkv_fused.cu): warpgroups, register split,
// the shared-memory map and the barriers.
#pragma once

#include <cstdint>

#include "xstage/ulysses/qkv.hpp"

namespace xstage::ulysses::qkv_device {

constexpr int kConsumerWGs = 2;
constexpr int kThreads = 128 * (1 + kConsumerWGs);
constexpr int kConsumerWarps = 4 * kConsumerWGs;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kBoxBytes = kQkvTileRows * kQkvTileK * 2;  // 16 KiB
constexpr int kStageBytes = 3 * kBoxBytes;
constexpr int kStages = 4;
constexpr int kStagePitch = 64 + 8;  // staging row, elements (144 B: conflict-free)
constexpr int kStagingBytesPerWG = 64 * kStagePitch * 2;
constexpr int kOffStaging = kStages * kStageBytes;
constexpr int kOffBar = kOffStaging + kConsumerWGs * kStagingBytesPerWG;
constexpr int kSmemBytes = 1024 + kOffBar + 256;
static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 per-block limit");
static_assert(128 * kProducerRegs + 128 * kConsumerWGs * kConsumerRegs <= 65536, "register file");

struct Barriers {
  uint64_t full[kStages], empty[kStages];
  uint32_t tiles_done[kConsumerWGs];  // release_by_agent: entries warpgroup w has stored
};
static_assert(sizeof(Barriers) <= 256, "barrier area");

}  // namespace xstage::ulysses::qkv_device
