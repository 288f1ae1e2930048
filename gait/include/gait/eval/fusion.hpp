// How much the skeleton weighs in a two-branch model's test embedding, chosen on a
// development set (torch-free).
//
// A two-branch checkpoint with branch heads has three embeddings per sequence: the
// fused head's [d, p], the silhouette head's [d, p] and the skeleton head's [d, 1]. A
// test embedding concatenates some of them along the part axis, the skeleton head
// repeated p times and multiplied by a scale a (evaluator.heads, evaluator.skeleton_scale).
// Since distances are per-part Euclidean averaged over parts, and scaling a vector by
// a >= 0 scales its distances by a, each choice's distance is a weighted mean of the
// three heads' own distances D_f, D_s, D_k:
//
//   fused            D_f
//   branches         (D_s + a D_k) / 2
//   fused+branches   (D_f + D_s + a D_k) / 3
//
// tune_fusion computes the three matrices once on a development set (identities that
// are neither trained on nor tested: e.g. `gait synth --seed 3`), scores every choice
// by its rank-1 (the mean of NM, BG and CL) and picks the best; the test set is then
// evaluated once with that choice (`gait eval --fusion FILE`). Ties go to the earlier
// candidate: fused first, then branches and fused+branches by increasing a.
#pragma once

#include <array>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gait/eval/embeddings.hpp"
#include "gait/eval/rank1.hpp"

namespace gait::eval {

struct FusionCandidate {
  std::string heads;                  // "fused", "branches" or "fused+branches" (evaluator.heads)
  double skeleton_scale = 1.0;        // a (evaluator.skeleton_scale)
  std::array<double, 3> weight{};     // of D_f, D_s, D_k in the distance
};

// fused, then for each scale (ascending, each >= 0) branches and fused+branches.
std::vector<FusionCandidate> fusion_candidates(std::span<const double> scales);

struct FusionRow {
  FusionCandidate candidate;
  Rank1Result rank1;
  double score = 0;                   // mean of the NM, BG and CL means
};
struct FusionTuning {
  std::vector<FusionRow> rows;        // in candidate order
  std::size_t best = 0;               // highest score, first on ties
  int parts = 0;                      // p of each of fused and silhouette heads
};

// all_heads: embeddings with heads fused+branches and skeleton scale 1, [d, 3p]: the
// fused head's p parts, the silhouette head's p, the skeleton head's one part p times.
FusionTuning tune_fusion(const EmbeddingSet& all_heads, const Protocol& protocol, std::span<const double> scales,
                         int threads = 0);

// {"rows": [{heads, skeleton_scale, NM, BG, CL, score}], "best": {heads, skeleton_scale, ...}}
nlohmann::json fusion_json(const FusionTuning& t);
// Table on stdout of `gait tune-fusion`; the best row marked.
std::string format_fusion_table(const FusionTuning& t);
// Score against the skeleton scale, one line per heads choice (fused: flat).
void write_fusion_chart(const std::filesystem::path& png, const FusionTuning& t, const std::string& title);

}  // namespace gait::eval
