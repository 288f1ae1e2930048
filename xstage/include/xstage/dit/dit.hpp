// DiT denoiser over sequence-parallel ranks: the host-side contract.
//
// No CUDA include: presets, validation, the weight schema and random weights,
// the SP sharding plan, rotary tables, the fp32 CPU reference of the whole
// denoiser and the flow-matching Euler sampler build and test everywhere. The
// GPU model is in xstage/dit/dit_cuda.hpp; safetensors I/O in xstage/dit/safetensors.hpp;
// the block structure with shapes in docs/xstage-dit.md.
//
// The denoiser works on patch tokens: a latent of T frames x Hl x Wl pixels and
// c channels is patchified outside (a reshape) into N = T/pt * Hl/ps * Wl/ps
// tokens of in_dim = c * pt * ps * ps values, raster order (frame, row, column).
// One forward, all shapes per rank r of P (L = N/P tokens, C hidden, H x D heads):
//   latent   [L, in_dim]  --patch embed-->  x [L, C]   (fp32 residual stream)
//   t        scalar       --sinusoid(256) + MLP-->  c [C]
//   N blocks, each:
//     mod    = Linear(SiLU(c)) [6C] = shift1, scale1, gate1, shift2, scale2, gate2
//     h      = LN(x) * (1 + scale1) + shift1                 [L, C]
//     q,k,v  = h Wqkvᵀ + b                                   [L, H, D] each
//     q,k    = RMSNorm over D (weight [D]) then RoPE at the tokens' global positions
//     a      = Ulysses attention (non-causal, scale 1/sqrt(D)) [L, H, D]
//     x     += gate1 * (a Woᵀ + bo)
//     h      = LN(x) * (1 + scale2) + shift2
//     x     += gate2 * FFN(h)     FFN: GELU(tanh) MLP C -> F -> C, or an MoE layer
//                                 (router C -> E, top-k softmax, SwiGLU experts C -> I -> C)
//   final: mod_f = Linear(SiLU(c)) [2C]; v = (LN(x) * (1 + scale) + shift) Woutᵀ + b  [L, in_dim]
// LN has no affine parameters (eps 1e-6); RMSNorm eps 1e-6.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "xstage/moe/moe.hpp"

namespace xstage::dit {

enum class Ffn { gelu_mlp, moe };
const char* to_string(Ffn f);

struct Config {
  std::string name;
  int64_t hidden = 128;        // C = heads * head_dim
  int64_t heads = 2;           // H
  int64_t head_dim = 64;       // D
  int blocks = 2;              // transformer blocks
  Ffn ffn = Ffn::gelu_mlp;
  int64_t ffn_hidden = 512;    // F of the GELU MLP
  int experts = 0;             // MoE: E (global), top-k, expert intermediate I
  int topk = 0;
  int64_t moe_inter = 0;
  int moe_raster_group = moe::kMoeRasterGroup;  // fused MoE kernel's tile raster (1: m-major); not a weight
  bool moe_device_routing = true;  // MoE routing, layout and order on the GPU (false: on the host); not a weight
  // GPU path: the attention projection with its bias, and for the GELU MLP fc1 + bias + GELU
  // and fc2 + bias, as cuBLASLt GEMMs with the tail in the epilogue, bf16 out (false: cuBLAS
  // GEMMs with fp32 outputs, then bias_act and the fp32 gated residual); and at P = 1 with
  // D = 128 and L % 128 == 0, the QKV projection as the fused QKV kernel (false: cuBLAS
  // GEMM, then qk_norm_rope). Not a weight.
  bool gemm_epilogues = true;
  int64_t latent_channels = 4; // c
  int patch = 2;               // ps (spatial)
  int patch_t = 1;             // pt (temporal)
  bool video = false;          // 3D RoPE (t, h, w) instead of 2D (h, w)
  int frames = 1;              // latent frames after temporal patching: the token grid's T
  int64_t time_freq_dim = 256; // sinusoidal timestep features
  double rope_theta = 10000.0;

