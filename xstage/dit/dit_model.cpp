// One rank's DiT denoiser on the GPU: weights, activations, cuBLAS GEMMs, the
// small kernels of dit_kernels.cu, attention (flash_fwd, or the Ulysses layer)
// and the MoE FFN (dit_moe_ffn.hpp: the fused EP MoE kernel).
//
// Order of one forward on the rank's stream (shapes in xstage/dit/dit.hpp):
//   conditioning: features(t) -> fc1 -> SiLU -> fc2 -> SiLU -> per-block mod [6C] (one batched GEMV), final mod [2C]
//   x = patch_embed(latent)
//   per block: ln_modulate -> QKV GEMM -> qk_norm_rope -> attention -> proj GEMM -> gated residual
//              (each gated residual and the LN after it are one kernel, gated_residual_ln_modulate)
//              (fused path with D = 128: the QKV GEMM, norms, RoPE and the pre-attention
//               All-to-All are one kernel, ulysses::Layer::pre_attention_qkv; at P = 1 with
//               Config::gemm_epilogues the same kernel with every head local)
//              -> ln_modulate -> FFN -> gated residual, the FFN being
//                 GELU MLP: fc1 GEMM -> bias + GELU -> fc2 GEMM
//                 (Config::gemm_epilogues: fc1 + bias + GELU, and the projection and fc2 with
//                  their biases, are cuBLASLt GEMMs with the tail in the epilogue, bf16 out;
//                  the gated residuals then take the bf16 branch)
//                 MoE:      router GEMM -> fused MoE kernel with routing on the GPU (bf16 out);
//                           or, with host routing, logits to the host, routing there, then the kernel
//   v = final.proj(ln_modulate(x))
// Everything is enqueued; nothing synchronises the host (synchronize(), latent() and
// velocity() do), except the MoE FFN with host routing, which waits for each block's
// router logits (dit_moe_ffn.hpp).
// Expert weights (moe.w1, moe.w2) are sharded: this rank holds experts
// [r·E/P, (r+1)·E/P) of each block; every other parameter is replicated.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <map>

#include "common/check.hpp"
#include "xstage/dit/moe_ffn.hpp"
#include "xstage/attention/attention_cuda.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "xstage/dit/dit_cuda.hpp"
#include "xstage/ulysses/qkv_fused.hpp"
#include "xstage/ulysses/ulysses_cuda.hpp"

