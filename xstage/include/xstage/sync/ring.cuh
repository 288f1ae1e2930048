// Position in a ring of N mbarrier-guarded slots (pipeline stages, item slots,
// release queues): the slot and the phase parity a consumer waits for on its "full"
// barrier; a producer waits for parity ^ 1 on "empty", which a fresh barrier
// satisfies at once (the slot starts empty). Producer and consumers advance their
// own copies in the same order, so no position is exchanged.
#pragma once

#include <cstdint>

namespace xstage::sync {

struct RingPos {
  uint32_t index = 0, phase = 0;
  template <int N>
  __device__ __forceinline__ void advance() {
    if (++index == N) {
      index = 0;
      phase ^= 1;
    }
  }
};

}  // namespace xstage::sync
