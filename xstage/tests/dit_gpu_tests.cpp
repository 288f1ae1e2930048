// GPU tests of the DiT denoiser: the single-GPU forward against the fp32 CPU
// reference (tiny presets, host weights), and the P = 2 sampler (serial and
// fused Ulysses attention) against the single-GPU sampler, for the GELU MLP and
// the MoE FFN (the fused EP MoE kernel); padded token counts against unpadded ones;
// refusals; the cuBLASLt bias and bias + GELU epilogues (BiasGemm) against an fp64 host reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/testing.hpp"
#include "xstage/attention/attention.hpp"
#include "xstage/comm/comm.hpp"
#include "common/device_buffer.hpp"
#include "xstage/dit/dit_cuda.hpp"

using namespace xstage;
using namespace xstage::dit;
using common::error_of;

namespace {

struct Diff {
  double max_abs = 0, rel_l2 = 0, ref_max = 0;
};
Diff diff(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  Diff d;
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    const double e = double(got[i]) - ref[i];
    if (!std::isfinite(got[i])) return {INFINITY, INFINITY, 0};
    d.max_abs = std::max(d.max_abs, std::fabs(e));
    d.ref_max = std::max(d.ref_max, std::fabs(double(ref[i])));
    num += e * e;
    den += double(ref[i]) * ref[i];
  }
  d.rel_l2 = std::sqrt(num / std::max(den, 1e-30));
  return d;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Share of tokens (rows of `row` values) whose relative L2 error exceeds `tol`.
double tokens_over(const std::vector<float>& got, const std::vector<float>& ref, int64_t row, double tol) {
  int64_t over = 0, n = int64_t(ref.size()) / row;
  for (int64_t t = 0; t < n; ++t) {
    double num = 0, den = 0;
    for (int64_t j = t * row; j < (t + 1) * row; ++j) {
      num += (double(got[size_t(j)]) - ref[size_t(j)]) * (double(got[size_t(j)]) - ref[size_t(j)]);
      den += double(ref[size_t(j)]) * ref[size_t(j)];
    }
    over += !(std::sqrt(num / std::max(den, 1e-30)) <= tol);
  }
  return double(over) / double(n);
}

// The single-GPU velocity v(x_1, t = 1) and the fp32 CPU reference's, on host weights.
std::pair<std::vector<float>, std::vector<float>> single_vs_reference(const Config& c, int64_t tokens) {
  const dit::Run run{tokens, 1, 1, 0};
  const Weights w = random_weights(c, c.blocks, 21);
  GpuOptions opt;
  opt.weights = &w;
  opt.time = false;
  opt.latent_seed = 5;
  const GpuResult r = run_gpu(c, run, AttnPath::single, opt);
  // The tails ran as asked (a fallback would leave the fused form untested); so did the QKV
  // projection (the fused QKV kernel at P = 1 needs D = 128 and whole 128-row tiles).
  EXPECT_EQ(r.gemm_epilogues, c.gemm_epilogues ? "fused" : "separate") << c.name;
  const bool fused_qkv = c.gemm_epilogues && c.head_dim == 128 && tokens % 128 == 0;
  EXPECT_EQ(r.qkv_projection, fused_qkv ? "fused" : "cuBLAS + qk_norm_rope") << c.name;
  return {r.first_velocity,
          reference_forward(c, c.blocks, w, token_grid(c, run.tokens), random_latent(c, run.tokens, 5), 1.0f)};
}

}  // namespace