  int64_t in_dim() const { return latent_channels * patch * patch * patch_t; }
};

// Presets: "tiny" (2D RoPE), "tiny-video" (3D), "tiny-moe" (MoE FFN), "flux-like",
// "wan-like", "dit-moe". Throws naming the known presets.
Config preset(const std::string& name);
std::vector<std::string> preset_names();

// The model's own rules (throws one line naming the field): hidden = heads x
// head_dim, head_dim even and splittable by the RoPE axes, positive sizes, MoE
// fields set exactly when ffn == moe (topk <= experts).
void validate(const Config& c);

// A run: tokens, ranks, steps. Rules (one line each): tokens % frames == 0,
// heads % P == 0, experts % P == 0 (MoE), 1 <= blocks_used <= blocks, steps >= 1,
// pad_multiple >= 0. gpu adds what the kernels need: head_dim in {64, 128},
// P <= visible_gpus (when > 0); for an MoE FFN the fused MoE kernel's tiles:
// hidden % 256 == 0 (L2 tile width), moe_inter % 128 == 0 (L1 tile width), then
// moe::validate of moe_problem() at the padded token count.
struct Run {
  int64_t tokens = 256;
  int ranks = 1;
  int steps = 1;
  int blocks = 0;        // blocks used (0: all of the preset)
  int64_t pad_multiple = 0;  // also pad the tokens to a multiple of this (0: only what P needs)
};
void validate(const Config& c, const Run& r, bool gpu, int visible_gpus = 0);
int blocks_used(const Config& c, const Run& r);

// The tokens the ranks hold, N_pad >= N = tokens: N rounded up to a multiple of
// 128·P when P > 1 (Ulysses: every rank's N_pad/P rows split into whole 128-row
// attention tiles), of 128 when P = 1 and single_gpu_pads_for_qkv (the QKV projection
// is then the fused QKV kernel, which takes whole 128-row tiles), and of pad_multiple
// when it is set. Tokens [N, N_pad) are
// padding: a zero latent, RoPE position (0, 0, 0), masked as attention keys
// (ulysses::Problem::valid), so no real token depends on them; they go through
// every per-token layer (MoE included) and are dropped from the output.
int64_t padded_tokens(const Config& c, const Run& r);
// Config::gemm_epilogues with head_dim 128: at P = 1 the QKV projection runs as the
// fused QKV kernel, so the single GPU pads its tokens to whole 128-row tiles.
bool single_gpu_pads_for_qkv(const Config& c);

// ---- token grid, SP sharding, rotary embedding --------------------------------
struct Grid {
  int64_t t = 1, h = 1, w = 1;
  int64_t tokens() const { return t * h * w; }
};
// T = frames; H x W = tokens / frames split as squarely as possible (H <= W, H the
// largest divisor of tokens/frames not above its square root).
Grid token_grid(const Config& c, int64_t tokens);

struct Pos {
  int64_t t = 0, h = 0, w = 0;
  friend bool operator==(const Pos&, const Pos&) = default;
};
Pos position_of(const Grid& g, int64_t token);  // raster order: token = (t * H + h) * W + w

// Rank r holds tokens row0 .. row0 + rows - 1 of the padded sequence (contiguous,
// as the Ulysses layer expects, rows = padded / P) and its RoPE positions are
// those of these global tokens; a padding token (>= g.tokens()) gets (0, 0, 0).
// padded: N_pad (0: g.tokens(), no padding).
struct Shard {
  int rank = 0;
  int64_t row0 = 0, rows = 0;
  int64_t valid = 0;     // of its rows, the first `valid` are tokens, the rest padding
  std::vector<Pos> pos;  // [rows]
};
Shard shard_of(const Grid& g, int ranks, int rank, int64_t padded = 0);

// Rotary split of the D/2 pairs of a head (documented in docs/xstage-dit.md):
//   2D: h gets the first floor(D/4) pairs, w the rest;
//   3D: h and w get floor(D/6) pairs each, t the first D/2 - 2 floor(D/6).
// Order inside a head: t pairs, then h, then w; pair i of an axis with n pairs
// turns by angle pos_axis * theta^(-i/n). Pair j rotates elements (2j, 2j+1).
struct RopeSplit {
  int t = 0, h = 0, w = 0;  // pairs per axis
};
RopeSplit rope_split(const Config& c);
// cos and sin per (local token, pair): [rows, D/2] each, fp32.
struct RopeTable {
  int64_t rows = 0, pairs = 0;
  std::vector<float> cos, sin;
};
RopeTable rope_table(const Config& c, const std::vector<Pos>& pos);

// ---- weights ----------------------------------------------------------------
// Names and shapes of every parameter, in a fixed order (linear weights are
// [out, in], as torch stores them). Initialisation: linear weights N(0, 1/in),
// biases N(0, 0.02²), norm weights 1 + N(0, 0.1²); adaLN-Zero's gates are NOT
// zero here, so that every path of the block changes the output.
enum class Init { linear, bias, norm };
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  Init init = Init::linear;
  int64_t numel() const;
  float stddev() const;  // of the random initialisation
};
std::vector<ParamSpec> param_specs(const Config& c, int blocks);
std::string block_param(int block, const char* name);  // "blocks.3.attn.qkv.weight"

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
using Weights = std::map<std::string, Tensor>;

