// Small 3D/2D vector and rotation helpers for the motion readers and the renderer.
// Coordinates are right-handed, Y up (the convention of both BVH and ASF/AMC).
#pragma once

#include <cmath>

namespace gait {

struct Vec3 {
  double x = 0, y = 0, z = 0;
  Vec3 operator+(const Vec3& o) const { return {x + o.x, y + o.y, z + o.z}; }
  Vec3 operator-(const Vec3& o) const { return {x - o.x, y - o.y, z - o.z}; }
  Vec3 operator*(double s) const { return {x * s, y * s, z * s}; }
  Vec3 operator-() const { return {-x, -y, -z}; }
  Vec3& operator+=(const Vec3& o) { x += o.x; y += o.y; z += o.z; return *this; }
};
inline double dot(const Vec3& a, const Vec3& b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
inline Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}
inline double norm(const Vec3& a) { return std::sqrt(dot(a, a)); }
inline Vec3 normalized(const Vec3& a) {
  const double n = norm(a);
  return n > 1e-12 ? a * (1.0 / n) : Vec3{0, 1, 0};
}
inline Vec3 lerp(const Vec3& a, const Vec3& b, double t) { return a + (b - a) * t; }

struct Vec2 {
  double x = 0, y = 0;
};

// Row-major 3x3 matrix acting on column vectors.
struct Mat3 {
  double m[3][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
  Vec3 operator*(const Vec3& v) const {
    return {m[0][0] * v.x + m[0][1] * v.y + m[0][2] * v.z, m[1][0] * v.x + m[1][1] * v.y + m[1][2] * v.z,
            m[2][0] * v.x + m[2][1] * v.y + m[2][2] * v.z};
  }
  Mat3 operator*(const Mat3& o) const {
    Mat3 r;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) r.m[i][j] = m[i][0] * o.m[0][j] + m[i][1] * o.m[1][j] + m[i][2] * o.m[2][j];
    return r;
  }
  Mat3 transposed() const {
    Mat3 r;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) r.m[i][j] = m[j][i];
    return r;
  }
};

// Rotation by `deg` degrees about axis 0 (X), 1 (Y) or 2 (Z).
inline Mat3 axis_rotation(int axis, double deg) {
  const double r = deg * 3.14159265358979323846 / 180.0, c = std::cos(r), s = std::sin(r);
  Mat3 m;
  const int a = (axis + 1) % 3, b = (axis + 2) % 3;
  m.m[a][a] = c;
  m.m[a][b] = -s;
  m.m[b][a] = s;
  m.m[b][b] = c;
  return m;
}

// Rotation about a unit axis (Rodrigues).
inline Mat3 rotation_about(const Vec3& u, double rad) {
  const double c = std::cos(rad), s = std::sin(rad), t = 1 - c;
  Mat3 m;
  m.m[0][0] = c + u.x * u.x * t;       m.m[0][1] = u.x * u.y * t - u.z * s; m.m[0][2] = u.x * u.z * t + u.y * s;
  m.m[1][0] = u.y * u.x * t + u.z * s; m.m[1][1] = c + u.y * u.y * t;       m.m[1][2] = u.y * u.z * t - u.x * s;
  m.m[2][0] = u.z * u.x * t - u.y * s; m.m[2][1] = u.z * u.y * t + u.x * s; m.m[2][2] = c + u.z * u.z * t;
  return m;
}

}  // namespace gait
