// Choosing a schedule: occupancy heuristic for the wave size, Burst-Gap advisor
// for the interleaved burst split and lag.
//
// What a wave emits. Only L2 epilogues store remotely (kL2TileStoreBytes per tile,
// to the tokens' owners). With G persistent blocks, one per SM, a wave with n1 L1
// and n2 L2 tiles keeps each SM busy for about
//     L1 phase: (n1 / G) * t_L1        L2 phase: (n2 / G) * t_L2
// (t_L1, t_L2 from TileTimeModel: the longer of flops / per-SM rate and the weight
// slab over the SM's share of HBM, plus a fixed overhead; means over the tiles).
//
// Expert-Wave. Each SM's L2 phase is one burst: B = ceil(n2 / G) tiles * 64 KiB
// issued within the L2 compute, followed by the next wave's L1 phase. We hand the
// advisor that profile: bytes_per_burst = B, compute gap = L1 phase + L2 phase,
// bursts = waves. (Counting the L2 compute as gap is generous to Expert-Wave:
// its stores really cluster inside that compute.)
//
// Interleaved with split s. The L2 tiles of wave w are cut into s pieces, each
// followed by 1/s of wave w+lag's L1 tiles: bursts of B/s with gap/s between
// them, s times as many. This is exactly the advisor's split_burst remedy, so:
//   - if the advisor says split_burst for the Expert-Wave profile, take its
//     recommended_split (one piece then fits the X-Stage capacity);
//   - in any case evaluate s = 1, 2, 4, ... up to the L2 tiles per SM per wave,
//     and keep the s with the least predicted stall (ties: the smaller s, fewer
//     switches between L1 and L2 operand sets).
// lag 2: with lag 1 the first piece of L2(w) follows the last L1 tiles of wave w
// directly, and its tiles wait for their row blocks (order_time_ns simulates it).
// Wave size: occupancy_wave_experts() for both schedules, so they differ in order
// only (the comparison the Burst-Gap schedules are measured by).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <queue>
#include <set>

#include "common/check.hpp"
#include "common/config_print.hpp"
#include "common/files.hpp"
#include "xstage/moe/moe.hpp"