// bf16 GEMM inputs and attention (8 mantissa bits) through two blocks: the
// velocity's relative L2 error against fp32 stays near bf16's 2^-8; 2.5e-2 is
// about 6x that, far below what a wrong index or a missing term gives (O(1)).
// Both forms of the GEMM tails (Config::gemm_epilogues): the cuBLASLt epilogues, whose
// biases are rounded to bf16 and whose projection and fc2 branches are bf16, and the cuBLAS
// GEMMs with fp32 outputs and the tail kernels. tiny-d128 (tiny with 2 heads of 128) also
// runs the QKV projection as the fused QKV kernel in the fused form.
TEST(DitGpu, SingleGpuForwardMatchesCpuReference) {
  for (const char* name : {"tiny", "tiny-video", "tiny-d128"})
    for (bool fused : {true, false}) {
      Config c = preset(std::string(name) == "tiny-d128" ? "tiny" : name);
      if (std::string(name) == "tiny-d128") {
        c.name = name;
        c.head_dim = 128;
        c.hidden = c.heads * c.head_dim;  // 256
        c.ffn_hidden = 4 * c.hidden;
      }
      c.gemm_epilogues = fused;
      const auto [got, ref] = single_vs_reference(c, 512);
      const Diff d = diff(got, ref);
      std::printf("%s, GEMM tails %s: velocity vs CPU fp32: max |diff| %.3e (max |ref| %.3f), rel L2 %.3e\n", name,
                  fused ? "fused" : "separate", d.max_abs, d.ref_max, d.rel_l2);
      EXPECT_LT(d.rel_l2, 2.5e-2) << name << (fused ? " fused" : " separate");
      EXPECT_LT(d.max_abs, 0.1 * d.ref_max) << name << (fused ? " fused" : " separate");
    }
}

// --breakdown's steps (GpuOptions::breakdown_steps, after the timed ones): every phase of
// a one-GPU forward has time, the All-to-Alls none (P = 1), and its events change nothing:
// the sampled latent is the same bitwise with and without them (the extra steps use dt = 0).
TEST(DitGpu, BreakdownTimesEveryPhaseOfTheForward) {
  for (const char* name : {"tiny", "tiny-moe"}) {
    const Config c = preset(name);
    const dit::Run run{512, 1, 2, 0};
    GpuOptions opt;
    opt.warmup = 1;
    opt.samples = 2;
    const GpuResult plain = run_gpu(c, run, AttnPath::single, opt);
    opt.breakdown_steps = 3;
    const GpuResult r = run_gpu(c, run, AttnPath::single, opt);
    EXPECT_EQ(plain.phases.steps, 0) << name;
    EXPECT_EQ(r.phases.steps, 3) << name;
    for (Phase p : {Phase::conditioning, Phase::qkv, Phase::attention, Phase::proj, Phase::ffn, Phase::final_layer})
      EXPECT_GT(r.phases.per_step(p), 0.0) << name << " " << to_string(p);
    EXPECT_EQ(r.phases.per_step(Phase::pre_a2a), 0.0) << name;
    EXPECT_EQ(r.phases.per_step(Phase::post_a2a), 0.0) << name;
    EXPECT_TRUE(r.latent == plain.latent) << name << ": the breakdown's steps moved the latent";
    std::printf("%s breakdown: %.3f ms per step over the phases (timed step %.3f ms)\n", name,
                r.phases.total_per_step(), r.step_ms);
  }
}

