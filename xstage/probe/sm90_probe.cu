// X-Stage probe kernels.
//
// sender   : persistent, one block per SM. Each burst: the block plans its stores
//            (addresses, values), meets at a barrier, every warp stamps clock64,
//            issues its share of `burst_bytes` as st.global (4/8/16 B) — or thread 0
//            issues TMA bulk stores from shared memory — and stamps again after its
//            last store issued. A store whose issue stalls (X-Stage full) stalls the
//            warp, so the stamp after it measures sender-visible issue time.
//            Visible mode then fences at system scope and releases a per-SM flag on
//            each destination. Then `gap_ns` of busy FMA work (not a sleep).
// observer : on each destination GPU, thread i waits (acquire) for sender SM i's
//            flag to reach each burst's value and stamps %globaltimer.
// ping/echo: flag ping-pong between two GPUs, to place the receiver's clock on the
//            sender's (offset = t_echo - (t_sent + t_back)/2 at the fastest round).
#include <nccl_device.h>

#include <iterator>
#include <string>

#include "xstage/probe/sm90_probe.hpp"
#include "common/cuda_check.hpp"
#include "xstage/sync/ptx.cuh"
#include "xstage/sync/wait.cuh"

namespace xstage::probe {

namespace {

// The probe's wait sites (sync::WaitReport::site) and their names.
enum class ProbeSite : int { burst_flag, ping_reply, ping };
constexpr const char* kProbeSiteNames[] = {
    "burst flag of sender SM {index} (observer)",
    "ping-pong reply (sender; index = round)",
    "ping-pong ping (echo; index = round)",
};
constexpr sync::SiteNames kProbeSites{sync::Kernel::probe, "probe", kProbeSiteNames,
                                      static_cast<int>(std::size(kProbeSiteNames))};

// The context of a launch: the caller's budget and rank, the process-wide report.
sync::WaitContext context_of(sync::WaitContext w) {
  sync::register_sites(kProbeSites);
  w.kernel = static_cast<int>(sync::Kernel::probe);
  w.report = sync::process_report().device();
  return w;
}

__device__ __forceinline__ unsigned long long clk() { return clock64(); }

__device__ __forceinline__ int smid() {
  int id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// Busy compute for `ns` nanoseconds measured on %globaltimer; checks the clock
// every 64 dependent FMAs so the check costs little.
__device__ __forceinline__ float busy_compute(long long ns, float acc) {
  if (ns <= 0) return acc;
  const unsigned long long start = sync::global_ns();
  #pragma unroll 1
  while (sync::global_ns() - start < static_cast<unsigned long long>(ns)) {
    #pragma unroll
    for (int i = 0; i < 64; ++i) acc = fmaf(acc, 1.0000001f, 1e-7f);
  }
  return acc;
}

template <int kWidth>
__device__ __forceinline__ void store_word(char* p, uint32_t w0) {
  if constexpr (kWidth == 4) {
    asm volatile("st.global.u32 [%0], %1;" ::"l"(p), "r"(w0) : "memory");
  } else if constexpr (kWidth == 8) {
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(w0), "r"(w0 + 1) : "memory");
  } else {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w0), "r"(w0 + 1), "r"(w0 + 2),
                 "r"(w0 + 3)
                 : "memory");
  }
}

// What a burst of plain stores needs, computed before its first stamp: the timed
// part is then the stores and a few adds per row, as in a kernel's epilogue whose
// values and addresses are ready. Hashing and a modulo per row inside the timed part
// (about 100 instructions) had made a free 16 KiB burst look six times slower than
// a bare loop of the same stores (docs/xstage-probe.md).
struct StBurst {
  int rows, tail;      // whole rows of kBlockThreads * width bytes, then bytes left
  int dst0;            // destination index of row 0 (probe_dst_of_row)
  char* first;         // this thread's first address: destination dst0 + offset
  std::size_t off;     // this thread's byte offset in each destination's payload
  uint32_t word0;      // the value of this thread's first word (probe_word is linear in the word)
};

