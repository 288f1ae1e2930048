// The weight schema of the DiT denoiser, random weights and latents.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <numbers>

#include "common/check.hpp"
#include "xstage/dit/dit.hpp"

namespace xstage::dit {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float ParamSpec::stddev() const {
  switch (init) {
    case Init::linear: return float(1.0 / std::sqrt(double(shape.back())));  // fan-in = last dimension
    case Init::bias: return 0.02f;
    case Init::norm: return 0.1f;
  }
  return 0;
}

std::string block_param(int block, const char* name) { return fmt::format("blocks.{}.{}", block, name); }

std::vector<ParamSpec> param_specs(const Config& c, int blocks) {
  validate(c);
  XS_ASSERT(blocks >= 1 && blocks <= c.blocks, "dit: {} blocks is outside 1 .. {}", blocks, c.blocks);
  const int64_t C = c.hidden, D = c.head_dim;
  std::vector<ParamSpec> s;
  auto linear = [&](std::string name, int64_t out, int64_t in, bool bias = true) {
    s.push_back({name + ".weight", {out, in}, Init::linear});
    if (bias) s.push_back({name + ".bias", {out}, Init::bias});
  };
  linear("patch_embed", C, c.in_dim());
  linear("time_embed.fc1", C, c.time_freq_dim);
  linear("time_embed.fc2", C, C);
  for (int b = 0; b < blocks; ++b) {
    linear(block_param(b, "mod"), 6 * C, C);
    linear(block_param(b, "attn.qkv"), 3 * C, C);
    s.push_back({block_param(b, "attn.q_norm.weight"), {D}, Init::norm});
    s.push_back({block_param(b, "attn.k_norm.weight"), {D}, Init::norm});
    linear(block_param(b, "attn.proj"), C, C);
    if (c.ffn == Ffn::gelu_mlp) {
      linear(block_param(b, "mlp.fc1"), c.ffn_hidden, C);
      linear(block_param(b, "mlp.fc2"), C, c.ffn_hidden);
    } else {
      linear(block_param(b, "moe.router"), c.experts, C, false);
      // The MoE layer's layout: W1 [E, 2I, C] (gate rows, then up rows), W2 [E, C, I].
      s.push_back({block_param(b, "moe.w1"), {c.experts, 2 * c.moe_inter, C}, Init::linear});
      s.push_back({block_param(b, "moe.w2"), {c.experts, C, c.moe_inter}, Init::linear});
    }
  }
  linear("final.mod", 2 * C, C);
  linear("final.proj", c.in_dim(), C);
  return s;
}

uint64_t param_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ (seed * 0x9E3779B97F4A7C15ull);  // FNV-1a over the name, seeded
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}

namespace {
// splitmix64 + Box-Muller: the same numbers on every platform and compiler.
struct Normal {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (double(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }  // (0, 1)
  void fill(std::vector<float>& v, float mean, float stddev) {
    for (size_t i = 0; i < v.size(); i += 2) {
      const double r = std::sqrt(-2.0 * std::log(uniform())), a = 2.0 * std::numbers::pi * uniform();
      v[i] = mean + stddev * float(r * std::cos(a));
      if (i + 1 < v.size()) v[i + 1] = mean + stddev * float(r * std::sin(a));
    }
  }
};
}  // namespace

std::vector<float> random_values(const ParamSpec& s, uint64_t seed) {
  std::vector<float> v(size_t(s.numel()));
  Normal{param_seed(seed, s.name)}.fill(v, s.init == Init::norm ? 1.0f : 0.0f, s.stddev());
  return v;
}

Weights random_weights(const Config& c, int blocks, uint64_t seed) {
  Weights w;
  for (const auto& s : param_specs(c, blocks)) w[s.name] = Tensor{s.shape, random_values(s, seed)};
  return w;
}

void check_weights(const Config& c, int blocks, const Weights& w) {
  const auto specs = param_specs(c, blocks);
  for (const auto& s : specs) {
    const auto it = w.find(s.name);
    XS_ASSERT(it != w.end(), "dit: weights lack '{}' ({} with {} blocks)", s.name, c.name, blocks);
    XS_ASSERT(it->second.shape == s.shape, "dit: '{}' has shape [{}], expected [{}]", s.name,
              fmt::join(it->second.shape, ", "), fmt::join(s.shape, ", "));
    XS_ASSERT(int64_t(it->second.data.size()) == s.numel(), "dit: '{}' holds {} values for shape [{}]", s.name,
              it->second.data.size(), fmt::join(s.shape, ", "));
  }
  if (w.size() != specs.size()) {
    for (const auto& [name, t] : w) {
      bool known = false;
      for (const auto& s : specs) known = known || s.name == name;
      XS_ASSERT(known, "dit: unexpected tensor '{}' for {} with {} blocks", name, c.name, blocks);
    }
  }
}

std::vector<float> random_latent(const Config& c, int64_t tokens, uint64_t seed) {
  std::vector<float> v(size_t(tokens * c.in_dim()));
  Normal{param_seed(seed, "latent")}.fill(v, 0.0f, 1.0f);
  return v;
}

}  // namespace xstage::dit