// BiasGemm, both tails, against an fp64 host reference on bf16-exact inputs, M not a
// multiple of any tile. Y = X Wᵀ has a standard deviation of about 2, so the GELU's inputs cover
// [-6, 6], where tanh-GELU and erf-GELU differ by up to 4.7e-4: the fp32 check's 2e-5
// (fp32 accumulation over K = 320 is about 1e-6) tells them apart. bf16 output: one
// rounding to nearest, at most half a unit in the last place, 2^-8 relative (8
// significant bits).
TEST(DitGpu, BiasGeluEpilogueMatchesHostReference) {
  const int64_t M = 200, N = 384, K = 320;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto bf16_vals = [&](int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = attention::bf16_bits_to_float(attention::float_to_bf16_bits(scale * normal(rng)));
    return v;
  };
  auto bits = [](const std::vector<float>& v) {
    std::vector<std::uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = attention::float_to_bf16_bits(v[i]);
    return b;
  };
  const std::vector<float> X = bf16_vals(M * K, 1.f), W = bf16_vals(N * K, 2.f / std::sqrt(float(K)));
  const std::vector<float> bias = bf16_vals(N, 0.5f);
  std::vector<double> Y(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(X[size_t(i * K + k)]) * W[size_t(j * K + k)];
      Y[size_t(i * N + j)] = acc;
    }
  auto gelu = [](double v) { return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); };

  XS_CHECK_CUDA(cudaSetDevice(0));
  cudaStream_t s = nullptr;
  XS_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasLtHandle_t lt = nullptr;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  const DeviceBuffer<std::uint16_t> dX = upload(bits(X)), dW = upload(bits(W)), dBb = upload(bits(bias));
  const DeviceBuffer<float> dB = upload(bias);
  DeviceBuffer<unsigned char> ws(kLtWorkspaceBytes);
  int64_t gelu_region = 0;  // outputs where tanh- and erf-GELU differ by more than 1e-4
  for (double v : Y)
    gelu_region += std::fabs(gelu(v) - 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))) > 1e-4;
  EXPECT_GT(gelu_region, M * N / 20) << "the data must exercise the GELU's shape";

  // Both tails (the identity: the projection and fc2; GELU: fc1), fp32 out with an fp32 bias
  // and bf16 out with a bf16 bias (the model's form).
  for (LtTail tail : {LtTail::bias_gelu, LtTail::bias}) {
    auto act = [&](double v) { return tail == LtTail::bias_gelu ? gelu(v) : v; };
    {
      BiasGemm g(lt, tail, M, N, K, CUDA_R_32F, kLtWorkspaceBytes);
      ASSERT_TRUE(g.supported()) << g.describe();
      DeviceBuffer<float> out(static_cast<size_t>(M * N));
      fill_device(out.get(), 0xFF, out.size() * 4);  // NaN poison
      g.run(dX.get(), dW.get(), out.get(), dB.get(), ws.get(), s);
      XS_CHECK_CUDA(cudaStreamSynchronize(s));
      const auto got = out.to_host(out.size());
      double worst = 0;
      for (int64_t i = 0; i < M * N; ++i) {
        const double ref = act(Y[size_t(i)] + bias[size_t(i % N)]);
        worst = std::max(worst, std::fabs(got[size_t(i)] - ref) / (2e-5 + 1e-5 * std::fabs(ref)));
      }
      std::printf("%s: worst error / tolerance %.3f\n", g.describe().c_str(), worst);
      EXPECT_LE(worst, 1.0) << g.describe();
    }
    {
      BiasGemm g(lt, tail, M, N, K, CUDA_R_16BF, kLtWorkspaceBytes);
      ASSERT_TRUE(g.supported()) << g.describe();
      DeviceBuffer<std::uint16_t> out(static_cast<size_t>(M * N));
      fill_device(out.get(), 0xFF, out.size() * 2);
      g.run(dX.get(), dW.get(), out.get(), dBb.get(), ws.get(), s);
      XS_CHECK_CUDA(cudaStreamSynchronize(s));
      const auto got = out.to_host(out.size());
      double worst = 0;
      for (int64_t i = 0; i < M * N; ++i) {
        const double ref = act(Y[size_t(i)] + bias[size_t(i % N)]);  // bias is bf16-exact
        const double e = std::fabs(attention::bf16_bits_to_float(got[size_t(i)]) - ref);
        worst = std::max(worst, e / (std::ldexp(std::fabs(ref), -8) + 2e-5));
      }
      std::printf("%s: worst error / tolerance %.3f\n", g.describe().c_str(), worst);
      EXPECT_LE(worst, 1.0) << g.describe();
    }
  }
  cublasLtDestroy(lt);
  cudaStreamDestroy(s);
}

