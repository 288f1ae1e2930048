// The fused path's tile order, chosen with the Burst-Gap advisor.
//
// What the fused kernel emits. Every CTA tile (128 query rows of one head)
// ends with its epilogue storing 128 x D bf16 = tile_store_bytes: remotely
// (into the owner's output through an LSA pointer) when the rows belong to
// another rank, locally otherwise. Between two remote tiles of one CTA lies the
// compute of the tiles in between, so the burst pattern of a CTA is fixed by
// the order of the linear tile index and the static persistent scheduler (CTA c
// takes tiles c, c + grid, c + 2·grid, ...). We simulate that schedule on the
// host (simulate_order) and hand the advisor the worst CTA's pattern:
//   bytes_per_burst = one tile's store, sms = most CTAs storing remotely in one
//   round, gap = that CTA's mean rounds between remote tiles x tile time,
//   bursts = its remote tiles.
// Candidates: head_major (the kernel's own order: a round covers ~grid
// consecutive m-blocks of one head, i.e. mostly one owner), and
// slice_interleaved with runs of 1, 2, 4, ... tiles per owner, local slice last
// in every group. Attention is compute-heavy (a tile is ~4·128·S·D flops for
// 256·D bytes of output), so at these sizes the model predicts no backpressure
// for any order; the tie-break then prefers the order whose last round has the
// fewest remote stores (the last stores drain while nothing else is left to
// overlap them), then the shorter run (more even injection).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include "common/check.hpp"
#include "common/config_print.hpp"
#include "common/files.hpp"
#include "xstage/ulysses/ulysses.hpp"

