// Where the fused epilogue of rank r puts a finished output slice: host and
// device share this arithmetic (the device policy calls fused_target, the CPU
// tests check it against the exchange plans).
//
// Rank r computes heads head0 .. head0 + H/P - 1 for every sequence row. The
// slice of query rows [row0, row0 + 64) of local head h belongs to the rank
// owning those rows, owner = row0 / (S/P), and goes into that rank's output
// [B, S/P, H, D] at row row0 - owner·S/P, head head0 + h. (S/P) % 128 == 0, so
// no 64-row slice straddles two owners.
#pragma once

#include <cstdint>

#include "xstage/attention/tiles.hpp"  // XS_HD

namespace xstage::ulysses {

constexpr int kMaxRanks = 8;

struct FusedGeometry {
  int rows_per_rank = 0;  // S/P
  int ranks = 0;          // P
  int head0 = 0;          // r·H/P
  int64_t stride_b = 0;   // output element strides: (S/P)·H·D, H·D
  int64_t stride_s = 0;
  int head_dim = 0;
  int chunk_rows = 0;     // by_agent / per_slice counts per chunk of an owner's rows (0: one per owner)
};

// How the fused epilogue signals that its stores have landed (sm90_ulysses_epilogue.cuh):
// per_cta: one system fence and one counter add per owner when a consumer warpgroup
// has stored its last slice; per_slice: a fence and an add after every slice;
// by_agent: the per_slice counts, added (after its own fence) by an agent lane of the
// producer warpgroup, so no consumer waits for its stores to drain.
// automatic: the layer picks per head dim (default_signal in xstage/ulysses/ulysses.hpp).
enum class FusedSignal { per_cta, per_slice, by_agent, automatic };
inline const char* to_string(FusedSignal s) {
  switch (s) {
    case FusedSignal::per_cta: return "per_cta";
    case FusedSignal::per_slice: return "per_slice";
    case FusedSignal::by_agent: return "by_agent";
    case FusedSignal::automatic: break;
  }
  return "automatic";
}

struct FusedTarget {
  int owner;
  int64_t offset;  // element offset of the slice's first row in the owner's output
};

XS_HD int slice_owner(const FusedGeometry& g, int row0) { return row0 / g.rows_per_rank; }

// Which of its owner's counters a slice's count goes to: the chunk of the owner's rows
// that holds it (a copy-engine drain waits chunk by chunk), or 0 with one counter per
// owner. counter[owner] is then the first of the owner's rows_per_rank / chunk_rows.
XS_HD int slice_chunk(const FusedGeometry& g, int row0) {
  return g.chunk_rows > 0 ? (row0 - slice_owner(g, row0) * g.rows_per_rank) / g.chunk_rows : 0;
}

XS_HD FusedTarget fused_target(const FusedGeometry& g, int batch, int head, int row0) {
  const int owner = slice_owner(g, row0);
  const int64_t local_row = row0 - static_cast<int64_t>(owner) * g.rows_per_rank;
  return {owner, batch * g.stride_b + local_row * g.stride_s + static_cast<int64_t>(g.head0 + head) * g.head_dim};
}

}  // namespace xstage::ulysses
