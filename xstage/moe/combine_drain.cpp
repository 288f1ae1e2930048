// The host-link combine drain (combine_drain.hpp).
#include "combine_drain.hpp"

#include <algorithm>

#include "common/check.hpp"
#include "common/cuda_check.hpp"

namespace xstage::moe {

CombineDrain::CombineDrain(const Problem& p, int rank, int max_rows)
    : p_(p),
      rank_(rank),
      stage_(std::size_t(std::max(max_rows, 1)) * p.hidden),
      l2_done_(std::size_t(p.experts_per_rank())),
      total_(p.experts_per_rank(), 0) {
  XS_CHECK_CUDA(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  XS_CHECK_CUDA(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  fill_device(l2_done_.get(), 0, l2_done_.size() * sizeof(unsigned));
  XS_CHECK_CUDA(cudaDeviceSynchronize());
}

CombineDrain::~CombineDrain() {  // the stage's cudaFree waits for the copies still in flight
  cudaEventDestroy(done_);
  cudaStreamDestroy(side_);
}

std::vector<DrainExpert> drain_plan(const RankLayout& R, const std::vector<WorkItem>& order, int ranks) {
  const int epr = static_cast<int>(R.expert_offset.size()) - 1;
  std::vector<int> last(epr, -1);
  std::vector<unsigned> halves(epr, 0);
  for (int i = 0; i < static_cast<int>(order.size()); ++i) {
    const WorkItem& it = order[i];
    if (it.kind != TileKind::l2) continue;
    XS_ASSERT(it.expert >= 0 && it.expert < epr, "combine drain: an L2 item names local expert {} of {}", it.expert,
              epr);
    last[it.expert] = i;
    halves[it.expert] += 2;  // each consumer warpgroup releases its half of every tile
  }
  std::vector<DrainExpert> plan;
  for (int e = 0; e < epr; ++e)
    if (last[e] >= 0) plan.push_back({e, halves[e], drain_copies(R, e, ranks)});
  std::sort(plan.begin(), plan.end(),
            [&](const DrainExpert& a, const DrainExpert& b) { return last[a.local] < last[b.local]; });
  return plan;
}

std::vector<DrainGroup> drain_groups(const std::vector<DrainExpert>& plan, int experts_per_copy) {
  std::vector<std::vector<DrainCopy>> copies;
  for (const DrainExpert& e : plan) copies.push_back(e.copies);
  return group_drain(copies, experts_per_copy);
}

void CombineDrain::enqueue(cudaStream_t main, unsigned epoch, const std::vector<DrainExpert>& plan,
                           const std::vector<DrainGroup>& groups, const std::array<char*, kMaxRanks>& windows,
                           const std::array<char*, kMaxRanks>& returns) {
  // No start signal: only this launch's counts meet the waits (they only grow), and the
  // stage is rewritten by the next launch only after `main` has joined this one.
  const std::size_t row_bytes = std::size_t(p_.hidden) * 2;
  for (const DrainGroup& g : groups) {
    for (int i = g.first; i < g.first + g.count; ++i) {
      const DrainExpert& e = plan[i];
      total_[e.local] += e.halves;
      common::stream_wait_geq(side_, l2_done_.get() + e.local, total_[e.local]);
    }
    for (const DrainCopy& c : g.copies)
      XS_CHECK_CUDA(cudaMemcpyAsync(returns[c.dst_rank] + std::size_t(c.dst_row) * row_bytes,
                                    reinterpret_cast<const char*>(stage_.get()) + std::size_t(c.src_row) * row_bytes,
                                    std::size_t(c.rows) * row_bytes, cudaMemcpyDefault, side_));
  }
  // This owner's rows of every rank's tokens have landed (its own: its L2 tiles ended).
  for (int r = 0; r < p_.ranks; ++r)
    common::stream_write(side_, reinterpret_cast<unsigned*>(windows[r]) + kDrainFlagsIndex + rank_, epoch);
  XS_CHECK_CUDA(cudaEventRecord(done_, side_));
  XS_CHECK_CUDA(cudaStreamWaitEvent(main, done_, 0));
}

}  // namespace xstage::moe