namespace xstage::ulysses {

double tile_ns(const Problem& p, const TileTimeModel& m) {
  const double flops = 4.0 * kTileRows * static_cast<double>(p.seq) * p.head_dim;
  const double rate = (p.head_dim == 128 ? m.sm_tflops_d128 : m.sm_tflops_d64) * 1e3;  // flop/ns
  return flops / rate + m.tile_overhead_ns;
}

int64_t tile_store_bytes(const Problem& p) { return kTileRows * p.head_dim * 2; }

int owner_row_blocks(const Problem& p) { return static_cast<int>(p.seq / kTileRows) / p.ranks; }

OrderStats simulate_order(const Problem& p, int rank, const attention::TileSpace& tiles, int grid) {
  XS_ASSERT(grid >= 1, "ulysses: grid must be >= 1 (got {})", grid);
  attention::StaticPersistentScheduler sched{tiles, false};
  const int64_t rounds = (tiles.count() + grid - 1) / grid;
  std::vector<int> per_round(static_cast<std::size_t>(rounds), 0);
  OrderStats s;
  int best_first = 0, best_last = 0;
  for (int c = 0; c < grid; ++c) {
    int count = 0, first = -1, last = -1;
    for (attention::WorkTile w = sched.initial_work(c, grid); w.valid; w = sched.next_work(w, grid)) {
      if (owner_of_row(p, int64_t{w.m_block} * kTileRows) == rank) continue;
      const int round = attention::StaticPersistentScheduler::round_of(w, grid);
      ++per_round[round];
      ++count;
      if (first < 0) first = round;
      last = round;
    }
    s.remote_tiles += count;
    if (count > s.bursts) {
      s.bursts = count;
      best_first = first;
      best_last = last;
    }
  }
  for (int v : per_round) s.sms_remote = std::max(s.sms_remote, v);
  s.remote_last_round = rounds > 0 ? per_round.back() : 0;
  s.gap_rounds = s.bursts >= 2 ? double(best_last - best_first) / (s.bursts - 1) : double(std::max<int64_t>(rounds, 1));
  return s;
}

namespace {

void print_once(const Problem& p, int rank, const FusedSchedule& f) {
  common::print_config_once(fmt::format("{} r{}", describe(p), rank), [&] {
    return fmt::format("xstage: ulysses schedule [{}] rank {}: {}", describe(p), rank, f.reason);
  });
}

std::string order_name(int run) { return run == 0 ? std::string("head_major") : fmt::format("interleaved run {}", run); }

// Rank `rank`'s tiles in `order`, the owner slices starting at rank + 1 (so its own last).
attention::TileSpace rank_tiles(const Problem& p, int rank, attention::TileOrder order) {
  validate(p);
  XS_ASSERT(rank >= 0 && rank < p.ranks, "ulysses: rank {} is outside 0 .. {}", rank, p.ranks - 1);
  attention::TileSpace t;
  t.m_blocks = static_cast<int>(p.seq / kTileRows);
  t.heads = static_cast<int>(p.heads_per_rank());
  t.batches = static_cast<int>(p.batch);
  t.order = order;
  t.slices = p.ranks;
  t.slice_first = (rank + 1) % p.ranks;
  return t;
}

}  // namespace

FusedSchedule evaluate_order(const Problem& p, int rank, int grid, int slice_run, const burstgap::ModelParams& params,
                             const TileTimeModel& time) {
  FusedSchedule f;  // its tiles first: rank_tiles validates the problem and the rank
  f.tiles = rank_tiles(p, rank,
                       slice_run == 0 ? attention::TileOrder::head_major : attention::TileOrder::slice_interleaved);
  XS_ASSERT(grid >= 1, "ulysses: grid must be >= 1 (got {})", grid);
  const int per_slice = owner_row_blocks(p);
  XS_ASSERT(slice_run >= 0 && slice_run <= per_slice, "ulysses: slice run {} is outside 0 .. {}", slice_run,
            per_slice);
  f.grid = grid;
  f.slice_run = slice_run;
  f.tiles.slice_run = std::max(slice_run, 1);
  f.stats = simulate_order(p, rank, f.tiles, grid);
  if (f.stats.bursts > 0) {
    f.profile.bytes_per_burst = static_cast<std::size_t>(tile_store_bytes(p));
    f.profile.sms = std::max(1, f.stats.sms_remote);
    f.profile.compute_ns_between_bursts = f.stats.gap_rounds * tile_ns(p, time);
    f.profile.bursts = f.stats.bursts;
    f.profile.pattern = params.pattern;
    f.profile.store = params.store;  // the epilogue's 16-byte st.global: st16
    f.advice = burstgap::advise(params, f.profile);
    f.predicted_stall_ns = f.advice.predicted_stall_ns;
  }
  return f;
}

attention::TileSpace owner_major_tiles(const Problem& p, int rank, int chunk_blocks) {
  attention::TileSpace t = rank_tiles(p, rank, attention::TileOrder::owner_major);
  const int per_slice = owner_row_blocks(p);
  XS_ASSERT(chunk_blocks >= 0 && (chunk_blocks == 0 || per_slice % chunk_blocks == 0),
            "ulysses: a drain chunk of {} row blocks does not divide an owner's {}", chunk_blocks, per_slice);
  t.chunk_blocks = chunk_blocks;
  return t;
}

FusedSchedule choose_schedule(const Problem& p, int rank, int grid, const burstgap::ModelParams& params,
                              const TileTimeModel& time) {
  validate(p);
  const int per_slice = owner_row_blocks(p);
  const double t_tile = tile_ns(p, time);
  std::vector<int> runs{0};
  for (int r = 1; r <= per_slice && p.ranks > 1; r *= 2)
    if (per_slice % r == 0) runs.push_back(r);

  FusedSchedule best;
  bool have = false;
  for (int run : runs) {
    const FusedSchedule f = evaluate_order(p, rank, grid, run, params, time);
    const double tie = 0.01 * t_tile;
    const bool better =
        !have || f.predicted_stall_ns < best.predicted_stall_ns - tie ||
        (std::abs(f.predicted_stall_ns - best.predicted_stall_ns) <= tie &&
         (f.stats.remote_last_round < best.stats.remote_last_round ||
          (f.stats.remote_last_round == best.stats.remote_last_round && run != 0 && best.slice_run == 0)));
    if (better) {
      best = f;
      have = true;
    }
  }
  best.reason = fmt::format(
      "{} of {} candidates: {} remote tiles, <= {} CTAs storing remotely per round, busiest CTA {} bursts of {} "
      "every {:.1f} tiles ({} each); {} remote stores in the last round; predicted stall {}{}{}",
      order_name(best.slice_run), runs.size(), best.stats.remote_tiles, best.stats.sms_remote, best.stats.bursts,
      common::format_bytes(double(tile_store_bytes(p))), best.stats.gap_rounds, common::format_ns(t_tile),
      best.stats.remote_last_round, common::format_ns(best.predicted_stall_ns),
      best.advice.reason.empty() ? "" : ": ", best.advice.reason);
  print_once(p, rank, best);
  return best;
}

}  // namespace xstage::ulysses
