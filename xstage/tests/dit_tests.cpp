// CPU tests of the DiT host side: presets and validation messages, the token
// grid and SP shards, RoPE tables (closed forms), the weight schema and random
// weights, safetensors round trips and refusals on files the tests write, the
// fp32 reference's structure (adaLN-Zero gates, attention mixing, shard
// invariance of positions) and the Euler sampler on ODEs with closed forms.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "common/files.hpp"
#include "common/plot.hpp"
#include "common/testing.hpp"
#include "xstage/dit/dit.hpp"
#include "xstage/dit/safetensors.hpp"
#include "xstage/ulysses/ulysses.hpp"
#include "xstage/ulysses/qkv.hpp"

using namespace xstage::dit;
using common::error_of;

namespace {

std::filesystem::path temp_path(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("xstage_dit_tests_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir / name;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// Sets the rows of the block's modulation that produce gate 1 (attention) or gate 2 (FFN) to zero.
void zero_gate(Weights& w, const Config& c, int block, int which) {
  const int64_t C = c.hidden, row0 = (which == 1 ? 2 : 5) * C;
  auto& W = w[block_param(block, "mod.weight")].data;
  auto& b = w[block_param(block, "mod.bias")].data;
  for (int64_t r = row0; r < row0 + C; ++r) {
    b[size_t(r)] = 0;
    for (int64_t k = 0; k < C; ++k) W[size_t(r * C + k)] = 0;
  }
}

}  // namespace

// ---- presets and validation ----------------------------------------------------

TEST(DitPresets, AllValidateAndMatchTheirModels) {
  for (const auto& n : preset_names()) EXPECT_NO_THROW(validate(preset(n))) << n;
  const Config f = preset("flux-like");
  EXPECT_EQ(f.hidden, 3072);
  EXPECT_EQ(f.heads, 24);
  EXPECT_EQ(f.head_dim, 128);
  EXPECT_EQ(f.blocks, 57);
  EXPECT_EQ(f.ffn_hidden, 4 * 3072);
  EXPECT_FALSE(f.video);
  const Config w = preset("wan-like");
  EXPECT_EQ(w.hidden, 5120);
  EXPECT_EQ(w.heads, 40);
  EXPECT_EQ(w.ffn_hidden, 13824);
  EXPECT_EQ(w.blocks, 40);
  EXPECT_TRUE(w.video);
  EXPECT_EQ(preset("dit-moe").ffn, Ffn::moe);
  EXPECT_TRUE(contains(error_of([] { preset("sdxl"); }), "unknown preset 'sdxl' (known: tiny,"));
}

TEST(DitValidate, OneLineRulesNameTheField) {
  const Config f = preset("flux-like");
  EXPECT_NO_THROW(validate(f, {4096, 4, 4, 2}, true, 4));
  EXPECT_TRUE(contains(error_of([&] { validate(f, {4000, 5, 1, 0}, false); }), "24 heads do not split over P = 5"));
  EXPECT_EQ(error_of([&] { validate(f, {4097, 1, 1, 0}, false); }), "");  // any count splits over P = 1
  // Any count splits over P > 1 too: the ranks pad it (padded_tokens, below).
  EXPECT_EQ(error_of([&] { validate(f, {4098, 4, 1, 0}, true, 4); }), "");
  EXPECT_EQ(error_of([&] { validate(f, {4000, 2, 1, 0}, true, 2); }), "");
  EXPECT_TRUE(contains(error_of([&] { validate(f, {4096, 2, 1, 0, -1}, false); }), "pad multiple -1 must be >= 0"));
  EXPECT_TRUE(contains(error_of([&] { validate(f, {4096, 4, 1, 0}, true, 2); }),
                       "--gpus 4 asks for more ranks than the 2 visible GPU(s)"));
  EXPECT_TRUE(contains(error_of([&] { validate(f, {4096, 1, 0, 0}, false); }), "--steps 0"));
  EXPECT_TRUE(contains(error_of([&] { validate(f, {4096, 1, 1, 58}, false); }), "--blocks 58 is outside 1 .. 57"));
  const Config w = preset("wan-like");
  EXPECT_TRUE(contains(error_of([&] { validate(w, {4096, 1, 1, 0}, false); }), "not a multiple of wan-like's 21 frames"));
  EXPECT_NO_THROW(validate(w, {21 * 3600, 1, 1, 0}, true));
  // The exact 720p length runs on 1, 2, 4 and 8 ranks (padded), and so does 75,264 (21 x 56 x 64).
  for (int P : {1, 2, 4, 8}) EXPECT_NO_THROW(validate(w, {21 * 3600, P, 1, 2}, true, 8)) << P;
  for (int P : {1, 2, 4}) EXPECT_NO_THROW(validate(w, {75264, P, 1, 2}, true, 4)) << P;
  EXPECT_EQ(token_grid(w, 75264).h, 56);
  EXPECT_EQ(token_grid(w, 75264).w, 64);
  Config odd = preset("tiny");
  odd.head_dim = 32;
  odd.hidden = 64;
  EXPECT_NO_THROW(validate(odd, {256, 1, 1, 0}, false));
  EXPECT_TRUE(contains(error_of([&] { validate(odd, {256, 1, 1, 0}, true); }), "head_dim 32 is not supported"));
  odd.hidden = 65;
  EXPECT_TRUE(contains(error_of([&] { validate(odd); }), "hidden 65 != heads 2 x head_dim 32"));
  Config moe = preset("tiny-moe");
  EXPECT_TRUE(contains(error_of([&] { validate(moe, {256, 8, 1, 0}, false); }), "heads do not split"));
  moe.heads = 8;
  moe.head_dim = 32;
  EXPECT_TRUE(contains(error_of([&] { validate(moe, {256, 8, 1, 0}, false); }), "4 experts do not split over P = 8"));
  moe.topk = 5;
  EXPECT_TRUE(contains(error_of([&] { validate(moe); }), "topk 5 must be in 1 .. experts 4"));
}

// ---- grid, shards, RoPE ----------------------------------------------------------

TEST(DitGrid, SquareAsPossibleAndRasterOrder) {
  const Grid g = token_grid(preset("flux-like"), 4096);
  EXPECT_EQ(g.t, 1);
  EXPECT_EQ(g.h, 64);
  EXPECT_EQ(g.w, 64);
  const Grid v = token_grid(preset("wan-like"), 75600);  // 21 frames of 45 x 80 (720p / 16)
  EXPECT_EQ(v.t, 21);
  EXPECT_EQ(v.h * v.w, 3600);
  EXPECT_LE(v.h, v.w);
  const Grid prime = token_grid(preset("tiny"), 13);
  EXPECT_EQ(prime.h, 1);
  EXPECT_EQ(prime.w, 13);
  const Grid s{3, 4, 5};
  EXPECT_EQ(position_of(s, 0), (Pos{0, 0, 0}));
  EXPECT_EQ(position_of(s, 5 * 4 + 7), (Pos{1, 1, 2}));
  EXPECT_EQ(position_of(s, 59), (Pos{2, 3, 4}));
  EXPECT_TRUE(contains(error_of([&] { position_of(s, 60); }), "token 60 is outside the 3x4x5 grid"));
}

TEST(DitPadding, WholeTilesPerRankAndNoMoreThanOneTileRowOfPadding) {
  const Config f = preset("flux-like"), w = preset("wan-like");
  EXPECT_EQ(padded_tokens(f, {4096, 1}), 4096);
  // One rank: attention takes any length, the fused QKV kernel (gemm_epilogues, D = 128)
  // whole 128-row tiles.
  ASSERT_TRUE(single_gpu_pads_for_qkv(f));
  EXPECT_EQ(padded_tokens(f, {4097, 1}), 4224);
  Config f_separate = f, tiny = preset("tiny");
  f_separate.gemm_epilogues = false;
  EXPECT_FALSE(single_gpu_pads_for_qkv(f_separate));
  EXPECT_EQ(padded_tokens(f_separate, {4097, 1}), 4097);
  EXPECT_FALSE(single_gpu_pads_for_qkv(tiny)) << "tiny's heads are not 128 wide";
  EXPECT_EQ(padded_tokens(tiny, {300, 1}), 300);
  EXPECT_EQ(padded_tokens(w, {75600, 1}), 75648);  // 591 tiles of 128: 48 padding tokens
  EXPECT_EQ(padded_tokens(f, {4096, 4}), 4096);  // 1024 per rank: no padding
  EXPECT_EQ(padded_tokens(f, {4000, 2}), 4096);
  EXPECT_EQ(padded_tokens(f, {100, 2}), 256);
  // wan-like 720p: 75,600 = 21 x 60 x 60.
  EXPECT_EQ(padded_tokens(w, {75600, 2}), 75776);  // 296 tiles of 128 per rank: 176 padding tokens
  EXPECT_EQ(padded_tokens(w, {75600, 4}), 75776);  // 148 per rank
  EXPECT_EQ(padded_tokens(w, {75600, 8}), 75776);  // 74 per rank
  EXPECT_EQ(padded_tokens(w, {75264, 4}), 75264);
  EXPECT_EQ(padded_tokens(f, {200, 1, 1, 0, 128}), 256);  // asked for: padding on one rank too
  EXPECT_EQ(padded_tokens(f, {200, 2, 1, 0, 96}), 768);   // lcm(96, 256)
  for (int P : {2, 4, 8})
    for (int64_t n : {1, 127, 128, 129, 1000, 75600}) {
      const int64_t m = padded_tokens(f, {n, P});
      EXPECT_EQ(m % (128 * P), 0) << n << " " << P;
      EXPECT_GE(m, n);
      EXPECT_LT(m - n, 128 * P) << n << " " << P;
    }
}

TEST(DitShard, PaddingTokensSitAtTheEndWithPositionZero) {
  const Grid g = token_grid(preset("tiny"), 300);  // 15 x 20
  const int64_t padded = padded_tokens(preset("tiny"), {300, 4});
  ASSERT_EQ(padded, 512);
  int64_t valid = 0;
  for (int r = 0; r < 4; ++r) {
    const Shard s = shard_of(g, 4, r, padded);
    EXPECT_EQ(s.rows, 128);
    EXPECT_EQ(s.row0, 128 * r);
    EXPECT_EQ(s.valid, std::clamp<int64_t>(300 - 128 * r, 0, 128)) << r;  // 128, 128, 44, 0
    for (int64_t i = 0; i < s.rows; ++i)
      EXPECT_EQ(s.pos[size_t(i)], i < s.valid ? position_of(g, s.row0 + i) : Pos{}) << r << " " << i;
    valid += s.valid;
  }
  EXPECT_EQ(valid, 300);
  EXPECT_TRUE(contains(error_of([&] { shard_of(g, 4, 0, 256); }), "256 padded tokens are fewer than the grid's 300"));
  EXPECT_EQ(shard_of(g, 1, 0).valid, 300);
}

TEST(DitShard, ContiguousSlicesWhosePositionsFollowTheTokens) {
  const Grid g = token_grid(preset("tiny-video"), 2 * 16 * 16);
  for (int P : {1, 2, 4, 8}) {
    int64_t next = 0;
    for (int r = 0; r < P; ++r) {
      const Shard s = shard_of(g, P, r);
      EXPECT_EQ(s.row0, next);
      EXPECT_EQ(s.rows, g.tokens() / P);
      for (int64_t i = 0; i < s.rows; ++i) EXPECT_EQ(s.pos[size_t(i)], position_of(g, s.row0 + i));
      next += s.rows;
    }
    EXPECT_EQ(next, g.tokens());
  }
  EXPECT_TRUE(contains(error_of([&] { shard_of(g, 3, 0); }), "do not split over P = 3"));
}

TEST(DitRope, SplitAndClosedFormAngles) {
  Config c = preset("flux-like");
  RopeSplit s = rope_split(c);
  EXPECT_EQ(s.t, 0);
  EXPECT_EQ(s.h, 32);
  EXPECT_EQ(s.w, 32);
  c = preset("wan-like");
  s = rope_split(c);
  EXPECT_EQ(s.h, 21);
  EXPECT_EQ(s.w, 21);
  EXPECT_EQ(s.t, 22);
  c = preset("tiny-video");  // D = 64: 32 pairs = t 12 + h 10 + w 10
  s = rope_split(c);
  EXPECT_EQ(s.t + s.h + s.w, 32);
  EXPECT_EQ(s.h, 10);
  const RopeTable tb = rope_table(c, {{0, 0, 0}, {1, 2, 3}});
  for (int64_t j = 0; j < tb.pairs; ++j) {
    EXPECT_FLOAT_EQ(tb.cos[size_t(j)], 1.0f);
    EXPECT_FLOAT_EQ(tb.sin[size_t(j)], 0.0f);
  }
  // Row 1: the first pair of each axis turns by the position itself; pair i of the w axis by 3 theta^(-i/10).
  EXPECT_NEAR(tb.sin[size_t(tb.pairs + 0)], std::sin(1.0), 1e-6);
  EXPECT_NEAR(tb.sin[size_t(tb.pairs + s.t)], std::sin(2.0), 1e-6);
  EXPECT_NEAR(tb.sin[size_t(tb.pairs + s.t + s.h)], std::sin(3.0), 1e-6);
  EXPECT_NEAR(tb.cos[size_t(tb.pairs + s.t + s.h + 4)], std::cos(3.0 * std::pow(10000.0, -0.4)), 1e-6);
}

// ---- weights ----------------------------------------------------------------------

TEST(DitWeights, SchemaSeedsAndChecks) {
  const Config c = preset("tiny");
  const auto specs = param_specs(c, 2);
  EXPECT_EQ(specs.size(), 6u + 2 * 12 + 4);
  EXPECT_EQ(specs[0].name, "patch_embed.weight");
  EXPECT_EQ(specs[0].shape, (std::vector<int64_t>{128, 16}));
  const Weights a = random_weights(c, 2, 7), b = random_weights(c, 2, 7), d = random_weights(c, 2, 8);
  const Weights one = random_weights(c, 1, 7);
  EXPECT_EQ(a.at("blocks.1.attn.qkv.weight").data, b.at("blocks.1.attn.qkv.weight").data);
  EXPECT_NE(a.at("blocks.1.attn.qkv.weight").data, d.at("blocks.1.attn.qkv.weight").data);
  EXPECT_EQ(a.at("blocks.0.mlp.fc2.weight").data, one.at("blocks.0.mlp.fc2.weight").data);  // independent of the rest
  // Empirical moments of the initialisation.
  const auto& W = a.at("blocks.0.mlp.fc1.weight").data;  // [512, 128]: N(0, 1/128)
  double s1 = 0, s2 = 0;
  for (float v : W) s1 += v, s2 += double(v) * v;
  EXPECT_NEAR(s1 / double(W.size()), 0.0, 0.003);
  EXPECT_NEAR(s2 / double(W.size()), 1.0 / 128, 0.0005);
  const auto& qn = a.at("blocks.0.attn.q_norm.weight").data;
  double m = 0;
  for (float v : qn) m += v;
  EXPECT_NEAR(m / double(qn.size()), 1.0, 0.05);

  Weights bad = a;
  bad.erase("final.proj.bias");
  EXPECT_TRUE(contains(error_of([&] { check_weights(c, 2, bad); }), "weights lack 'final.proj.bias'"));
  bad = a;
  bad["blocks.0.attn.proj.weight"].shape = {128, 64};
  EXPECT_TRUE(contains(error_of([&] { check_weights(c, 2, bad); }),
                       "'blocks.0.attn.proj.weight' has shape [128, 64], expected [128, 128]"));
  bad = a;
  bad["extra"] = Tensor{{1}, {0.0f}};
  EXPECT_TRUE(contains(error_of([&] { check_weights(c, 2, bad); }), "unexpected tensor 'extra'"));
  EXPECT_TRUE(contains(error_of([&] { check_weights(c, 1, a); }), "unexpected tensor 'blocks.1."));

  const auto moe_specs = param_specs(preset("tiny-moe"), 1);
  bool has_w1 = false;
  for (const auto& s : moe_specs)
    if (s.name == "blocks.0.moe.w1") has_w1 = s.shape == std::vector<int64_t>{4, 256, 256};
  EXPECT_TRUE(has_w1);
}

// ---- safetensors -------------------------------------------------------------------

TEST(DitSafetensors, RoundTripF32ExactBf16Rounded) {
  StFile f;
  f.metadata["note"] = "test";
  f.tensors["a"] = StTensor::from_f32({1.0f, -2.5f, 3.14159f, 1e-20f, 0.0f, 7.0f}, {2, 3}, StDType::f32);
  f.tensors["b"] = StTensor::from_f32({1.0f, 1.00390625f, 3.14159f}, {3}, StDType::bf16);
  f.tensors["empty"] = StTensor::from_f32({}, {0, 4}, StDType::f32);
  const auto path = temp_path("roundtrip.safetensors");
  write_safetensors(path, f);
  const StFile g = read_safetensors(path);
  EXPECT_EQ(g.metadata.at("note"), "test");
  EXPECT_EQ(g.tensors.at("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(g.tensors.at("a").to_f32(), f.tensors.at("a").to_f32());
  const auto bv = g.tensors.at("b").to_f32();
  EXPECT_EQ(bv[0], 1.0f);
  EXPECT_EQ(bv[1], 1.0f);  // 1 + 2^-8 is a tie: rounds to even (1.0)
  EXPECT_EQ(bv[2], 3.140625f);
  EXPECT_EQ(g.tensors.at("empty").numel(), 0);
  // The header length is a multiple of 8 (data aligned) and the layout is what the format says.
  const std::string bytes = common::read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 6 * 4 + 3 * 2);
}

TEST(DitSafetensors, BadFilesGiveOneClearLine) {
  StFile f;
  f.tensors["w"] = StTensor::from_f32(std::vector<float>(16, 1.0f), {4, 4}, StDType::f32);
  const std::string good = serialize_safetensors(f);
  auto err = [](const std::string& bytes) { return error_of([&] { parse_safetensors(bytes, "x.safetensors"); }); };
  EXPECT_EQ(err(good), "");
  EXPECT_TRUE(contains(err(good.substr(0, 5)), "too short"));
  EXPECT_TRUE(contains(err(good.substr(0, good.size() - 4)), "tensor 'w' ends at byte 64 of data, but the file holds 60 (truncated?)"));
  EXPECT_TRUE(contains(err(good.substr(0, 20)), "runs past the end"));
  std::string huge = good;
  huge[7] = char(0x7f);
  EXPECT_TRUE(contains(err(huge), "over the format's 100 MiB limit"));
  auto with_header = [](const std::string& json, size_t data) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[size_t(i)] = char((json.size() >> (8 * i)) & 0xff);
    return s + json + std::string(data, '\0');
  };
  EXPECT_TRUE(contains(err(with_header("{\"w\": [1, 2", 0)), "header is not valid JSON"));
  EXPECT_TRUE(contains(err(with_header("[1]", 0)), "header is not a JSON object"));
  EXPECT_TRUE(contains(err(with_header(R"({"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})", 4)),
                       "dtype F16, which is not supported"));
  EXPECT_TRUE(contains(err(with_header(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8)),
                       "tensor 'w': 8 bytes for F32 shape [3] (expected 12)"));
  EXPECT_TRUE(contains(err(with_header(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 8]}})", 8)),
                       "bad dimension"));
  EXPECT_TRUE(contains(err(with_header(R"({"w": {"dtype": "F32", "shape": [2]}})", 8)), "lacks dtype, shape or"));
  EXPECT_TRUE(contains(err(with_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 8)),
                       "run backwards"));
  EXPECT_TRUE(contains(err(with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                          "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                       12)),
                       "tensors 'a' and 'b' overlap"));
  EXPECT_TRUE(contains(err(with_header(R"({"__metadata__": {"k": 1}})", 0)), "value of 'k' is not a string"));
  EXPECT_TRUE(contains(error_of([] { read_safetensors(temp_path("missing.safetensors")); }), "cannot open"));
}

