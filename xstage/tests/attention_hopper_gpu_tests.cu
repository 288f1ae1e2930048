// GPU tests of the Hopper building blocks exactly as the attention kernel uses
// them: a TMA load with 128-byte swizzle lands in the documented pattern, and
// the kernel's own S = Q·Kᵀ (wgmma SS) -> bf16 P fragments -> O = P·V (wgmma RS,
// V read transposed) chain matches a CPU product. If the attention test fails
// and these pass, the fault is in the pipeline or softmax, not the layouts.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "xstage/attention/sm90_flash_fwd.cuh"
#include "xstage/attention/sm90_flash_fwd_launch.cuh"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"

namespace {

using xstage::DeviceBuffer;
namespace hw = xstage::hopper;
namespace sm90 = xstage::attention::sm90;

template <int D>
struct ChainTraits {  // one consumer warpgroup's view: 64 Q rows, a 128-key block
  static constexpr int kHeadDim = D;
  static constexpr int kBlockM = 64;
  static constexpr int kBlockN = 128;
  static constexpr int kRowBytes = 128;
  static constexpr int kPanels = D / 64;
};

struct ChainMaps {
  CUtensorMap q, k, v;
};

template <int D>
__global__ void chain_kernel(const __grid_constant__ ChainMaps maps, float* s_out, float* o_out, uint8_t* q_raw) {
  using T = ChainTraits<D>;
  extern __shared__ uint8_t raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
  uint8_t* q = smem;                         // [panel][64][128 B]
  uint8_t* k = q + 64 * D * 2;               // [panel][128][128 B]
  uint8_t* v = k + 128 * D * 2;              // [panel][128][128 B]
  auto* bar = reinterpret_cast<uint64_t*>(v + 128 * D * 2);
  const int tid = threadIdx.x;
  if (tid == 0) {
    hw::mbar_init(bar, 1);
    hw::mbar_init_fence();
  }
  __syncthreads();
  if (tid == 0) {
    hw::mbar_arrive_expect_tx(bar, (64 + 128 + 128) * D * 2);
    for (int p = 0; p < T::kPanels; ++p) {
      hw::tma_load_4d(&maps.q, bar, q + p * 64 * 128, p * 64, 0, 0, 0);
      hw::tma_load_4d(&maps.k, bar, k + p * 128 * 128, p * 64, 0, 0, 0);
      hw::tma_load_4d(&maps.v, bar, v + p * 128 * 128, p * 64, 0, 0, 0);
    }
  }
  const xstage::sync::WaitContext wait{10'000'000'000ull};  // no report: a timeout only ends the kernel
  xstage::sync::wait_phase(wait, bar, 0, sm90::AttentionSite::q_full, -1);
  for (int i = tid; i < 64 * D * 2; i += 128) q_raw[i] = q[i];

  float s[64];
  sm90::issue_qk<T>(s, hw::smem_addr(q), hw::smem_addr(k));
  hw::wgmma::wait<0>();
  hw::wgmma::fence_operand(s);
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int i = 0; i < 64; ++i) {
    const int jj = i / 4, e = i % 4;
    const int row = warp * 16 + g + 8 * (e >> 1), col = 8 * jj + 2 * t + (e & 1);
    s_out[row * 128 + col] = s[i];
  }
  uint32_t pa[8][4];
  sm90::convert_p<128>(s, pa);
  float o[D / 2];
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  sm90::issue_pv<T>(o, pa, hw::smem_addr(v));
  hw::wgmma::wait<0>();
  hw::wgmma::fence_operand(o);
  for (int i = 0; i < D / 2; ++i) {
    const int jj = i / 4, e = i % 4;
    const int row = warp * 16 + g + 8 * (e >> 1), col = 8 * jj + 2 * t + (e & 1);
    o_out[row * D + col] = o[i];
  }
}

CUtensorMap map_2d(const void* base, int cols, int rows, int box_rows) {
  xstage::attention::Tensor4 t = xstage::attention::Tensor4::bshd(const_cast<void*>(base), 1, rows, 1, cols);
  return sm90::make_bshd_map(t, box_rows);
}

float bf(uint16_t b) { return xstage::attention::bf16_bits_to_float(b); }

template <int D>
void run_chain() {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.f, 1.f);
  auto make = [&](int n, float sd) {
    std::vector<uint16_t> h(n);
    for (auto& x : h) x = xstage::attention::float_to_bf16_bits(nd(rng) * sd);
    return h;
  };
  const auto hq = make(64 * D, 0.5f), hk = make(128 * D, 0.5f), hv = make(128 * D, 1.f);
  DeviceBuffer<uint16_t> dq(hq.size()), dk(hk.size()), dv(hv.size());
  xstage::copy_to_device(dq.get(), hq.data(), hq.size() * 2);
  xstage::copy_to_device(dk.get(), hk.data(), hk.size() * 2);
  xstage::copy_to_device(dv.get(), hv.data(), hv.size() * 2);
  ChainMaps maps{map_2d(dq.get(), D, 64, 64), map_2d(dk.get(), D, 128, 128), map_2d(dv.get(), D, 128, 128)};
  DeviceBuffer<float> s_out(64 * 128), o_out(64 * D);
  DeviceBuffer<uint8_t> q_raw(64 * D * 2);
  xstage::fill_device(s_out.get(), 0xFF, 64 * 128 * 4);  // NaN poison
  xstage::fill_device(o_out.get(), 0xFF, 64 * D * 4);
  const int smem = 1024 + (64 + 256) * D * 2 + 64;
  XS_CHECK_CUDA(cudaFuncSetAttribute(chain_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  chain_kernel<D><<<1, 128, smem>>>(maps, s_out.get(), o_out.get(), q_raw.get());
  XS_CHECK_LAUNCH();
  XS_CHECK_CUDA(cudaDeviceSynchronize());
  const auto s = s_out.to_host(64 * 128), o = o_out.to_host(64 * D);
  const auto raw = q_raw.to_host(64 * D * 2);

  // TMA 128-B swizzle: element (r, c) of panel p at p·64·128 + r·128 + ((c/8) ^ (r%8))·16 + (c%8)·2.
  int swizzle_bad = 0;
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < D; ++c) {
      const int p = c / 64, cc = c % 64;
      const size_t off = p * 64 * 128 + r * 128 + (((cc / 8) ^ (r % 8)) * 16) + (cc % 8) * 2;
      const uint16_t got = static_cast<uint16_t>(raw[off] | (raw[off + 1] << 8));
      swizzle_bad += got != hq[r * D + c];
    }
  EXPECT_EQ(swizzle_bad, 0) << "TMA 128-byte swizzle pattern differs from the documented one";

  // S = Q·Kᵀ, then O = bf16(S)·V.
  double s_err = 0, s_ref_max = 0, o_err = 0, o_ref_max = 0;
  std::vector<float> p(64 * 128);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 128; ++n) {
      double acc = 0;
      for (int d = 0; d < D; ++d) acc += static_cast<double>(bf(hq[m * D + d])) * bf(hk[n * D + d]);
      s_err = std::max(s_err, std::abs(acc - s[m * 128 + n]));
      s_ref_max = std::max(s_ref_max, std::abs(acc));
      p[m * 128 + n] = bf(xstage::attention::float_to_bf16_bits(s[m * 128 + n]));
    }
  for (int m = 0; m < 64; ++m)
    for (int d = 0; d < D; ++d) {
      double acc = 0;
      for (int n = 0; n < 128; ++n) acc += static_cast<double>(p[m * 128 + n]) * bf(hv[n * D + d]);
      o_err = std::max(o_err, std::abs(acc - o[m * D + d]));
      o_ref_max = std::max(o_ref_max, std::abs(acc));
    }
  EXPECT_LT(s_err, 1e-3 * s_ref_max + 1e-4) << "S = Q·Kᵀ (wgmma SS, K-major descriptors) is wrong; max |S| " << s_ref_max;
  EXPECT_LT(o_err, 1e-3 * o_ref_max + 1e-4) << "O = P·V (wgmma RS, transposed V descriptor, LBO = panel stride) is wrong; max |O| "
                                             << o_ref_max;
}

}  // namespace

TEST(AttentionHopperGpu, ChainD64) { run_chain<64>(); }
TEST(AttentionHopperGpu, ChainD128) { run_chain<128>(); }

TEST(AttentionHopperGpu, HostSmemFormulaMatchesKernelTraits) {
  EXPECT_EQ(xstage::attention::smem_bytes_for(64), sm90::FlashFwdTraits<64>::kSmemBytes);
  EXPECT_EQ(xstage::attention::smem_bytes_for(128), sm90::FlashFwdTraits<128>::kSmemBytes);
  for (int d : {64, 128}) {
    xstage::attention::Problem p;
    p.B = 1, p.Sq = 1000, p.Skv = 1000, p.H = 2, p.D = d;
    const auto c = xstage::attention::choose_config(p, 132);
    const int stages = d == 64 ? sm90::FlashFwdTraits<64>::kStages : sm90::FlashFwdTraits<128>::kStages;
    EXPECT_EQ(c.stages, stages);
    EXPECT_EQ(c.block_m, sm90::FlashFwdTraits<64>::kBlockM);
    EXPECT_EQ(c.block_n, sm90::FlashFwdTraits<64>::kBlockN);
    EXPECT_EQ(c.threads, sm90::FlashFwdTraits<64>::kThreads);
  }
}
