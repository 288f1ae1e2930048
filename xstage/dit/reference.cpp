// The fp32 CPU reference of the whole DiT denoiser (tiny presets) and the
// flow-matching Euler sampler around it.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/check.hpp"
#include "common/progress.hpp"
#include "xstage/attention/attention.hpp"
#include "xstage/dit/dit.hpp"
#include "xstage/moe/moe.hpp"

namespace xstage::dit {

namespace {
using Vec = std::vector<float>;

const Tensor& param(const Weights& w, const std::string& name) {
  const auto it = w.find(name);
  XS_ASSERT(it != w.end(), "dit: weights lack '{}'", name);
  return it->second;
}

// y [n, out] = x [n, in] Wᵀ (+ b); W [out, in] (at an offset, for experts).
Vec linear(const Vec& x, int64_t n, const float* W, int64_t out, int64_t in, const float* b) {
  Vec y(size_t(n * out));
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = &x[size_t(i * in)];
    for (int64_t o = 0; o < out; ++o) {
      const float* wo = W + o * in;
      float acc = 0;
      for (int64_t k = 0; k < in; ++k) acc += xi[k] * wo[k];
      y[size_t(i * out + o)] = acc + (b ? b[o] : 0.0f);
    }
  }
  return y;
}
Vec linear(const Weights& w, const std::string& name, const Vec& x, int64_t n) {
  const Tensor& W = param(w, name + ".weight");
  const auto bit = w.find(name + ".bias");
  return linear(x, n, W.data.data(), W.shape[0], W.shape[1], bit == w.end() ? nullptr : bit->second.data.data());
}

float silu(float v) { return v / (1.0f + std::exp(-v)); }
float gelu_tanh(float v) {
  const float k = float(std::sqrt(2.0 / std::numbers::pi));
  return 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
}

// h = LN(x) * (1 + scale) + shift, per row of [n, C].
Vec ln_modulate(const Vec& x, int64_t n, int64_t C, const float* shift, const float* scale) {
  Vec h(x.size());
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = &x[size_t(i * C)];
    double mean = 0, var = 0;
    for (int64_t j = 0; j < C; ++j) mean += xi[j];
    mean /= double(C);
    for (int64_t j = 0; j < C; ++j) var += (xi[j] - mean) * (xi[j] - mean);
    const double inv = 1.0 / std::sqrt(var / double(C) + 1e-6);
    for (int64_t j = 0; j < C; ++j)
      h[size_t(i * C + j)] = float((xi[j] - mean) * inv) * (1.0f + scale[j]) + shift[j];
  }
  return h;
}

// RMSNorm over D then RoPE, in place on one head vector.
void norm_rope(float* v, int64_t D, const float* weight, const float* cs, const float* sn) {
  double ss = 0;
  for (int64_t d = 0; d < D; ++d) ss += double(v[d]) * v[d];
  const float inv = float(1.0 / std::sqrt(ss / double(D) + 1e-6));
  for (int64_t d = 0; d < D; ++d) v[d] = v[d] * inv * weight[d];
  for (int64_t j = 0; j < D / 2; ++j) {
    const float a = v[2 * j], b = v[2 * j + 1];
    v[2 * j] = a * cs[j] - b * sn[j];
    v[2 * j + 1] = a * sn[j] + b * cs[j];
  }
}

}  // namespace

std::vector<float> reference_moe_ffn(const Config& c, const Weights& w, int b, const std::vector<float>& h,
                                     int64_t n) {
  const int64_t C = c.hidden, I = c.moe_inter;
  const Vec logits = linear(w, block_param(b, "moe.router"), h, n);
  const moe::Routing r = moe::route_from_logits(logits, int(n), c.experts, c.topk);
  const float* W1 = param(w, block_param(b, "moe.w1")).data.data();
  const float* W2 = param(w, block_param(b, "moe.w2")).data.data();
  Vec out(size_t(n * C), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const Vec row(h.begin() + i * C, h.begin() + (i + 1) * C);
    for (int k = 0; k < c.topk; ++k) {
      const int e = r.expert[size_t(i * c.topk + k)];
      Vec g = linear(row, 1, W1 + int64_t(e) * 2 * I * C, 2 * I, C, nullptr);
      Vec a(static_cast<size_t>(I));
      for (int64_t j = 0; j < I; ++j) a[size_t(j)] = silu(g[size_t(j)]) * g[size_t(I + j)];
      const Vec y = linear(a, 1, W2 + int64_t(e) * C * I, C, I, nullptr);
      for (int64_t j = 0; j < C; ++j) out[size_t(i * C + j)] += r.weight[size_t(i * c.topk + k)] * y[size_t(j)];
    }
  }
  return out;
}

std::vector<float> timestep_features(const Config& c, float t) {
  const int64_t half = c.time_freq_dim / 2;
  Vec f(size_t(c.time_freq_dim));
  for (int64_t i = 0; i < half; ++i) {
    const double freq = std::exp(-std::log(10000.0) * double(i) / double(half));
    const double a = 1000.0 * double(t) * freq;
    f[size_t(i)] = float(std::cos(a));
    f[size_t(half + i)] = float(std::sin(a));
  }
  return f;
}

