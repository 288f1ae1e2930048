#include "gait/synth/gait_cycles.hpp"

#include <algorithm>
#include <cmath>

namespace gait {

namespace {

constexpr double kPi = 3.14159265358979323846;

Vec3 horizontal(const Vec3& v) { return {v.x, 0, v.z}; }

CanonPose pose_at(const CanonMotion& m, double t) {
  const double c = std::clamp(t, 0.0, static_cast<double>(m.frames.size() - 1));
  const std::size_t i = std::min(static_cast<std::size_t>(c), m.frames.size() - 2);
  const double w = c - static_cast<double>(i);
  CanonPose p;
  for (int j = 0; j < kCanonJoints; ++j) p[j] = lerp(m.frames[i][j], m.frames[i + 1][j], w);
  return p;
}

}  // namespace

std::vector<GaitCycle> cut_gait_cycles(const CanonMotion& m, const CycleLimits& lim, CycleCutReport* report) {
  CycleCutReport rep;
  std::vector<GaitCycle> out;
  const int n = static_cast<int>(m.frames.size());
  const int w = std::max(1, static_cast<int>(std::lround(kHeadingWindowS * m.fps)));
  const int lo = static_cast<int>(m.first_frame) + w, hi = n - w;  // velocity defined on [lo, hi)
  if (hi - lo < 8) {
    if (report) *report = rep;
    return out;
  }
  std::vector<Vec3> heading(static_cast<std::size_t>(n));
  std::vector<double> d(static_cast<std::size_t>(n), 0.0);
  for (int t = lo; t < hi; ++t) {
    heading[t] = normalized(horizontal(m.frames[t + w][cPelvis] - m.frames[t - w][cPelvis]));
    d[t] = dot(horizontal(m.frames[t][cLAnkle] - m.frames[t][cRAnkle]), heading[t]);
  }
  // Light smoothing (+-40 ms) against marker jitter.
  const int s = std::max(1, static_cast<int>(std::lround(0.04 * m.fps)));
  std::vector<double> ds(d);
  for (int t = lo; t < hi; ++t) {
    double acc = 0;
    int cnt = 0;
    for (int k = std::max(lo, t - s); k <= std::min(hi - 1, t + s); ++k, ++cnt) acc += d[k];
    ds[t] = acc / cnt;
  }
  // Maxima that dominate +-0.3 s (a stride is >= 0.7 s, so two maxima cannot be closer).
  const int r = std::max(1, static_cast<int>(std::lround(0.3 * m.fps)));
  std::vector<double> strikes;
  for (int t = lo + 1; t < hi - 1; ++t) {
    bool best = ds[t] > 0;
    for (int k = std::max(lo, t - r); best && k <= std::min(hi - 1, t + r); ++k)
      if (ds[k] > ds[t] || (ds[k] == ds[t] && k < t)) best = false;
    if (!best) continue;
    const double a = ds[t - 1], b = ds[t], c = ds[t + 1], den = a - 2 * b + c;
    strikes.push_back(t + (std::abs(den) > 1e-12 ? std::clamp(0.5 * (a - c) / den, -0.5, 0.5) : 0.0));
  }
  for (std::size_t i = 0; i + 1 < strikes.size(); ++i) {
    ++rep.candidates;
    GaitCycle c;
    c.clip = m.clip;
    c.person = m.person;
    c.start = strikes[i];
    c.end = strikes[i + 1];
    c.duration_s = (c.end - c.start) / m.fps;
    if (c.duration_s < lim.min_duration_s || c.duration_s > lim.max_duration_s) {
      ++rep.too_short_or_long;
      continue;
    }
    const Vec3 p0 = horizontal(pose_at(m, c.start)[cPelvis]), p1 = horizontal(pose_at(m, c.end)[cPelvis]);
    double path = 0;
    Vec3 prev = p0;
    for (int t = static_cast<int>(std::ceil(c.start)); t <= static_cast<int>(c.end); ++t) {
      const Vec3 p = horizontal(m.frames[t][cPelvis]);
      path += norm(p - prev);
      prev = p;
    }
    path += norm(p1 - prev);
    c.stride = norm(p1 - p0) / m.leg_length;
    if (c.stride < lim.min_stride || c.stride > lim.max_stride || norm(p1 - p0) < lim.min_straightness * path) {
      ++rep.not_walking;
      continue;
    }
    const Vec3 h0 = heading[static_cast<int>(std::lround(c.start))], h1 = heading[static_cast<int>(std::lround(c.end))];
    if (std::acos(std::clamp(dot(h0, h1), -1.0, 1.0)) * 180 / kPi > lim.max_turn_deg) {
      ++rep.turning;
      continue;
    }
    out.push_back(c);
  }
  if (report) *report = rep;
  return out;
}

CycleSamples sample_cycle(const CanonMotion& m, const GaitCycle& c, int n) {
  const CanonPose a = pose_at(m, c.start), b = pose_at(m, c.end);
  const Vec3 fwd = normalized(horizontal(b[cPelvis] - a[cPelvis]));
  const Vec3 up{0, 1, 0};
  Vec3 right = cross(fwd, up);
  // A mirrored source (left-handed axes) puts the left hip on the right: flip the lateral axis.
  double side = 0;
  for (int k = 0; k < 8; ++k) {
    const CanonPose p = pose_at(m, c.start + (c.end - c.start) * k / 8.0);
    side += dot(p[cLHip] - p[cRHip], right);
  }
  if (side > 0) right = -right;
  CycleSamples s;
  s.duration_s = c.duration_s;
  for (int k = 0; k < n; ++k) {
    const double phase = static_cast<double>(k) / n;
    const CanonPose p = pose_at(m, c.start + (c.end - c.start) * phase);
    std::array<Vec3, kCanonBones> dirs;
    for (int bi = 0; bi < kCanonBones; ++bi) {
      const Vec3 d = normalized(p[kCanonBoneList[bi].child] - p[kCanonBoneList[bi].parent]);
      dirs[bi] = {dot(d, fwd), dot(d, up), dot(d, right)};
    }
    s.dirs.push_back(dirs);
    const Vec3 line = lerp(a[cPelvis], b[cPelvis], phase);
    s.sway.push_back(dot(p[cPelvis] - line, right) / m.leg_length);
  }
  return s;
}

}  // namespace gait