namespace xstage::dit {

const char* to_string(AttnPath p) {
  switch (p) {
    case AttnPath::single: return "single";
    case AttnPath::serial: return "serial";
    case AttnPath::fused: return "fused";
  }
  return "?";
}

namespace {
void check_cublas(cublasStatus_t st, const char* what) {
  XS_ASSERT(st == CUBLAS_STATUS_SUCCESS, "dit: cuBLAS {} failed: {}", what, cublasGetStatusString(st));
}

bool is_matrix(const ParamSpec& s) { return s.init == Init::linear; }

// Values of `s` this rank holds: all, or its E/P experts of an expert tensor.
int64_t local_numel(const ParamSpec& s, int ranks) { return is_expert_param(s.name) ? s.numel() / ranks : s.numel(); }

// Device copy of one parameter: matrices bf16, vectors fp32.
struct DevParam {
  DeviceBuffer<std::uint16_t> bf16;
  DeviceBuffer<float> f32;
};
}  // namespace

void gemm_bf16_f32(cublasHandle_t blas, const std::uint16_t* X, const std::uint16_t* W, float* Y, int64_t M,
                   int64_t N, int64_t K) {
  const float one = 1.f, zero = 0.f;
  check_cublas(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &one, W, CUDA_R_16BF, int(K), X,
                            CUDA_R_16BF, int(K), &zero, Y, CUDA_R_32F, int(N), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "GemmEx");
}

struct RankModel::Impl {
  Config c;
  int blocks;
  int ranks, rank;
  cudaStream_t stream;
  ulysses::Layer* layer;
  std::unique_ptr<MoeFfn> moe;  // c.ffn == moe
  Shard shard;    // rows = L, padding included
  int64_t keys;   // the real tokens N: attention's keys (the rest is padding)
  int64_t L, C, H, D, F, in;
  cublasHandle_t blas = nullptr;
  // Config::gemm_epilogues: a block's GEMM with its bias (fc1: bias + GELU) in a cuBLASLt
  // epilogue, bf16 out; the blocks' biases in bf16 (a bf16 output's epilogue takes a bf16
  // bias). Null gemm: the cuBLAS GEMM (fp32 out) and the tail as a kernel of its own
  // (not asked for, or cuBLASLt offers no algorithm for the shape).
  struct LtGemm {
    const char* param;  // the block parameter: attn.proj, mlp.fc1, mlp.fc2
    std::unique_ptr<BiasGemm> gemm;
    DeviceBuffer<std::uint16_t> bias_bf16;  // [blocks, N]
    int64_t n = 0;
  };
  cublasLtHandle_t lt = nullptr;
  LtGemm proj_lt{"attn.proj"}, fc1_lt{"mlp.fc1"}, fc2_lt{"mlp.fc2"};
  DeviceBuffer<unsigned char> lt_workspace;
  DeviceBuffer<std::uint16_t> branch;  // [L, C] bf16: the projection's or fc2's output (with a cuBLASLt tail)
  // Config::gemm_epilogues at P = 1 with D = 128: the QKV projection as the fused QKV kernel
  // with this rank the owner of every head (no store leaves the GPU), so q, k, v [L, H, D]
  // come out of the GEMM's epilogue without the fp32 [L, 3C] round trip. Null: cuBLAS +
  // qk_norm_rope (also when the shape does not suit the kernel).
  struct LocalQkv {
    ulysses::QkvArgs args;          // shape, order, owner pointers; inputs bound per block
    DeviceBuffer<int> order;
    DeviceBuffer<uint32_t> flags{2};  // [0] completion count (nobody waits), [1] ready flag (its own)
    int grid = 0;
  };
  std::unique_ptr<LocalQkv> qkv1;
  // The blocks' adaLN modulation as one batched GEMV (cuBLAS GemmBatchedEx over the blocks'
  // separate weights): device arrays of the A (mod.weight), B (cond_bf) and C (mods rows)
  // pointers, and the blocks' mod biases side by side [blocks, 6C] for one bias kernel.
  DeviceBuffer<const void*> mod_ptrs;  // [3, blocks]
  DeviceBuffer<float> mod_bias;
  std::vector<ParamSpec> specs;
  std::map<std::string, DevParam> w;
  DeviceBuffer<float> lat, vel, x, qkv, proj, f1, cos, sin, c1, cond, mods, fmod;
  DeviceBuffer<std::uint16_t> lat_bf, h, q, k, v, o, g, tfeat, c1_bf, cond_bf;
  std::vector<std::uint16_t> tfeat_host;
  bool loaded = false;
  uint32_t qkv1_epoch = 0;  // launches of the local fused QKV kernel
  // Breakdown (set_breakdown): an event at the start of each forward and at the end of
  // each phase; marks[i] ends phase labels[i - 1].
  bool marking = false;
  std::vector<cudaEvent_t> marks;
  std::vector<Phase> labels;
  std::size_t used = 0;

