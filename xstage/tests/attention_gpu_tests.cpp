// GPU correctness of the sm_90a attention forward kernel.
//
// Every case draws fresh random inputs (the seed is printed on failure),
// poisons O, its padding and the LSE with NaN, runs the kernel, and checks:
//   - every output element was written (finite) and no padding was touched;
//   - error against a high-precision reference (fp64 CPU for small problems,
//     else the fp32 GPU naive kernel) is at most 2x that of a bf16 reference
//     (the naive kernel rounding P and O to bf16 like a flash kernel) plus a
//     small atol, both in max-abs and relative L2 terms;
//   - LSE matches; a second run is bitwise identical (no races).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "xstage/attention/attention_cuda.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"

namespace {

using namespace xstage::attention;
using xstage::DeviceBuffer;

enum class Layout { dense, packed_qkv, padded };

struct Case {
  int B, Sq, Skv, H, D;
  bool causal;
  Layout layout = Layout::dense;
  bool lse = true;
  int max_ctas = 0;
  int pingpong = -1;
  int head_group = -1;
  int snake = -1;
};

std::string name(const Case& c) {
  const char* l = c.layout == Layout::dense ? "dense" : c.layout == Layout::packed_qkv ? "packed_qkv" : "padded";
  return "B" + std::to_string(c.B) + " Sq" + std::to_string(c.Sq) + " Skv" + std::to_string(c.Skv) + " H" +
         std::to_string(c.H) + " D" + std::to_string(c.D) + (c.causal ? " causal " : " full ") + l +
         (c.max_ctas ? " ctas" + std::to_string(c.max_ctas) : "") +
         (c.pingpong >= 0 ? " pingpong" + std::to_string(c.pingpong) : "") +
         (c.head_group != -1 ? " head_group" + std::to_string(c.head_group) : "") +
         (c.snake >= 0 ? " snake" + std::to_string(c.snake) : "");
}

struct Err {
  double max_abs = 0, rel_l2 = 0;
};
Err error_of(const std::vector<float>& x, const std::vector<double>& ref) {
  double num = 0, den = 0, mx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = x[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    mx = std::max(mx, std::abs(d));
  }
  return {mx, den > 0 ? std::sqrt(num / den) : std::sqrt(num)};
}

void sync_or_explain() {
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    const std::string why = explain_device_failure();
    FAIL() << "kernel failed: " << cudaGetErrorString(err) << (why.empty() ? "" : "; " + why);
  }
}

constexpr uint16_t kBf16NaN = 0x7FC1;

// The case's Q, K, V: fresh random bf16 in the case's layout, and the kernel's arguments
// (their views and the output's, set by the caller).
struct CaseInputs {
  DeviceBuffer<uint16_t> qkv_packed, dq, dk, dv;
  FwdArgs a;
};

CaseInputs make_inputs(const Case& c, uint64_t seed) {
  const int64_t B = c.B, Sq = c.Sq, Skv = c.Skv, H = c.H, D = c.D;
  CaseInputs in;
  if (c.layout == Layout::packed_qkv) {
    EXPECT_EQ(Sq, Skv);
    in.qkv_packed = DeviceBuffer<uint16_t>(static_cast<size_t>(B * Sq * 3 * H * D));
    fill_random_bf16(in.qkv_packed.get(), B * Sq * 3 * H * D, seed, 1.f);
    auto view = [&](int which) {
      return Tensor4{in.qkv_packed.get() + which * H * D, DType::bf16, B, Sq, H, D, Sq * 3 * H * D, 3 * H * D, D, 1};
    };
    in.a.q = view(0), in.a.k = view(1), in.a.v = view(2);
    return in;
  }
  const int64_t pad = c.layout == Layout::padded ? 16 : 0;  // extra elements per row of Q/K/V
  in.dq = DeviceBuffer<uint16_t>(static_cast<size_t>(B * Sq * (H * D + pad)));
  in.dk = DeviceBuffer<uint16_t>(static_cast<size_t>(B * Skv * (H * D + pad)));
  in.dv = DeviceBuffer<uint16_t>(static_cast<size_t>(B * Skv * (H * D + pad)));
  fill_random_bf16(in.dq.get(), static_cast<int64_t>(in.dq.size()), seed, 1.f);
  fill_random_bf16(in.dk.get(), static_cast<int64_t>(in.dk.size()), seed + 1, 1.f);
  fill_random_bf16(in.dv.get(), static_cast<int64_t>(in.dv.size()), seed + 2, 1.f);
  auto view = [&](uint16_t* p, int64_t S) {
    return Tensor4{p, DType::bf16, B, S, H, D, S * (H * D + pad), H * D + pad, D, 1};
  };
  in.a.q = view(in.dq.get(), Sq), in.a.k = view(in.dk.get(), Skv), in.a.v = view(in.dv.get(), Skv);
  return in;
}