// Deterministic in (config, blocks, seed); each tensor has its own stream
// (seed mixed with the parameter's name), so a tensor does not depend on the others.
Weights random_weights(const Config& c, int blocks, uint64_t seed);
std::vector<float> random_values(const ParamSpec& s, uint64_t seed);  // one tensor of random_weights
uint64_t param_seed(uint64_t seed, const std::string& name);
// Every spec present with its shape, nothing else (one line naming the first problem).
void check_weights(const Config& c, int blocks, const Weights& w);

// Gaussian noise x_1 of the sampler: [tokens, in_dim], deterministic in seed.
std::vector<float> random_latent(const Config& c, int64_t tokens, uint64_t seed);

// ---- MoE FFN on GPUs: the host side (docs/xstage-dit.md, "The MoE FFN") ----------
// The block's MoE FFN runs through the fused expert-parallel MoE kernel
// (xstage/moe): rank r of P holds its L = N/P tokens and experts
// [r·E/P, (r+1)·E/P) of every block's moe.w1 / moe.w2 (the router is replicated).
// By default routing, layout and order are built on the GPU (FusedMoe::route_on_device).
// With host routing (Config::moe_device_routing = false) the router logits of all N
// tokens come to the host per block, where every rank builds the same routing and
// layout, then its own Interleaved tile order: the functions below.

// The fused kernel's problem for this model and run: {P, N/P, E, k, C, I}.
moe::Problem moe_problem(const Config& c, int64_t tokens, int ranks);
// "blocks.<b>.moe.w1" / "blocks.<b>.moe.w2": expert-major [E, ...], sharded over ranks.
bool is_expert_param(const std::string& name);
// Rank r's experts of an expert-major tensor [E, ...]: the values of experts
// r·E/P .. (r+1)·E/P - 1, i.e. [E/P, ...] (the layout FusedMoe::set_weights takes).
std::vector<float> expert_shard(const Tensor& t, int ranks, int rank);
// Every rank's routing (moe::route_from_logits on its slice of `logits` [N, E],
// rank-major) and the global layout built from them.
struct MoeRoute {
  std::vector<moe::Routing> routing;  // [P]
  moe::Layout layout;
};
MoeRoute moe_route(const moe::Problem& p, const std::vector<float>& logits);
// The same from each token's top-k already chosen (expert [N, k], weight [N, k],
// rank-major, as route_from_logits gives them).
MoeRoute moe_route_from_topk(const moe::Problem& p, const int* expert, const float* weight);
// Rank `rank`'s tile order: the Interleaved schedule that moe::choose_schedule
// picks with these Burst-Gap parameters for `sms` persistent blocks, over tiles in
// raster groups of `raster_group` m blocks (moe::build_tiles).
std::vector<moe::WorkItem> moe_order(const moe::Problem& p, const MoeRoute& route, int rank, int sms,
                                     const burstgap::ModelParams& params, int raster_group = moe::kMoeRasterGroup);

// ---- CPU reference (fp32) ---------------------------------------------------
// The whole denoiser on the host for one rank holding all tokens (P = 1):
// latent [tokens, in_dim] -> velocity [tokens, in_dim]. Only sensible for the
// tiny presets (naive loops).
std::vector<float> timestep_features(const Config& c, float t);  // [time_freq_dim]: cos half, then sin half of (1000 t)
std::vector<float> reference_forward(const Config& c, int blocks, const Weights& w, const Grid& g,
                                     const std::vector<float>& latent, float t);
// One block's MoE FFN on h [n, C] -> [n, C] (router, top-k softmax, SwiGLU experts), as
// reference_forward uses it.
std::vector<float> reference_moe_ffn(const Config& c, const Weights& w, int block, const std::vector<float>& h,
                                     int64_t n);

// ---- where a GPU step's time goes (xstage dit --breakdown) --------------------
// The phases of one forward in stream order; each ends at a CUDA event:
//   conditioning  timestep embedding, every block's modulation, patch embedding, the first LN
//   qkv           QKV GEMM + bias, RMSNorm, RoPE (fused path at D = 128: one kernel that also
//                 stores each head to its owner, and the wait for every source's heads)
//   pre_a2a       the pre-attention All-to-All (serial path: NCCL)
//   attention     attention (fused path: with the epilogue's stores to the owners and the
//                 wait for every source's rows, i.e. the post-attention All-to-All)
//   post_a2a      the post-attention All-to-All (serial path: NCCL)
//   proj          output projection, gated residual + the next LN
//   ffn           GELU MLP or MoE FFN (router, planner, fused kernel), gated residual + LN
//   final_layer   the final projection
enum class Phase : int { conditioning, qkv, pre_a2a, attention, post_a2a, proj, ffn, final_layer };
inline constexpr int kPhases = 8;
const char* to_string(Phase p);

