// Routing, layout and schedule order of the fused MoE on the GPU, so that a forward
// from router logits needs no host round trip (FusedMoe::route_on_device).
//
// From this rank's logits [T, E]:
//   1. topk_softmax: each token's top-k experts and weights (xstage/moe/topk.hpp, the
//      arithmetic of route_from_logits).
//   2. the caller gathers every rank's experts [P, T*k] (ncclAllGather; P = 1: none).
//   3. plan: the layout build_layout() makes, and this rank's order, from the gathered
//      experts, in three kernels:
//        count   one block per 512 (token, slot) pairs of a source: per-expert counts;
//        scan    one block: per expert, exclusive prefix over (source, chunk); each
//                destination's expert offsets; this rank's dispatch targets (+=) and
//                m blocks; the tables of its tile order (xstage/moe/order.hpp);
//        order   one thread per tile: its place in the order (tile_position);
//        assign  one block per chunk: the row of each pair = its expert's offset on
//                the destination + pairs of that expert in earlier (source, chunk) +
//                earlier pairs of its chunk, i.e. build_layout's (expert, source, pair)
//                order. Sources write send_rank / send_row of their own pairs,
//                destinations recv_src_rank / recv_src_slot of theirs.
// Every rank computes the same layout from the same gathered experts, so a source knows
// each destination row without asking. Output values do not depend on this order (each
// output row depends on its own input row only), but the order is deterministic and
// equal to the host's, which the GPU tests check.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "xstage/moe/moe.hpp"

namespace xstage::moe::route {

// kTopkMax, kChunk and the buffer sizes are in xstage/moe/moe.hpp (host code, CPU-tested).

// Top-k softmax of logits [tokens, experts] fp32 (device) into expert / weight
// [tokens * topk]. A non-finite logit sets *nonfinite = 1 (left alone otherwise) and is
// ranked as +-FLT_MAX (NaN as -FLT_MAX), so every token still gets k distinct experts.
void topk_softmax(const float* logits, int tokens, int experts, int topk, int* expert, float* weight, int* nonfinite,
                  cudaStream_t s);

// Where plan() writes (device pointers, sizes in brackets).
struct PlanOut {
  int* send_rank = nullptr;         // [T*k] destination rank of each of this rank's pairs
  int* send_row = nullptr;          // [T*k] its row there
  int* expert_offset = nullptr;     // [E/P + 1] this rank's recv rows per local expert
  int* recv_src_rank = nullptr;     // [max_rows] owner of each recv row (rows written: this forward's)
  int* recv_src_slot = nullptr;     // [max_rows] token*k + slot on the owner
  WorkItem* items = nullptr;        // [item_capacity] the order
  int* n_items = nullptr;           // [1]
  unsigned* dispatch_expect = nullptr;  // [E/P] cumulative dispatch targets: += this forward's counts
};
struct PlanScratch {
  int* chunk_count = nullptr;   // [chunk_count_size(p)]
  int* expert_start = nullptr;  // [E] first row of each global expert on its destination
  int* tables = nullptr;        // [plan_table_size(p)] per-expert and per-wave tables of the order
};
// Rank `rank`'s layout and order from all_expert [P, T*k] (global expert ids in
// [0, E), each token's distinct). spec: order_spec(config, p, raster_group).
// marks (optional, for timing): four events, recorded after the count, scan, order and
// assign kernels.
void plan(const Problem& p, int rank, const int* all_expert, const OrderSpec& spec, int max_rows,
          const PlanScratch& scratch, const PlanOut& out, cudaStream_t s, cudaEvent_t* marks = nullptr);

}  // namespace xstage::moe::route
