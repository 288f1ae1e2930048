#include "gait/nets/graph.hpp"

#include <cmath>
#include <deque>

#include "gait/pose.hpp"

namespace gait::nets {

const SkeletonGraph& coco_graph() {
  static const SkeletonGraph g = [] {
    SkeletonGraph s;
    s.bones = {{kLeftEye, kNose},           {kRightEye, kNose},         {kLeftEar, kLeftEye},
               {kRightEar, kRightEye},      {kLeftShoulder, kNose},     {kRightShoulder, kNose},
               {kLeftElbow, kLeftShoulder}, {kRightElbow, kRightShoulder}, {kLeftWrist, kLeftElbow},
               {kRightWrist, kRightElbow},  {kLeftHip, kLeftShoulder},  {kRightHip, kRightShoulder},
               {kLeftKnee, kLeftHip},       {kRightKnee, kRightHip},    {kLeftAnkle, kLeftKnee},
               {kRightAnkle, kRightKnee}};
    s.parent[kNose] = kNose;
    for (auto [c, p] : s.bones) s.parent[c] = p;
    return s;
  }();
  return g;
}

std::vector<std::vector<int>> hop_distances(const SkeletonGraph& g) {
  std::vector<std::vector<int>> adj(kJoints), d(kJoints, std::vector<int>(kJoints, -1));
  for (auto [a, b] : g.bones) {
    adj[a].push_back(b);
    adj[b].push_back(a);
  }
  for (int s = 0; s < kJoints; ++s) {
    std::deque<int> q{s};
    d[s][s] = 0;
    while (!q.empty()) {
      const int u = q.front();
      q.pop_front();
      for (int v : adj[u])
        if (d[s][v] < 0) {
          d[s][v] = d[s][u] + 1;
          q.push_back(v);
        }
    }
  }
  return d;
}

std::vector<float> k_hop_operators(const SkeletonGraph& g, int scales) {
  const auto d = hop_distances(g);
  std::vector<float> out(static_cast<std::size_t>(scales) * kJoints * kJoints, 0.0f);
  for (int k = 0; k < scales; ++k) {
    float* a = out.data() + static_cast<std::size_t>(k) * kJoints * kJoints;
    double deg[kJoints];
    for (int i = 0; i < kJoints; ++i) {
      deg[i] = 0;
      for (int j = 0; j < kJoints; ++j) {
        const bool on = i == j || (k > 0 && d[i][j] == k);
        deg[i] += on ? 1 : 0;
      }
    }
    for (int i = 0; i < kJoints; ++i)
      for (int j = 0; j < kJoints; ++j)
        if (i == j || (k > 0 && d[i][j] == k)) a[i * kJoints + j] = static_cast<float>(1.0 / std::sqrt(deg[i] * deg[j]));
  }
  return out;
}

}  // namespace gait::nets