  Impl(const Config& cfg, int nblocks, const Grid& grid, int P, int r, cudaStream_t s, ulysses::Layer* l,
       comm::Rank* comm, const burstgap::ModelParams* moe_params, int64_t padded)
      : c(cfg),
        blocks(nblocks),
        ranks(P),
        rank(r),
        stream(s),
        layer(l),
        shard(shard_of(grid, P, r, padded)),
        keys(grid.tokens()) {
    validate(c);
    XS_ASSERT((P > 1) == (layer != nullptr), "dit: P = {} needs {} Ulysses layer", P, P > 1 ? "a" : "no");
    XS_ASSERT(!layer || (layer->problem().seq == shard.rows * P && layer->problem().keys() == keys),
              "dit: the Ulysses layer is for {} rows with {} valid, the model holds {} with {} real tokens",
              layer ? layer->problem().seq : 0, layer ? layer->problem().keys() : 0, shard.rows * P, keys);
    if (c.ffn == Ffn::moe) {
      XS_ASSERT(comm && moe_params && comm->nranks() == P && comm->rank() == r && comm->stream() == s,
                "dit: {}'s MoE FFN needs rank {}'s communicator (P = {}, the model's stream) and Burst-Gap parameters",
                c.name, r, P);
      moe = std::make_unique<MoeFfn>(*comm, c, shard.rows * P, *moe_params);  // collective; padding included
    }
    L = shard.rows, C = c.hidden, H = c.heads, D = c.head_dim, F = c.ffn_hidden, in = c.in_dim();
    check_cublas(cublasCreate(&blas), "create");
    check_cublas(cublasSetStream(blas, stream), "set stream");
    specs = param_specs(c, blocks);
    for (const auto& sp : specs) {
      DevParam p;
      if (is_matrix(sp)) p.bf16 = DeviceBuffer<std::uint16_t>(size_t(local_numel(sp, ranks)));
      else p.f32 = DeviceBuffer<float>(size_t(sp.numel()));
      w.emplace(sp.name, std::move(p));
    }
    auto f = [](int64_t n) { return DeviceBuffer<float>(size_t(n)); };
    auto b = [](int64_t n) { return DeviceBuffer<std::uint16_t>(size_t(n)); };
    lat = f(L * in), vel = f(L * in), x = f(L * C);
    cos = f(L * D / 2), sin = f(L * D / 2), c1 = f(C), cond = f(C), mods = f(int64_t(blocks) * 6 * C), fmod = f(2 * C);
    lat_bf = b(L * in), h = b(L * C), q = b(L * C), k = b(L * C), v = b(L * C), o = b(L * C), g = b(L * F);
    tfeat = b(c.time_freq_dim), c1_bf = b(C), cond_bf = b(C);
    const RopeTable rt = rope_table(c, shard.pos);
    copy_to_device(cos.get(), rt.cos.data(), rt.cos.size() * 4);
    copy_to_device(sin.get(), rt.sin.data(), rt.sin.size() * 4);
    if (layer) layer->set_inputs(q.get(), k.get(), v.get());
    plan_modulation();
    if (c.gemm_epilogues) plan_epilogues();
    // The fp32 GEMM outputs that only the separate tails read: [L, 3C] for qk_norm_rope (any
    // P > 1: its serial path), [L, F] for bias_act, [L, C] for the fp32 gated residual.
    if (!qkv1) qkv = f(L * 3 * C);
    if (c.ffn == Ffn::gelu_mlp && !fc1_lt.gemm) f1 = f(L * F);
    if (!proj_lt.gemm || (c.ffn == Ffn::gelu_mlp && !fc2_lt.gemm)) proj = f(L * C);
  }
  ~Impl() {
    for (cudaEvent_t e : marks) cudaEventDestroy(e);
    for (LtGemm* lg : {&proj_lt, &fc1_lt, &fc2_lt}) lg->gemm.reset();
    if (lt) cublasLtDestroy(lt);
    if (blas) cublasDestroy(blas);
  }