// One of the inputs (a view of `in`) as a dense [B, S, H, D] float array on the host.
std::vector<float> dense_on_host(const CaseInputs& in, const Tensor4& t) {
  const DeviceBuffer<uint16_t>& buf = in.qkv_packed.get() ? in.qkv_packed
                                      : t.data == in.dq.get() ? in.dq
                                      : t.data == in.dk.get() ? in.dk
                                                              : in.dv;
  const std::vector<uint16_t> all = buf.to_host(buf.size());
  const int64_t off = static_cast<const uint16_t*>(t.data) - static_cast<const uint16_t*>(buf.get());
  std::vector<float> out(static_cast<size_t>(t.B * t.S * t.H * t.D));
  for (int64_t b = 0; b < t.B; ++b)
    for (int64_t s = 0; s < t.S; ++s)
      for (int64_t h = 0; h < t.H; ++h)
        for (int64_t d = 0; d < t.D; ++d)
          out[static_cast<size_t>(((b * t.S + s) * t.H + h) * t.D + d)] =
              bf16_bits_to_float(all[static_cast<size_t>(off + b * t.stride_b + s * t.stride_s + h * t.stride_h + d)]);
  return out;
}

// The kernel's output bits (heads `o_hstride` apart) as dense floats, with the count of
// elements left non-finite and of padding elements touched (padding must stay kBf16NaN).
struct Unpacked {
  std::vector<float> o;
  int64_t unwritten = 0, pad_touched = 0;
};
Unpacked unpack_output(const Case& c, const std::vector<uint16_t>& raw, int64_t o_hstride) {
  const int64_t B = c.B, Sq = c.Sq, H = c.H, D = c.D;
  Unpacked u;
  u.o.resize(static_cast<size_t>(B * Sq * H * D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Sq; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < o_hstride; ++d) {
          const uint16_t bits = raw[static_cast<size_t>(((b * Sq + i) * H + h) * o_hstride + d)];
          if (d >= D) {
            u.pad_touched += bits != kBf16NaN;
            continue;
          }
          const float x = bf16_bits_to_float(bits);
          u.unwritten += !std::isfinite(x);
          u.o[static_cast<size_t>(((b * Sq + i) * H + h) * D + d)] = x;
        }
  return u;
}

// The references: high precision (fp64 on the CPU for small problems, which also checks
// the naive kernel; else the fp32 GPU naive kernel) with its LSE, and the bf16-emulating
// naive kernel.
struct References {
  std::vector<double> hi, lse;
  std::vector<float> bf;
};
References references(const Case& c, const CaseInputs& in) {
  const int64_t B = c.B, Sq = c.Sq, Skv = c.Skv, H = c.H, D = c.D;
  DeviceBuffer<float> ref_hi(static_cast<size_t>(B * Sq * H * D)), ref_bf(static_cast<size_t>(B * Sq * H * D)),
      ref_lse(static_cast<size_t>(B * H * Sq));
  NaiveArgs na;
  na.fwd = in.a;
  na.o_out = ref_hi.get();
  na.lse_out = ref_lse.get();
  naive_attention(na);
  na.o_out = ref_bf.get();
  na.lse_out = nullptr;
  na.emulate_bf16 = true;
  naive_attention(na);
  sync_or_explain();
  const auto hi32 = ref_hi.to_host(ref_hi.size());
  const auto lse32 = ref_lse.to_host(ref_lse.size());
  References r{{hi32.begin(), hi32.end()}, {lse32.begin(), lse32.end()}, ref_bf.to_host(ref_bf.size())};
  if (static_cast<double>(B * H) * Sq * Skv * D <= 3e8) {
    const auto cpu = reference_fwd(dense_on_host(in, in.a.q), dense_on_host(in, in.a.k), dense_on_host(in, in.a.v), B,
                                   Sq, Skv, H, D, c.causal, 1.0 / std::sqrt(double(D)));
    EXPECT_LT(error_of(hi32, cpu.o).rel_l2, 1e-5) << "GPU naive fp32 reference disagrees with the fp64 CPU reference";
    r.hi = cpu.o;
    r.lse = cpu.lse;
  }
  return r;
}

// Every LSE within 2e-3 + 1e-4 |ref| of the reference; -inf rows (nothing attended) -inf.
void expect_lse_close(const std::vector<float>& lse, const std::vector<double>& ref) {
  int64_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(ref[i])) {
      bad += !(std::isinf(lse[i]) && lse[i] < 0);
      continue;
    }
    const double d = std::abs(lse[i] - ref[i]);
    worst = std::max(worst, d);
    bad += !(d <= 2e-3 + 1e-4 * std::abs(ref[i]));
  }
  EXPECT_EQ(bad, 0) << "LSE mismatches; worst |diff| " << worst;
}

