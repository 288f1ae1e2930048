// `xstage bench ulysses --link host`: rank `rank`'s share of a P-rank Ulysses layer on
// one GPU, with the fused epilogue's stores to the other owners crossing the host link.
// The remote owners' outputs are mapped pinned host memory (MappedHostBuffer); this
// rank's own output, its inputs, all compute and the completion counters stay in HBM
// (per_cta signals: one 4-byte add per warpgroup and owner, next to 32 KiB of rows per
// tile, and no PCIe atomics to depend on).
// Timed in turns: attention alone in the SM-store advisor's, head_major and the drain's
// orders (the compute the model's predictions start from), the fused kernel with its SM
// stores crossing the link in the SM-store advisor's order and in head_major (row-major)
// order, the copy-engine drain (CopyEngineDrain) in the advisor's chunks and with one
// chunk per owner, and the exchange after attention (attention, then one 2-D copy per
// remote owner into its host buffer on the copy engine). Checked: every host-link
// schedule's outputs equal, bitwise, those of the same kernel with every owner in HBM.
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
#include "xstage/bench/copy_costs.hpp"
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

// The copy-engine drain over the host link. The fused kernel walks the owner_major order
// in chunks of chunk_blocks row blocks and stores every owner's rows into HBM (the
// remote owners' into their HBM copies, which stage them) with by_agent signals on one
// counter per (owner, chunk) in HBM (the fences off the consumers' path: per_slice's fence
// per slice cost 2 % more here, docs/xstage-host-link.md); a side stream waits for each
// remote chunk's count (a stream wait on the GPU's front end: no SM, no kernel) and copies
// that chunk's rows of this rank's heads to its owner's host buffer while the later
// chunks compute. No SM store crosses the link, so no SM's reads wait behind the stage.
struct CopyEngineDrain {
  HostLinkShare& s;
  int chunks;                 // per owner
  int64_t chunk_rows;         // an owner's rows per chunk
  uint32_t slices_per_chunk;  // by_agent signals one chunk gets per forward
  cudaStream_t side = nullptr;
  cudaEvent_t done = nullptr;
  DeviceBuffer<uint32_t> counter;  // [kMaxRanks][chunks]; counts only grow, one forward after another
  uint32_t forwards = 0;           // launched so far: forward i waits for (i + 1) x slices_per_chunk
  FusedTargets targets;

  // The by_agent count does not depend on the grid or the warpgroups (1, 1).
  CopyEngineDrain(HostLinkShare& share, int chunk_blocks)
      : s(share),
        chunks(chunk_blocks > 0 ? owner_row_blocks(share.p) / chunk_blocks : 1),
        chunk_rows(share.p.rows_per_rank() / chunks),
        slices_per_chunk(fused_signals_per_forward(share.p, FusedSignal::by_agent, 1, 1) / chunks),
        counter(std::size_t(kMaxRanks) * chunks), targets(share.targets(false)) {
    XS_CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    XS_CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    fill_device(counter.get(), 0, counter.size() * sizeof(uint32_t));
    for (int j = 0; j < s.p.ranks; ++j) targets.counter[j] = chunk_counter(j, 0);
    targets.signal = FusedSignal::by_agent;
    targets.geo.chunk_rows = chunks > 1 ? static_cast<int>(chunk_rows) : 0;
  }
  ~CopyEngineDrain() {
    cudaEventDestroy(done);
    cudaStreamDestroy(side);
  }
  CopyEngineDrain(const CopyEngineDrain&) = delete;
  CopyEngineDrain& operator=(const CopyEngineDrain&) = delete;

  uint32_t* chunk_counter(int owner, int c) const { return counter.get() + std::size_t(owner) * chunks + c; }
  void wait_for(uint32_t* count, uint32_t value) { common::stream_wait_geq(side, count, value); }
  // Rows [c·chunk_rows, + rows) of this rank's heads of owner j, from its HBM copy to its
  // host buffer, on `stream` (the side stream unless given).
  void copy_rows(int j, int c, int64_t rows, cudaStream_t stream = nullptr) {
    const int64_t Hp = s.p.heads_per_rank(), D = s.p.head_dim;
    const std::size_t pitch = std::size_t(s.p.heads * D) * 2, width = std::size_t(Hp * D) * 2;
    const std::size_t first = std::size_t(c * chunk_rows * s.p.heads * D + s.rank * Hp * D);
    XS_CHECK_CUDA(cudaMemcpy2DAsync(s.host_out[j].host() + first, pitch, s.hbm_out[j].get() + first, pitch, width,
                                    std::size_t(rows), cudaMemcpyDeviceToHost, stream ? stream : side));
  }