template <int kWidth>
__device__ __forceinline__ StBurst plan_burst_st(char* const* dst, int n_dst, int burst_bytes, std::size_t off,
                                                 uint32_t epoch, uint32_t sm, uint32_t burst) {
  const int row_bytes = kBlockThreads * kWidth;
  StBurst s;
  s.rows = burst_bytes / row_bytes;
  s.tail = burst_bytes - s.rows * row_bytes;
  s.dst0 = probe_dst_of_row(0, static_cast<int>(sm), n_dst);
  s.off = off + threadIdx.x * kWidth;
  s.first = dst[s.dst0] + s.off;
  s.word0 = probe_word(epoch, sm, burst, 0) + threadIdx.x * (kWidth / 4);
  return s;
}

// One burst of plain stores from this block: rows of kBlockThreads*kWidth bytes,
// row r going to destination probe_dst_of_row(r, sm, n_dst) (round robin). One
// destination (local, peer, host): the addresses are the plan's plus a stride, with
// no shared-memory load between stores.
template <int kWidth>
__device__ __forceinline__ void issue_burst_st(char* const* dst, int n_dst, const StBurst& s) {
  constexpr int kRow = kBlockThreads * kWidth;
  if (n_dst == 1) {
    #pragma unroll 4
    for (int r = 0; r < s.rows; ++r) store_word<kWidth>(s.first + r * kRow, s.word0 + r * (kRow / 4));
    if (threadIdx.x * kWidth < s.tail) store_word<kWidth>(s.first + s.rows * kRow, s.word0 + s.rows * (kRow / 4));
    return;
  }
  int d = s.dst0;
  #pragma unroll 4
  for (int r = 0; r < s.rows; ++r) {
    store_word<kWidth>(dst[d] + s.off + r * kRow, s.word0 + r * (kRow / 4));
    d = d + 1 == n_dst ? 0 : d + 1;
  }
  if (threadIdx.x * kWidth < s.tail) store_word<kWidth>(dst[d] + s.off + s.rows * kRow, s.word0 + s.rows * (kRow / 4));
}

__device__ __forceinline__ void issue_burst_tma(char* const* dst, int n_dst, int burst_bytes, std::size_t region_off,
                                                uint32_t sm, const char* smem) {
  const uint32_t src = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  for (int off = 0, row = 0; off < burst_bytes; off += kTmaChunk, ++row) {
    const int n = min(kTmaChunk, burst_bytes - off);
    char* d = dst[probe_dst_of_row(row, sm, n_dst)] + region_off + off;
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(d), "r"(src), "r"(n)
                 : "memory");
  }
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// What the bursts of one sender block share.
struct SenderBlock {
  char* const* dst;        // payload base per destination (shared memory)
  uint32_t* const* flags;  // burst flags per destination (shared memory)
  const char* smem;        // the TMA source chunk
  unsigned long long* warp_start;
  unsigned long long* warp_end;
  uint32_t sm;
  int warp, lane;
};