// gated_residual_ln_modulate (fp32 branch with bias, bf16 branch without) against an
// fp64 host reference: the new x within fp32 rounding (2e-6 relative to the terms), h
// within half a bf16 unit in the last place of the reference (2^-8 relative) plus 1e-4
// for the fp32 mean and variance; and h bitwise equal to ln_modulate alone on the x it
// wrote (the LN code is shared). Row widths 3072 (flux-like) and 200 (not a multiple of
// the block's 256 threads); outputs poisoned first.
TEST(DitGpu, GatedResidualLnModulateMatchesHostReference) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto vals = [&](int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = scale * normal(rng);
    return v;
  };
  for (const int64_t C : {int64_t(3072), int64_t(200)})
    for (const bool bf16_branch : {false, true}) {
      const int64_t rows = 37;
      const std::vector<float> x0 = vals(rows * C, 1.f), b = vals(C, 0.3f), gate = vals(C, 0.5f),
                               shift = vals(C, 0.2f), scale = vals(C, 0.2f);
      std::vector<float> y = vals(rows * C, 1.f);
      std::vector<std::uint16_t> y_bits(y.size());
      for (size_t i = 0; i < y.size(); ++i) {
        y_bits[i] = attention::float_to_bf16_bits(y[i]);
        if (bf16_branch) y[i] = attention::bf16_bits_to_float(y_bits[i]);
      }
      DeviceBuffer<float> dx = upload(x0);
      const DeviceBuffer<float> dy = upload(y), db = upload(b), dg = upload(gate), ds = upload(shift),
                                dsc = upload(scale);
      const DeviceBuffer<std::uint16_t> dyb = upload(y_bits);
      DeviceBuffer<std::uint16_t> h(static_cast<size_t>(rows * C)), h2(static_cast<size_t>(rows * C));
      fill_device(h.get(), 0xFF, h.size() * 2);
      fill_device(h2.get(), 0xFF, h2.size() * 2);
      if (bf16_branch)
        kernels::gated_residual_ln_modulate_bf16(dx.get(), dyb.get(), dg.get(), h.get(), ds.get(), dsc.get(), rows, C,
                                                 nullptr);
      else
        kernels::gated_residual_ln_modulate(dx.get(), dy.get(), db.get(), dg.get(), h.get(), ds.get(), dsc.get(), rows,
                                            C, nullptr);
      kernels::ln_modulate(h2.get(), dx.get(), ds.get(), dsc.get(), rows, C, nullptr);
      XS_CHECK_CUDA(cudaDeviceSynchronize());
      const auto got_x = dx.to_host(dx.size());
      const auto got_h = h.to_host(h.size()), got_h2 = h2.to_host(h2.size());
      double worst_x = 0, worst_h = 0;
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<double> xr(static_cast<size_t>(C));
        double mean = 0, var = 0;
        for (int64_t j = 0; j < C; ++j) {
          const size_t i = size_t(r * C + j);
          const double branch = double(gate[size_t(j)]) * (double(y[i]) + (bf16_branch ? 0.0 : b[size_t(j)]));
          xr[size_t(j)] = x0[i] + branch;
          worst_x = std::max(worst_x, std::fabs(got_x[i] - xr[size_t(j)]) /
                                          (2e-6 * (std::fabs(x0[i]) + std::fabs(branch)) + 1e-30));
          mean += xr[size_t(j)];
        }
        mean /= double(C);
        for (double v : xr) var += (v - mean) * (v - mean);
        const double inv = 1 / std::sqrt(var / double(C) + 1e-6);
        for (int64_t j = 0; j < C; ++j) {
          const size_t i = size_t(r * C + j);
          const double ref = (xr[size_t(j)] - mean) * inv * (1 + scale[size_t(j)]) + shift[size_t(j)];
          worst_h = std::max(worst_h, std::fabs(attention::bf16_bits_to_float(got_h[i]) - ref) /
                                          (std::ldexp(std::fabs(ref), -8) + 1e-4));
        }
      }
      std::printf("C %ld, %s branch: worst x error / tolerance %.3f, worst h error / tolerance %.3f\n", long(C),
                  bf16_branch ? "bf16" : "fp32", worst_x, worst_h);
      EXPECT_LE(worst_x, 1.0) << C << (bf16_branch ? " bf16" : " fp32");
      EXPECT_LE(worst_h, 1.0) << C << (bf16_branch ? " bf16" : " fp32");
      EXPECT_EQ(got_h, got_h2) << "h differs from ln_modulate of the same x, C " << C;
    }
}