TEST(DitSafetensors, WeightsSaveLoadAndRefuseTheWrongModel) {
  const Config c = preset("tiny");
  const Weights w = random_weights(c, 2, 3);
  const auto p32 = temp_path("tiny_f32.safetensors"), p16 = temp_path("tiny_bf16.safetensors");
  save_weights(p32, c, 2, w, StDType::f32);
  save_weights(p16, c, 2, w, StDType::bf16);
  const Weights r32 = load_weights(p32, c, 2), r16 = load_weights(p16, c, 2);
  for (const auto& [name, t] : w) {
    EXPECT_EQ(r32.at(name).data, t.data) << name;
    for (size_t i = 0; i < t.data.size(); ++i)
      ASSERT_NEAR(r16.at(name).data[i], t.data[i], std::fabs(t.data[i]) / 256 + 1e-30) << name;
  }
  EXPECT_EQ(read_safetensors(p16).metadata.at("preset"), "tiny");
  EXPECT_TRUE(contains(error_of([&] { load_weights(p32, c, 1); }), "unexpected tensor 'blocks.1."));
  Config moe = c;  // tiny's width with an MoE FFN (the tiny-moe preset is wider)
  moe.ffn = Ffn::moe;
  moe.experts = 4;
  moe.topk = 2;
  moe.moe_inter = 128;
  EXPECT_TRUE(contains(error_of([&] { load_weights(p32, moe, 2); }), "weights lack 'blocks.0.moe.router.weight'"));
  EXPECT_TRUE(contains(error_of([&] { load_weights(p32, preset("tiny-moe"), 2); }),
                       "'patch_embed.weight' has shape [128, 16], expected [256, 16]"));
  Config wide = c;
  wide.ffn_hidden = 256;
  EXPECT_TRUE(contains(error_of([&] { load_weights(p32, wide, 2); }),
                       "'blocks.0.mlp.fc1.weight' has shape [512, 128], expected [256, 128]"));
  // A truncated weights file names the file.
  const std::string bytes = common::read_file(p32);
  const auto cut = temp_path("cut.safetensors");
  common::write_file_atomic(cut, std::string_view(bytes).substr(0, bytes.size() / 2));
  const std::string e = error_of([&] { load_weights(cut, c, 2); });
  EXPECT_TRUE(contains(e, "cut.safetensors") && contains(e, "truncated?")) << e;
}