// The bursts of one store kind. The kind is a template parameter, so nothing between
// the stamps branches on it.
template <StoreKind kKind>
__device__ float run_bursts(const SenderArgs& a, const SenderBlock& k, float acc) {
  constexpr int kWidth = kKind == StoreKind::tma ? 16 : static_cast<int>(kKind);
  const std::size_t region_off = static_cast<std::size_t>(k.sm) * a.region_bytes;
  const int total = a.warmup + a.bursts;
  for (int b = 0; b < total; ++b) {
    const std::size_t off = region_off + static_cast<std::size_t>(b % a.places) * a.place_bytes;
    StBurst s{};  // TMA bursts need no plan: thread 0 issues whole chunks
    if constexpr (kKind != StoreKind::tma)
      s = plan_burst_st<kWidth>(k.dst, a.n_dst, a.burst_bytes, off, a.epoch, k.sm, b);
    // The plan is computed before the stamp (a volatile asm that reads it stays before
    // the barrier and the clock read), and the barrier starts every warp's stores
    // together: the span from the first warp's stamp to the last one's is then the
    // stores, not how far apart the warps finished their plans.
    asm volatile("" ::"r"(s.rows), "r"(s.tail), "l"(s.first), "l"(s.off), "r"(s.word0));
    __syncthreads();
    unsigned long long gt_start = 0;
    if (threadIdx.x == 0) gt_start = sync::global_ns();
    const unsigned long long t0 = clk();
    if constexpr (kKind == StoreKind::tma) {
      if (threadIdx.x == 0) issue_burst_tma(k.dst, a.n_dst, a.burst_bytes, off, k.sm, k.smem);
    } else {
      issue_burst_st<kWidth>(k.dst, a.n_dst, s);
    }
    const unsigned long long t1 = clk();
    if (k.lane == 0) {
      k.warp_start[k.warp] = t0;
      k.warp_end[k.warp] = t1;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long first = k.warp_start[0], last = k.warp_end[0];
      if constexpr (kKind != StoreKind::tma) {
        for (int w = 1; w < kBlockThreads / 32; ++w) {
          first = min(first, k.warp_start[w]);
          last = max(last, k.warp_end[w]);
        }
      }
      unsigned long long gt_fenced = 0;
      if (a.visible) {
        if constexpr (kKind == StoreKind::tma) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        sync::fence_acq_rel_sys();
        for (int d = 0; d < a.n_dst; ++d) sync::st_relaxed_sys(k.flags[d] + k.sm, a.flag_base + b + 1);
        gt_fenced = sync::global_ns();
      }
      if (b >= a.warmup) a.bursts_out[static_cast<std::size_t>(k.sm) * a.bursts + (b - a.warmup)] =
          BurstRecord{first, last, gt_start, gt_fenced};
    }
    acc = busy_compute(a.gap_ns, acc);
    __syncthreads();
  }
  return acc;
}

__global__ void __launch_bounds__(kBlockThreads, 1) sender_kernel(const SenderArgs a) {
  extern __shared__ __align__(128) char smem[];
  __shared__ unsigned long long warp_start[kBlockThreads / 32], warp_end[kBlockThreads / 32];
  __shared__ char* dst[kMaxDst];
  __shared__ uint32_t* flags[kMaxDst];
  const uint32_t sm = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x < a.n_dst) {
    if (a.self_payload) {  // one rank: no LSA pointers (SenderArgs)
      dst[threadIdx.x] = a.self_payload;
      flags[threadIdx.x] = a.self_flags;
    } else {
      dst[threadIdx.x] = static_cast<char*>(ncclGetLsaPointer(a.window, kPayloadOffset, a.dst_rank[threadIdx.x]));
      flags[threadIdx.x] = static_cast<uint32_t*>(ncclGetLsaPointer(a.window, kFlagOffset, a.dst_rank[threadIdx.x]));
    }
  }
  if (a.store == StoreKind::tma) {
    // Source chunk for bulk stores: burst 0's pattern, repeated each burst.
    for (int w = threadIdx.x; w < kTmaChunk / 4; w += blockDim.x)
      reinterpret_cast<uint32_t*>(smem)[w] = probe_word(a.epoch, sm, 0, w);
    sync::fence_proxy_async_smem();
  }
  SmRecord rec{};
  if (threadIdx.x == 0) {
    rec.clk0 = clk();
    rec.gt0 = sync::global_ns();
    rec.smid = smid();
  }
  __syncthreads();

  const SenderBlock k{dst, flags, smem, warp_start, warp_end, sm, warp, lane};
  float acc = static_cast<float>(threadIdx.x);
  switch (a.store) {
    case StoreKind::st4: acc = run_bursts<StoreKind::st4>(a, k, acc); break;
    case StoreKind::st8: acc = run_bursts<StoreKind::st8>(a, k, acc); break;
    case StoreKind::st16: acc = run_bursts<StoreKind::st16>(a, k, acc); break;
    case StoreKind::tma: acc = run_bursts<StoreKind::tma>(a, k, acc); break;
  }
  if (a.store == StoreKind::tma && threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  __threadfence_system();  // payload performed before the kernel ends (for verification)
  if (threadIdx.x == 0) {
    rec.clk1 = clk();
    rec.gt1 = sync::global_ns();
    a.sms_out[sm] = rec;
  }
  if (acc == -1.0f) a.sink[threadIdx.x] = acc;  // never true; keeps the FMAs
}

