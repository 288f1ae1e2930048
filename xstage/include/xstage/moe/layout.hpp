// Expert-parallel MoE, dispatch and combine layout: the index maps every rank's part of
// the fused kernel reads, built on the host from every rank's routing.
#pragma once

#include <cstddef>
#include <vector>

#include "xstage/moe/routing.hpp"

namespace xstage::moe {

// ============================================================================
// Dispatch and combine layout
// ============================================================================

// Everything one rank's part of the fused kernel indexes by. Built on the host
// from every rank's routing (the reference path routes on the host too).
struct RankLayout {
  int rank = 0;
  // Send side: for each (token, slot) of this rank, where its row goes.
  std::vector<int> send_rank;      // [T*k] destination rank
  std::vector<int> send_row;       // [T*k] row in the destination's recv buffer
  // Receive side: rows grouped by local expert.
  std::vector<int> expert_offset;  // [E/P + 1] first recv row of each local expert
  std::vector<int> recv_src_rank;  // [rows] owner of the token
  std::vector<int> recv_src_slot;  // [rows] token * k + slot on the owner (its comb row)
  std::vector<int> recv_from;      // [P] rows this rank receives from each source
  // The host-link combine drain (FusedMoe::set_combine_drain): this rank's L2 rows go to a
  // stage in (source, local expert) order (drain_stage_rows), so that a source's rows of
  // consecutive local experts lie together there as they do in the source's return rows,
  // which hold its ranges in (owner rank, owner's local expert) order: one copy can move
  // a source's rows of several experts.
  std::vector<int> recv_start;     // [E/P * P + 1] first recv row of (local expert e, source s) at e * P + s
  std::vector<int> return_start;   // [E/P * P] where that range starts in the source's return rows
  std::vector<int> return_row;     // [T*k] row of each (token, slot)'s result in this rank's return rows
  int rows() const { return expert_offset.empty() ? 0 : expert_offset.back(); }
  int count(int local_expert) const { return expert_offset[local_expert + 1] - expert_offset[local_expert]; }
};

struct Layout {
  Problem problem;
  std::vector<RankLayout> ranks;
  int max_rows() const;                       // most rows any rank receives
};
Layout build_layout(const Problem& p, const std::vector<Routing>& routing);
// Structural invariants (every (token, slot) sent once, maps inverse, offsets
// monotone); throws naming the first broken one.
void check_layout(const Layout& layout, const std::vector<Routing>& routing);

// One copy of the combine drain: `rows` rows from the owner's stage at `src_row` to rank
// `dst_rank`'s return rows at `dst_row`.
struct DrainCopy {
  int src_row, dst_rank, dst_row, rows;
  bool operator==(const DrainCopy&) const = default;
};
// Owner R's stage row of each of its recv rows: (source, local expert) order.
std::vector<int> drain_stage_rows(const RankLayout& R, int ranks);
// Owner R's copies of local expert `local_expert`'s rows back to the other ranks (its own
// rows stay: the combine reads them in place); empty ranges left out.
std::vector<DrainCopy> drain_copies(const RankLayout& R, int local_expert, int ranks);
// The same copies with each run that continues another in both stage and return rows
// (same destination) made one: a group of experts' copies, fewest operations.
std::vector<DrainCopy> merge_drain_copies(std::vector<DrainCopy> copies);
// The drain's groups: experts taken `experts_per_copy` at a time in the order given (the
// order their L2 tiles end), each group's copies merged. `copies[i]` are the i-th
// expert's (drain_copies); a group names its experts by that index. The side stream
// (CombineDrain) and the prediction (predict_drain_us) both group through this.
struct DrainGroup {
  int first = 0, count = 0;      // experts [first, first + count) of the order
  std::vector<DrainCopy> copies;
};
std::vector<DrainGroup> group_drain(const std::vector<std::vector<DrainCopy>>& copies, int experts_per_copy);

// Sizes of the GPU planner's buffers (FusedMoe::route_on_device, moe/device_route.hpp).
namespace route {
inline constexpr int kTopkMax = 8;  // the top-k kernel keeps k <= 8 entries in registers
inline constexpr int kChunk = 512;  // (token, slot) pairs per block of its count and assign kernels
int chunks_per_rank(const Problem& p);           // ceil(T*k / kChunk)
std::size_t chunk_count_size(const Problem& p);  // P * chunks * E
std::size_t plan_table_size(const Problem& p);   // 9 * E/P + 2 ints: the order's tables
// The most rows one rank can receive (each token of every rank at most once per
// local expert and at most k times), the most m blocks of one local expert
// (ceil(P*T / kTileM)), and the most work items an order over max_rows rows has.
int max_recv_rows(const Problem& p);
int max_m_blocks(const Problem& p);
int item_capacity(const Problem& p, int max_rows);
}  // namespace route

// Host model of the kernel's data movement over `row_elems` elements per row
// (bit copies): dispatch x rows to recv buffers, and return recv-shaped rows to
// the owners' comb buffers [T*k, row_elems].
std::vector<std::vector<bf16_bits>> dispatch_rows(const Layout& layout, const std::vector<std::vector<bf16_bits>>& x,
                                                  int row_elems);
std::vector<std::vector<bf16_bits>> combine_rows(const Layout& layout,
                                                 const std::vector<std::vector<bf16_bits>>& recv, int row_elems);
// The same through the combine drain, `experts_per_copy` consecutive local experts' copies
// merged (merge_drain_copies): every owner's stage, its copies into the sources' return
// rows [T*k, row_elems], then each (token, slot) read at return_row (or, for a row this
// rank computed itself, at its stage row). Equal to combine_rows.
std::vector<std::vector<bf16_bits>> combine_rows_drained(const Layout& layout,
                                                         const std::vector<std::vector<bf16_bits>>& recv,
                                                         int row_elems, int experts_per_copy = 1);


}  // namespace xstage::moe
