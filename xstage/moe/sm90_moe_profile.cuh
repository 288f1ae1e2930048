// Profile policies of the fused MoE kernel (a template parameter of the kernel):
// NoProfile compiles every hook to nothing; CycleProfile adds the SM clock cycles of
// each phase of a role (ProducerPhase, ConsumerPhase in xstage/moe/kernel_plan.hpp)
// to the role's sums in shared memory, then, once per launch, to FusedArgs::profile
// [block][role][field] (FusedMoe::set_profile / profile summarise them).
//
// A role is the producer thread (role 0) or a consumer warpgroup (roles 1, 2); its
// thread 0 is the writer, the others' hooks read the clock and add nothing. Phases
// chain: end(phase, since) adds now - since and returns now, the start of the next.
#pragma once

#include <cstddef>

#include "sm90_moe_fused_traits.cuh"

namespace xstage::moe::device {

struct NoProfile {
  using Stamp = long long;
  __device__ __forceinline__ NoProfile(unsigned long long*, bool) {}
  __device__ __forceinline__ static Stamp now() { return 0; }
  template <class Phase>
  __device__ __forceinline__ Stamp end(Phase, Stamp) { return 0; }
  template <class Phase>
  __device__ __forceinline__ void add(Phase, unsigned long long) {}
  __device__ __forceinline__ void flush(const FusedArgs&, int) {}
  __device__ __forceinline__ static void clear(Barriers&) {}
};

struct CycleProfile {
  using Stamp = long long;
  unsigned long long* sums;  // this role's row of Barriers::prof
  bool writer;
  __device__ __forceinline__ CycleProfile(unsigned long long* role_sums, bool is_writer)
      : sums(role_sums), writer(is_writer) {}
  __device__ __forceinline__ static Stamp now() { return clock64(); }
  template <class Phase>
  __device__ __forceinline__ Stamp end(Phase f, Stamp since) {
    const long long t = clock64();
    if (writer) sums[static_cast<int>(f)] += static_cast<unsigned long long>(t - since);
    return t;
  }
  // A count (items), or a stamp to subtract (the entry, from a role's total).
  template <class Phase>
  __device__ __forceinline__ void add(Phase f, unsigned long long v) {
    if (writer) sums[static_cast<int>(f)] += v;
  }
  // The role's sums of this launch into FusedArgs::profile.
  __device__ __forceinline__ void flush(const FusedArgs& a, int role) {
    if (!writer) return;
    unsigned long long* dst = a.profile + (static_cast<std::size_t>(blockIdx.x) * kProfileRoles + role) * kProfileFields;
#pragma unroll 1
    for (int f = 0; f < kProfileFields; ++f) dst[f] += sums[f];
  }
  // Zeroes the CTA's sums (one thread, before the CTA-wide barrier of the start).
  __device__ __forceinline__ static void clear(Barriers& bar) {
#pragma unroll 1
    for (int r = 0; r < kProfileRoles; ++r)
#pragma unroll 1
      for (int f = 0; f < kProfileFields; ++f) bar.prof[r][f] = 0;
  }
};

}  // namespace xstage::moe::device