// ---- the CPU denoiser --------------------------------------------------------------

TEST(DitReference, TimestepFeaturesClosedForm) {
  const Config c = preset("tiny");
  const auto f0 = timestep_features(c, 0.0f);
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(f0[size_t(i)], 1.0f);
    EXPECT_EQ(f0[size_t(128 + i)], 0.0f);
  }
  const auto f = timestep_features(c, 0.5f);
  EXPECT_NEAR(f[0], std::cos(500.0), 1e-5);
  EXPECT_NEAR(f[128 + 64], std::sin(500.0 * std::exp(-std::log(10000.0) * 0.5)), 1e-5);
}

TEST(DitReference, ZeroGatesMakeBlocksIdentity) {
  const Config c = preset("tiny");
  const Grid g = token_grid(c, 64);
  Weights w = random_weights(c, 2, 11);
  const auto lat = random_latent(c, g.tokens(), 5);
  zero_gate(w, c, 1, 1);
  zero_gate(w, c, 1, 2);
  Weights first = w;
  for (auto it = first.begin(); it != first.end();) it = it->first.rfind("blocks.1.", 0) == 0 ? first.erase(it) : ++it;
  const auto two = reference_forward(c, 2, w, g, lat, 0.7f);
  const auto one = reference_forward(c, 1, first, g, lat, 0.7f);
  EXPECT_EQ(two, one);
  EXPECT_GT(max_abs(two), 0.1);
  // With block 1 live, the output changes.
  const auto live = reference_forward(c, 2, random_weights(c, 2, 11), g, lat, 0.7f);
  double d = 0;
  for (size_t i = 0; i < live.size(); ++i) d = std::max(d, double(std::fabs(live[i] - one[i])));
  EXPECT_GT(d, 1e-2);
}

