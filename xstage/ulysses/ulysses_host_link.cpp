// `xstage bench ulysses --link host`: rank `rank`'s share of a P-rank Ulysses layer on
// one GPU, with the fused epilogue's stores to the other owners crossing the host link.
// The remote owners' outputs are mapped pinned host memory (MappedHostBuffer); this
// rank's own output, its inputs, all compute and the completion counters stay in HBM
// (per_cta signals: one 4-byte add per warpgroup and owner, next to 32 KiB of rows per
// tile, and no PCIe atomics to depend on).
// Timed in turns: attention alone in both orders (the compute the model's prediction
// starts from), the fused kernel with its SM stores crossing the link in the SM-store
// advisor's order and in head_major (row-major) order, the copy-engine drain
// (CopyEngineDrain), and the exchange after attention (attention, then one 2-D copy per
// remote owner into its host buffer on the copy engine). Checked: both host-link
// schedules' outputs equal, bitwise, those of the same kernel with every owner in HBM.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "xstage/attention/attention_cuda.hpp"
#include "xstage/bench/event_timer.hpp"
#include "xstage/bench/ulysses_bench.hpp"
#include "xstage/sync/report.hpp"
#include "xstage/ulysses/ulysses_fused.hpp"
#include "share_inputs.hpp"

namespace xstage::ulysses {

namespace {

constexpr std::uint16_t kPoison = 0xFFFF;  // a NaN: no kernel writes it

// One rank's share: q, k, v, its attention output and the counters in HBM; each owner's
// output [B, S/P, H, D] in HBM (every owner) and over the host link (the others).
struct HostLinkShare : ShareInputs {
  int rank;
  std::vector<DeviceBuffer<std::uint16_t>> hbm_out;       // [P]
  DeviceBuffer<uint32_t> hbm_counter;                     // [P]
  std::vector<MappedHostBuffer<std::uint16_t>> host_out;  // [P], empty for this rank

  HostLinkShare(const Problem& prob, int r)
      : ShareInputs(prob), rank(r), hbm_counter(kMaxRanks) {
    for (int j = 0; j < p.ranks; ++j) {
      hbm_out.emplace_back(n_owner);
      host_out.emplace_back(j == rank ? 0 : n_owner);
    }
    fill_device(hbm_counter.get(), 0, kMaxRanks * sizeof(uint32_t));
  }
  // Every owner's output: over the host link for the other owners (host), or all in HBM.
  FusedTargets targets(bool host) const {
    FusedTargets t;
    for (int j = 0; j < p.ranks; ++j) {
      const bool remote = host && j != rank;
      t.out[j] = remote ? static_cast<void*>(host_out[j].device()) : static_cast<void*>(hbm_out[j].get());
      t.counter[j] = hbm_counter.get() + j;
    }
    t.geo = fused_geometry(p, rank);
    t.signal = FusedSignal::per_cta;
    return t;
  }
  // Each remote owner's rows of this rank's heads, copied from the attention output
  // into its host buffer at head offset rank x H/P (B = 1: the rows of a slice are
  // contiguous in the output).
  void exchange_after(cudaStream_t st) {
    const int64_t Hp = p.heads_per_rank(), D = p.head_dim, rows = p.rows_per_rank();
    const std::size_t row_bytes = std::size_t(Hp * D) * 2;
    for (int j = 0; j < p.ranks; ++j) {
      if (j == rank) continue;
      const std::uint16_t* src = o.get() + std::size_t(j * rows * Hp * D);
      std::uint16_t* dst = host_out[j].host() + std::size_t(rank * Hp * D);
      XS_CHECK_CUDA(cudaMemcpy2DAsync(dst, std::size_t(p.heads * D) * 2, src, row_bytes, row_bytes, rows,
                                      cudaMemcpyDeviceToHost, st));
    }
  }
  // One owner's buffer on the host (host-link or HBM copy).
  std::vector<std::uint16_t> owner(int j, bool host) const {
    if (host && j != rank) return std::vector<std::uint16_t>(host_out[j].host(), host_out[j].host() + n_owner);
    return hbm_out[j].to_host(n_owner);
  }
  void poison() {
    for (int j = 0; j < p.ranks; ++j) {
      attention::fill_bf16_bits(hbm_out[j].get(), n_owner, kPoison);
      if (j != rank) std::fill(host_out[j].host(), host_out[j].host() + n_owner, kPoison);
    }
    XS_CHECK_CUDA(cudaDeviceSynchronize());
  }
};

// The fused kernel in the advisor's order with every owner in HBM, then a host-link
// schedule (`host_link`), each from poisoned buffers: every owner's buffer must match
// bitwise, and this rank's heads must be written everywhere.
bool host_link_keeps_bits(HostLinkShare& s, const attention::FwdConfig& cfg,
                          const std::function<void()>& host_link) {
  s.poison();
  launch_fused_attention(s.a, cfg, s.targets(false), nullptr);
  XS_CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<std::vector<std::uint16_t>> hbm;
  for (int j = 0; j < s.p.ranks; ++j) hbm.push_back(s.owner(j, false));
  s.poison();
  host_link();
  XS_CHECK_CUDA(cudaDeviceSynchronize());
  const int64_t Hp = s.p.heads_per_rank(), D = s.p.head_dim;
  for (int j = 0; j < s.p.ranks; ++j) {
    const auto got = s.owner(j, true);
    if (got != hbm[j]) return false;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const int64_t head = int64_t(i / D) % s.p.heads;
      if (head / Hp == s.rank && got[i] == kPoison) return false;
    }
  }
  return true;
}

// cuStreamWaitValue32 through the runtime's driver entry point (no link against libcuda).
using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
WaitValueFn wait_value_fn() {
  static const auto fn = reinterpret_cast<WaitValueFn>(common::driver_function("cuStreamWaitValue32"));
  return fn;
}

// The copy-engine drain over the host link. The fused kernel walks the owner_major order
// and stores every owner's rows into HBM (the remote owners' into their HBM copies, which
// stage them) with by_agent signals on per-owner counters in HBM (the fences off the
// consumers' path: per_slice's fence per slice cost 2 % more here, docs/xstage-host-link.md);
// a side stream waits for each remote owner's count (a stream wait on the GPU's front end:
// no SM, no kernel)
// and copies that owner's rows of this rank's heads to its host buffer while the later
// owners compute. No SM store crosses the link, so no SM's reads wait behind the stage.
struct CopyEngineDrain {
  HostLinkShare& s;
  cudaStream_t side = nullptr;
  cudaEvent_t start = nullptr, done = nullptr;
  DeviceBuffer<uint32_t> counter{kMaxRanks};
  FusedTargets targets;
  uint32_t slices_per_owner;  // by_agent signals one owner gets per forward