std::vector<float> reference_forward(const Config& c, int blocks, const Weights& w, const Grid& g,
                                     const std::vector<float>& latent, float t) {
  check_weights(c, blocks, w);
  const int64_t n = g.tokens(), C = c.hidden, H = c.heads, D = c.head_dim;
  XS_ASSERT(int64_t(latent.size()) == n * c.in_dim(), "dit: latent has {} values, expected {} tokens x {}",
            latent.size(), n, c.in_dim());
  const RopeTable rope = rope_table(c, shard_of(g, 1, 0).pos);

  // Conditioning: c = fc2(SiLU(fc1(sinusoid(t)))), then SiLU(c) feeds every modulation.
  Vec cond = linear(w, "time_embed.fc1", timestep_features(c, t), 1);
  for (float& v : cond) v = silu(v);
  cond = linear(w, "time_embed.fc2", cond, 1);
  for (float& v : cond) v = silu(v);

  Vec x = linear(w, "patch_embed", latent, n);
  for (int b = 0; b < blocks; ++b) {
    const Vec mod = linear(w, block_param(b, "mod"), cond, 1);  // shift1 scale1 gate1 shift2 scale2 gate2
    const float* m = mod.data();
    // Attention half.
    Vec h = ln_modulate(x, n, C, m, m + C);
    Vec qkv = linear(w, block_param(b, "attn.qkv"), h, n);  // [n, 3C]: q, k, v, each head-major
    Vec q(size_t(n * C)), k(size_t(n * C)), v(size_t(n * C));
    const float* qn = param(w, block_param(b, "attn.q_norm.weight")).data.data();
    const float* kn = param(w, block_param(b, "attn.k_norm.weight")).data.data();
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(&qkv[size_t(i * 3 * C)], C, &q[size_t(i * C)]);
      std::copy_n(&qkv[size_t(i * 3 * C + C)], C, &k[size_t(i * C)]);
      std::copy_n(&qkv[size_t(i * 3 * C + 2 * C)], C, &v[size_t(i * C)]);
      const float* cs = &rope.cos[size_t(i * rope.pairs)];
      const float* sn = &rope.sin[size_t(i * rope.pairs)];
      for (int64_t hh = 0; hh < H; ++hh) {
        norm_rope(&q[size_t(i * C + hh * D)], D, qn, cs, sn);
        norm_rope(&k[size_t(i * C + hh * D)], D, kn, cs, sn);
      }
    }
    const auto att = attention::reference_fwd(q, k, v, 1, n, n, H, D, false, 1.0 / std::sqrt(double(D)));
    const Vec a(att.o.begin(), att.o.end());
    const Vec proj = linear(w, block_param(b, "attn.proj"), a, n);
    for (int64_t i = 0; i < n * C; ++i) x[size_t(i)] += m[2 * C + i % C] * proj[size_t(i)];
    // FFN half.
    h = ln_modulate(x, n, C, m + 3 * C, m + 4 * C);
    Vec f;
    if (c.ffn == Ffn::gelu_mlp) {
      f = linear(w, block_param(b, "mlp.fc1"), h, n);
      for (float& e : f) e = gelu_tanh(e);
      f = linear(w, block_param(b, "mlp.fc2"), f, n);
    } else {
      f = reference_moe_ffn(c, w, b, h, n);
    }
    for (int64_t i = 0; i < n * C; ++i) x[size_t(i)] += m[5 * C + i % C] * f[size_t(i)];
  }
  const Vec fmod = linear(w, "final.mod", cond, 1);  // shift, scale
  const Vec h = ln_modulate(x, n, C, fmod.data(), fmod.data() + C);
  return linear(w, "final.proj", h, n);
}

std::vector<float> euler_times(int steps) {
  XS_ASSERT(steps >= 1, "dit: {} sampler steps (need at least 1)", steps);
  std::vector<float> t(size_t(steps) + 1);
  for (int k = 0; k <= steps; ++k) t[size_t(k)] = 1.0f - float(k) / float(steps);
  return t;
}

void euler_loop(int steps, const std::string& label, bool progress,
                const std::function<void(int k, float t, float dt)>& step) {
  const std::vector<float> t = euler_times(steps);
  common::ProgressBar bar(label, size_t(steps), progress);
  for (int k = 0; k < steps; ++k) {
    step(k, t[size_t(k)], t[size_t(k) + 1] - t[size_t(k)]);
    bar.tick();
  }
}

void euler_update(std::vector<float>& x, const std::vector<float>& v, float dt) {
  XS_ASSERT(x.size() == v.size(), "dit: Euler update of {} values with a velocity of {}", x.size(), v.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] += dt * v[i];
}

std::vector<float> reference_sample(const Config& c, int blocks, const Weights& w, const Grid& g, std::vector<float> x,
                                    int steps, bool progress) {
  euler_loop(steps, "dit cpu", progress, [&](int, float t, float dt) {
    euler_update(x, reference_forward(c, blocks, w, g, x, t), dt);
  });
  return x;
}

}  // namespace xstage::dit