  // The cuBLASLt plans of Config::gemm_epilogues; a shape cuBLASLt has no algorithm for
  // keeps the GEMM and its separate tail (one line on stderr says so).
  void plan_epilogues() {
    plan_local_qkv();
    check_cublas(cublasLtCreate(&lt), "Lt create");
    plan_lt(proj_lt, LtTail::bias, C, C);
    if (c.ffn == Ffn::gelu_mlp) {
      plan_lt(fc1_lt, LtTail::bias_gelu, F, C);
      plan_lt(fc2_lt, LtTail::bias, C, F);
    }
    if (proj_lt.gemm || fc1_lt.gemm || fc2_lt.gemm) lt_workspace = DeviceBuffer<unsigned char>(kLtWorkspaceBytes);
    if (proj_lt.gemm || fc2_lt.gemm) branch = DeviceBuffer<std::uint16_t>(size_t(L * C));
  }
  void plan_lt(LtGemm& g, LtTail tail, int64_t N, int64_t K) {
    g.gemm = std::make_unique<BiasGemm>(lt, tail, L, N, K, CUDA_R_16BF, kLtWorkspaceBytes);
    if (!g.gemm->supported()) {
      std::fprintf(stderr, "dit: rank %d: cuBLASLt offers no algorithm for %s's %s; it runs as GEMM + its tail\n",
                   rank, g.param, g.gemm->describe().c_str());
      g.gemm.reset();
      return;
    }
    g.n = N;
    g.bias_bf16 = DeviceBuffer<std::uint16_t>(size_t(blocks) * N);
  }
  // Block b's GEMM of `g` (planned) on X into out [L, N] bf16.
  void run_lt(const LtGemm& g, int b, const std::uint16_t* X, std::uint16_t* out) {
    g.gemm->run(X, mat(block_param(b, g.param) + ".weight"), out, g.bias_bf16.get() + int64_t(b) * g.n,
                lt_workspace.get(), stream);
  }
  void plan_local_qkv() {
    if (layer || !single_gpu_pads_for_qkv(c)) return;  // the rule padded_tokens pads P = 1 by
    const ulysses::Problem one{1, 1, L, H, D};
    try {
      ulysses::validate_qkv(one);
    } catch (const common::Error&) {
      return;  // e.g. L not a multiple of 128 rows: cuBLAS + qk_norm_rope
    }
    int dev = 0, sms = 0;
    XS_CHECK_CUDA(cudaGetDevice(&dev));
    XS_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    auto lq = std::make_unique<LocalQkv>();
    lq->grid = std::min(sms, ulysses::qkv_tiles(one));
    const std::vector<int> order = ulysses::qkv_split_tail(
        one, ulysses::qkv_tile_order(one, 0, ulysses::QkvOrder::natural, ulysses::qkv_raster_group(one, lq->grid)),
        lq->grid);
    lq->order = upload(order);
    fill_device(lq->flags.get(), 0, 2 * sizeof(uint32_t));
    ulysses::QkvArgs& a = lq->args;
    a = ulysses::qkv_shape_args(one, 0);
    a.order = lq->order.get();
    a.n_entries = static_cast<int>(order.size());
    a.dst[0][0] = q.get();
    a.dst[1][0] = k.get();
    a.dst[2][0] = v.get();
    a.done[0] = lq->flags.get();
    a.ready_out[0] = lq->flags.get() + 1;
    a.ready_in = lq->flags.get() + 1;
    qkv1 = std::move(lq);
  }
  void plan_modulation() {
    if (blocks == 0) return;
    std::vector<const void*> p(std::size_t(3) * blocks);
    for (int b = 0; b < blocks; ++b) {
      p[b] = mat(block_param(b, "mod") + ".weight");
      p[blocks + b] = cond_bf.get();
      p[2 * blocks + b] = mods.get() + int64_t(b) * 6 * C;
    }
    mod_ptrs = upload(p);
    mod_bias = DeviceBuffer<float>(size_t(blocks) * 6 * C);
  }
  // mods [blocks, 6C] = cond · mod.weightᵀ of every block, + mod.bias: one batched GEMV and
  // one bias kernel instead of a GEMV and a bias kernel per block.
  void modulation() {
    if (blocks == 0) return;
    const float one = 1.f, zero = 0.f;
    const void* const* p = mod_ptrs.get();
    check_cublas(cublasGemmBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(6 * C), 1, int(C), &one, p, CUDA_R_16BF,
                                     int(C), p + blocks, CUDA_R_16BF, int(C), &zero,
                                     const_cast<void* const*>(p + 2 * blocks), CUDA_R_32F, int(6 * C), blocks,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "GemmBatchedEx (modulation)");
    kernels::bias_act(mods.get(), nullptr, mod_bias.get(), 1, int64_t(blocks) * 6 * C, kernels::Act::none, stream);
  }
  // After the weights change: the bf16 copies of the cuBLASLt tails' biases, and the blocks'
  // modulation biases side by side.
  void weights_changed() {
    for (int b = 0; b < blocks; ++b)
      XS_CHECK_CUDA(cudaMemcpyAsync(mod_bias.get() + int64_t(b) * 6 * C, vec(block_param(b, "mod.bias")),
                                    size_t(6 * C) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    for (const LtGemm* lg : {&proj_lt, &fc1_lt, &fc2_lt}) {
      if (!lg->gemm) continue;
      for (int b = 0; b < blocks; ++b)
        kernels::to_bf16(lg->bias_bf16.get() + int64_t(b) * lg->n,
                         vec(block_param(b, lg->param) + ".bias"), lg->n, stream);
    }
  }
  std::string epilogues() const {
    if (!c.gemm_epilogues) return "separate";
    std::string missing;  // the GEMMs cuBLASLt had no algorithm for
    for (const LtGemm* lg : {&proj_lt, &fc1_lt, &fc2_lt})
      if (!lg->gemm && (lg == &proj_lt || c.ffn == Ffn::gelu_mlp))
        missing += std::string(missing.empty() ? "" : ", ") + lg->param;
    return missing.empty() ? "fused" : "fused except " + missing + " (no cuBLASLt algorithm)";
  }
  std::string qkv_form() const {
    if (layer) return "per path (serial: cuBLAS + qk_norm_rope; fused: the fused QKV kernel at D = 128)";
    return qkv1 ? "fused" : "cuBLAS + qk_norm_rope";
  }

  void record_mark() {
    if (used == marks.size()) {
      cudaEvent_t e;
      XS_CHECK_CUDA(cudaEventCreate(&e));
      marks.push_back(e);
    }
    XS_CHECK_CUDA(cudaEventRecord(marks[used++], stream));
  }
  // The phase that ends here (no-op unless marking).
  void mark(Phase p) {
    if (!marking) return;
    labels.push_back(p);
    record_mark();
  }
  // The last forward's phases into t (waits for its events).
  void add_marks(PhaseTimes& t) {
    if (used < 2) return;
    XS_CHECK_CUDA(cudaEventSynchronize(marks[used - 1]));
    std::vector<double> ms(used - 1);
    for (std::size_t i = 1; i < used; ++i) {
      float v = 0;
      XS_CHECK_CUDA(cudaEventElapsedTime(&v, marks[i - 1], marks[i]));
      ms[i - 1] = v;
    }
    t.add_forward(labels, ms);
  }

  const std::uint16_t* mat(const std::string& name) const { return w.at(name).bf16.get(); }
  const float* vec(const std::string& name) const { return w.at(name).f32.get(); }

  // Y [M, N] fp32 = X [M, K] bf16 · W [N, K]ᵀ (row-major; cuBLAS sees the transposes).
  void gemm(const std::uint16_t* X, const std::uint16_t* W, float* Y, int64_t M, int64_t N, int64_t K) {
    gemm_bf16_f32(blas, X, W, Y, M, N, K);
  }
  void linear(const std::uint16_t* X, const std::string& name, float* Y, int64_t M, int64_t N, int64_t K) {
    gemm(X, mat(name + ".weight"), Y, M, N, K);
  }

  // Block b's inputs of the fused QKV projection (h: the block's first LN).
  ulysses::QkvInputs qkv_inputs(int b) const {
    ulysses::QkvInputs in;
    in.h = h.get();
    in.w = mat(block_param(b, "attn.qkv.weight"));
    in.bias = vec(block_param(b, "attn.qkv.bias"));
    in.q_norm = vec(block_param(b, "attn.q_norm.weight"));
    in.k_norm = vec(block_param(b, "attn.k_norm.weight"));
    in.cos = cos.get();
    in.sin = sin.get();
    return in;
  }

  // This rank's tokens, all heads, after attention: [L, H, D] bf16. `gathered`:
  // the fused QKV projection has already delivered the heads (no pre-attention exchange).
  const std::uint16_t* attention(AttnPath path, bool gathered = false) {
    if (path == AttnPath::single) {
      using namespace attention;
      FwdArgs a;
      a.q = Tensor4::bshd(q.get(), 1, L, H, D);
      a.k = Tensor4::bshd(k.get(), 1, keys, H, D);  // padded tokens are not keys
      a.v = Tensor4::bshd(v.get(), 1, keys, H, D);
      a.o = Tensor4::bshd(o.get(), 1, L, H, D);
      flash_fwd(a, stream);
      mark(Phase::attention);
      return o.get();
    }
    if (!gathered) {
      layer->pre_attention();  // [L, H, D] -> [N, H/P, D]
      mark(Phase::pre_a2a);
    }
    if (path == AttnPath::serial) {
      layer->attention_only();
      mark(Phase::attention);
      layer->post_attention();  // NCCL back
      mark(Phase::post_a2a);
      return layer->serial_out();
    }
    layer->fused(ulysses::Completion::receiver_complete);  // attention storing to the owners
    mark(Phase::attention);
    return layer->fused_out();
  }

  void forward(float t, AttnPath path) {
    XS_ASSERT(loaded, "dit: rank {}: forward before load() or randomize()", rank);
    XS_ASSERT((path == AttnPath::single) == (layer == nullptr), "dit: the {} path needs {}", to_string(path),
              path == AttnPath::single ? "P = 1" : "P > 1 (a Ulysses layer)");
    using kernels::Act;
    used = 0;
    labels.clear();
    if (marking) record_mark();  // the forward's start
    // Conditioning (a few GEMVs).
    const auto feat = timestep_features(c, t);
    tfeat_host.resize(feat.size());
    for (size_t i = 0; i < feat.size(); ++i) tfeat_host[i] = attention::float_to_bf16_bits(feat[i]);
    XS_CHECK_CUDA(cudaMemcpyAsync(tfeat.get(), tfeat_host.data(), tfeat_host.size() * 2, cudaMemcpyHostToDevice,
                                  stream));
    linear(tfeat.get(), "time_embed.fc1", c1.get(), 1, C, c.time_freq_dim);
    kernels::bias_act(c1.get(), c1_bf.get(), vec("time_embed.fc1.bias"), 1, C, Act::silu, stream);
    linear(c1_bf.get(), "time_embed.fc2", cond.get(), 1, C, C);
    kernels::bias_act(cond.get(), cond_bf.get(), vec("time_embed.fc2.bias"), 1, C, Act::silu, stream);
    modulation();  // every block's shift, scale and gate: [blocks, 6C]
    linear(cond_bf.get(), "final.mod", fmod.get(), 1, 2 * C, C);
    kernels::bias_act(fmod.get(), nullptr, vec("final.mod.bias"), 1, 2 * C, Act::none, stream);

    // Patch embedding.
    kernels::to_bf16(lat_bf.get(), lat.get(), L * in, stream);
    linear(lat_bf.get(), "patch_embed", x.get(), L, C, in);
    kernels::bias_act(x.get(), nullptr, vec("patch_embed.bias"), L, C, Act::none, stream);

    // h = the first LN (block 0's, or the final layer's); every later LN runs in one kernel
    // with the gated residual before it.
    const float* first_mod = blocks > 0 ? mods.get() : fmod.get();
    kernels::ln_modulate(h.get(), x.get(), first_mod, first_mod + C, L, C, stream);
    mark(Phase::conditioning);
    for (int b = 0; b < blocks; ++b) {
      const float* m = mods.get() + int64_t(b) * 6 * C;  // shift1 scale1 gate1 shift2 scale2 gate2
      const float* next = b + 1 < blocks ? m + 6 * C : fmod.get();  // the next LN's shift, then scale
      const bool fused_qkv = path == AttnPath::fused && layer->fused_qkv_supported();
      if (fused_qkv) {
        layer->pre_attention_qkv(qkv_inputs(b));  // -> [N, H/P, D] on every owner
      } else if (qkv1) {
        ulysses::QkvArgs a = qkv1->args;
        ulysses::qkv_bind_inputs(a, qkv_inputs(b));
        a.epoch = ++qkv1_epoch;
        ulysses::launch_qkv_fused(a, qkv1->grid, stream);  // -> q, k, v [L, H, D]
      } else {
        linear(h.get(), block_param(b, "attn.qkv"), qkv.get(), L, 3 * C, C);
        kernels::qk_norm_rope(q.get(), k.get(), v.get(), qkv.get(), vec(block_param(b, "attn.qkv.bias")),
                              vec(block_param(b, "attn.q_norm.weight")), vec(block_param(b, "attn.k_norm.weight")),
                              cos.get(), sin.get(), L, H, D, stream);
      }
      mark(Phase::qkv);
      const std::uint16_t* a = attention(path, fused_qkv);
      if (proj_lt.gemm) {  // the bias in the GEMM's epilogue, the branch in bf16
        run_lt(proj_lt, b, a, branch.get());
        kernels::gated_residual_ln_modulate_bf16(x.get(), branch.get(), m + 2 * C, h.get(), m + 3 * C, m + 4 * C, L,
                                                 C, stream);
      } else {
        linear(a, block_param(b, "attn.proj"), proj.get(), L, C, C);
        kernels::gated_residual_ln_modulate(x.get(), proj.get(), vec(block_param(b, "attn.proj.bias")), m + 2 * C,
                                            h.get(), m + 3 * C, m + 4 * C, L, C, stream);
      }
      mark(Phase::proj);
      if (moe) {  // [L, C] bf16 from the fused MoE kernel (no bias)
        linear(h.get(), block_param(b, "moe.router"), moe->logits(), L, c.experts, C);
        const std::uint16_t* y = moe->forward(h.get(), mat(block_param(b, "moe.w1")), mat(block_param(b, "moe.w2")));
        kernels::gated_residual_ln_modulate_bf16(x.get(), y, m + 5 * C, h.get(), next, next + C, L, C, stream);
      } else {
        if (fc1_lt.gemm) {
          run_lt(fc1_lt, b, h.get(), g.get());
        } else {
          linear(h.get(), block_param(b, "mlp.fc1"), f1.get(), L, F, C);
          kernels::bias_act(f1.get(), g.get(), vec(block_param(b, "mlp.fc1.bias")), L, F, Act::gelu_tanh, stream);
        }
        if (fc2_lt.gemm) {
          run_lt(fc2_lt, b, g.get(), branch.get());
          kernels::gated_residual_ln_modulate_bf16(x.get(), branch.get(), m + 5 * C, h.get(), next, next + C, L, C,
                                                   stream);
        } else {
          linear(g.get(), block_param(b, "mlp.fc2"), proj.get(), L, C, F);
          kernels::gated_residual_ln_modulate(x.get(), proj.get(), vec(block_param(b, "mlp.fc2.bias")), m + 5 * C,
                                              h.get(), next, next + C, L, C, stream);
        }
      }
      mark(Phase::ffn);
    }
    linear(h.get(), "final.proj", vel.get(), L, in, C);  // h: the final layer's LN (above)
    kernels::bias_act(vel.get(), nullptr, vec("final.proj.bias"), L, in, Act::none, stream);
    mark(Phase::final_layer);
  }
};

RankModel::RankModel(const Config& c, int blocks, const Grid& g, int ranks, int rank, cudaStream_t stream,
                     ulysses::Layer* layer, comm::Rank* comm, const burstgap::ModelParams* moe_params,
                     int64_t padded)
    : impl_(std::make_unique<Impl>(c, blocks, g, ranks, rank, stream, layer, comm, moe_params, padded)) {}
RankModel::~RankModel() = default;

void RankModel::load(const Weights& wts) {
  auto& m = *impl_;
  check_weights(m.c, m.blocks, wts);
  for (const auto& sp : m.specs) {
    std::vector<float> shard;
    if (is_expert_param(sp.name)) shard = expert_shard(wts.at(sp.name), m.ranks, m.rank);
    const auto& src = is_expert_param(sp.name) ? shard : wts.at(sp.name).data;
    auto& dst = m.w.at(sp.name);
    if (is_matrix(sp)) {
      std::vector<std::uint16_t> bits(src.size());
      for (size_t i = 0; i < src.size(); ++i) bits[i] = attention::float_to_bf16_bits(src[i]);
      copy_to_device(dst.bf16.get(), bits.data(), bits.size() * 2);
    } else {
      copy_to_device(dst.f32.get(), src.data(), src.size() * 4);
    }
  }
  m.weights_changed();
  m.loaded = true;
}

void RankModel::randomize(uint64_t seed) {
  auto& m = *impl_;
  for (const auto& sp : m.specs) {
    auto& dst = m.w.at(sp.name);
    if (is_expert_param(sp.name)) {  // per expert, so that an expert's values do not depend on P
      const int64_t per_expert = sp.numel() / sp.shape[0], local = sp.shape[0] / m.ranks;
      for (int64_t j = 0; j < local; ++j) {
        const int64_t e = m.rank * local + j;
        attention::fill_random_bf16(dst.bf16.get() + j * per_expert, per_expert,
                                    param_seed(seed, fmt::format("{}[{}]", sp.name, e)), sp.stddev(), m.stream);
      }
    } else if (is_matrix(sp)) {
      attention::fill_random_bf16(dst.bf16.get(), sp.numel(), param_seed(seed, sp.name), sp.stddev(), m.stream);
    } else {
      const auto vals = random_values(sp, seed);
      copy_to_device(dst.f32.get(), vals.data(), vals.size() * 4);
    }
  }
  m.weights_changed();
  XS_CHECK_CUDA(cudaStreamSynchronize(m.stream));
  m.loaded = true;
}

void RankModel::set_latent(const std::vector<float>& local) {
  auto& m = *impl_;
  XS_ASSERT(int64_t(local.size()) == m.L * m.in, "dit: rank {}: latent of {} values, expected {} x {}", m.rank,
            local.size(), m.L, m.in);
  synchronize();  // a forward still on the stream may read the latent this overwrites
  copy_to_device(m.lat.get(), local.data(), local.size() * 4);
}

void RankModel::synchronize() const {
  const cudaError_t e = cudaStreamSynchronize(impl_->stream);
  if (e == cudaSuccess) {
    if (impl_->moe) impl_->moe->synchronize();  // non-finite router logits are reported here
    return;
  }
  // A kernel that timed out names its wait: the fused QKV kernel's (a report of its own),
  // or the MoE kernel's (its synchronize reads its report).
  const std::string qkv = ulysses::qkv_explain_failure();
  XS_ASSERT(qkv.empty(), "dit: rank {}: {} ({})", impl_->rank, qkv, cudaGetErrorString(e));
  if (impl_->moe) impl_->moe->synchronize();
  XS_FAIL("dit: rank {}: a kernel failed: {}", impl_->rank, cudaGetErrorString(e));
}
std::vector<float> RankModel::latent() const {
  synchronize();
  return impl_->lat.to_host(impl_->lat.size());
}
std::vector<float> RankModel::velocity() const {
  synchronize();
  return impl_->vel.to_host(impl_->vel.size());
}
void RankModel::forward(float t, AttnPath path) { impl_->forward(t, path); }
void RankModel::euler(float dt) {
  kernels::axpy(impl_->lat.get(), impl_->vel.get(), dt, impl_->L * impl_->in, impl_->stream);
}
int64_t RankModel::local_tokens() const { return impl_->L; }
void RankModel::set_breakdown(bool on) { impl_->marking = on; }
void RankModel::add_breakdown(PhaseTimes& t) { impl_->add_marks(t); }
std::string RankModel::gemm_epilogues() const { return impl_->epilogues(); }
std::string RankModel::qkv_projection() const { return impl_->qkv_form(); }

MoeTimes RankModel::moe_host_times() const { return impl_->moe ? impl_->moe->host_times() : MoeTimes{}; }
void RankModel::reset_moe_host_times() {
  if (impl_->moe) impl_->moe->reset_host_times();
}

MoeTimes MoeTimes::per_forward() const {
  if (forwards == 0) return {};
  const double n = double(forwards);
  return {wait_us / n, route_us / n, upload_us / n, 1, plan_gpu_us / n, kernel_gpu_us / n};
}

}  // namespace xstage::dit