  // One forward on the legacy stream, joined with the side stream at its end. The side
  // stream needs no start signal: only this forward's counts meet its waits, and the next
  // forward's kernel (legacy stream, after the join) cannot overwrite the staged rows
  // before their copies end.
  void launch(const attention::FwdConfig& cfg) {
    const uint32_t target = ++forwards * slices_per_chunk;
    launch_fused_attention(s.a, cfg, targets, nullptr);
    for (int k = 1; k < s.p.ranks; ++k) {
      const int j = (s.rank + k) % s.p.ranks;
      for (int c = 0; c < chunks; ++c) {
        wait_for(chunk_counter(j, c), target);
        copy_rows(j, c, chunk_rows);
      }
    }
    XS_CHECK_CUDA(cudaEventRecord(done, side));
    XS_CHECK_CUDA(cudaStreamWaitEvent(nullptr, done));
  }
  // The copy engine's costs for the drain's prediction (bench::measure_copy_costs): one
  // stream, as the drain's side stream, with the drain's own copies on an idle GPU (the
  // attention kernel computes more than it reads): one-row copies for the cost per
  // operation, and for the rate every remote owner's rows copied whole, back to back,
  // their fixed costs left in (at small S they are a large part of the copies' time).
  burstgap::CopyCosts copy_costs() {
    bench::CopyCostProbe probe;
    probe.copy = [&](cudaStream_t stream, int, int) { copy_rows((s.rank + 1) % s.p.ranks, 0, 1, stream); };
    probe.copy_bytes = double(owner_rows_bytes()) / double(s.p.rows_per_rank());
    probe.bulk = [&](cudaStream_t stream) {
      for (int k = 1; k < s.p.ranks; ++k) copy_rows((s.rank + k) % s.p.ranks, 0, s.p.rows_per_rank(), stream);
    };
    probe.bulk_bytes = double(s.p.ranks - 1) * double(owner_rows_bytes());
    return bench::measure_copy_costs(probe);
  }
  // A timed batch of forwards ends here: each forward's copies waited for within the wait
  // budget, then the legacy stream (the kernels, the join).
  void wait_checked() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(sync::wait_budget_ns());
    cudaError_t q;
    while ((q = cudaEventQuery(done)) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (q == cudaErrorNotReady) fail_with_counts();
    XS_CHECK_CUDA(q);
    XS_CHECK_CUDA(cudaStreamSynchronize(nullptr));
  }
  // The first forward, waited for within the wait budget.
  void launch_checked(const attention::FwdConfig& cfg) {
    launch(cfg);
    wait_checked();
  }

 private:
  std::size_t owner_rows_bytes() const {
    return std::size_t(s.p.rows_per_rank() * s.p.heads_per_rank() * s.p.head_dim) * 2;
  }
  // A count that never arrived: the first one short of what the last forward expects,
  // named by rank, owner, chunk and counter, instead of a hang. The counters are read on a
  // stream of their own (the side stream is stuck in its wait), then set past any wait so
  // that the stuck stream ends and the process can exit. The stream wait compares
  // cyclically ((int32_t)(count - target) >= 0), so "past" is 0x40404040: far ahead of
  // every target, with room for the kernel's later adds (all ones would read as -1).
  [[noreturn]] void fail_with_counts() {
    std::vector<uint32_t> seen(counter.size());
    cudaStream_t peek = nullptr;
    XS_CHECK_CUDA(cudaStreamCreateWithFlags(&peek, cudaStreamNonBlocking));
    XS_CHECK_CUDA(
        cudaMemcpyAsync(seen.data(), counter.get(), seen.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost, peek));
    XS_CHECK_CUDA(cudaStreamSynchronize(peek));
    XS_CHECK_CUDA(cudaMemsetAsync(counter.get(), 0x40, counter.size() * sizeof(uint32_t), peek));
    XS_CHECK_CUDA(cudaStreamSynchronize(peek));
    cudaStreamDestroy(peek);
    const uint32_t expected = forwards * slices_per_chunk;
    const double waited_s = sync::wait_budget_ns() * 1e-9;
    for (int k = 1; k < s.p.ranks; ++k) {
      const int j = (s.rank + k) % s.p.ranks;
      for (int c = 0; c < chunks; ++c) {
        const uint32_t got = seen[std::size_t(j) * chunks + c];
        if (got < expected)
          XS_FAIL("copy-engine drain: rank {} waited {:.3f} s for owner {}'s chunk {} of {} (counter {} at {}): "
                  "expected >= {} slices, saw {}",
                  s.rank, waited_s, j, c, chunks, std::size_t(j) * chunks + c,
                  static_cast<void*>(chunk_counter(j, c)), expected, got);
      }
    }
    XS_FAIL("copy-engine drain: rank {}'s forward did not end within {:.3f} s", s.rank, waited_s);
  }
};

}  // namespace

