// The natural COCO-17 skeleton graph and its k-hop operators (torch-free).
//
// Graph: GaitGraph's COCO tree, 16 bones rooted at the nose (nose-eyes-ears,
// nose-shoulders, shoulder-elbow-wrist, shoulder-hip, hip-knee-ankle). parent[j] is the
// next joint towards the nose (the nose is its own parent); bones are x_j - x_parent(j).
//
// k-hop operators (MS-G3D's disentangled multi-scale aggregation): with d(i, j) the
// hop distance on the tree,
//   A_0 = I
//   A_k = D_k^-1/2 (I + B_k) D_k^-1/2,  B_k[i][j] = 1 if d(i, j) == k,  D_k = rowsum(I + B_k)
// so scale k mixes each joint with exactly the joints k bones away. The merged operator
// is the stack [A_0 .. A_{K-1}] (K x 17 x 17), applied in one product (gcn_branch.hpp).
#pragma once

#include <array>
#include <utility>
#include <vector>

namespace gait::nets {

inline constexpr int kJoints = 17;

struct SkeletonGraph {
  std::vector<std::pair<int, int>> bones;  // (child, parent)
  std::array<int, kJoints> parent{};
};

const SkeletonGraph& coco_graph();

// Hop distances on the graph, [17][17]; -1 where unreachable.
std::vector<std::vector<int>> hop_distances(const SkeletonGraph& g);

// The K operators, row-major [K][17][17].
std::vector<float> k_hop_operators(const SkeletonGraph& g, int scales);

}  // namespace gait::nets
