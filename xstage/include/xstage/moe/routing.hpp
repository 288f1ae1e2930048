// Expert-parallel MoE, routing: top-k from router logits, synthetic routings, checks.
#pragma once

#include <cstdint>
#include <vector>

#include "xstage/moe/problem.hpp"

namespace xstage::moe {

// ============================================================================
// Routing
// ============================================================================

// One rank's routing: expert ids (global, distinct per token) and weights.
struct Routing {
  int tokens = 0, topk = 0;
  std::vector<int> expert;     // [tokens * topk]
  std::vector<float> weight;   // [tokens * topk]
};

// Softmax over the top-k logits of each token (= softmax over all experts,
// renormalised over the chosen k). Ties go to the lower expert id.
// logits: [tokens, experts].
Routing route_from_logits(const std::vector<float>& logits, int tokens, int experts, int topk);

struct SyntheticRouting {
  double zipf = 0;             // expert popularity ~ 1/(rank+1)^zipf; 0 = uniform
  int empty_experts = 0;       // this many experts (chosen by seed) receive no token
  double same_rank = 0;        // probability that slot j>0 picks an expert on slot 0's rank
  std::uint64_t seed = 1;
  // Every expert gets the same number of (token, slot) pairs (within one when E does not
  // divide P * T * k): what a balanced router gives, and the shape of a batched GEMM at the
  // mean count. Pair g = (rank * T + token) * k + slot goes to expert perm[g mod E], perm
  // seeded, so a token's k experts are distinct. Takes no zipf, empty experts or same-rank picks.
  bool balanced = false;
};
// Routing of every rank (one Routing per rank), deterministic in (problem, s).
std::vector<Routing> synthetic_routing(const Problem& p, const SyntheticRouting& s);
// Throws when ids are out of range, repeated within a token, or weights not finite.
void validate(const Problem& p, const std::vector<Routing>& routing);


}  // namespace xstage::moe