__global__ void observer_kernel(const ObserverArgs a) {
  const uint32_t* flags = static_cast<const uint32_t*>(ncclGetLocalPointer(a.window, kFlagOffset));
  const int total = a.warmup + a.bursts;
  for (int s = threadIdx.x; s < a.sender_sms; s += blockDim.x) {
    for (int b = 0; b < total; ++b) {
      sync::wait_geq_acquire(a.wait, flags + s, a.flag_base + b + 1, ProbeSite::burst_flag, s);
      const unsigned long long t = sync::global_ns();
      if (b >= a.warmup) a.seen_out[static_cast<std::size_t>(s) * a.bursts + (b - a.warmup)] = t;
    }
  }
}

__global__ void ping_sender_kernel(const PingArgs a) {
  uint32_t* ping = static_cast<uint32_t*>(ncclGetLsaPointer(a.window, kPingOffset, a.peer));
  const uint32_t* pong = static_cast<const uint32_t*>(ncclGetLocalPointer(a.window, kPongOffset));
  for (int i = 0; i < a.rounds; ++i) {
    const unsigned long long t0 = sync::global_ns();
    sync::st_release_sys(ping, a.base + i + 1);
    sync::wait_geq_acquire(a.wait, pong, a.base + i + 1, ProbeSite::ping_reply, i);
    const unsigned long long t1 = sync::global_ns();
    a.t_out[2 * i] = t0;
    a.t_out[2 * i + 1] = t1;
  }
}

__global__ void ping_echo_kernel(const PingArgs a) {
  const uint32_t* ping = static_cast<const uint32_t*>(ncclGetLocalPointer(a.window, kPingOffset));
  uint32_t* pong = static_cast<uint32_t*>(ncclGetLsaPointer(a.window, kPongOffset, a.peer));
  for (int i = 0; i < a.rounds; ++i) {
    sync::wait_geq_acquire(a.wait, ping, a.base + i + 1, ProbeSite::ping, i);
    a.t_out[i] = sync::global_ns();
    sync::st_release_sys(pong, a.base + i + 1);
  }
}

}  // namespace

void launch_sender(const SenderArgs& args, int sms, cudaStream_t stream) {
  XS_CHECK_MSG(sms >= 1 && sms <= kMaxSms, "probe sender: SM count out of range");
  XS_CHECK_MSG(args.n_dst >= 1 && args.n_dst <= kMaxDst, "probe sender: destination count out of range");
  XS_CHECK_MSG(args.burst_bytes > 0 && args.burst_bytes % 16 == 0, "probe sender: burst must be a multiple of 16");
  XS_CHECK_MSG(static_cast<std::size_t>(args.burst_bytes) <= args.region_bytes, "probe sender: burst exceeds region");
  XS_CHECK_CUDA(cudaFuncSetAttribute(sender_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBlockSmem));
  SenderArgs a = args;
  a.wait = context_of(args.wait);
  sender_kernel<<<sms, kBlockThreads, kBlockSmem, stream>>>(a);
  XS_CHECK_LAUNCH();
}

void launch_observer(const ObserverArgs& args, cudaStream_t stream) {
  const int threads = std::min(1024, ((args.sender_sms + 31) / 32) * 32);
  ObserverArgs a = args;
  a.wait = context_of(args.wait);
  observer_kernel<<<1, threads, 0, stream>>>(a);
  XS_CHECK_LAUNCH();
}

void launch_ping_sender(const PingArgs& args, cudaStream_t stream) {
  PingArgs a = args;
  a.wait = context_of(args.wait);
  ping_sender_kernel<<<1, 1, 0, stream>>>(a);
  XS_CHECK_LAUNCH();
}

void launch_ping_echo(const PingArgs& args, cudaStream_t stream) {
  PingArgs a = args;
  a.wait = context_of(args.wait);
  ping_echo_kernel<<<1, 1, 0, stream>>>(a);
  XS_CHECK_LAUNCH();
}

void synchronize(cudaStream_t stream) {
  const cudaError_t err = cudaStreamSynchronize(stream);
  if (err == cudaSuccess) return;
  const std::string why = sync::take_report();
  if (why.empty()) XS_CHECK_CUDA(err);
  detail::check_failed(__FILE__, __LINE__, (why + "; CUDA: " + cudaGetErrorString(err)).c_str());
}

}  // namespace xstage::probe
