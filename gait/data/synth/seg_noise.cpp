#include "gait/synth/seg_noise.hpp"

#include <algorithm>
#include <cmath>

namespace gait {

namespace {
constexpr double kPi = 3.14159265358979323846;
}

SegNoiseParams sample_seg_noise(Rng& rng, double camo_prob) {
  SegNoiseParams p;
  p.edge_amp = rng.uniform(0.4, 1.3);
  p.edge_scale = rng.uniform(2.0, 4.5);
  p.hole_prob = rng.uniform(0.02, 0.25);
  p.speck_prob = rng.uniform(0.0, 0.12);
  p.failure_prob = 0.004;
  p.shadow = rng.chance(0.5);
  p.light_azimuth = rng.uniform(0, 2 * kPi);
  p.shadow_length = rng.uniform(0.12, 0.45);
  if (rng.chance(camo_prob)) p.camo = rng.chance(0.6) ? Garment::Top : Garment::Trousers;
  p.camo_level = rng.uniform(0.25, 0.6);
  p.camo_scale = rng.uniform(10, 24);
  return p;
}

void add_shadow(Scene& scene, const CanonPose& pose, const SegNoiseParams& p) {
  if (!p.shadow) return;
  const Vec3 l{std::cos(p.light_azimuth), 0, std::sin(p.light_azimuth)}, perp{-l.z, 0, l.x};
  // The part of the shadow that a segmenter keeps: the dark patch right at the feet.
  Vec3 c = (pose[cLAnkle] + pose[cRAnkle] + pose[cLToe] + pose[cRToe]) * 0.25;
  c.y = 0.002;
  const double spread = 0.5 * norm(Vec3{pose[cLAnkle].x - pose[cRAnkle].x, 0, pose[cLAnkle].z - pose[cRAnkle].z});
  const double half = spread * 0.8 + 0.08;
  Box b;
  b.part = Part::Shadow;
  b.corners = {c - perp * half, c + perp * half, c + l * p.shadow_length + perp * (half * 0.7),
               c + l * p.shadow_length - perp * (half * 0.7)};
  scene.boxes.push_back(std::move(b));
}

SegNoise::SegNoise(const SegNoiseParams& params, std::uint64_t seed) : p_(params), rng_(seed) {
  for (auto& v : lattice_) v = static_cast<float>(rng_.uniform(-1, 1));
  camo_ox_ = rng_.uniform(0, kLattice);
  camo_oy_ = rng_.uniform(0, kLattice);
}

bool SegNoise::camouflaged(const SdfRaster& r, int x, int y) const {
  const Part part = r.part(x, y);
  const bool garment = p_.camo == Garment::Top ? (part == Part::Torso || part == Part::Arm || part == Part::Coat)
                                               : part == Part::Leg;
  return garment && value_noise(x, y, p_.camo_scale, camo_ox_, camo_oy_) > p_.camo_level;
}

double SegNoise::value_noise(double x, double y, double scale, double ox, double oy) const {
  const double fx = x / scale + ox, fy = y / scale + oy;
  const int ix = static_cast<int>(std::floor(fx)), iy = static_cast<int>(std::floor(fy));
  const double tx = fx - ix, ty = fy - iy;
  auto at = [&](int a, int b) {
    return lattice_[static_cast<std::size_t>(((b % kLattice) + kLattice) % kLattice) * kLattice +
                    static_cast<std::size_t>(((a % kLattice) + kLattice) % kLattice)];
  };
  const double sx = tx * tx * (3 - 2 * tx), sy = ty * ty * (3 - 2 * ty);  // smoothstep
  const double top = at(ix, iy) + (at(ix + 1, iy) - at(ix, iy)) * sx;
  const double bot = at(ix, iy + 1) + (at(ix + 1, iy + 1) - at(ix, iy + 1)) * sx;
  return top + (bot - top) * sy;
}

void SegNoise::render(const SdfRaster& r, common::Image& out) {
  if (out.width != r.width() || out.height != r.height() || out.channels != 1)
    out = common::Image::blank(r.width(), r.height(), 1);
  else
    std::fill(out.pixels.begin(), out.pixels.end(), 0);
  const PixelBox& b = r.box();
  if (b.empty()) return;
  ox_ = rng_.uniform(0, kLattice);
  oy_ = rng_.uniform(0, kLattice);
  if (rng_.chance(p_.failure_prob)) {  // segmentation failure: a few stray pixels only
    for (int i = 0; i < 20; ++i) out.at(b.y0 + rng_.below(b.y1 - b.y0 + 1), b.x0 + rng_.below(b.x1 - b.x0 + 1)) = 255;
    return;
  }
  const bool camo = p_.camo != Garment::None;
  for (int y = b.y0; y <= b.y1; ++y)
    for (int x = b.x0; x <= b.x1; ++x) {
      const float d = r.sdf(x, y);
      if (d > p_.edge_amp) continue;  // beyond the noise band: background
      if (camo && d < 0 && camouflaged(r, x, y)) continue;
      if (d < -p_.edge_amp || d < p_.edge_amp * value_noise(x, y, p_.edge_scale, ox_, oy_)) out.at(y, x) = 255;
    }
  auto ellipse = [&](double cx, double cy, double rx, double ry, std::uint8_t v) {
    for (int y = std::max(0, static_cast<int>(cy - ry)); y <= std::min(out.height - 1, static_cast<int>(cy + ry)); ++y)
      for (int x = std::max(0, static_cast<int>(cx - rx)); x <= std::min(out.width - 1, static_cast<int>(cx + rx)); ++x) {
        const double u = (x + 0.5 - cx) / rx, w = (y + 0.5 - cy) / ry;
        if (u * u + w * w <= 1) out.at(y, x) = v;
      }
  };
  if (rng_.chance(p_.hole_prob)) {
    for (int tries = 0; tries < 30; ++tries) {  // a point well inside the body
      const int x = b.x0 + rng_.below(b.x1 - b.x0 + 1), y = b.y0 + rng_.below(b.y1 - b.y0 + 1);
      if (r.sdf(x, y) < -2.5f) {
        ellipse(x + 0.5, y + 0.5, rng_.uniform(1.0, 3.0), rng_.uniform(1.0, 3.5), 0);
        break;
      }
    }
  }
  if (rng_.chance(p_.speck_prob)) {
    const double cx = rng_.uniform(r.body_x0 - 10, r.body_x1 + 10), cy = r.body_y1 + rng_.uniform(-12, 4);
    ellipse(cx, cy, rng_.uniform(0.8, 2.5), rng_.uniform(0.8, 2.0), 255);
  }
}

}  // namespace gait
