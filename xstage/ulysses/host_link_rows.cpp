// The host-link bench's derived figures and its summary (host only, CPU-tested): what
// the model predicts for a row, from attention's measured time plus the predicted cost of
// each schedule's remote bytes, against what the schedules took.
#include <algorithm>
#include <cmath>

#include "common/check.hpp"
#include "common/stats.hpp"
#include "xstage/bench/ulysses_bench.hpp"

namespace xstage::ulysses {

namespace {
// A schedule (the copy-engine drain over SM stores, a finer drain chunk over a coarser
// one) must win by more than this share of the predicted time to be chosen: each adds
// stream operations whose cost is known only roughly.
constexpr double kScheduleTie = 0.01;

// The copy rate of a row measured before the bench recorded it: its exchange after
// attention is P - 1 whole-owner copies back to back (GB/s, 0 where the row cannot give
// one), as the bench's copy_GBps.
double exchange_copy_GBps(const HostLinkRow& r) {
  const double ms = r.exchange_after_ms - r.attention_row_major_ms;
  return ms > 0 ? rank_remote_bytes(r.config.problem()) / (ms * 1e6) : 0;
}

// Attention alone in the fastest of the orders measured (0: none was).
double fastest_attention_ms(const HostLinkRow& r) {
  double ms = 0;
  for (double t : {r.attention_guided_ms, r.attention_row_major_ms, r.attention_owner_ms})
    if (t > 0) ms = ms > 0 ? std::min(ms, t) : t;
  return ms;
}
}  // namespace

double rank_remote_bytes(const Problem& p) {
  return double(p.ranks - 1) * double(p.batch * p.rows_per_rank() * p.heads_per_rank() * p.head_dim) * 2;
}

double predict_sm_stores_ms(double attention_ms, double remote_bytes, const burstgap::ModelParams& link) {
  return attention_ms + burstgap::read_blocked_drain_ns(link, remote_bytes) * 1e-6;
}

double predict_copy_engine_drain_ms(const Problem& p, int rank, int grid, double attention_ms,
                                    const burstgap::ModelParams& link, int chunk_blocks, CopyCosts copy) {
  const double rate = copy.GBps > 0 ? copy.GBps : link.drain_GBps;
  XS_ASSERT(rate > 0 && grid >= 1, "ulysses host link: copy rate {} GB/s and grid {} must be positive", rate, grid);
  const attention::TileSpace tiles = owner_major_tiles(p, rank, chunk_blocks);
  const int per_slice = owner_row_blocks(p);
  const int chunk = chunk_blocks > 0 ? chunk_blocks : per_slice, chunks = per_slice / chunk;
  const int64_t rounds = (tiles.count() + grid - 1) / grid;
  // The round in which each (owner, chunk)'s last tile ends.
  std::vector<int64_t> last_round(static_cast<std::size_t>(p.ranks * chunks), -1);
  for (int64_t i = 0; i < tiles.count(); ++i) {
    const int m = tiles.tile(i).m_block, owner = m / per_slice;
    last_round[static_cast<std::size_t>(owner * chunks + (m - owner * per_slice) / chunk)] = i / grid;
  }
  const double round_ms = attention_ms / static_cast<double>(rounds);
  const double chunk_bytes = double(p.batch * p.rows_per_rank() * p.heads_per_rank() * p.head_dim) * 2 / chunks;
  // A chunk costs two stream operations (its wait and its copy) and its bytes.
  double end = 0;
  for (int k = 1; k < p.ranks; ++k) {
    const int j = (rank + k) % p.ranks;
    for (int c = 0; c < chunks; ++c)
      end = std::max(end, double(last_round[static_cast<std::size_t>(j * chunks + c)] + 1) * round_ms) +
            2 * copy.op_ms + chunk_bytes / (rate * 1e6);  // B per ms
  }
  return std::max(attention_ms, end);
}

int choose_drain_chunk_blocks(const Problem& p, int rank, int grid, double attention_ms,
                              const burstgap::ModelParams& link, CopyCosts copy) {
  validate(p);
  const int per_slice = owner_row_blocks(p);
  int best = 0;
  double best_ms = predict_copy_engine_drain_ms(p, rank, grid, attention_ms, link, 0, copy);
  for (int chunk = per_slice / 2; chunk >= 1; chunk /= 2) {
    if (per_slice % chunk != 0) continue;
    const double ms = predict_copy_engine_drain_ms(p, rank, grid, attention_ms, link, chunk, copy);
    if (ms < (1 - kScheduleTie) * best_ms) {
      best = chunk;
      best_ms = ms;
    }
  }
  return best;
}

void advise_host_link_schedule(HostLinkRow& r, int grid, const burstgap::ModelParams& link) {
  const Problem p = r.config.problem();
  const double attention = r.attention_row_major_ms;
  const CopyCosts copy{r.copy_op_us * 1e-3, r.copy_GBps};
  const double owner_attention = r.attention_owner_ms > 0 ? r.attention_owner_ms : attention;
  r.predicted_sm_stores_ms = predict_sm_stores_ms(attention, r.remote_bytes, link);
  r.predicted_ce_drain_ms =
      predict_copy_engine_drain_ms(p, r.rank, grid, owner_attention, link, r.drain_chunk_blocks, copy);
  r.predicted_ce_owner_ms = predict_copy_engine_drain_ms(p, r.rank, grid, owner_attention, link, 0, copy);
  const bool ce = r.predicted_ce_drain_ms < (1 - kScheduleTie) * r.predicted_sm_stores_ms;
  r.schedule = ce ? "copy_engine_drain" : "sm_stores";
  r.predicted_stall_row_major_us = (r.predicted_sm_stores_ms - attention) * 1e3;
  r.predicted_stall_guided_us = ((ce ? r.predicted_ce_drain_ms : r.predicted_sm_stores_ms) - attention) * 1e3;
}

void set_achievable_bound(HostLinkRow& r) {
  r.achievable_ms = r.achievable_bound_vs_row_major = 0;
  const double attention = fastest_attention_ms(r);
  const double rate = r.copy_GBps > 0 ? r.copy_GBps : exchange_copy_GBps(r);
  if (r.sms <= 0 || attention <= 0 || rate <= 0 || r.fused_row_major_ms <= 0) return;
  const Problem p = r.config.problem();
  const int64_t tiles = owner_major_tiles(p, r.rank).count(), grid = std::min<int64_t>(tiles, r.sms);
  const double rounds = static_cast<double>((tiles + grid - 1) / grid);
  const double last_byte = attention / rounds + rank_remote_bytes(p) / (rate * 1e6);  // B per ms
  r.achievable_ms = std::min(r.fused_row_major_ms, std::max(attention, last_byte));
  r.achievable_bound_vs_row_major = r.fused_row_major_ms / r.achievable_ms;
}

void finish_host_link_row(HostLinkRow& r) {
  r.fused_guided_ms = r.schedule == "copy_engine_drain" ? r.fused_ce_drain_ms : r.fused_sm_guided_ms;
  const double guided = r.attention_row_major_ms + r.predicted_stall_guided_us * 1e-3;
  const double row_major = r.attention_row_major_ms + r.predicted_stall_row_major_us * 1e-3;
  r.speedup_vs_row_major = r.fused_guided_ms > 0 ? r.fused_row_major_ms / r.fused_guided_ms : 0;
  r.predicted_speedup_vs_row_major = guided > 0 ? row_major / guided : 0;
  r.speedup_vs_exchange_after = r.fused_guided_ms > 0 ? r.exchange_after_ms / r.fused_guided_ms : 0;
  r.stall_predicted = r.predicted_stall_row_major_us * 1e-3 > 0.01 * r.attention_row_major_ms;
  r.link_GBps = r.fused_guided_ms > 0 ? r.remote_bytes / (r.fused_guided_ms * 1e6) : 0;
  const double attention = fastest_attention_ms(r);
  r.hiding_bound_vs_row_major = attention > 0 ? r.fused_row_major_ms / attention : 0;
  set_achievable_bound(r);
}

HostLinkSummary summarize_host_link(const std::vector<HostLinkRow>& rows) {
  HostLinkSummary s;
  if (rows.empty()) return s;
  double log_sum = 0, log_bound = 0, log_chunked = 0, log_achievable = 0, log_reached = 0;
  int chunked = 0, achievable = 0;
  std::vector<double> errors;
  s.min_speedup = s.max_speedup = rows.front().speedup_vs_row_major;
  for (const auto& r : rows) {
    s.min_speedup = std::min(s.min_speedup, r.speedup_vs_row_major);
    s.max_speedup = std::max(s.max_speedup, r.speedup_vs_row_major);
    if (r.speedup_vs_row_major > 0)
      errors.push_back(std::abs(r.predicted_speedup_vs_row_major - r.speedup_vs_row_major) / r.speedup_vs_row_major);
    if (r.fused_ce_drain_ms > 0 && r.fused_ce_owner_ms > 0) {
      log_chunked += std::log(r.fused_ce_owner_ms / r.fused_ce_drain_ms);
      ++chunked;
    }
    if (!r.stall_predicted || r.speedup_vs_row_major <= 0) continue;
    log_sum += std::log(r.speedup_vs_row_major);
    log_bound += std::log(r.hiding_bound_vs_row_major > 0 ? r.hiding_bound_vs_row_major : r.speedup_vs_row_major);
    ++s.rows_where_stall_predicted;
    if (r.achievable_bound_vs_row_major <= 0) continue;
    log_achievable += std::log(r.achievable_bound_vs_row_major);
    log_reached += std::log(r.speedup_vs_row_major / r.achievable_bound_vs_row_major);
    ++achievable;
  }
  if (s.rows_where_stall_predicted > 0) {
    s.geomean_where_stall_predicted = std::exp(log_sum / s.rows_where_stall_predicted);
    s.hiding_bound_geomean = std::exp(log_bound / s.rows_where_stall_predicted);
  }
  if (achievable > 0) {
    s.achievable_bound_geomean = std::exp(log_achievable / achievable);
    s.speedup_over_achievable_geomean = std::exp(log_reached / achievable);
  }
  if (chunked > 0) s.chunked_over_owner_drain_geomean = std::exp(log_chunked / chunked);
  if (!errors.empty()) s.speedup_prediction_median_abs_rel_error = common::median(errors);
  return s;
}

DrainModelCheck check_drain_predictions(const std::vector<HostLinkRow>& rows, const burstgap::ModelParams& link,
                                        int sms) {
  std::vector<double> then, now;
  for (const auto& r : rows) {
    if (r.fused_ce_drain_ms <= 0 || r.fused_ce_owner_ms <= 0 || r.predicted_ce_drain_ms <= 0 ||
        r.predicted_ce_owner_ms <= 0)
      continue;
    const Problem p = r.config.problem();
    const int row_sms = r.sms > 0 ? r.sms : sms;
    XS_ASSERT(row_sms > 0, "Ulysses drain check: a row (S {}, P {}) without its SM count; give the SM count of the "
              "GPU that measured it (host-link-results --sms)", p.seq, p.ranks);
    const int grid = static_cast<int>(std::min<int64_t>(owner_major_tiles(p, r.rank).count(), row_sms));
    const CopyCosts copy{r.copy_op_us * 1e-3, r.copy_GBps > 0 ? r.copy_GBps : exchange_copy_GBps(r)};
    const double attention = r.attention_owner_ms > 0 ? r.attention_owner_ms : r.attention_row_major_ms;
    then.push_back(r.fused_ce_drain_ms / r.predicted_ce_drain_ms);
    then.push_back(r.fused_ce_owner_ms / r.predicted_ce_owner_ms);
    now.push_back(r.fused_ce_drain_ms /
                  predict_copy_engine_drain_ms(p, r.rank, grid, attention, link, r.drain_chunk_blocks, copy));
    now.push_back(r.fused_ce_owner_ms / predict_copy_engine_drain_ms(p, r.rank, grid, attention, link, 0, copy));
  }
  DrainModelCheck c;
  if (then.empty()) return c;
  auto abs_error = [](std::vector<double> v) {
    for (double& x : v) x = std::abs(x - 1);
    return common::median(v);
  };
  c.at_measurement = common::summarize(then);
  c.current = common::summarize(now);
  c.at_measurement_median_abs_rel_error = abs_error(then);
  c.current_median_abs_rel_error = abs_error(now);
  return c;
}

HostLinkRow host_link_row_from_json(const nlohmann::json& j) {
  HostLinkRow r;
  r.config = {j.at("S").get<int64_t>(), j.at("P").get<int>(), j.at("H").get<int64_t>(), j.at("D").get<int64_t>()};
  r.rank = j.at("rank").get<int>();
  for (auto [key, field] : {std::pair{"attention_row_major_ms", &r.attention_row_major_ms},
                            {"attention_owner_ms", &r.attention_owner_ms},
                            {"attention_guided_ms", &r.attention_guided_ms}, {"copy_op_us", &r.copy_op_us},
                            {"copy_GBps", &r.copy_GBps}, {"exchange_after_ms", &r.exchange_after_ms},
                            {"fused_row_major_ms", &r.fused_row_major_ms},
                            {"fused_ce_drain_ms", &r.fused_ce_drain_ms}, {"fused_ce_owner_ms", &r.fused_ce_owner_ms},
                            {"predicted_ce_drain_ms", &r.predicted_ce_drain_ms},
                            {"predicted_ce_owner_ms", &r.predicted_ce_owner_ms},
                            {"speedup_vs_row_major", &r.speedup_vs_row_major}})
    *field = j.value(key, 0.0);
  r.drain_chunk_blocks = j.value("drain_chunk_blocks", 0);
  r.sms = j.value("sms", 0);
  r.stall_predicted = j.value("stall_predicted", false);
  return r;
}

}  // namespace xstage::ulysses
