// Host launchers for the X-Stage probe kernels (xstage/probe/sm90_probe.cu).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>

#include "xstage/sync/report.hpp"
#include "xstage/probe/probe.hpp"  // kMaxDst, probe_dst_of_row

namespace xstage::probe {

// Window layout shared by every rank (offsets into the symmetric window).
inline constexpr std::size_t kPingOffset = 0;          // uint32: ping flag (receiver side)
inline constexpr std::size_t kPongOffset = 128;        // uint32: pong flag (sender side)
inline constexpr std::size_t kFlagOffset = 4096;       // uint32[kMaxSms]: per-sender-SM burst flags
inline constexpr int kMaxSms = 1024;
inline constexpr std::size_t kPayloadOffset = 64 * 1024;  // payload regions, one per sender SM
// Threads per issuing block: 16 warps keep enough stores in flight per SM.
inline constexpr int kBlockThreads = 512;
// Dynamic shared memory per block. Large enough that only one block fits on an SM
// (so `sms` blocks really are `sms` SMs), and the TMA source buffer lives in it.
inline constexpr int kBlockSmem = 120 * 1024;
inline constexpr int kTmaChunk = 32 * 1024;  // bytes per bulk store (<= kBlockSmem)

enum class StoreKind : int { st4 = 4, st8 = 8, st16 = 16, tma = 0 };

// Record per SM per burst (all times raw; converted on the host).
struct BurstRecord {
  unsigned long long clk_start;    // clock64 at the first store of the burst (min over warps)
  unsigned long long clk_issued;   // clock64 after the last store was issued (max over warps)
  unsigned long long gt_start;     // %globaltimer at burst start (thread 0)
  unsigned long long gt_fenced;    // %globaltimer after fence+flag (visible mode), else 0
};
// Per SM: clock calibration over the whole kernel, and which SM ran the block.
struct SmRecord {
  unsigned long long clk0, gt0, clk1, gt1;
  int smid;
  int pad;
};

struct SenderArgs {
  ncclWindow_t window;
  // One rank: NCCL gives a one-rank communicator no symmetric memory, so its window
  // has no LSA pointers; the sender then stores to this rank's own buffer directly
  // (the only destination, "local"). Null on more ranks.
  char* self_payload;
  uint32_t* self_flags;
  int dst_rank[kMaxDst];  // LSA ranks receiving this sender's bursts (own rank for "local")
  int n_dst;
  StoreKind store;
  int burst_bytes;        // per SM per burst; multiple of 16
  std::size_t region_bytes;  // payload bytes reserved per sender SM (>= burst_bytes)
  std::size_t place_bytes;   // burst b goes to region + (b % places) * place_bytes
  int places;                // 1: every burst rewrites the same place
  int warmup, bursts;     // bursts run = warmup + bursts; records only for measured ones
  long long gap_ns;       // busy compute between bursts
  int visible;            // 1: fence + release flag after each burst
  uint32_t flag_base;     // flag value for burst b is flag_base + b + 1
  uint32_t epoch;         // payload pattern seed
  BurstRecord* bursts_out;  // [gridDim.x][bursts]
  SmRecord* sms_out;        // [gridDim.x]
  float* sink;              // keeps the gap compute alive
  sync::WaitContext wait;   // {budget_ns, rank}; the launcher sets the rest
};

struct ObserverArgs {
  ncclWindow_t window;
  int sender_sms;
  int warmup, bursts;
  uint32_t flag_base;
  unsigned long long* seen_out;  // [sender_sms][bursts] %globaltimer when the flag was seen
  sync::WaitContext wait;        // {budget_ns, rank}; the launcher sets the rest
};

struct PingArgs {
  ncclWindow_t window;
  int peer;         // LSA rank of the other side
  int rounds;
  uint32_t base;    // flag values base + i + 1
  unsigned long long* t_out;  // sender: [rounds][2] (sent, pong seen); echo: [rounds] (ping seen)
  sync::WaitContext wait;     // {budget_ns, rank}; the launcher sets the rest
};

inline int probe_row_bytes(StoreKind s) { return s == StoreKind::tma ? kTmaChunk : kBlockThreads * static_cast<int>(s); }

void launch_sender(const SenderArgs& args, int sms, cudaStream_t stream);
void launch_observer(const ObserverArgs& args, cudaStream_t stream);
void launch_ping_sender(const PingArgs& args, cudaStream_t stream);
void launch_ping_echo(const PingArgs& args, cudaStream_t stream);

// cudaStreamSynchronize; on an error throws one line that names the timed-out wait
// (rank, which flag, expected, seen) when a probe kernel reported one.
void synchronize(cudaStream_t stream);

}  // namespace xstage::probe
