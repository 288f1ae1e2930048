// DiT presets, validation, the token grid, SP shards and rotary tables.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/check.hpp"
#include "common/plot.hpp"
#include "xstage/dit/dit.hpp"
#include "xstage/ulysses/ulysses.hpp"      // kTileRows
#include "xstage/ulysses/qkv.hpp"  // kQkvTileRows, kQkvHeadDim

namespace xstage::dit {

const char* to_string(Ffn f) { return f == Ffn::gelu_mlp ? "gelu_mlp" : "moe"; }

namespace {
Config dense(std::string name, int64_t heads, int64_t head_dim, int blocks, int64_t ffn_hidden) {
  Config c;
  c.name = std::move(name);
  c.heads = heads;
  c.head_dim = head_dim;
  c.hidden = heads * head_dim;
  c.blocks = blocks;
  c.ffn_hidden = ffn_hidden;
  return c;
}
}  // namespace

std::vector<std::string> preset_names() {
  return {"tiny", "tiny-video", "tiny-moe", "flux-like", "wan-like", "dit-moe"};
}

Config preset(const std::string& name) {
  if (name == "tiny") return dense("tiny", 2, 64, 2, 512);  // C 128, MLP ratio 4, 4 channels x 2x2 patches
  if (name == "tiny-video") {
    Config c = dense("tiny-video", 2, 64, 2, 512);
    c.video = true;
    c.frames = 2;
    return c;
  }
  if (name == "tiny-moe") {  // C 256 = 4 x 64: the fused MoE kernel's L2 tiles are 256 columns of hidden wide
    Config c = dense("tiny-moe", 4, 64, 2, 0);
    c.ffn = Ffn::moe;
    c.experts = 4;
    c.topk = 2;
    c.moe_inter = 128;
    return c;
  }
  if (name == "flux-like") {  // Flux's transformer width: 3072 = 24 x 128, 57 blocks, MLP ratio 4 (GELU)
    Config c = dense("flux-like", 24, 128, 57, 4 * 3072);
    c.latent_channels = 16;  // 16-channel latents in 2x2 patches: 64 values per token
    return c;
  }
  if (name == "wan-like") {  // Wan 2.1 14B: 5120 = 40 x 128, FFN 13824, 40 blocks; 21 latent frames at 720p
    Config c = dense("wan-like", 40, 128, 40, 13824);
    c.latent_channels = 16;
    c.video = true;
    c.frames = 21;
    return c;
  }
  if (name == "dit-moe") {  // illustrative (no public model): flux-like width, 28 blocks, 16 experts top-2
    Config c = dense("dit-moe", 24, 128, 28, 0);
    c.latent_channels = 16;
    c.ffn = Ffn::moe;
    c.experts = 16;
    c.topk = 2;
    c.moe_inter = 3072;
    return c;
  }
  XS_FAIL("dit: unknown preset '{}' (known: {})", name, fmt::join(preset_names(), ", "));
}

void validate(const Config& c) {
  XS_ASSERT(c.heads >= 1 && c.head_dim >= 2 && c.blocks >= 1, "dit: {}: heads {}, head_dim {}, blocks {} must be positive",
            c.name, c.heads, c.head_dim, c.blocks);
  XS_ASSERT(c.hidden == c.heads * c.head_dim, "dit: {}: hidden {} != heads {} x head_dim {}", c.name, c.hidden, c.heads,
            c.head_dim);
  XS_ASSERT(c.head_dim % 2 == 0, "dit: {}: head_dim {} must be even (RoPE rotates pairs)", c.name, c.head_dim);
  XS_ASSERT(!c.video || c.head_dim >= 6, "dit: {}: 3D RoPE needs head_dim >= 6 (got {})", c.name, c.head_dim);
  XS_ASSERT(c.latent_channels >= 1 && c.patch >= 1 && c.patch_t >= 1 && c.frames >= 1 && c.time_freq_dim >= 2 &&
                c.time_freq_dim % 2 == 0,
            "dit: {}: latent channels {}, patch {}x{}, frames {}, time features {} must be positive (time features even)",
            c.name, c.latent_channels, c.patch_t, c.patch, c.frames, c.time_freq_dim);
  XS_ASSERT(c.video || c.frames == 1, "dit: {}: an image model has frames = 1 (got {})", c.name, c.frames);
  if (c.ffn == Ffn::gelu_mlp) {
    XS_ASSERT(c.ffn_hidden >= 1, "dit: {}: ffn_hidden must be positive for the GELU MLP", c.name);
    XS_ASSERT(c.experts == 0 && c.topk == 0, "dit: {}: experts/topk are set but the FFN is a GELU MLP", c.name);
  } else {
    XS_ASSERT(c.experts >= 1 && c.moe_inter >= 1, "dit: {}: the MoE FFN needs experts ({}) and moe_inter ({}) >= 1",
              c.name, c.experts, c.moe_inter);
    XS_ASSERT(c.topk >= 1 && c.topk <= c.experts, "dit: {}: topk {} must be in 1 .. experts {}", c.name, c.topk,
              c.experts);
  }
}

int blocks_used(const Config& c, const Run& r) { return r.blocks == 0 ? c.blocks : r.blocks; }

bool single_gpu_pads_for_qkv(const Config& c) {
  return c.gemm_epilogues && c.head_dim == ulysses::kQkvHeadDim;
}

int64_t padded_tokens(const Config& c, const Run& r) {
  XS_ASSERT(r.tokens >= 1 && r.ranks >= 1 && r.pad_multiple >= 0, "dit: no padding for {} tokens over P = {} ranks",
            r.tokens, r.ranks);
  int64_t m = r.ranks > 1 ? int64_t{ulysses::kTileRows} * r.ranks : 1;  // every rank: whole attention tiles
  if (r.ranks == 1 && single_gpu_pads_for_qkv(c)) m = ulysses::kQkvTileRows;  // whole tiles of the fused QKV kernel
  if (r.pad_multiple > 0) m = std::lcm(m, r.pad_multiple);
  return (r.tokens + m - 1) / m * m;
}

void validate(const Config& c, const Run& r, bool gpu, int visible_gpus) {
  validate(c);
  XS_ASSERT(r.tokens >= 1, "dit: --tokens {} must be positive", r.tokens);
  XS_ASSERT(r.steps >= 1, "dit: --steps {} must be at least 1", r.steps);
  XS_ASSERT(r.blocks >= 0 && blocks_used(c, r) <= c.blocks, "dit: --blocks {} is outside 1 .. {} ({} has {} blocks)",
            r.blocks, c.blocks, c.name, c.blocks);
  XS_ASSERT(r.ranks >= 1 && r.ranks <= ulysses::kMaxRanks, "dit: --gpus {} is outside 1 .. {}", r.ranks, ulysses::kMaxRanks);
  XS_ASSERT(!gpu || visible_gpus <= 0 || r.ranks <= visible_gpus,
            "dit: --gpus {} asks for more ranks than the {} visible GPU(s)", r.ranks, visible_gpus);
  XS_ASSERT(r.tokens % c.frames == 0, "dit: --tokens {} is not a multiple of {}'s {} frames", r.tokens, c.name,
            c.frames);
  XS_ASSERT(r.pad_multiple >= 0, "dit: pad multiple {} must be >= 0", r.pad_multiple);
  XS_ASSERT(c.heads % r.ranks == 0, "dit: {}'s {} heads do not split over P = {} ranks (heads % P = {})", c.name,
            c.heads, r.ranks, c.heads % r.ranks);
  XS_ASSERT(c.ffn != Ffn::moe || c.experts % r.ranks == 0,
            "dit: {}'s {} experts do not split over P = {} ranks (experts % P = {})", c.name, c.experts, r.ranks,
            c.experts % r.ranks);
  if (!gpu) return;
  XS_ASSERT(c.head_dim == 64 || c.head_dim == 128, "dit: {}: head_dim {} is not supported by the attention kernel (64, 128)",
            c.name, c.head_dim);
  if (c.ffn == Ffn::moe) {
    XS_ASSERT(c.hidden % moe::kHiddenQuantum == 0,
              "dit: {}: hidden {} is not a multiple of {} (the fused MoE kernel's L2 tile width)", c.name, c.hidden,
              moe::kHiddenQuantum);
    XS_ASSERT(c.moe_inter % moe::kInterQuantum == 0,
              "dit: {}: moe_inter {} is not a multiple of {} (the fused MoE kernel's L1 tile width)", c.name,
              c.moe_inter, moe::kInterQuantum);
    moe::validate(moe_problem(c, padded_tokens(c, r), r.ranks));
  }
}

Grid token_grid(const Config& c, int64_t tokens) {
  XS_ASSERT(tokens >= 1 && tokens % c.frames == 0, "dit: {} tokens are not a multiple of {} frames", tokens, c.frames);
  Grid g;
  g.t = c.frames;
  const int64_t plane = tokens / c.frames;
  g.h = 1;
  for (int64_t d = 1; d * d <= plane; ++d)
    if (plane % d == 0) g.h = d;
  g.w = plane / g.h;
  return g;
}

Pos position_of(const Grid& g, int64_t token) {
  XS_ASSERT(token >= 0 && token < g.tokens(), "dit: token {} is outside the {}x{}x{} grid", token, g.t, g.h, g.w);
  return {token / (g.h * g.w), (token / g.w) % g.h, token % g.w};
}

Shard shard_of(const Grid& g, int ranks, int rank, int64_t padded) {
  const int64_t valid = g.tokens(), n = padded == 0 ? valid : padded;
  XS_ASSERT(ranks >= 1 && rank >= 0 && rank < ranks, "dit: rank {} is outside 0 .. {}", rank, ranks - 1);
  XS_ASSERT(n >= valid, "dit: {} padded tokens are fewer than the grid's {}", n, valid);
  XS_ASSERT(n % ranks == 0, "dit: {} tokens do not split over P = {} ranks", n, ranks);
  Shard s;
  s.rank = rank;
  s.rows = n / ranks;
  s.row0 = rank * s.rows;
  s.valid = std::clamp<int64_t>(valid - s.row0, 0, s.rows);
  s.pos.reserve(size_t(s.rows));
  for (int64_t i = 0; i < s.rows; ++i) s.pos.push_back(i < s.valid ? position_of(g, s.row0 + i) : Pos{});
  return s;
}

RopeSplit rope_split(const Config& c) {
  const int pairs = int(c.head_dim / 2);
  RopeSplit s;
  if (c.video) {
    s.h = s.w = int(c.head_dim / 6);
    s.t = pairs - 2 * s.h;
  } else {
    s.h = int(c.head_dim / 4);
    s.w = pairs - s.h;
  }
  return s;
}

RopeTable rope_table(const Config& c, const std::vector<Pos>& pos) {
  const RopeSplit sp = rope_split(c);
  RopeTable tb;
  tb.rows = int64_t(pos.size());
  tb.pairs = c.head_dim / 2;
  tb.cos.resize(size_t(tb.rows * tb.pairs));
  tb.sin.resize(tb.cos.size());
  for (int64_t r = 0; r < tb.rows; ++r) {
    int64_t j = 0;
    auto axis = [&](int n, int64_t p) {
      for (int i = 0; i < n; ++i, ++j) {
        const double angle = double(p) * std::pow(c.rope_theta, -double(i) / n);
        tb.cos[size_t(r * tb.pairs + j)] = float(std::cos(angle));
        tb.sin[size_t(r * tb.pairs + j)] = float(std::sin(angle));
      }
    };
    axis(sp.t, pos[size_t(r)].t);
    axis(sp.h, pos[size_t(r)].h);
    axis(sp.w, pos[size_t(r)].w);
  }
  return tb;
}

const char* to_string(Phase p) {
  switch (p) {
    case Phase::conditioning: return "conditioning";
    case Phase::qkv: return "qkv";
    case Phase::pre_a2a: return "pre_a2a";
    case Phase::attention: return "attention";
    case Phase::post_a2a: return "post_a2a";
    case Phase::proj: return "proj";
    case Phase::ffn: return "ffn";
    case Phase::final_layer: return "final_layer";
  }
  return "?";
}

void PhaseTimes::add_forward(const std::vector<Phase>& labels, const std::vector<double>& interval_ms) {
  XS_ASSERT(labels.size() == interval_ms.size(), "dit: {} phase labels for {} intervals", labels.size(),
            interval_ms.size());
  for (std::size_t i = 0; i < labels.size(); ++i) {
    XS_ASSERT(int(labels[i]) >= 0 && int(labels[i]) < kPhases, "dit: phase {} is not a phase", int(labels[i]));
    XS_ASSERT(interval_ms[i] >= 0, "dit: phase {} took {} ms (events out of order)", to_string(labels[i]),
              interval_ms[i]);
    ms[int(labels[i])] += interval_ms[i];
  }
  ++steps;
}

double PhaseTimes::total_per_step() const {
  double t = 0;
  for (int i = 0; i < kPhases; ++i) t += per_step(Phase(i));
  return t;
}

void write_breakdown_png(const std::vector<std::pair<std::string, PhaseTimes>>& paths, const std::string& title,
                         const std::string& png) {
  namespace plot = common::plot;
  XS_ASSERT(!paths.empty(), "dit: no path's phases to plot");
  static const char* const kShort[kPhases] = {"cond", "qkv", "pre a2a", "attn", "post a2a", "proj", "ffn", "final"};
  plot::Chart c;
  c.title = title;
  c.x = {.label = "phase"};
  c.x.min = -0.5;
  c.x.max = kPhases - 0.5;
  for (int i = 0; i < kPhases; ++i) c.x.ticks.push_back(i);
  c.x.tick_format = [](double v) {
    const int i = int(std::lround(v));
    return i >= 0 && i < kPhases ? std::string(kShort[i]) : std::string();
  };
  c.y = {.label = "ms per step", .include_zero = true};
  c.width = 1100;
  const plot::Marker marks[] = {plot::Marker::circle, plot::Marker::square, plot::Marker::diamond};
  for (std::size_t k = 0; k < paths.size(); ++k) {
    const auto& [path, t] = paths[k];
    XS_ASSERT(t.steps > 0, "dit: the {} path has no timed phases to plot", path);
    plot::Series s{.label = fmt::format("{} ({:.2f} ms)", path, t.total_per_step()),
                   .line = plot::LineStyle::none,
                   .marker = marks[k % 3],
                   .marker_radius = 6};
    for (int i = 0; i < kPhases; ++i) {
      s.x.push_back(i + 0.12 * (double(k) - 0.5 * double(paths.size() - 1)));  // side by side per phase
      s.y.push_back(t.per_step(Phase(i)));
    }
    c.series.push_back(std::move(s));
  }
  plot::write_chart(c, png);
}

}  // namespace xstage::dit
