// The host side of the DiT block's MoE FFN on GPUs: the fused kernel's problem,
// expert shards per rank, routing and layout from the router logits of all
// tokens, and this rank's Interleaved tile order.
#include <algorithm>
#include <climits>

#include "common/check.hpp"
#include "xstage/dit/dit.hpp"

namespace xstage::dit {

moe::Problem moe_problem(const Config& c, int64_t tokens, int ranks) {
  XS_ASSERT(c.ffn == Ffn::moe, "dit: {} has no MoE FFN", c.name);
  XS_ASSERT(ranks >= 1 && tokens >= 1 && tokens % ranks == 0, "dit: {} tokens do not split over P = {} ranks", tokens,
            ranks);
  XS_ASSERT(tokens / ranks <= INT_MAX && c.hidden <= INT_MAX && c.moe_inter <= INT_MAX,
            "dit: {}: {} tokens per rank, hidden {}, moe_inter {} exceed the MoE kernel's 32-bit sizes", c.name,
            tokens / ranks, c.hidden, c.moe_inter);
  return moe::Problem{ranks, int(tokens / ranks), c.experts, c.topk, int(c.hidden), int(c.moe_inter)};
}

bool is_expert_param(const std::string& name) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return name.rfind("blocks.", 0) == 0 && (ends_with(".moe.w1") || ends_with(".moe.w2"));
}

std::vector<float> expert_shard(const Tensor& t, int ranks, int rank) {
  XS_ASSERT(!t.shape.empty() && ranks >= 1 && rank >= 0 && rank < ranks && t.shape[0] % ranks == 0,
            "dit: an expert-major tensor of {} experts does not shard over P = {} ranks (rank {})",
            t.shape.empty() ? 0 : t.shape[0], ranks, rank);
  const size_t per_rank = t.data.size() / size_t(ranks);
  XS_ASSERT(per_rank * size_t(ranks) == t.data.size(), "dit: expert tensor of {} values over {} ranks", t.data.size(),
            ranks);
  return {t.data.begin() + rank * per_rank, t.data.begin() + (rank + 1) * per_rank};
}

MoeRoute moe_route(const moe::Problem& p, const std::vector<float>& logits) {
  const size_t per_rank = size_t(p.tokens_per_rank) * p.experts;
  XS_ASSERT(logits.size() == per_rank * p.ranks, "dit: {} router logits for {} ranks x {} tokens x {} experts",
            logits.size(), p.ranks, p.tokens_per_rank, p.experts);
  const moe::Routing all = moe::route_from_logits(logits, p.tokens_per_rank * p.ranks, p.experts, p.topk);
  return moe_route_from_topk(p, all.expert.data(), all.weight.data());
}

MoeRoute moe_route_from_topk(const moe::Problem& p, const int* expert, const float* weight) {
  const size_t per_rank = size_t(p.tokens_per_rank) * p.topk;
  MoeRoute r;
  r.routing.reserve(size_t(p.ranks));
  for (int s = 0; s < p.ranks; ++s)
    r.routing.push_back({p.tokens_per_rank, p.topk, std::vector<int>(expert + s * per_rank, expert + (s + 1) * per_rank),
                         std::vector<float>(weight + s * per_rank, weight + (s + 1) * per_rank)});
  r.layout = moe::build_layout(p, r.routing);  // validates the experts and weights
  return r;
}

std::vector<moe::WorkItem> moe_order(const moe::Problem& p, const MoeRoute& route, int rank, int sms,
                                     const burstgap::ModelParams& params, int raster_group) {
  XS_ASSERT(rank >= 0 && rank < p.ranks, "dit: rank {} is outside 0 .. {}", rank, p.ranks - 1);
  const moe::TileLists tiles = moe::build_tiles(p, route.layout.ranks[size_t(rank)], raster_group);
  const moe::ScheduleConfig cfg = moe::choose_schedule(moe::ScheduleKind::interleaved, p, tiles, sms, params);
  return moe::make_scheduler(cfg)->order(tiles);
}

}  // namespace xstage::dit