  // The by_agent count does not depend on the grid or the warpgroups (1, 1).
  explicit CopyEngineDrain(HostLinkShare& share)
      : s(share), targets(share.targets(false)),
        slices_per_owner(fused_signals_per_forward(share.p, FusedSignal::by_agent, 1, 1)) {
    XS_CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    XS_CHECK_CUDA(cudaEventCreateWithFlags(&start, cudaEventDisableTiming));
    XS_CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    for (int j = 0; j < s.p.ranks; ++j) targets.counter[j] = counter.get() + j;
    targets.signal = FusedSignal::by_agent;
  }
  ~CopyEngineDrain() {
    cudaEventDestroy(start);
    cudaEventDestroy(done);
    cudaStreamDestroy(side);
  }
  CopyEngineDrain(const CopyEngineDrain&) = delete;
  CopyEngineDrain& operator=(const CopyEngineDrain&) = delete;

  // One forward on the legacy stream, joined with the side stream at its end.
  void launch(const attention::FwdConfig& cfg) {
    XS_CHECK_CUDA(cudaMemsetAsync(counter.get(), 0, kMaxRanks * sizeof(uint32_t), nullptr));
    XS_CHECK_CUDA(cudaEventRecord(start, nullptr));
    XS_CHECK_CUDA(cudaStreamWaitEvent(side, start));
    launch_fused_attention(s.a, cfg, targets, nullptr);
    for (int k = 1; k < s.p.ranks; ++k) {
      const int j = (s.rank + k) % s.p.ranks;
      const CUresult rc = wait_value_fn()(reinterpret_cast<CUstream>(side),
                                          reinterpret_cast<CUdeviceptr>(counter.get() + j), slices_per_owner,
                                          CU_STREAM_WAIT_VALUE_GEQ);
      XS_ASSERT(rc == CUDA_SUCCESS, "copy-engine drain: cuStreamWaitValue32 failed (CUresult {})",
                static_cast<int>(rc));
      copy_owner(j);
    }
    XS_CHECK_CUDA(cudaEventRecord(done, side));
    XS_CHECK_CUDA(cudaStreamWaitEvent(nullptr, done));
  }
  // This rank's heads of owner j's rows, from its HBM copy to its host buffer.
  void copy_owner(int j) {
    const int64_t Hp = s.p.heads_per_rank(), D = s.p.head_dim;
    const std::size_t pitch = std::size_t(s.p.heads * D) * 2, width = std::size_t(Hp * D) * 2;
    const std::size_t head0 = std::size_t(s.rank * Hp * D);
    XS_CHECK_CUDA(cudaMemcpy2DAsync(s.host_out[j].host() + head0, pitch, s.hbm_out[j].get() + head0, pitch, width,
                                    std::size_t(s.p.batch * s.p.rows_per_rank()), cudaMemcpyDeviceToHost, side));
  }
  // The first forward, waited for within the wait budget: a count that never arrives
  // ends the bench with the owner, its count and the expected one instead of a hang.
  void launch_checked(const attention::FwdConfig& cfg) {
    launch(cfg);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(sync::wait_budget_ns());
    cudaError_t q;
    while ((q = cudaEventQuery(done)) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (q == cudaErrorNotReady) {
      std::vector<uint32_t> seen(kMaxRanks);
      cudaStream_t peek = nullptr;
      XS_CHECK_CUDA(cudaStreamCreateWithFlags(&peek, cudaStreamNonBlocking));
      XS_CHECK_CUDA(cudaMemcpyAsync(seen.data(), counter.get(), kMaxRanks * sizeof(uint32_t),
                                    cudaMemcpyDeviceToHost, peek));
      XS_CHECK_CUDA(cudaStreamSynchronize(peek));
      for (int k = 1; k < s.p.ranks; ++k) {
        const int j = (s.rank + k) % s.p.ranks;
        XS_ASSERT(seen[j] >= slices_per_owner,
                  "copy-engine drain: rank {} waited {:.3f} s for owner {}'s slices (counter {} at {}): expected >= "
                  "{}, saw {}", s.rank, sync::wait_budget_ns() * 1e-9, j, j, static_cast<void*>(counter.get() + j),
                  slices_per_owner, seen[j]);
      }
      XS_ASSERT(false, "copy-engine drain: rank {}'s forward did not end within {:.3f} s", s.rank,
                sync::wait_budget_ns() * 1e-9);
    }
    XS_CHECK_CUDA(q);
  }
};

}  // namespace

HostLinkRow run_host_link_bench(const BenchConfig& c, int rank, const burstgap::ModelParams& params, int warmup,
                                int reps) {
  const Problem p = c.problem();
  validate(p);
  XS_ASSERT(p.batch == 1, "bench ulysses --link host: B = 1 only (got {})", p.batch);
  XS_ASSERT(rank >= 0 && rank < p.ranks, "bench ulysses --link host: rank {} is outside 0 .. {}", rank, p.ranks - 1);
  XS_CHECK_CUDA(cudaSetDevice(0));
  HostLinkShare s(p, rank);
  int sms = 0;
  XS_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const attention::FwdConfig cfg = attention::choose_config(attention::validate(s.a), sms);
  const FusedSchedule guided = choose_schedule(p, rank, cfg.grid, params);
  const FusedSchedule row_major = evaluate_order(p, rank, cfg.grid, 0, params);
  attention::FwdConfig guided_cfg = cfg, row_major_cfg = cfg, owner_cfg = cfg;
  guided_cfg.tiles = guided.tiles;
  row_major_cfg.tiles = row_major.tiles;
  owner_cfg.tiles = owner_major_tiles(p, rank);
  const FusedTargets host = s.targets(true);
  CopyEngineDrain drain(s);
  drain.launch_checked(owner_cfg);
  const std::vector<std::function<void()>> launches = {
      [&] { attention::flash_fwd_with(s.a, guided_cfg); },
      [&] { attention::flash_fwd_with(s.a, row_major_cfg); },
      [&] { launch_fused_attention(s.a, guided_cfg, host, nullptr); },
      [&] { launch_fused_attention(s.a, row_major_cfg, host, nullptr); },
      [&] { drain.launch(owner_cfg); },
      [&] {
        attention::flash_fwd_with(s.a, row_major_cfg);
        s.exchange_after(nullptr);
      }};
  bench::EventTimer timer(nullptr, "attention kernel", attention::explain_device_failure);
  const std::vector<double> ms = bench::launch_medians_in_turns(timer, launches, warmup, reps);

  HostLinkRow row;
  row.config = c;
  row.rank = rank;
  row.order = guided.reason;
  row.guided_run = guided.slice_run;
  row.attention_guided_ms = ms[0];
  row.attention_row_major_ms = ms[1];
  row.fused_sm_guided_ms = ms[2];
  row.fused_row_major_ms = ms[3];
  row.fused_ce_drain_ms = ms[4];
  row.exchange_after_ms = ms[5];
  row.remote_bytes = double(p.ranks - 1) * double(p.rows_per_rank() * p.heads_per_rank() * p.head_dim) * 2;
  advise_host_link_schedule(row, cfg.grid, params);
  row.bitwise_equal =
      host_link_keeps_bits(s, guided_cfg, [&] { launch_fused_attention(s.a, guided_cfg, host, nullptr); }) &&
      host_link_keeps_bits(s, guided_cfg, [&] { drain.launch(owner_cfg); });
  finish_host_link_row(row);
  return row;
}

}  // namespace xstage::ulysses