// The model with fc1's tail and the QKV projection fused and separate gives the same
// sampled latent up to bf16 rounding (flux-like, 2 blocks, 1024 tokens, two steps): the fc1
// bias in bf16, q, k, v rounded from the fused kernel's registers, and other accumulation
// orders are the only differences.
TEST(DitGpu, FusedGemmEpiloguesMatchSeparateKernels) {
  Config fused = preset("flux-like"), separate = fused;
  separate.gemm_epilogues = false;
  const dit::Run run{1024, 1, 2, 2};
  GpuOptions opt;
  opt.time = false;
  const GpuResult a = run_gpu(fused, run, AttnPath::single, opt), b = run_gpu(separate, run, AttnPath::single, opt);
  ASSERT_EQ(a.gemm_epilogues, "fused");
  ASSERT_EQ(b.gemm_epilogues, "separate");
  // At P = 1 with D = 128 the QKV projection goes with them: the fused QKV kernel, or cuBLAS.
  ASSERT_EQ(a.qkv_projection, "fused");
  ASSERT_EQ(b.qkv_projection, "cuBLAS + qk_norm_rope");
  const Diff d = diff(a.latent, b.latent);
  std::printf("flux-like, 2 blocks, 2 steps: latent, fc1 tail and QKV fused vs separate: max |diff| %.3e rel %.3e "
              "(max |x| %.3f)\n",
              d.max_abs, d.rel_l2, d.ref_max);
  EXPECT_LT(d.rel_l2, 1e-2);
  EXPECT_GT(d.ref_max, 0.5);
  // 1000 rows are not whole 128-row tiles: with the epilogues on, P = 1 pads them to 1024
  // (single_gpu_pads_for_qkv) and runs the fused QKV kernel; with them off it does not pad.
  EXPECT_EQ(run_gpu(fused, dit::Run{1000, 1, 1, 1}, AttnPath::single, opt).qkv_projection, "fused");
  EXPECT_EQ(run_gpu(separate, dit::Run{1000, 1, 1, 1}, AttnPath::single, opt).qkv_projection, "cuBLAS + qk_norm_rope");
}

// The MoE FFN through the fused MoE kernel (P = 1: one rank holds all experts).
// With top-k = E there is no expert selection, so the GELU test's tolerance holds
// as is. With top-2 of 4, a token whose 2nd and 3rd router logits lie within the
// bf16 error of each other (the GPU rounds h and the router weights to bf16;
// about 5e-3 here) may take the other expert: an O(1) change of that token's FFN
// output. A simulation of 4 unit-normal logits with that noise flips about 0.4 %
// of tokens per block, so the top-2 check bounds the share of tokens off
// (5 %) and the global relative L2 (0.1); a wrong index, weight or scale breaks
// most tokens.
TEST(DitGpu, MoeSingleGpuForwardMatchesCpuReference) {
  Config dense = preset("tiny-moe");
  dense.topk = dense.experts;
  for (const Config& c : {dense, preset("tiny-moe")}) {
    const auto [got, ref] = single_vs_reference(c, 512);
    const Diff d = diff(got, ref);
    const double over = tokens_over(got, ref, c.in_dim(), 2.5e-2);
    std::printf("%s top-%d: velocity vs CPU fp32: max |diff| %.3e (max |ref| %.3f), rel L2 %.3e, tokens over 2.5e-2: "
                "%.1f%%\n",
                c.name.c_str(), c.topk, d.max_abs, d.ref_max, d.rel_l2, 100 * over);
    if (c.topk == c.experts) {
      EXPECT_LT(d.rel_l2, 2.5e-2) << "top-k = E";
      EXPECT_LT(d.max_abs, 0.1 * d.ref_max) << "top-k = E";
    } else {
      EXPECT_LT(over, 0.05) << "top-2";
      EXPECT_LT(d.rel_l2, 0.1) << "top-2";
    }
  }
}