void run_case(const Case& c) {
  const uint64_t seed = std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32);
  SCOPED_TRACE(name(c) + " seed " + std::to_string(seed));
  const int64_t B = c.B, Sq = c.Sq, H = c.H, D = c.D;
  CaseInputs in = make_inputs(c, seed);
  FwdArgs& a = in.a;
  // Output: padded layouts put 8 spare elements after every head (must stay NaN).
  const int64_t o_hstride = c.layout == Layout::padded ? D + 8 : D;
  const int64_t o_elems = B * Sq * H * o_hstride;
  DeviceBuffer<uint16_t> dout(static_cast<size_t>(o_elems));
  a.o = Tensor4{dout.get(), DType::bf16, B, Sq, H, D, Sq * H * o_hstride, H * o_hstride, o_hstride, 1};
  DeviceBuffer<float> dlse(static_cast<size_t>(B * H * Sq));
  a.lse = c.lse ? dlse.get() : nullptr;
  a.causal = c.causal;

  auto run = [&] {
    fill_bf16_bits(dout.get(), o_elems, kBf16NaN);
    fill_f32(dlse.get(), B * H * Sq, NAN);
    FwdOptions opt;
    opt.max_ctas = c.max_ctas;
    opt.pingpong = c.pingpong;
    opt.head_group = c.head_group;
    opt.snake = c.snake;
    flash_fwd(a, nullptr, opt);
    sync_or_explain();
  };
  run();
  if (::testing::Test::HasFatalFailure() || ::testing::Test::HasFailure()) return;
  const auto raw = dout.to_host(static_cast<size_t>(o_elems));
  const auto lse = dlse.to_host(static_cast<size_t>(B * H * Sq));

  // Written exactly where it should be.
  const Unpacked ours = unpack_output(c, raw, o_hstride);
  ASSERT_EQ(ours.unwritten, 0) << "output elements left NaN (unwritten or NaN computed)";
  ASSERT_EQ(ours.pad_touched, 0) << "the kernel wrote into padding between heads";

  const References ref = references(c, in);
  const Err e_ours = error_of(ours.o, ref.hi), e_bf = error_of(ref.bf, ref.hi);
  constexpr double kAtolMax = 2e-3, kAtolL2 = 1e-4;
  EXPECT_LE(e_ours.max_abs, 2 * e_bf.max_abs + kAtolMax)
      << "max |ours - ref| " << e_ours.max_abs << " vs bf16 reference " << e_bf.max_abs;
  EXPECT_LE(e_ours.rel_l2, 2 * e_bf.rel_l2 + kAtolL2)
      << "rel L2 ours " << e_ours.rel_l2 << " vs bf16 reference " << e_bf.rel_l2;
  ::testing::Test::RecordProperty("rel_l2_ours", std::to_string(e_ours.rel_l2));
  if (c.lse) expect_lse_close(lse, ref.lse);

  // Deterministic: a second run gives the same bits.
  run();
  const auto raw2 = dout.to_host(static_cast<size_t>(o_elems));
  int64_t diff = 0;
  for (size_t i = 0; i < raw.size(); ++i) diff += raw[i] != raw2[i];
  EXPECT_EQ(diff, 0) << "a second run on the same inputs differs (race?)";
}

}  // namespace

class AttentionSizes : public ::testing::TestWithParam<std::tuple<int, bool, int>> {};

