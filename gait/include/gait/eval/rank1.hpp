// The CASIA-B rank-1 evaluation exactly as OpenGait computes it
// (opengait/evaluation/evaluator.py: single_view_gallery_evaluation + de_diag):
//
//   views  = the sorted distinct views of the evaluated sequences
//   for each probe set S in (NM: nm-05..06, BG: bg-01..02, CL: cl-01..02),
//     for each probe view v1 and gallery view v2:
//       probes  = sequences of S at v1;  gallery = nm-01..04 sequences at v2
//       acc[v1][v2] = round(100 * #{probes whose nearest gallery sequence has the same
//                                  subject} / #probes, 2)
//     per_view[v1] = sum over v2 != v1 of acc[v1][v2] / (V - 1)   (identical view excluded)
//     mean         = mean over v1 of per_view[v1]
//   distance: Euclidean per horizontal part, averaged over parts (part_distance), every
//   probe against every gallery sequence computed once, in parallel (a 64-part, 128-channel
//   two-branch model on the 124-subject set: 3,300 x 2,200 pairs of 8,192 values).
//
// Only test subjects (Protocol::is_test) enter. Two documented differences, neither of
// which changes a result on a complete dataset: distances are computed in double by
// direct differences (OpenGait expands |x|^2 + |y|^2 - 2xy in float32; only exact near-ties
// could break differently), and a (v1, v2) cell with no probe or no gallery sequence is
// NaN and left out of the means (OpenGait would divide by zero). A tie goes to the
// gallery sequence that comes first in key order. Torch-free.
#pragma once

#include <array>
#include <vector>

#include "gait/eval/embeddings.hpp"
#include "gait/protocol.hpp"

namespace gait::eval {

inline constexpr std::array<ProbeSet, 3> kProbeSets = {ProbeSet::NM, ProbeSet::BG, ProbeSet::CL};
const char* probe_set_name(ProbeSet s);  // "NM", "BG", "CL"

struct Rank1Result {
  std::vector<int> views;                                  // sorted, degrees
  std::array<std::vector<std::vector<double>>, 3> acc;     // [set][probe view][gallery view], %, NaN if empty
  std::array<std::vector<double>, 3> per_view;             // [set][probe view], %, identical view excluded
  std::array<double, 3> mean{};                            // [set], %
  std::array<std::size_t, 3> probes{};                     // probe sequences per set
  std::size_t gallery = 0;                                 // gallery sequences
};

// threads: the probe x gallery distances are computed on up to this many threads
// (0: every core); the result does not depend on it.
Rank1Result evaluate_rank1(const EmbeddingSet& set, const Protocol& protocol, int threads = 0);

// The same in two steps, for callers that combine distances of several embeddings of
// one set of sequences (gait tune-fusion): every probe x gallery distance of the test
// subjects, then the table from a matrix of that shape.
struct PairDistances {
  std::vector<std::size_t> probes, gallery;  // rows of the set, in set order
  std::vector<double> d;                     // [probes.size()][gallery.size()]
};
PairDistances pair_distances(const EmbeddingSet& set, const Protocol& protocol, int threads = 0);
// keys: the set's keys (the rows PairDistances names); d: any matrix of that shape.
Rank1Result rank1_from_distances(const std::vector<SequenceKey>& keys, const Protocol& protocol,
                                 const PairDistances& d);
// The parts [first, first + count) of every row (e.g. one head of a concatenated embedding).
EmbeddingSet slice_parts(const EmbeddingSet& set, int first, int count);

}  // namespace gait::eval