// Routing on the GPU and on the host give the same sampled latent: the same experts
// (the top-k arithmetic is shared) and the same weights up to the last bit of the two
// exp implementations, in possibly another tile order, which the output does not depend
// on. tiny-moe and dit-moe (2 blocks), P = 1, two steps; with 2 GPUs also P = 2.
TEST(DitGpu, MoeRoutingOnTheGpuEqualsRoutingOnTheHost) {
  for (const char* name : {"tiny-moe", "dit-moe"})
    for (int P : {1, 2}) {
      if (comm::visible_gpus() < P) continue;
      Config dev = preset(name), host = preset(name);
      host.moe_device_routing = false;
      ASSERT_TRUE(dev.moe_device_routing) << "routing on the GPU is the default";
      const dit::Run run{std::string(name) == "dit-moe" ? 1024 : 512, P, 2, 2};
      GpuOptions opt;
      opt.time = false;
      const AttnPath path = P == 1 ? AttnPath::single : AttnPath::serial;
      const GpuResult a = run_gpu(dev, run, path, opt), b = run_gpu(host, run, path, opt);
      const Diff d = diff(a.latent, b.latent);
      std::printf("%s P = %d: latent, GPU vs host routing: max |diff| %.3e (max |x| %.3f)\n", name, P, d.max_abs,
                  d.ref_max);
      EXPECT_LE(d.max_abs, 1e-3 * d.ref_max) << name << " P = " << P;
    }
}