HostLinkRow run_host_link_bench(const BenchConfig& c, int rank, const burstgap::ModelParams& params, int warmup,
                                int reps, int drain_chunk_blocks) {
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
  bench::EventTimer timer(nullptr, "attention kernel", attention::explain_device_failure);
  // The advisor's drain chunk, from the measured cost of a chunk's stream operations and
  // a first timing of attention alone (the full timing below takes the variants in turns).
  CopyEngineDrain owner_drain(s, 0);
  const CopyCosts copy = owner_drain.copy_costs();
  const double attention_first =
      bench::launch_medians_in_turns(timer, {[&] { attention::flash_fwd_with(s.a, owner_cfg); }}, warmup, reps)[0];
  const int chunk_blocks = drain_chunk_blocks >= 0
                               ? drain_chunk_blocks
                               : choose_drain_chunk_blocks(p, rank, cfg.grid, attention_first, params, copy);
  attention::FwdConfig chunk_cfg = owner_cfg;
  chunk_cfg.tiles = owner_major_tiles(p, rank, chunk_blocks);
  CopyEngineDrain drain(s, chunk_blocks);
  drain.launch_checked(chunk_cfg);
  owner_drain.launch_checked(owner_cfg);
  const std::vector<std::function<void()>> launches = {
      [&] { attention::flash_fwd_with(s.a, guided_cfg); },
      [&] { attention::flash_fwd_with(s.a, row_major_cfg); },
      [&] { attention::flash_fwd_with(s.a, chunk_cfg); },
      [&] { launch_fused_attention(s.a, guided_cfg, host, nullptr); },
      [&] { launch_fused_attention(s.a, row_major_cfg, host, nullptr); },
      [&] { drain.launch(chunk_cfg); },
      [&] { owner_drain.launch(owner_cfg); },
      [&] {
        attention::flash_fwd_with(s.a, row_major_cfg);
        s.exchange_after(nullptr);
      }};
  // Every timed batch of the drains ends with their checked wait: a stream wait has no
  // timeout of its own.
  const std::vector<CopyEngineDrain*> waits = {nullptr, nullptr, nullptr, nullptr, nullptr, &drain, &owner_drain,
                                               nullptr};
  std::vector<std::function<double(int)>> timed;
  for (std::size_t i = 0; i < launches.size(); ++i)
    timed.push_back([&, i](int n) {
      if (!waits[i]) return timer(launches[i], n);
      return timer.timed(launches[i], n, [&] { waits[i]->wait_checked(); });
    });
  const std::vector<double> ms = bench::medians_in_turns(timed, warmup, reps);

  HostLinkRow row;
  row.config = c;
  row.rank = rank;
  row.order = guided.reason;
  row.guided_run = guided.slice_run;
  row.attention_guided_ms = ms[0];
  row.attention_row_major_ms = ms[1];
  row.attention_owner_ms = ms[2];
  row.fused_sm_guided_ms = ms[3];
  row.fused_row_major_ms = ms[4];
  row.fused_ce_drain_ms = ms[5];
  row.fused_ce_owner_ms = ms[6];
  row.exchange_after_ms = ms[7];
  row.drain_chunk_blocks = chunk_blocks;
  row.copy_op_us = copy.op_ms * 1e3;
  row.copy_GBps = copy.GBps;
  row.remote_bytes = rank_remote_bytes(p);
  row.sms = sms;
  advise_host_link_schedule(row, cfg.grid, params);
  row.bitwise_equal =
      host_link_keeps_bits(s, guided_cfg, [&] { launch_fused_attention(s.a, guided_cfg, host, nullptr); }) &&
      host_link_keeps_bits(s, guided_cfg, [&] { drain.launch(chunk_cfg); }) &&
      host_link_keeps_bits(s, guided_cfg, [&] { owner_drain.launch(owner_cfg); });
  finish_host_link_row(row);
  return row;
}

}  // namespace xstage::ulysses
