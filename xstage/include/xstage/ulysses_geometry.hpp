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

#include "xstage/attention_tiles.hpp"  // XS_HD

namespace xstage::ulysses {

constexpr int kMaxRanks = 8;

struct FusedGeometry {
  int rows_per_rank = 0;  // S/P
  int head0 = 0;          // r·H/P
  int64_t stride_b = 0;   // output element strides: (S/P)·H·D, H·D
  int64_t stride_s = 0;
  int head_dim = 0;
};

struct FusedTarget {
  int owner;
  int64_t offset;  // element offset of the slice's first row in the owner's output
};

XS_HD FusedTarget fused_target(const FusedGeometry& g, int batch, int head, int row0) {
  const int owner = row0 / g.rows_per_rank;
  const int64_t local_row = row0 - static_cast<int64_t>(owner) * g.rows_per_rank;
  return {owner, batch * g.stride_b + local_row * g.stride_s + static_cast<int64_t>(g.head0 + head) * g.head_dim};
}

}  // namespace xstage::ulysses