namespace xstage::moe {

namespace {

struct WaveStats {
  int waves = 0;
  double l1_per_wave = 0, l2_per_wave = 0;  // tiles, averaged over waves
};

WaveStats wave_stats(const TileLists& t, int wave_experts) {
  int busy = 0;
  for (int e = 0; e < t.experts; ++e) busy += t.m_blocks[e] > 0;
  WaveStats s;
  s.waves = (busy + wave_experts - 1) / wave_experts;
  if (s.waves > 0) {
    s.l1_per_wave = double(t.l1.size()) / s.waves;
    s.l2_per_wave = double(t.l2.size()) / s.waves;
  }
  return s;
}

// Tile time from its flops and the bytes of its weight slab, which an expert with
// `m_blocks` m blocks reads from HBM once per raster group of them.
double tile_ns(double flops, double slab_bytes, int m_blocks, const TileTimeModel& m) {
  const double compute_ns = flops / (m.sm_tflops * 1e3);  // TFLOP/s = 1e3 flop/ns
  const double hbm_bytes = slab_bytes / std::clamp(m_blocks, 1, kMoeRasterGroup);
  const double stream_ns = hbm_bytes / (m.hbm_gbps / m.gpu_sms);  // GB/s = bytes/ns
  return std::max(compute_ns, stream_ns) + m.tile_overhead_ns;
}

void print_once(const Problem& p, const ScheduleConfig& c) {
  common::print_config_once(fmt::format("{}/{}/{}", describe(p), to_string(c.kind), c.sms), [&] {
    return fmt::format("xstage: moe schedule [{}] {}: sms {}, wave {} experts, lag {}, burst split {}: {}", describe(p),
                       to_string(c.kind), c.sms, c.wave_experts, c.lag, c.burst_split, c.reason);
  });
}

}  // namespace

double l1_tile_ns(const Problem& p, const TileTimeModel& m, int m_blocks) {
  return tile_ns(2.0 * kTileM * (2.0 * kL1TileN) * p.hidden, 2.0 * kL1TileN * p.hidden * 2, m_blocks, m);
}

double l2_tile_ns(const Problem& p, const TileTimeModel& m, int m_blocks) {
  return tile_ns(2.0 * kTileM * kL2TileN * p.intermediate, double(kL2TileN) * p.intermediate * 2, m_blocks, m);
}

TilesTime tiles_time(const Problem& p, const TileLists& t, const TileTimeModel& m) {
  double l1 = 0, l2 = 0;
  long long n1 = 0, n2 = 0;
  for (int e = 0; e < t.experts; ++e) {
    const long long mb = t.m_blocks[std::size_t(e)];
    const int sharing = static_cast<int>(std::min<long long>(mb, t.raster_group));  // m blocks per slab read
    n1 += mb * t.l1_n_blocks;
    n2 += mb * t.l2_n_blocks;
    l1 += double(mb * t.l1_n_blocks) * l1_tile_ns(p, m, sharing);
    l2 += double(mb * t.l2_n_blocks) * l2_tile_ns(p, m, sharing);
  }
  TilesTime out;
  out.l1_mean_ns = n1 ? l1 / double(n1) : l1_tile_ns(p, m);
  out.l2_mean_ns = n2 ? l2 / double(n2) : l2_tile_ns(p, m);
  out.total_ns = l1 + l2;
  return out;
}

double order_time_ns(const Problem& p, const TileLists& t, const std::vector<WorkItem>& order, int blocks,
                     const TileTimeModel& m, std::vector<double>* l2_end) {
  XS_ASSERT(blocks >= 1, "order_time_ns: blocks must be >= 1 (got {})", blocks);
  TileTimeModel compute_only = m;  // the tiles' own time; the weight stream bounds the whole below
  compute_only.hbm_gbps = std::numeric_limits<double>::infinity();
  std::vector<std::size_t> first_block(std::size_t(t.experts) + 1, 0);  // (e, m) -> e's first + m
  std::vector<double> l1_ns(std::size_t(t.experts)), l2_ns(std::size_t(t.experts));
  // Every tile's weight slab share over the HBM rate of these blocks' SMs (P ranks on one
  // GPU share it).
  const double hbm_gbps = m.hbm_gbps * std::min(1.0, double(blocks) / m.gpu_sms);
  double stream_ns = 0;
  for (int e = 0; e < t.experts; ++e) {
    const int mb = t.m_blocks[std::size_t(e)];
    first_block[std::size_t(e) + 1] = first_block[std::size_t(e)] + std::size_t(mb);
    const int sharing = std::max(1, std::min(mb, t.raster_group));
    l1_ns[std::size_t(e)] = l1_tile_ns(p, compute_only, sharing);
    l2_ns[std::size_t(e)] = l2_tile_ns(p, compute_only, sharing);
    const double slabs = double(mb) / sharing * (2.0 * kL1TileN * p.hidden * t.l1_n_blocks +
                                                 double(kL2TileN) * p.intermediate * t.l2_n_blocks) * 2;
    stream_ns += slabs / hbm_gbps;
  }
  std::vector<double> l1_end(first_block.back(), 0.0), free_at(std::size_t(blocks), 0.0);
  using Request = std::pair<double, int>;  // (when the CTA asks for a ticket, CTA)
  std::priority_queue<Request, std::vector<Request>, std::greater<>> asking;
  for (int b = 0; b < blocks; ++b) asking.push({0.0, b});
  double last = 0;
  if (l2_end) l2_end->assign(std::size_t(t.experts), 0.0);
  for (const WorkItem& it : order) {
    const int b = asking.top().second;
    asking.pop();
    const std::size_t e = std::size_t(it.expert), rb = first_block[e] + std::size_t(it.m_block);
    const bool l1 = it.kind == TileKind::l1;
    const double start = std::max(free_at[std::size_t(b)], l1 ? 0.0 : l1_end[rb]);
    const double ns = l1 ? l1_ns[e] : l2_ns[e], end = start + ns;
    if (l1) l1_end[rb] = std::max(l1_end[rb], end);
    else if (l2_end) (*l2_end)[e] = std::max((*l2_end)[e], end);
    free_at[std::size_t(b)] = end;
    last = std::max(last, end);
    // The producer issues the item's K steps into the ring, so it asks for its next
    // ticket once the ring holds the item's last kStages steps.
    const int k_steps = (l1 ? p.hidden : p.intermediate) / kTileK;
    asking.push({std::max(start, end - ns * std::min(1.0, double(FusedKernelShape::kStages) / k_steps)), b});
  }
  if (l2_end && last > 0 && stream_ns > last)
    for (double& v : *l2_end) v *= stream_ns / last;
  return std::max(last, stream_ns);
}

OrderTimes order_times(const Problem& p, const TileLists& t, const ScheduleConfig& interleaved,
                       const TileTimeModel& m) {
  ScheduleConfig expert_wave = interleaved;
  expert_wave.kind = ScheduleKind::expert_wave;
  const int blocks = interleaved.sms;
  return {order_time_ns(p, t, make_scheduler(expert_wave)->order(t), blocks, m),
          order_time_ns(p, t, make_scheduler(interleaved)->order(t), blocks, m)};
}

burstgap::BurstProfile burst_profile(const ScheduleConfig& c, const Problem& p, const TileLists& t,
                                     const TileTimeModel& time) {
  const WaveStats s = wave_stats(t, c.wave_experts);
  const int split = c.kind == ScheduleKind::interleaved ? c.burst_split : 1;
  const double l2_per_sm = s.l2_per_wave / c.sms;  // L2 tiles per SM per wave
  const double l1_per_sm = s.l1_per_wave / c.sms;
  burstgap::BurstProfile prof;
  prof.sms = std::max(1, std::min(c.sms, static_cast<int>(std::ceil(s.l2_per_wave))));
  const TilesTime tt = tiles_time(p, t, time);
  prof.bytes_per_burst =
      static_cast<std::size_t>(std::ceil(std::max(1.0, l2_per_sm / split))) * kL2TileStoreBytes;
  prof.compute_ns_between_bursts = (l1_per_sm * tt.l1_mean_ns + l2_per_sm * tt.l2_mean_ns) / split;
  prof.bursts = std::max(1, s.waves * split);
  prof.pattern = "peer";
  prof.store = "st16";  // the epilogue stores 16 B per thread
  return prof;
}

ScheduleConfig choose_schedule(ScheduleKind kind, const Problem& p, const TileLists& t, int sms,
                               const burstgap::ModelParams& params, const TileTimeModel& time) {
  XS_ASSERT(sms >= 1, "choose_schedule: sms must be >= 1 (got {})", sms);
  ScheduleConfig c;
  c.kind = kind;
  c.sms = sms;
  c.wave_experts = occupancy_wave_experts(t, sms);
  const WaveStats s = wave_stats(t, c.wave_experts);
  c.reason = fmt::format("wave of {} experts: {:.0f} L1 tiles fill {} SMs ({} waves)", c.wave_experts, s.l1_per_wave,
                         sms, s.waves);
  if (kind == ScheduleKind::expert_wave || s.waves == 0) {
    print_once(p, c);
    return c;
  }
  // Lag 2: with lag 1 an L2 piece follows its own wave's last L1 tiles, and its tiles
  // wait for their row blocks (0.04-0.12 of the consumers' time at 8192 tokens).
  c.lag = 2;

  // The Expert-Wave profile and what the advisor makes of it.
  ScheduleConfig ew = c;
  ew.kind = ScheduleKind::expert_wave;
  const burstgap::Advice base = burstgap::advise(params, burst_profile(ew, p, t, time));

  const int max_split = std::max(1, static_cast<int>(std::ceil(s.l2_per_wave / sms)));
  std::vector<int> candidates;
  for (int k = 1; k <= max_split; k *= 2) candidates.push_back(k);
  if (base.remedy == burstgap::Remedy::split_burst) candidates.push_back(std::min(max_split, base.recommended_split));
  int best = 1;
  double best_stall = INFINITY;
  for (int k : candidates) {
    ScheduleConfig trial = c;
    trial.burst_split = k;
    const double stall = burstgap::advise(params, burst_profile(trial, p, t, time)).predicted_stall_ns;
    if (stall < best_stall - 1e-6 || (std::abs(stall - best_stall) <= 1e-6 && k < best)) {
      best = k;
      best_stall = stall;
    }
  }
  c.burst_split = best;
  c.reason += fmt::format("; expert-wave burst: advisor says {} (stall {}): {}; interleaved split {} (of <= {}), "
                          "lag {}: predicted stall {}",
                          burstgap::to_string(base.remedy), common::format_ns(base.predicted_stall_ns), base.reason,
                          best, max_split, c.lag, common::format_ns(best_stall));
  print_once(p, c);
  return c;
}

KernelProfile summarize_profile(const std::vector<unsigned long long>& sums, int blocks, int launches, int clock_khz) {
  XS_ASSERT(blocks >= 1 && launches >= 1, "moe profile: blocks and launches must be >= 1 (got {}, {})", blocks,
            launches);
  XS_ASSERT(sums.size() == std::size_t(blocks) * kProfileRoles * kProfileFields,
            "moe profile: {} sums for {} blocks (want {})", sums.size(), blocks,
            std::size_t(blocks) * kProfileRoles * kProfileFields);
  using C = ConsumerPhase;
  using P = ProducerPhase;
  auto at = [&](int b, int role, auto field) {
    return double(sums[(std::size_t(b) * kProfileRoles + role) * kProfileFields + static_cast<int>(field)]);
  };
  KernelProfile out;
  out.launches = launches;
  int wgs = 0, producers = 0;
  double total_cycles = 0, items = 0;
  for (int b = 0; b < blocks; ++b) {
    for (int role = 1; role < kProfileRoles; ++role) {
      const double total = at(b, role, C::total);
      if (!(total > 0)) continue;
      ++wgs;
      total_cycles += total;
      items += at(b, role, C::items);
      const double item = at(b, role, C::item) / total, main = at(b, role, C::mainloop) / total;
      const double epi = at(b, role, C::epilogue) / total, cw = at(b, role, C::combine_wait) / total;
      const double cs = at(b, role, C::combine) / total;
      out.item_wait += item;
      out.mainloop += main;
      out.stage_wait += at(b, role, C::stage) / total;
      out.epilogue += epi;
      out.combine_wait += cw;
      out.combine += cs;
      out.start += 1.0 - (item + main + epi + cw + cs);
    }
    const double ptotal = at(b, 0, P::total);
    if (ptotal > 0) {
      ++producers;
      out.producer_dispatch_first += at(b, 0, P::dispatch_first) / ptotal;
      out.producer_dependency += at(b, 0, P::dependency) / ptotal;
      out.producer_ring += at(b, 0, P::ring) / ptotal;
    }
  }
  XS_ASSERT(wgs > 0 && producers > 0, "moe profile: the profiled launches recorded nothing");
  for (double* v : {&out.item_wait, &out.mainloop, &out.stage_wait, &out.epilogue, &out.combine_wait, &out.combine,
                    &out.start})
    *v /= wgs;
  for (double* v : {&out.producer_dispatch_first, &out.producer_dependency, &out.producer_ring}) *v /= producers;
  out.items_per_warpgroup = items / wgs / launches;
  out.total_us = clock_khz > 0 ? total_cycles / wgs / launches / (double(clock_khz) * 1e-3) : 0.0;
  return out;
}

}  // namespace xstage::moe
