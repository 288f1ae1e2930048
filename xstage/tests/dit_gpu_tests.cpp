// GPU tests of the DiT denoiser: the single-GPU forward against the fp32 CPU
// reference (tiny presets, host weights), and the P = 2 sampler (serial and
// fused Ulysses attention) against the single-GPU sampler; refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "common/testing.hpp"
#include "xstage/comm.hpp"
#include "xstage/dit_cuda.hpp"

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

}  // namespace

// bf16 GEMM inputs and attention (8 mantissa bits) through two blocks: the
// velocity's relative L2 error against fp32 stays near bf16's 2^-8; 2.5e-2 is
// about 6x that, far below what a wrong index or a missing term gives (O(1)).
TEST(DitGpu, SingleGpuForwardMatchesCpuReference) {
  for (const char* name : {"tiny", "tiny-video"}) {
    const Config c = preset(name);
    const dit::Run run{512, 1, 1, 0};
    const Weights w = random_weights(c, c.blocks, 21);
    GpuOptions opt;
    opt.weights = &w;
    opt.time = false;
    opt.latent_seed = 5;
    const GpuResult r = run_gpu(c, run, AttnPath::single, opt);
    const auto ref = reference_forward(c, c.blocks, w, token_grid(c, run.tokens), random_latent(c, run.tokens, 5), 1.0f);
    const Diff d = diff(r.first_velocity, ref);
    std::printf("%s: velocity vs CPU fp32: max |diff| %.3e (max |ref| %.3f), rel L2 %.3e\n", name, d.max_abs, d.ref_max,
                d.rel_l2);
    EXPECT_LT(d.rel_l2, 2.5e-2) << name;
    EXPECT_LT(d.max_abs, 0.1 * d.ref_max) << name;
  }
}

TEST(DitGpu, TwoRankSerialAndFusedMatchSingleGpu) {
  if (comm::visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  for (const char* name : {"tiny", "flux-like"}) {
    const Config c = preset(name);
    const dit::Run one{c.name == "tiny" ? 512 : 1024, 1, 2, 2}, two{one.tokens, 2, 2, 2};
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
    // Same math on the same data; only GEMM shapes (cuBLAS algorithms) differ.
    EXPECT_LT(ds.rel_l2, 1e-2) << name;
    EXPECT_LT(df.rel_l2, 1e-2) << name;
    EXPECT_LT(dfs.rel_l2, 1e-2) << name;
    EXPECT_GT(ds.ref_max, 0.5) << name;
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
  EXPECT_TRUE(contains(error_of([&] { run_gpu(preset("tiny-moe"), {256, 1, 1, 0}, AttnPath::single, opt); }),
                       "MoE FFN"));
  EXPECT_TRUE(contains(error_of([&] { run_gpu(preset("tiny"), {256, 1, 1, 0}, AttnPath::fused, opt); }),
                       "the fused path is for P > 1"));
}
