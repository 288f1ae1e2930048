// `xstage bench ulysses --link host`: rank `rank`'s share of a P-rank Ulysses layer on
// one GPU, with the fused epilogue's stores to the other owners crossing the host link.
// The remote owners' outputs are mapped pinned host memory (MappedHostBuffer); this
// rank's own output, its inputs, all compute and the completion counters stay in HBM
// (per_cta signals: one 4-byte add per warpgroup and owner, next to 32 KiB of rows per
// tile, and no PCIe atomics to depend on).
// Timed in turns: attention alone in both orders (the compute the model's prediction
// starts from), the fused kernel in the advisor's order and in head_major (row-major)
// order, and the exchange after attention (attention, then one 2-D copy per remote
// owner into its host buffer on the copy engine). Checked: the host-link outputs equal,
// bitwise, those of the same kernel with every owner's buffer in HBM.
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "xstage/attention/attention_cuda.hpp"
#include "xstage/bench/event_timer.hpp"
#include "xstage/bench/ulysses_bench.hpp"
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

// The fused kernel in the advisor's order, once with every owner in HBM and once over
// the host link, from poisoned buffers: every owner's buffer must match bitwise, and
// this rank's heads must be written everywhere.
bool host_link_keeps_bits(HostLinkShare& s, const attention::FwdConfig& cfg) {
  s.poison();
  launch_fused_attention(s.a, cfg, s.targets(false), nullptr);
  XS_CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<std::vector<std::uint16_t>> hbm;
  for (int j = 0; j < s.p.ranks; ++j) hbm.push_back(s.owner(j, false));
  s.poison();
  launch_fused_attention(s.a, cfg, s.targets(true), nullptr);
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
  attention::FwdConfig guided_cfg = cfg, row_major_cfg = cfg;
  guided_cfg.tiles = guided.tiles;
  row_major_cfg.tiles = row_major.tiles;
  const FusedTargets host = s.targets(true);
  const std::vector<std::function<void()>> launches = {
      [&] { attention::flash_fwd_with(s.a, guided_cfg); },
      [&] { attention::flash_fwd_with(s.a, row_major_cfg); },
      [&] { launch_fused_attention(s.a, guided_cfg, host, nullptr); },
      [&] { launch_fused_attention(s.a, row_major_cfg, host, nullptr); },
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
  row.fused_guided_ms = ms[2];
  row.fused_row_major_ms = ms[3];
  row.exchange_after_ms = ms[4];
  row.predicted_stall_guided_us = guided.predicted_stall_ns * 1e-3;
  row.predicted_stall_row_major_us = row_major.predicted_stall_ns * 1e-3;
  row.remote_bytes = double(p.ranks - 1) * double(p.rows_per_rank() * p.heads_per_rank() * p.head_dim) * 2;
  row.bitwise_equal = host_link_keeps_bits(s, guided_cfg);
  finish_host_link_row(row);
  return row;
}

}  // namespace xstage::ulysses
