// Dispatch/combine layout: which row goes where, for any EP size.
//
// Rank d's recv buffer holds, for local expert e = 0..E/P-1 in order, the rows of
// every source rank s = 0..P-1 in order, each source's rows in (token, slot)
// order. Every rank builds the same Layout from all ranks' routing, so a source
// knows the destination row of each of its rows without asking (the reference
// path also routes on the host; a device-side count exchange is future work).
#include <algorithm>

#include "common/check.hpp"
#include "xstage/moe/moe.hpp"

namespace xstage::moe {

int Layout::max_rows() const {
  int m = 0;
  for (const auto& r : ranks) m = std::max(m, r.rows());
  return m;
}

Layout build_layout(const Problem& p, const std::vector<Routing>& routing) {
  validate(p, routing);
  const int P = p.ranks, epr = p.experts_per_rank(), T = p.tokens_per_rank, K = p.topk;
  Layout L{p, std::vector<RankLayout>(P)};
  // count[d][e_local][s]
  std::vector<int> count(std::size_t(P) * epr * P, 0);
  auto cidx = [&](int d, int el, int s) { return (std::size_t(d) * epr + el) * P + s; };
  for (int s = 0; s < P; ++s)
    for (int i = 0; i < T * K; ++i) {
      const int e = routing[s].expert[i];
      ++count[cidx(e / epr, e % epr, s)];
    }
  // Start row of (d, e_local, s) in d's recv buffer.
  std::vector<int> start(count.size(), 0);
  for (int d = 0; d < P; ++d) {
    RankLayout& R = L.ranks[d];
    R.rank = d;
    R.expert_offset.assign(epr + 1, 0);
    R.recv_from.assign(P, 0);
    int row = 0;
    for (int el = 0; el < epr; ++el) {
      R.expert_offset[el] = row;
      for (int s = 0; s < P; ++s) {
        start[cidx(d, el, s)] = row;
        row += count[cidx(d, el, s)];
        R.recv_from[s] += count[cidx(d, el, s)];
      }
    }
    R.expert_offset[epr] = row;
    R.recv_src_rank.assign(row, -1);
    R.recv_src_slot.assign(row, -1);
    R.recv_start.assign(std::size_t(epr) * P + 1, row);
    for (int el = 0; el < epr; ++el)
      for (int s = 0; s < P; ++s) R.recv_start[std::size_t(el) * P + s] = start[cidx(d, el, s)];
  }
  // Return rows of source s: its ranges in (owner d, local expert) order.
  std::vector<int> ret(count.size(), 0);
  for (int s = 0; s < P; ++s) {
    int pos = 0;
    for (int d = 0; d < P; ++d)
      for (int el = 0; el < epr; ++el) {
        ret[cidx(d, el, s)] = pos;
        pos += count[cidx(d, el, s)];
      }
  }
  for (int d = 0; d < P; ++d) {
    RankLayout& R = L.ranks[d];
    R.return_start.assign(std::size_t(epr) * P, 0);
    for (int el = 0; el < epr; ++el)
      for (int s = 0; s < P; ++s) R.return_start[std::size_t(el) * P + s] = ret[cidx(d, el, s)];
  }
  std::vector<int> fill = start;
  for (int s = 0; s < P; ++s) {
    RankLayout& S = L.ranks[s];
    S.send_rank.assign(std::size_t(T) * K, -1);
    S.send_row.assign(std::size_t(T) * K, -1);
    S.return_row.assign(std::size_t(T) * K, -1);
    for (int i = 0; i < T * K; ++i) {
      const int e = routing[s].expert[i], d = e / epr, el = e % epr;
      const int row = fill[cidx(d, el, s)]++;
      S.send_rank[i] = d;
      S.send_row[i] = row;
      S.return_row[i] = ret[cidx(d, el, s)] + (row - start[cidx(d, el, s)]);
      L.ranks[d].recv_src_rank[row] = s;
      L.ranks[d].recv_src_slot[row] = i;
    }
  }
  return L;
}

void check_layout(const Layout& L, const std::vector<Routing>& routing) {
  const Problem& p = L.problem;
  const int P = p.ranks, epr = p.experts_per_rank(), TK = p.tokens_per_rank * p.topk;
  XS_ASSERT(int(L.ranks.size()) == P, "layout: {} ranks for P = {}", L.ranks.size(), P);
  long long total_rows = 0;
  for (int d = 0; d < P; ++d) {
    const RankLayout& R = L.ranks[d];
    XS_ASSERT(int(R.expert_offset.size()) == epr + 1 && R.expert_offset[0] == 0, "layout: rank {} offsets malformed", d);
    for (int el = 0; el < epr; ++el)
      XS_ASSERT(R.expert_offset[el] <= R.expert_offset[el + 1], "layout: rank {} offsets decrease at expert {}", d, el);
    XS_ASSERT(int(R.recv_src_rank.size()) == R.rows() && int(R.recv_src_slot.size()) == R.rows(),
              "layout: rank {} recv maps have the wrong length", d);
    int from_sum = 0;
    for (int s = 0; s < P; ++s) from_sum += R.recv_from[s];
    XS_ASSERT(from_sum == R.rows(), "layout: rank {} receives {} rows but counts sum to {}", d, R.rows(), from_sum);
    total_rows += R.rows();
    for (int row = 0; row < R.rows(); ++row) {
      const int s = R.recv_src_rank[row], i = R.recv_src_slot[row];
      XS_ASSERT(s >= 0 && s < P && i >= 0 && i < TK, "layout: rank {} row {} has no source", d, row);
      XS_ASSERT(L.ranks[s].send_rank[i] == d && L.ranks[s].send_row[i] == row,
                "layout: rank {} row {} and rank {} slot {} are not inverse", d, row, s, i);
      const int e = routing[s].expert[i];
      XS_ASSERT(e / epr == d && row >= R.expert_offset[e % epr] && row < R.expert_offset[e % epr + 1],
                "layout: rank {} row {} (expert {}) lies outside its expert's segment", d, row, e);
    }
  }
  XS_ASSERT(total_rows == (long long)P * TK, "layout: {} rows received for {} (token, slot) pairs", total_rows,
            (long long)P * TK);
  for (int s = 0; s < P; ++s) {
    std::vector<char> returned(TK, 0);
    for (int i = 0; i < TK; ++i) {
      const int d = L.ranks[s].send_rank[i], row = L.ranks[s].send_row[i];
      XS_ASSERT(d >= 0 && d < P && row >= 0 && row < L.ranks[d].rows(), "layout: rank {} slot {} is not sent", s, i);
      const int back = int(L.ranks[s].return_row.size()) == TK ? L.ranks[s].return_row[i] : -1;
      XS_ASSERT(back >= 0 && back < TK && !returned[back], "layout: rank {} slot {} has no return row of its own", s,
                i);
      returned[back] = 1;
    }
  }
}

namespace {
// The one place of the stage's order: the first stage row of each (local expert el,
// source s) range, at el * ranks + s, with the ranges laid out source by source and,
// within a source, expert by expert.
std::vector<int> drain_stage_starts(const RankLayout& R, int ranks) {
  const int epr = static_cast<int>(R.expert_offset.size()) - 1;
  std::vector<int> start(std::size_t(epr) * ranks, 0);
  int at = 0;
  for (int s = 0; s < ranks; ++s)
    for (int el = 0; el < epr; ++el) {
      const std::size_t i = std::size_t(el) * ranks + s;
      start[i] = at;
      at += R.recv_start[i + 1] - R.recv_start[i];
    }
  return start;
}
}  // namespace

std::vector<int> drain_stage_rows(const RankLayout& R, int ranks) {
  const std::vector<int> start = drain_stage_starts(R, ranks);
  std::vector<int> stage(R.rows(), -1);
  for (std::size_t i = 0; i < start.size(); ++i)
    for (int row = R.recv_start[i]; row < R.recv_start[i + 1]; ++row) stage[row] = start[i] + row - R.recv_start[i];
  return stage;
}

std::vector<DrainCopy> drain_copies(const RankLayout& R, int el, int ranks) {
  const std::vector<int> start = drain_stage_starts(R, ranks);
  std::vector<DrainCopy> out;
  for (int s = 0; s < ranks; ++s) {
    const std::size_t i = std::size_t(el) * ranks + s;
    const int rows = R.recv_start[i + 1] - R.recv_start[i];
    if (s != R.rank && rows > 0) out.push_back({start[i], s, R.return_start[i], rows});
  }
  return out;
}

std::vector<DrainCopy> merge_drain_copies(std::vector<DrainCopy> copies) {
  std::sort(copies.begin(), copies.end(), [](const DrainCopy& a, const DrainCopy& b) {
    return a.dst_rank != b.dst_rank ? a.dst_rank < b.dst_rank : a.dst_row < b.dst_row;
  });
  std::vector<DrainCopy> out;
  for (const DrainCopy& c : copies) {
    if (!out.empty()) {
      DrainCopy& last = out.back();
      const bool continues =
          last.dst_rank == c.dst_rank && last.src_row + last.rows == c.src_row && last.dst_row + last.rows == c.dst_row;
      if (continues) {
        last.rows += c.rows;
        continue;
      }
    }
    out.push_back(c);
  }
  return out;
}

std::vector<std::vector<bf16_bits>> dispatch_rows(const Layout& L, const std::vector<std::vector<bf16_bits>>& x,
                                                  int n) {
  const Problem& p = L.problem;
  std::vector<std::vector<bf16_bits>> recv(p.ranks);
  for (int d = 0; d < p.ranks; ++d) recv[d].assign(std::size_t(L.ranks[d].rows()) * n, 0);
  for (int s = 0; s < p.ranks; ++s) {
    XS_ASSERT(x[s].size() == std::size_t(p.tokens_per_rank) * n, "dispatch_rows: rank {} x has {} elements", s,
              x[s].size());
    for (int i = 0; i < p.tokens_per_rank * p.topk; ++i) {
      const int t = i / p.topk, d = L.ranks[s].send_rank[i], row = L.ranks[s].send_row[i];
      std::copy_n(&x[s][std::size_t(t) * n], n, &recv[d][std::size_t(row) * n]);
    }
  }
  return recv;
}

std::vector<std::vector<bf16_bits>> combine_rows(const Layout& L, const std::vector<std::vector<bf16_bits>>& recv,
                                                 int n) {
  const Problem& p = L.problem;
  std::vector<std::vector<bf16_bits>> comb(p.ranks);
  for (int s = 0; s < p.ranks; ++s) comb[s].assign(std::size_t(p.tokens_per_rank) * p.topk * n, 0);
  for (int d = 0; d < p.ranks; ++d) {
    const RankLayout& R = L.ranks[d];
    for (int row = 0; row < R.rows(); ++row)
      std::copy_n(&recv[d][std::size_t(row) * n], n,
                  &comb[R.recv_src_rank[row]][std::size_t(R.recv_src_slot[row]) * n]);
  }
  return comb;
}

std::vector<DrainGroup> group_drain(const std::vector<std::vector<DrainCopy>>& copies, int experts_per_copy) {
  XS_ASSERT(experts_per_copy >= 1, "combine drain: experts per copy must be >= 1 (got {})", experts_per_copy);
  std::vector<DrainGroup> groups;
  const int n = static_cast<int>(copies.size());
  for (int first = 0; first < n; first += experts_per_copy) {
    DrainGroup g{first, std::min(experts_per_copy, n - first), {}};
    for (int i = first; i < first + g.count; ++i) g.copies.insert(g.copies.end(), copies[i].begin(), copies[i].end());
    g.copies = merge_drain_copies(std::move(g.copies));
    groups.push_back(std::move(g));
  }
  return groups;
}

std::vector<std::vector<bf16_bits>> combine_rows_drained(const Layout& L,
                                                         const std::vector<std::vector<bf16_bits>>& recv, int n,
                                                         int experts_per_copy) {
  const Problem& p = L.problem;
  const int epr = p.experts_per_rank();
  const std::size_t tk = std::size_t(p.tokens_per_rank) * p.topk;
  std::vector<std::vector<bf16_bits>> stage(p.ranks), ret(p.ranks, std::vector<bf16_bits>(tk * n, 0));
  for (int d = 0; d < p.ranks; ++d) {
    const RankLayout& R = L.ranks[d];
    const std::vector<int> at = drain_stage_rows(R, p.ranks);
    stage[d].assign(recv[d].size(), 0);
    for (int row = 0; row < R.rows(); ++row)
      std::copy_n(&recv[d][std::size_t(row) * n], n, &stage[d][std::size_t(at[row]) * n]);
    std::vector<std::vector<DrainCopy>> by_expert;
    for (int el = 0; el < epr; ++el) by_expert.push_back(drain_copies(R, el, p.ranks));
    for (const DrainGroup& g : group_drain(by_expert, experts_per_copy))
      for (const DrainCopy& c : g.copies)
        std::copy_n(&stage[d][std::size_t(c.src_row) * n], std::size_t(c.rows) * n,
                    &ret[c.dst_rank][std::size_t(c.dst_row) * n]);
  }
  std::vector<std::vector<bf16_bits>> comb(p.ranks, std::vector<bf16_bits>(tk * n, 0));
  for (int s = 0; s < p.ranks; ++s) {
    const RankLayout& S = L.ranks[s];
    const std::vector<int> at = drain_stage_rows(S, p.ranks);
    for (std::size_t i = 0; i < tk; ++i) {
      const bf16_bits* from = S.send_rank[i] == s ? &stage[s][std::size_t(at[S.send_row[i]]) * n]
                                                  : &ret[s][std::size_t(S.return_row[i]) * n];
      std::copy_n(from, n, &comb[s][i * n]);
    }
  }
  return comb;
}

namespace route {

int chunks_per_rank(const Problem& p) { return (p.tokens_per_rank * p.topk + kChunk - 1) / kChunk; }

std::size_t chunk_count_size(const Problem& p) {
  return std::size_t(p.ranks) * chunks_per_rank(p) * p.experts;
}

std::size_t plan_table_size(const Problem& p) { return 9 * std::size_t(p.experts_per_rank()) + 2; }

int max_recv_rows(const Problem& p) {
  const long long rows = (long long)p.ranks * p.tokens_per_rank * std::min(p.topk, p.experts_per_rank());
  XS_ASSERT(rows <= (1LL << 30), "moe: {} can send {} rows to one rank (over 2^30)", describe(p), rows);
  return static_cast<int>(rows);
}

int max_m_blocks(const Problem& p) {
  return static_cast<int>(((long long)p.ranks * p.tokens_per_rank + kTileM - 1) / kTileM);
}

int item_capacity(const Problem& p, int max_rows) {
  const long long cap = ((long long)max_rows / kTileM + p.experts_per_rank()) *
                        (p.intermediate / kL1TileN + p.hidden / kL2TileN);
  XS_ASSERT(cap <= (1LL << 30), "moe: {} needs {} work items (over 2^30)", describe(p), cap);
  return static_cast<int>(cap);
}

}  // namespace route

}  // namespace xstage::moe