TEST_P(AttentionSizes, MatchesReference) {
  const auto [D, causal, S] = GetParam();
  const int H = S >= 4097 ? 2 : 3, B = S >= 4097 ? 1 : 2;
  run_case({B, S, S, H, D, causal});
}

INSTANTIATE_TEST_SUITE_P(OddSizes, AttentionSizes,
                         ::testing::Combine(::testing::Values(64, 128), ::testing::Bool(),
                                            ::testing::Values(1, 127, 1000, 4097)));

// The scheduling variants compute the same function: pingpong on and off,
// causal head sections, on odd sizes and with several tiles per CTA.
class AttentionVariants : public ::testing::TestWithParam<std::tuple<int, bool, int>> {};

TEST_P(AttentionVariants, MatchesReference) {
  const auto [D, causal, pingpong] = GetParam();
  for (int S : {1, 127, 1000, 4097}) {
    const int H = S >= 4097 ? 2 : 3, B = S >= 4097 ? 1 : 2;
    Case c{B, S, S, H, D, causal};
    c.pingpong = pingpong;
    run_case(c);
  }
  Case many{2, 1000, 1000, 5, D, causal, Layout::dense, true, 7};
  many.pingpong = pingpong;
  run_case(many);
  many.snake = 1;  // boustrophedon rounds
  run_case(many);
  if (causal) {
    many.head_group = 2;  // sections of 2 heads (5 heads: 2 + 2 + 1)
    run_case(many);
    many.head_group = -2;
    run_case(many);
  }
  run_case({1, 1000, 127, 2, D, causal, Layout::dense, true, 0, pingpong});
  run_case({1, 127, 1000, 2, D, causal, Layout::dense, true, 0, pingpong});
}

INSTANTIATE_TEST_SUITE_P(Scheduling, AttentionVariants,
                         ::testing::Combine(::testing::Values(64, 128), ::testing::Bool(), ::testing::Values(0, 1)));

TEST(AttentionGpu, DifferentQueryAndKeyLengths) {
  for (int D : {64, 128})
    for (bool causal : {false, true}) {
      run_case({1, 1000, 127, 2, D, causal});
      run_case({1, 127, 1000, 2, D, causal});
      run_case({1, 1, 4097, 2, D, causal});
      run_case({2, 300, 1, 2, D, causal});  // causal: most rows see no key -> O = 0, LSE = -inf
    }
}

TEST(AttentionGpu, StridedLayouts) {
  for (int D : {64, 128})
    for (bool causal : {false, true}) {
      run_case({2, 1000, 1000, 3, D, causal, Layout::packed_qkv});
      run_case({2, 333, 517, 2, D, causal, Layout::padded, false});
    }
}

TEST(AttentionGpu, PersistentCtasRunManyTiles) {
  for (int D : {64, 128})
    for (bool causal : {false, true}) run_case({2, 1000, 1000, 3, D, causal, Layout::dense, true, 3});
}

TEST(AttentionGpu, UnsupportedShapesRefusedBeforeLaunch) {
  DeviceBuffer<uint16_t> buf(1 << 16);
  fill_bf16_bits(buf.get(), 1 << 16, kBf16NaN);
  XS_CHECK_CUDA(cudaDeviceSynchronize());
  FwdArgs a;
  a.q = a.k = a.v = a.o = Tensor4::bshd(buf.get(), 1, 64, 2, 96);
  EXPECT_THROW(flash_fwd(a), common::Error);  // D = 96
  a.q = a.k = a.v = a.o = Tensor4::bshd(buf.get(), 1, 64, 2, 64);
  a.k.stride_s = 2 * 64 + 4;  // not a multiple of 8 elements
  EXPECT_THROW(flash_fwd(a), common::Error);
  a.k = a.q;
  a.v.dtype = DType::fp16;
  EXPECT_THROW(flash_fwd(a), common::Error);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  const auto h = buf.to_host(1 << 16);
  for (auto x : h) ASSERT_EQ(x, kBf16NaN) << "a refused call wrote output";
}

// Small cases for compute-sanitizer (memcheck, racecheck): tails, causal,
// Skv != Sq, several tiles per CTA.
TEST(AttentionGpu, SanitizerCase) {
  for (int pingpong : {0, 1}) {
    run_case({1, 200, 200, 2, 128, true, Layout::dense, true, 2, pingpong});
    run_case({1, 130, 260, 1, 64, false, Layout::dense, true, 1, pingpong});
  }
}
