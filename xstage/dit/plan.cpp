// `xstage dit --plan`: what the GPU path would do on P ranks, without a GPU. Every
// figure comes from the host functions the GPU path calls itself (sharding, padding,
// the attention kernel's launch shape, the advisor-chosen tile orders, the MoE
// schedules), so the plan is the run's, not a model of it.
#include <algorithm>

#include "common/check.hpp"
#include "xstage/attention/attention.hpp"
#include "xstage/dit/dit.hpp"
#include "xstage/ulysses/ulysses.hpp"
#include "xstage/ulysses/qkv.hpp"

namespace xstage::dit {

RunPlan plan_run(const Config& c, const Run& r, const burstgap::ModelParams& peer, int sms) {
  validate(c, r, true);  // the GPU path's rules, without counting GPUs
  XS_ASSERT(sms >= 1, "dit: --sms must be >= 1 (got {})", sms);
  const int P = r.ranks;
  RunPlan plan;
  plan.tokens = r.tokens;
  plan.padded = padded_tokens(c, r);
  plan.per_rank = plan.padded / P;
  plan.ranks = P;
  plan.blocks = blocks_used(c, r);
  plan.sms = sms;

  const ulysses::Problem up{P, 1, plan.padded, c.heads, c.head_dim, false, r.tokens};
  bool qkv_fused = P > 1 || single_gpu_pads_for_qkv(c);
  if (qkv_fused) {
    try {
      ulysses::validate_qkv(up);
    } catch (const common::Error&) {
      qkv_fused = false;  // D = 64: cuBLAS + the serial exchange
    }
  }
  const Grid grid = token_grid(c, r.tokens);
  for (int k = 0; k < P; ++k) {
    RankPlan rp;
    rp.rank = k;
    const Shard sh = shard_of(grid, P, k, plan.padded);
    rp.row0 = sh.row0;
    rp.real = sh.valid;
    rp.padding = sh.rows - sh.valid;
    rp.head0 = k * (c.heads / P);
    rp.heads = c.heads / P;
    rp.qkv_fused = qkv_fused;
    if (qkv_fused) {
      rp.qkv_grid = std::min(sms, ulysses::qkv_tiles(up));
      const ulysses::QkvSchedule q = ulysses::choose_qkv_schedule(up, k, rp.qkv_grid, peer);
      rp.qkv_stall_ns = P > 1 ? q.predicted_stall_ns : 0.0;
      rp.qkv_order = q.reason;
    }
    if (P > 1) {
      attention::Problem ap;
      ap.B = 1;
      ap.Sq = plan.padded;
      ap.Skv = r.tokens;
      ap.H = c.heads / P;
      ap.D = c.head_dim;
      const attention::FwdConfig cfg = attention::choose_config(ap, sms);
      const ulysses::FusedSchedule f = ulysses::choose_schedule(up, k, cfg.grid, peer);
      rp.attention_grid = cfg.grid;
      rp.attention_stall_ns = f.predicted_stall_ns;
      rp.attention_order = f.reason;
    }
    plan.rank.push_back(std::move(rp));
  }

  const double C = double(c.hidden), L = double(plan.per_rank), remote = double(P - 1) / P;
  plan.pre_a2a_bytes = P > 1 ? 3 * L * C * 2 * remote : 0.0;
  plan.post_a2a_bytes = P > 1 ? L * C * 2 * remote : 0.0;
  plan.gemm_flops = 2 * L * C * 3 * C + 2 * L * C * C;  // QKV, output projection
  plan.attention_flops = 4.0 * double(plan.padded) * double(r.tokens) * double(c.head_dim) * double(c.heads / P);
  if (c.ffn == Ffn::moe) {
    const moe::Problem mp = moe_problem(c, plan.padded, P);
    const moe::TileLists tiles = moe::expected_tiles(mp, c.moe_raster_group);
    auto schedule = [&](moe::ScheduleKind kind, std::string& why, double& stall) {
      const moe::ScheduleConfig cfg = moe::choose_schedule(kind, mp, tiles, sms, peer);
      why = cfg.reason;
      stall = P > 1 ? burstgap::advise(peer, moe::burst_profile(cfg, mp, tiles, moe::TileTimeModel{})).predicted_stall_ns
                    : 0.0;
    };
    plan.moe = true;
    schedule(moe::ScheduleKind::interleaved, plan.moe_interleaved, plan.moe_interleaved_stall_ns);
    schedule(moe::ScheduleKind::expert_wave, plan.moe_expert_wave, plan.moe_expert_wave_stall_ns);
    const double rows = L * c.topk;
    plan.moe_dispatch_bytes = rows * C * 2 * remote;
    plan.moe_combine_bytes = rows * C * 2 * remote;
    plan.gemm_flops += 2 * L * C * c.experts + 6 * rows * C * double(c.moe_inter);  // router, W1 (gate, up), W2
  } else {
    plan.gemm_flops += 4 * L * C * double(c.ffn_hidden);  // fc1, fc2
  }
  return plan;
}

}  // namespace xstage::dit
