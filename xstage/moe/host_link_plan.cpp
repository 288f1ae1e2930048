// The predicted side of `xstage bench moe --link host` (host only, CPU-tested): both
// schedules of rank 0 with the one GPU's SMs split over the P emulated ranks, each
// schedule's burst profile widened to the P ranks that burst into the one X-Stage
// together, the advisor's stall, and the tile-time estimate of the compute.
#include <algorithm>
#include <vector>

#include "xstage/bench/moe_bench.hpp"

namespace xstage::moe {

void predict_host_link_row(HostLinkRow& row, const burstgap::ModelParams& params, int sms) {
  const Problem p = row.config.problem();
  const auto routing = synthetic_routing(p, row.config.synthetic());
  const Layout layout = build_layout(p, routing);
  const TileLists tiles = build_tiles(p, layout.ranks[0]);
  const int blocks = std::max(1, sms / p.ranks);  // OneGpuGroup's default per rank
  const TileTimeModel time;
  auto stall_us = [&](ScheduleKind kind, ScheduleConfig* out) {
    const ScheduleConfig cfg = choose_schedule(kind, p, tiles, blocks, params, time);
    if (out) *out = cfg;
    burstgap::BurstProfile prof = burst_profile(cfg, p, tiles, time);
    prof.sms = std::min(sms, prof.sms * p.ranks);  // every rank's kernel bursts into one stage
    return burstgap::advise(params, prof).predicted_stall_ns * 1e-3;
  };
  row.predicted_stall_expert_wave_us = stall_us(ScheduleKind::expert_wave, nullptr);
  row.predicted_stall_interleaved_us = stall_us(ScheduleKind::interleaved, &row.interleaved);
  const double compute_ns = tiles_time(p, tiles, time).total_ns / blocks;
  row.predicted_compute_us = compute_ns * 1e-3;
  row.predicted_speedup = (row.predicted_compute_us + row.predicted_stall_expert_wave_us) /
                          (row.predicted_compute_us + row.predicted_stall_interleaved_us);
}

ModelCheck check_expert_wave_predictions(const std::vector<HostLinkRow>& measured, const burstgap::ModelParams& params,
                                         int sms) {
  std::vector<double> then, now;
  for (const HostLinkRow& m : measured) {
    if (!m.correct) continue;
    then.push_back(m.expert_wave_us / (m.predicted_compute_us + m.predicted_stall_expert_wave_us));
    HostLinkRow r;
    r.config = m.config;
    predict_host_link_row(r, params, sms);
    now.push_back(m.expert_wave_us / (r.predicted_compute_us + r.predicted_stall_expert_wave_us));
  }
  ModelCheck c;
  if (!now.empty()) {
    c.at_measurement = common::summarize(then);
    c.current = common::summarize(now);
  }
  return c;
}

}  // namespace xstage::moe