TEST(DitGpu, TwoRankSerialAndFusedMatchSingleGpu) {
  if (comm::visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  // tiny-moe and dit-moe: experts sharded E/P per rank, the fused MoE kernel
  // exchanging rows between the two GPUs; the routing is the same as on one GPU.
  for (const char* name : {"tiny", "flux-like", "tiny-moe", "dit-moe"}) {
    const Config c = preset(name);
    const bool tiny = c.name.rfind("tiny", 0) == 0;
    const dit::Run one{tiny ? 512 : 1024, 1, 2, 2}, two{one.tokens, 2, 2, 2};
    GpuOptions opt;
    opt.time = false;
    const GpuResult single = run_gpu(c, one, AttnPath::single, opt);
    const GpuResult serial = run_gpu(c, two, AttnPath::serial, opt);
    const GpuResult fused = run_gpu(c, two, AttnPath::fused, opt);
    const Diff ds = diff(serial.latent, single.latent), df = diff(fused.latent, single.latent),
               dfs = diff(fused.latent, serial.latent);
    std::printf("%s P=2 vs P=1 after 2 steps: serial max %.3e rel %.3e; fused max %.3e rel %.3e; fused vs serial max "
                "%.3e (max |x| %.3f)\n",
                name, ds.max_abs, ds.rel_l2, df.max_abs, df.rel_l2, dfs.max_abs, ds.ref_max);
    // Same math on the same data; only GEMM shapes (cuBLAS algorithms) differ, and on the fused
    // path of flux-like and dit-moe (D = 128) the QKV projection is the fused QKV + pre-A2A
    // kernel (fp32 accumulation in its own order, one bf16 rounding as qk_norm_rope). MoE: the
    // same routing unless that rounding crosses an exact tie of router logits.
    EXPECT_LT(ds.rel_l2, 1e-2) << name;
    EXPECT_LT(df.rel_l2, 1e-2) << name;
    EXPECT_LT(dfs.rel_l2, 1e-2) << name;
    EXPECT_GT(ds.ref_max, 0.5) << name;
  }
}

// Padding (padded_tokens) changes no real token: P = 1 padded to a multiple of 128 on
// request, and P = 2 (padded to 128 per rank) serial and fused, against P = 1 unpadded.
// Token counts that no 128-row tile divides; the padded tokens are a sizeable share of
// the keys (56 of 256 for tiny), so attending to them would move the output by far more
// than the bf16 tolerance. The GEMM shapes differ (cuBLAS algorithms), so not bitwise.
// flux-like (D = 128, fused GEMM epilogues) pads itself at P = 1 (whole tiles of the fused
// QKV kernel, single_gpu_pads_for_qkv): its unpadded reference runs the separate
// epilogues, which do not pad, and its plain run is the self-padded one.
TEST(DitGpu, PaddingChangesNoRealToken) {
  for (const char* name : {"tiny", "tiny-moe", "flux-like"}) {
    const Config c = preset(name);
    const int64_t tokens = c.name == "flux-like" ? 1000 : 200;
    const dit::Run plain{tokens, 1, 2, 2}, padded{tokens, 1, 2, 2, 128};
    ASSERT_GT(padded_tokens(c, padded), tokens);
    Config unpadded = c;
    if (single_gpu_pads_for_qkv(c)) unpadded.gemm_epilogues = false;
    ASSERT_EQ(padded_tokens(unpadded, plain), tokens);
    GpuOptions opt;
    opt.time = false;
    const GpuResult ref = run_gpu(unpadded, plain, AttnPath::single, opt);
    ASSERT_EQ(ref.latent.size(), size_t(tokens * c.in_dim()));
    std::vector<std::pair<std::string, GpuResult>> runs;
    runs.emplace_back("P = 1 padded", run_gpu(c, padded, AttnPath::single, opt));
    if (single_gpu_pads_for_qkv(c)) {
      ASSERT_EQ(padded_tokens(c, plain), 1024);
      GpuResult self = run_gpu(c, plain, AttnPath::single, opt);
      EXPECT_EQ(self.qkv_projection, "fused") << name << ": the self-padded run should use the fused QKV kernel";
      runs.emplace_back("P = 1 self-padded (fused QKV kernel)", std::move(self));
    }
    if (comm::visible_gpus() >= 2) {
      const dit::Run two{tokens, 2, 2, 2};
      runs.emplace_back("P = 2 serial", run_gpu(c, two, AttnPath::serial, opt));
      runs.emplace_back("P = 2 fused", run_gpu(c, two, AttnPath::fused, opt));
    }
    for (const auto& [what, r] : runs) {
      const Diff d = diff(r.latent, ref.latent);
      std::printf("%s, %ld tokens, %s vs P = 1 unpadded: max |diff| %.3e rel %.3e (max |x| %.3f)\n", name,
                  long(tokens), what.c_str(), d.max_abs, d.rel_l2, d.ref_max);
      EXPECT_LT(d.rel_l2, 1e-2) << name << ", " << what;
      EXPECT_GT(d.ref_max, 0.5) << name;
    }
  }
}

TEST(DitGpu, Refusals) {
  const int gpus = comm::visible_gpus();
  GpuOptions opt;
  opt.time = false;
  if (gpus < 8) {
    const dit::Run more{256 * (gpus + 1), gpus + 1, 1, 0};
    EXPECT_TRUE(contains(error_of([&] { run_gpu(preset("tiny"), more, AttnPath::serial, opt); }),
                         "asks for more ranks than the"));
  }
  Config narrow = preset("tiny-moe");  // hidden 128: not a whole L2 tile of the fused MoE kernel
  narrow.heads = 2;
  narrow.hidden = 128;
  EXPECT_TRUE(contains(error_of([&] { run_gpu(narrow, {256, 1, 1, 0}, AttnPath::single, opt); }),
                       "hidden 128 is not a multiple of 256 (the fused MoE kernel's L2 tile width)"));
  EXPECT_TRUE(contains(error_of([&] { run_gpu(preset("tiny"), {256, 1, 1, 0}, AttnPath::fused, opt); }),
                       "the fused path is for P > 1"));
}