// Per-phase sums over `steps` forwards.
struct PhaseTimes {
  double ms[kPhases] = {};
  int steps = 0;
  // One forward's marks: labels[i] is the phase that ends at mark i + 1, and interval_ms[i]
  // the time from mark i to mark i + 1 (sizes must match; negative intervals refused).
  void add_forward(const std::vector<Phase>& labels, const std::vector<double>& interval_ms);
  double per_step(Phase p) const { return steps > 0 ? ms[int(p)] / steps : 0.0; }
  double total_per_step() const;  // the sum of per_step over the phases
};

// The phases per step of each path as a chart (x: the phases, y: ms per step, one series
// per path, e.g. single / serial / fused), written to `png`. Throws (one line) when there is
// no path or a path has no steps.
void write_breakdown_png(const std::vector<std::pair<std::string, PhaseTimes>>& paths, const std::string& title,
                         const std::string& png);

// ---- a run's plan without a GPU (xstage dit --plan) ---------------------------
// What the GPU path would do on P ranks, from the host logic it uses itself: each
// rank's tokens, and with the Burst-Gap parameters `peer` the tile orders that the
// fused path's two exchanges would take and the stall the model predicts for them
// (ulysses::choose_qkv_schedule, ulysses::choose_schedule with the attention kernel's
// grid), and for an MoE FFN the Interleaved and Expert-Wave schedules for the mean count
// per expert (what MoeFfn plans with). `sms`: the GPU's SM count (H200: 132).
struct RankPlan {
  int rank = 0;
  int64_t row0 = 0, real = 0, padding = 0;  // its slice of the padded tokens: real ones, then padding
  int64_t head0 = 0, heads = 0;             // the heads whose attention it computes
  bool qkv_fused = false;                   // QKV projection + pre-attention exchange as one kernel (D = 128)
  int qkv_grid = 0;
  double qkv_stall_ns = 0;
  std::string qkv_order;                    // the advisor's choice, in words
  int attention_grid = 0;                   // P > 1: the fused attention kernel's persistent CTAs
  double attention_stall_ns = 0;
  std::string attention_order;
};
struct RunPlan {
  int64_t tokens = 0, padded = 0, per_rank = 0;
  int ranks = 1, blocks = 0, sms = 0;
  std::vector<RankPlan> rank;
  // MoE FFN (the same problem on every rank): the schedules and their predicted stalls
  // (0 at P = 1: every store is local).
  bool moe = false;
  std::string moe_interleaved, moe_expert_wave;
  double moe_interleaved_stall_ns = 0, moe_expert_wave_stall_ns = 0;
  // Per block, per rank: bytes it sends to the other ranks (the MoE ones expected under
  // uniform routing: a row's expert is on another rank with probability (P - 1) / P), and
  // the floating-point operations of its GEMMs and attention (attention over the real keys).
  double pre_a2a_bytes = 0, post_a2a_bytes = 0, moe_dispatch_bytes = 0, moe_combine_bytes = 0;
  double gemm_flops = 0, attention_flops = 0;
};
RunPlan plan_run(const Config& c, const Run& r, const burstgap::ModelParams& peer, int sms = 132);

// ---- flow-matching Euler sampler --------------------------------------------
// t runs from 1 (noise) to 0 (data) over `steps` equal steps: t_k = 1 - k/steps,
// dt = -1/steps, x_{k+1} = x_k + dt * v(x_k, t_k).
std::vector<float> euler_times(int steps);  // t_0 .. t_steps
// Runs steps calls of step(k, t_k, dt) with a progress bar (label; hidden when !progress).
void euler_loop(int steps, const std::string& label, bool progress,
                const std::function<void(int k, float t, float dt)>& step);
// x += dt * v (host).
void euler_update(std::vector<float>& x, const std::vector<float>& v, float dt);
// The whole sampler on the CPU reference.
std::vector<float> reference_sample(const Config& c, int blocks, const Weights& w, const Grid& g,
                                    std::vector<float> x, int steps, bool progress = false);

}  // namespace xstage::dit