TEST(DitReference, AttentionIsTheOnlyPathBetweenTokens) {
  const Config c = preset("tiny");
  const Grid g = token_grid(c, 64);
  const auto lat = random_latent(c, g.tokens(), 9);
  auto lat2 = lat;
  for (int64_t j = 0; j < c.in_dim(); ++j) lat2[size_t(63 * c.in_dim() + j)] += 1.0f;  // perturb token 63 only
  auto other_tokens_diff = [&](const Weights& w) {
    const auto a = reference_forward(c, 2, w, g, lat, 0.3f), b = reference_forward(c, 2, w, g, lat2, 0.3f);
    double d = 0;
    for (size_t i = 0; i < size_t(63 * c.in_dim()); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
    return d;
  };
  Weights w = random_weights(c, 2, 4);
  EXPECT_GT(other_tokens_diff(w), 1e-4);
  zero_gate(w, c, 0, 1);
  zero_gate(w, c, 1, 1);
  EXPECT_EQ(other_tokens_diff(w), 0.0);
}

TEST(DitReference, VideoAndMoeForwardsAreFiniteAndDeterministic) {
  for (const char* name : {"tiny-video", "tiny-moe"}) {
    const Config c = preset(name);
    const Grid g = token_grid(c, 2 * 32);
    const Weights w = random_weights(c, c.blocks, 2);
    const auto lat = random_latent(c, g.tokens(), 1);
    const auto a = reference_forward(c, c.blocks, w, g, lat, 0.5f), b = reference_forward(c, c.blocks, w, g, lat, 0.5f);
    EXPECT_EQ(a, b) << name;
    EXPECT_EQ(int64_t(a.size()), g.tokens() * c.in_dim());
    for (float v : a) ASSERT_TRUE(std::isfinite(v)) << name;
    EXPECT_GT(max_abs(a), 0.1) << name;
  }
  const Config c = preset("tiny");
  EXPECT_TRUE(contains(error_of([&] { reference_forward(c, 2, random_weights(c, 2, 1), token_grid(c, 64), {1.0f}, 0); }),
                       "latent has 1 values, expected 64 tokens x 16"));
}

// ---- sampler ----------------------------------------------------------------------

// ---- the run's plan (xstage dit --plan) ---------------------------------------

TEST(DitPlan, FourRanksTokensHeadsBytesAndFlops) {
  const Config c = preset("flux-like");
  const auto peer = xstage::burstgap::example_params("peer");
  const RunPlan plan = plan_run(c, {4096, 4, 1, 0}, peer);
  EXPECT_EQ(plan.padded, 4096);
  EXPECT_EQ(plan.per_rank, 1024);
  EXPECT_EQ(plan.blocks, 57);
  ASSERT_EQ(plan.rank.size(), 4u);
  const xstage::ulysses::Problem up{4, 1, 4096, 24, 128, false, 4096};
  for (const RankPlan& r : plan.rank) {
    EXPECT_EQ(r.row0, 1024 * r.rank);
    EXPECT_EQ(r.real, 1024);
    EXPECT_EQ(r.padding, 0);
    EXPECT_EQ(r.head0, 6 * r.rank);
    EXPECT_EQ(r.heads, 6);
    EXPECT_TRUE(r.qkv_fused) << "D = 128: the QKV projection carries the pre-attention exchange";
    EXPECT_EQ(r.qkv_grid, std::min(132, xstage::ulysses::qkv_tiles(up)));
    // The same choices the Ulysses layer makes on that rank.
    const auto q = xstage::ulysses::choose_qkv_schedule(up, r.rank, r.qkv_grid, peer);
    EXPECT_EQ(r.qkv_order, q.reason);
    EXPECT_DOUBLE_EQ(r.qkv_stall_ns, q.predicted_stall_ns);
    EXPECT_GE(r.attention_grid, 1);
    EXPECT_LE(r.attention_grid, 132);
    EXPECT_EQ(r.attention_order, xstage::ulysses::choose_schedule(up, r.rank, r.attention_grid, peer).reason);
  }
  const double L = 1024, C = 3072;
  EXPECT_DOUBLE_EQ(plan.pre_a2a_bytes, 3 * L * C * 2 * 0.75);  // q, k, v of the other ranks' heads
  EXPECT_DOUBLE_EQ(plan.post_a2a_bytes, L * C * 2 * 0.75);
  EXPECT_DOUBLE_EQ(plan.gemm_flops, 2 * L * C * 3 * C + 2 * L * C * C + 4 * L * C * 12288);
  EXPECT_DOUBLE_EQ(plan.attention_flops, 4.0 * 4096 * 4096 * 128 * 6);
  EXPECT_FALSE(plan.moe);
}

TEST(DitPlan, PaddingOnTheLastRankMoeSchedulesAndOneGpu) {
  const auto peer = xstage::burstgap::example_params("peer");
  const RunPlan wan = plan_run(preset("wan-like"), {75600, 4, 1, 0}, peer);
  ASSERT_EQ(wan.rank.size(), 4u);
  EXPECT_EQ(wan.padded, 75776);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(wan.rank[r].padding, 0);
  EXPECT_EQ(wan.rank[3].real, 75600 - 3 * 18944);
  EXPECT_EQ(wan.rank[3].padding, 176);
  EXPECT_DOUBLE_EQ(wan.attention_flops, 4.0 * 75776 * 75600 * 128 * 10) << "queries padded, keys real";

  const RunPlan moe8 = plan_run(preset("dit-moe"), {4096, 8, 1, 0}, peer);  // eight ranks
  ASSERT_TRUE(moe8.moe);
  EXPECT_TRUE(contains(moe8.moe_interleaved, "interleaved split")) << moe8.moe_interleaved;
  EXPECT_TRUE(contains(moe8.moe_expert_wave, "wave of")) << moe8.moe_expert_wave;
  EXPECT_DOUBLE_EQ(moe8.moe_dispatch_bytes, 512.0 * 2 * 3072 * 2 * 7 / 8);
  EXPECT_DOUBLE_EQ(moe8.moe_combine_bytes, moe8.moe_dispatch_bytes);

  const RunPlan one = plan_run(preset("flux-like"), {4096, 1, 1, 0}, peer);
  EXPECT_EQ(one.pre_a2a_bytes, 0);
  EXPECT_EQ(one.post_a2a_bytes, 0);
  EXPECT_EQ(one.rank[0].attention_grid, 0);
  EXPECT_TRUE(one.rank[0].qkv_fused) << "P = 1 with the fused epilogues: the fused QKV kernel, every head local";
  EXPECT_EQ(one.rank[0].qkv_stall_ns, 0);
  EXPECT_FALSE(plan_run(preset("tiny"), {512, 2, 1, 0}, peer).rank[0].qkv_fused) << "D = 64: cuBLAS + NCCL";
}

TEST(DitPlan, StallsComeFromTheParametersAndBadRunsAreRefused) {
  // A stage that drains slowly and holds little: the advisor predicts stalls for the same run.
  auto tight = xstage::burstgap::example_params("peer");
  tight.drain_GBps = 20;
  tight.capacity_bytes_gpu = 2e5;
  tight.capacity_bytes_per_sm.reset();
  tight.capacity_scope = xstage::burstgap::CapacityScope::gpu;
  const RunPlan slow = plan_run(preset("flux-like"), {4096, 4, 1, 0}, tight);
  EXPECT_GT(slow.rank[0].qkv_stall_ns, 0) << slow.rank[0].qkv_order;
  EXPECT_GT(slow.rank[0].attention_stall_ns, 0) << slow.rank[0].attention_order;
  const auto peer = xstage::burstgap::example_params("peer");
  EXPECT_TRUE(contains(error_of([&] { plan_run(preset("flux-like"), {4096, 5, 1, 0}, peer); }),
                       "24 heads do not split over P = 5"));
  EXPECT_TRUE(contains(error_of([&] { plan_run(preset("flux-like"), {4096, 4, 1, 0}, peer, 0); }), "--sms"));
}

TEST(DitSampler, EulerOnClosedFormOdes) {
  const auto t = euler_times(4);
  EXPECT_EQ(t, (std::vector<float>{1.0f, 0.75f, 0.5f, 0.25f, 0.0f}));
  EXPECT_TRUE(contains(error_of([] { euler_times(0); }), "0 sampler steps"));
  // dx/dt = c: x(0) = x(1) - c exactly, for any step count.
  std::vector<float> x{1.0f, -2.0f};
  euler_loop(8, "test", false, [&](int, float, float dt) { euler_update(x, {0.5f, 2.0f}, dt); });
  EXPECT_NEAR(x[0], 0.5f, 1e-6);
  EXPECT_NEAR(x[1], -4.0f, 1e-6);
  // dx/dt = x from t = 1 to 0 with K steps: x_K = x_0 (1 - 1/K)^K.
  for (int K : {1, 3, 10}) {
    std::vector<float> y{2.0f};
    int calls = 0;
    euler_loop(K, "test", false, [&](int k, float tk, float dt) {
      EXPECT_EQ(k, calls++);
      EXPECT_FLOAT_EQ(tk, 1.0f - float(k) / float(K));
      euler_update(y, y, dt);
    });
    EXPECT_EQ(calls, K);
    EXPECT_NEAR(y[0], 2.0 * std::pow(1.0 - 1.0 / K, K), 1e-5);
  }
}

TEST(DitSampler, ReferenceSampleMovesTheLatent) {
  const Config c = preset("tiny");
  const Grid g = token_grid(c, 64);
  const Weights w = random_weights(c, 2, 1);
  const auto x0 = random_latent(c, g.tokens(), 1);
  const auto x1 = reference_sample(c, 2, w, g, x0, 2);
  // Two Euler steps by hand.
  auto y = x0;
  euler_update(y, reference_forward(c, 2, w, g, y, 1.0f), -0.5f);
  euler_update(y, reference_forward(c, 2, w, g, y, 0.5f), -0.5f);
  EXPECT_EQ(x1, y);
  EXPECT_NE(x1, x0);
}

// xstage dit --breakdown: one forward's marks into per-phase sums (events of the GPU path).
TEST(DitBreakdown, IntervalsGoToTheirPhases) {
  using xstage::dit::Phase;
  xstage::dit::PhaseTimes t;
  // Two blocks of a serial-path forward, then another forward with other figures.
  const std::vector<Phase> f = {Phase::conditioning, Phase::qkv, Phase::pre_a2a, Phase::attention, Phase::post_a2a,
                                Phase::proj, Phase::ffn, Phase::qkv, Phase::pre_a2a, Phase::attention,
                                Phase::post_a2a, Phase::proj, Phase::ffn, Phase::final_layer};
  t.add_forward(f, {0.5, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 0.25});
  t.add_forward(f, {1.5, 3, 0, 1, 0, 1, 2, 3, 0, 1, 0, 1, 2, 0.75});
  EXPECT_EQ(t.steps, 2);
  EXPECT_DOUBLE_EQ(t.per_step(Phase::conditioning), 1.0);
  EXPECT_DOUBLE_EQ(t.per_step(Phase::qkv), 4.0);       // (1 + 1 + 3 + 3) / 2
  EXPECT_DOUBLE_EQ(t.per_step(Phase::pre_a2a), 2.0);   // (2 + 2 + 0 + 0) / 2
  EXPECT_DOUBLE_EQ(t.per_step(Phase::attention), 4.0);
  EXPECT_DOUBLE_EQ(t.per_step(Phase::post_a2a), 4.0);
  EXPECT_DOUBLE_EQ(t.per_step(Phase::proj), 6.0);
  EXPECT_DOUBLE_EQ(t.per_step(Phase::ffn), 8.0);
  EXPECT_DOUBLE_EQ(t.per_step(Phase::final_layer), 0.5);
  EXPECT_DOUBLE_EQ(t.total_per_step(), 29.5);  // every interval of both forwards, halved
  EXPECT_STREQ(xstage::dit::to_string(Phase::post_a2a), "post_a2a");
  EXPECT_DOUBLE_EQ(xstage::dit::PhaseTimes{}.per_step(Phase::qkv), 0.0);  // no steps: zero, not NaN
  // A label per interval, and no negative interval (events out of order).
  EXPECT_TRUE(contains(error_of([&] { t.add_forward({Phase::qkv}, {1.0, 2.0}); }), "1 phase labels for 2 intervals"));
  EXPECT_TRUE(contains(error_of([&] { t.add_forward({Phase::qkv}, {-1.0}); }), "events out of order"));
  EXPECT_EQ(t.steps, 2);
}

// --breakdown's chart: one series per path; refusals name what is missing.
TEST(DitBreakdown, ChartOfThePathsPhases) {
  if (!common::plot::charts_available()) GTEST_SKIP() << "this build draws no charts (no PLplot)";
  using xstage::dit::Phase;
  xstage::dit::PhaseTimes serial, fused;
  const std::vector<Phase> f = {Phase::conditioning, Phase::qkv, Phase::pre_a2a, Phase::attention,
                                Phase::post_a2a, Phase::proj, Phase::ffn, Phase::final_layer};
  serial.add_forward(f, {0.1, 0.5, 0.3, 0.4, 0.2, 0.2, 1.0, 0.01});
  fused.add_forward(f, {0.1, 0.6, 0, 0.5, 0, 0.2, 1.0, 0.01});
  const auto png = temp_path("breakdown.png");
  std::filesystem::remove(png);
  xstage::dit::write_breakdown_png({{"serial", serial}, {"fused", fused}}, "flux-like, P = 4", png.string());
  EXPECT_GT(std::filesystem::file_size(png), 1000u);
  EXPECT_TRUE(contains(error_of([&] { xstage::dit::write_breakdown_png({}, "t", png.string()); }), "no path's phases"));
  EXPECT_TRUE(contains(error_of([&] {
                         xstage::dit::write_breakdown_png({{"single", xstage::dit::PhaseTimes{}}}, "t", png.string());
                       }),
                       "the single path has no timed phases"));
}
