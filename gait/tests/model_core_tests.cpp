// Torch-free parts of the gait model code: config strictness, the CASIA-B evaluator on
// a hand-computed case, embedding files, reports, the skeleton graph operators,
// augmentation, learning-rate schedules and the training curves.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include <fmt/format.h>
#include <unistd.h>

#include "common/testing.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"
#include "common/png.hpp"
#include "gait/eval/embeddings.hpp"
#include "gait/eval/fusion.hpp"
#include "gait/eval/rank1.hpp"
#include "gait/eval/report.hpp"
#include "gait/nets/graph.hpp"
#include "gait/pose.hpp"
#include "gait/preprocess.hpp"
#include "gait/train/augment.hpp"
#include "gait/seq_cache.hpp"
#include "gait/train/config.hpp"
#include "gait/train/curves.hpp"
#include "gait/train/data_source.hpp"
#include "gait/train/schedule.hpp"

namespace gait {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / fmt::format("gait_model_core_{}_{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

using common::error_of;

// ------------------------------------------------------------------------- config

TEST(Config, DefaultsRoundTrip) {
  const train::Config c;
  EXPECT_EQ(train::parse_config(train::to_json(c), "t"), c);
  const json j = train::to_json(c);
  for (const char* s : {"data", "model", "loss", "optimizer", "scheduler", "trainer", "evaluator"}) EXPECT_TRUE(j.contains(s)) << s;
  EXPECT_EQ(j["model"]["gcn"]["operator"], "fc");
  EXPECT_EQ(j["loss"]["triplet_margin"], 0.2);
}

TEST(Config, UnknownKeysAreErrorsNamingThePath) {
  const std::string e1 = error_of([] { train::parse_config(json::parse(R"({"model": {"gcn": {"stc_attn": true}}})"), "cfg.json"); });
  EXPECT_NE(e1.find("cfg.json"), std::string::npos) << e1;
  EXPECT_NE(e1.find("'model.gcn.stc_attn'"), std::string::npos) << e1;
  EXPECT_NE(e1.find("stc_att"), std::string::npos) << e1;  // lists the known keys
  const std::string e2 = error_of([] { train::parse_config(json::parse(R"({"modle": {}})"), "c"); });
  EXPECT_NE(e2.find("'modle'"), std::string::npos) << e2;
  const std::string e3 = error_of([] { train::parse_config(json::parse(R"({"trainer": {"augment": {"flip": 1}}})"), "c"); });
  EXPECT_NE(e3.find("'trainer.augment.flip'"), std::string::npos) << e3;
}

TEST(Config, WrongTypesAndValuesAreErrors) {
  const std::string e1 = error_of([] { train::parse_config(json::parse(R"({"trainer": {"iterations": "10"}})"), "c"); });
  EXPECT_NE(e1.find("trainer.iterations: expected an integer"), std::string::npos) << e1;
  const std::string e2 = error_of([] { train::parse_config(json::parse(R"({"model": {"mode": "three_branch"}})"), "c"); });
  EXPECT_NE(e2.find("two_branch, silhouette, skeleton"), std::string::npos) << e2;
  const std::string e3 = error_of([] { train::parse_config(json::parse(R"({"model": {"cnn": {"parts": 7}}})"), "c"); });
  EXPECT_NE(e3.find("model.cnn.parts"), std::string::npos) << e3;
  const std::string e4 = error_of([] { train::parse_config(json::parse(R"({"trainer": {"batch_k": 1}})"), "c"); });
  EXPECT_NE(e4.find("batch_k"), std::string::npos) << e4;
  EXPECT_NE(error_of([] { train::parse_config(json::parse(R"({"model": 3})"), "c"); }).find("expected an object"),
            std::string::npos);
  const std::string e5 = error_of([] { train::parse_config(json::parse(R"({"trainer": {"max_minutes": -1}})"), "c"); });
  EXPECT_NE(e5.find("trainer.max_minutes must be >= 0"), std::string::npos) << e5;
  const std::string e6 =
      error_of([] { train::parse_config(json::parse(R"({"trainer": {"fit_schedule_to_time": true}})"), "c"); });
  EXPECT_NE(e6.find("needs trainer.max_minutes > 0"), std::string::npos) << e6;
  // Test embeddings from the branch heads need a model that has them.
  const std::string e7 = error_of([] { train::parse_config(json::parse(R"({"evaluator": {"heads": "skeleton"}})"), "c"); });
  EXPECT_NE(e7.find("needs the branch heads"), std::string::npos) << e7;
  const std::string e8 = error_of([] { train::parse_config(json::parse(R"({"evaluator": {"heads": "both"}})"), "c"); });
  EXPECT_NE(e8.find("fused, fused+branches, branches, silhouette, skeleton"), std::string::npos) << e8;
  const train::Config ok = train::parse_config(
      json::parse(R"({"model": {"fusion": {"branch_loss_weight": 1}}, "evaluator": {"heads": "fused+branches"}})"), "c");
  EXPECT_EQ(ok.evaluator.heads, train::EvalHeads::FusedAndBranches);
  EXPECT_EQ(train::parse_eval_heads("silhouette"), train::EvalHeads::SilhouetteHead);
  EXPECT_NE(error_of([] { train::parse_eval_heads("all"); }).find("--heads 'all'"), std::string::npos);
}

TEST(Config, BaseFilesMergeAndStayStrict) {
  const fs::path d = temp_dir("base");
  common::write_file_atomic(d / "base.json", R"({"model": {"mode": "skeleton", "gcn": {"scales": 2}}, "trainer": {"iterations": 7}})");
  common::write_file_atomic(d / "child.json", R"({"base": "base.json", "model": {"gcn": {"stc_att": false}}})");
  const train::Config c = train::load_config(d / "child.json");
  EXPECT_EQ(c.model.mode, train::ModelMode::Skeleton);
  EXPECT_EQ(c.model.gcn.scales, 2);
  EXPECT_FALSE(c.model.gcn.stc_att);
  EXPECT_EQ(c.trainer.iterations, 7);
  common::write_file_atomic(d / "bad.json", R"({"base": "base.json", "model": {"gcn": {"hops": 2}}})");
  EXPECT_NE(error_of([&] { train::load_config(d / "bad.json"); }).find("model.gcn.hops"), std::string::npos);
  common::write_file_atomic(d / "loop.json", R"({"base": "loop.json"})");
  EXPECT_NE(error_of([&] { train::load_config(d / "loop.json"); }).find("loops"), std::string::npos);
  fs::remove_all(d);
}

TEST(Config, ShippedConfigsLoad) {
  const char* src = std::getenv("XSTAGE_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "run through ctest (XSTAGE_SOURCE_DIR)";
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(src) / "gait" / "configs")) {
    if (e.path().extension() != ".json") continue;
    EXPECT_NO_THROW(train::load_config(e.path())) << e.path();
    ++n;
  }
  EXPECT_GE(n, 7);
  const train::Config nat = train::load_config(fs::path(src) / "gait/configs/ablation/skeleton_only_natural.json");
  EXPECT_EQ(nat.model.gcn.op, train::GraphOperator::Natural);
  EXPECT_EQ(nat.model.mode, train::ModelMode::Skeleton);
  EXPECT_EQ(nat.trainer.iterations, 80000);  // from the base
  // The GPU-budget variants: the ablation's model settings, a time-bounded cosine run.
  const train::Config fc = train::load_config(fs::path(src) / "gait/configs/gpu-budget/skeleton_only_fc_stcatt.json");
  EXPECT_EQ(fc.model.mode, train::ModelMode::Skeleton);
  EXPECT_EQ(fc.model.gcn.op, train::GraphOperator::FullyConnected);
  EXPECT_TRUE(fc.model.gcn.stc_att);
  EXPECT_EQ(fc.model.gcn.channels, (std::vector<int>{64, 64, 128, 128}));
  EXPECT_GT(fc.trainer.max_minutes, 0);
  EXPECT_TRUE(fc.trainer.fit_schedule_to_time);
  EXPECT_EQ(fc.scheduler.type, train::ScheduleType::Cosine);
  const train::Config two = train::load_config(fs::path(src) / "gait/configs/gpu-budget/two_branch.json");
  EXPECT_EQ(two.model, train::load_config(fs::path(src) / "gait/configs/ablation/two_branch.json").model);
  EXPECT_EQ(two.model.fusion.branch_loss_weight, 1.0);  // the two-branch extras (gait_net.hpp)
  EXPECT_EQ(two.model.fusion.modality_dropout, 0.5);
  EXPECT_EQ(two.evaluator.heads, train::EvalHeads::FusedAndBranches);  // the two-branch test embedding
  EXPECT_EQ(fc.evaluator.heads, train::EvalHeads::Fused);
  for (const char* bad : {R"({"model": {"fusion": {"modality_dropout": 1.0}}})",
                          R"({"model": {"fusion": {"branch_loss_weight": -1}}})"})
    EXPECT_NE(error_of([&] { train::parse_config(json::parse(bad), "c"); }).find("model.fusion."), std::string::npos)
        << bad;
}

// data.cache_only: the cache alone is the dataset (no listing of ROOT); an empty or
// missing cache is an error that says to run gait preprocess.
TEST(DataSource, CacheOnlyReadsTheCacheWithoutTheDataset) {
  const fs::path d = temp_dir("cacheonly");
  train::DataConfig cfg;
  cfg.root = (d / "no-such-dataset").string();
  cfg.cache = (d / "cache").string();
  cfg.cache_only = true;
  const std::string e1 = error_of([&] { train::open_data_source(cfg, false); });
  EXPECT_NE(e1.find("run gait preprocess"), std::string::npos) << e1;
  fs::create_directories(d / "cache");
  const std::string e2 = error_of([&] { train::open_data_source(cfg, false); });
  EXPECT_NE(e2.find("holds no usable sequence"), std::string::npos) << e2;
  for (int subject : {1, 2, 3, 8}) {
    CachedSequence s;
    s.key = {subject, Condition::NM, 1, 90};
    for (int t = 0; t < 5; ++t) s.sil.frame_ids.push_back(t);
    s.sil.pixels.assign(5 * kSilPixels, 255);
    s.pose.resize(5);
    write_cached_sequence(cache_path(d / "cache", s.key), s);
  }
  const train::DataSource src = train::open_data_source(cfg, false);
  EXPECT_EQ(src.entries.size(), 4u);
  EXPECT_EQ(src.max_subject, 8);
  EXPECT_TRUE(src.has_pose);
  EXPECT_EQ(src.protocol.train_last_subject, protocol_for_subjects(8).train_last_subject);
  fs::remove_all(d);
}

// ------------------------------------------------------------------------- evaluator

// Hand-computed case. 1-D embeddings (c = 1, p = 1) on a line, distance |a - b|.
// Subject 1 is a training subject (ignored: its points sit exactly on the probes);
// test subjects 2, 3, 4; views 0, 18, 36.
//   gallery nm-01: subjects 2, 3, 4 at 0, 10, 20 in every view, except subject 3 at
//                  view 18, which sits at 2 (close to subject 2);  nm-02 of subject 4 at 21.
//   NM (nm-05):    2 -> 0.2, 3 -> 10.2, 4 -> 20.2 at every view: always right -> 100.
//   BG (bg-01):    2 -> 0.5 (at 18: 0.5 vs 2 -> right), except at probe view 36 where
//                  subject 2 sits at 6 (nearer to 10, and to 2 at gallery view 18): wrong.
//                  per view: 0 -> 100, 18 -> 100, 36 -> 66.67; mean 88.89.
//   CL (cl-01):    2 -> 3 (right at gallery views 0, 36; wrong at 18 where 3's gallery
//                  sits at 2), 3 -> 10.5, 4 -> 20: acc[v1][18] = 66.67, others 100.
//                  per view (identical view excluded): 0 -> (66.67 + 100) / 2 = 83.335,
//                  18 -> 100 (its only wrong cell is the excluded diagonal), 36 -> 83.335;
//                  mean 88.89. Including the diagonal would give 88.89 at view 18.
// Many channels and parts, several threads: every cell equals the nearest-neighbour
// rank-1 found with part_distance directly, whatever the thread count.
TEST(Rank1, ParallelDistanceMatrixEqualsDirectNearestNeighbour) {
  eval::EmbeddingSet set;
  set.channels = 7;
  set.parts = 5;
  Rng rng(11);
  const int views[2] = {0, 90};
  for (int s = 1; s <= 6; ++s)
    for (int v : views)
      for (auto [c, q] : {std::pair{Condition::NM, 1}, {Condition::NM, 2}, {Condition::NM, 5}, {Condition::BG, 1},
                          {Condition::CL, 1}}) {
        std::vector<float> e(35);
        for (std::size_t i = 0; i < e.size(); ++i) e[i] = static_cast<float>(s * (i % 3) + rng.normal(0, 2.0));
        set.add({s, c, q, v}, e);
      }
  Protocol p;
  p.train_last_subject = 1;
  const eval::Rank1Result one = eval::evaluate_rank1(set, p, 1), four = eval::evaluate_rank1(set, p, 4);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(one.acc[k], four.acc[k]);
    for (int v1 = 0; v1 < 2; ++v1)
      for (int v2 = 0; v2 < 2; ++v2) {
        int hits = 0, n = 0;
        for (std::size_t i = 0; i < set.size(); ++i) {
          if (!p.is_test(set.keys[i].subject) || set.keys[i].view != views[v1] ||
              p.probe_set(set.keys[i]) != eval::kProbeSets[k])
            continue;
          double best = 1e300;
          int who = -1;
          for (std::size_t g = 0; g < set.size(); ++g) {
            if (!p.is_gallery(set.keys[g]) || set.keys[g].view != views[v2]) continue;
            const double d = eval::part_distance(set.row(i), set.row(g), set.channels, set.parts);
            if (d < best) best = d, who = set.keys[g].subject;
          }
          hits += who == set.keys[i].subject;
          ++n;
        }
        EXPECT_NEAR(one.acc[k][v1][v2], 100.0 * hits / n, 0.006) << k << " " << v1 << " " << v2;
      }
  }
}

// tune_fusion's weighted mixes of the three heads' distances rank exactly like the
// concatenated embeddings the embedder builds for each choice ([f | s | a * k repeated]);
// the best is the highest mean, ties to the first; bad inputs are refused.
TEST(Fusion, MixedDistancesEqualTheConcatenatedEmbeddings) {
  constexpr int C = 3, P = 2;
  Rng rng(21);
  eval::EmbeddingSet all;  // [C, 3P]: fused P, silhouette P, skeleton once repeated P
  all.channels = C;
  all.parts = 3 * P;
  std::vector<std::array<std::vector<float>, 3>> heads;  // per row: f [C*P], s [C*P], k [C]
  for (int s = 1; s <= 5; ++s)
    for (int v : {0, 90, 180})
      for (auto [c, q] : {std::pair{Condition::NM, 1}, {Condition::NM, 2}, {Condition::NM, 5}, {Condition::BG, 1},
                          {Condition::CL, 1}}) {
        std::array<std::vector<float>, 3> h = {std::vector<float>(C * P), std::vector<float>(C * P),
                                               std::vector<float>(C)};
        // Subject signal in each head, the skeleton's blurred by the condition.
        for (auto& x : h[0]) x = static_cast<float>(0.3 * s + rng.normal(0, 1.0));
        for (auto& x : h[1]) x = static_cast<float>((c == Condition::CL ? 0.1 : 0.6) * s + rng.normal(0, 1.0));
        for (auto& x : h[2]) x = static_cast<float>(0.5 * s + rng.normal(0, 0.8));
        std::vector<float> row(C * 3 * P);
        for (int ch = 0; ch < C; ++ch)
          for (int p = 0; p < P; ++p) {
            row[ch * 3 * P + p] = h[0][ch * P + p];
            row[ch * 3 * P + P + p] = h[1][ch * P + p];
            row[ch * 3 * P + 2 * P + p] = h[2][ch];
          }
        all.add({s, c, q, v}, row);
        heads.push_back(h);
      }
  Protocol proto;
  proto.train_last_subject = 0;
  const std::vector<double> scales = {2, 0, 0.5, 0.5};  // unsorted, a duplicate
  const eval::FusionTuning t = eval::tune_fusion(all, proto, scales, 2);
  ASSERT_EQ(t.rows.size(), 7u);  // fused + 2 x {0, 0.5, 2}
  EXPECT_EQ(t.parts, P);
  EXPECT_EQ(t.rows[0].candidate.heads, "fused");
  EXPECT_EQ(t.rows[1].candidate.heads, "branches");
  EXPECT_EQ(t.rows[1].candidate.skeleton_scale, 0);
  EXPECT_EQ(t.rows[6].candidate.heads, "fused+branches");
  EXPECT_EQ(t.rows[6].candidate.skeleton_scale, 2);
  for (const eval::FusionRow& r : t.rows) {
    // The embedding the embedder would build for this choice.
    eval::EmbeddingSet e;
    e.channels = C;
    const bool fused = r.candidate.heads != "branches", sil = r.candidate.heads != "fused";
    e.parts = (fused ? P : 0) + (sil ? 2 * P : 0);
    for (std::size_t i = 0; i < all.size(); ++i) {
      std::vector<float> row;
      for (int ch = 0; ch < C; ++ch) {
        if (fused)
          for (int p = 0; p < P; ++p) row.push_back(heads[i][0][ch * P + p]);
        if (sil) {
          for (int p = 0; p < P; ++p) row.push_back(heads[i][1][ch * P + p]);
          for (int p = 0; p < P; ++p) row.push_back(static_cast<float>(r.candidate.skeleton_scale * heads[i][2][ch]));
        }
      }
      e.add(all.keys[i], row);
    }
    const eval::Rank1Result direct = eval::evaluate_rank1(e, proto, 1);
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(r.rank1.mean[k], direct.mean[k], 1e-9) << r.candidate.heads << " " << r.candidate.skeleton_scale;
      EXPECT_EQ(r.rank1.acc[k], direct.acc[k]);
    }
    EXPECT_NEAR(r.score, (direct.mean[0] + direct.mean[1] + direct.mean[2]) / 3, 1e-9);
    EXPECT_LE(r.score, t.rows[t.best].score);
  }
  for (std::size_t i = 0; i < t.best; ++i) EXPECT_LT(t.rows[i].score, t.rows[t.best].score);  // first of the best
  // The three heads differ here, so the choice matters.
  EXPECT_NE(t.rows[0].score, t.rows[1].score);
  const json j = eval::fusion_json(t);
  EXPECT_EQ(j["rows"].size(), 7u);
  EXPECT_EQ(j["best"]["heads"], t.rows[t.best].candidate.heads);
  EXPECT_NE(eval::format_fusion_table(t).find("<- best"), std::string::npos);
  const fs::path png = temp_dir("fusion") / "fusion.png";
  eval::write_fusion_chart(png, t, "test");
  EXPECT_GT(fs::file_size(png), 1000u);
  // Refusals: not 3p parts; a last third that is not one part repeated; bad scales.
  eval::EmbeddingSet two = eval::slice_parts(all, 0, 2 * P);
  EXPECT_NE(error_of([&] { eval::tune_fusion(two, proto, scales); }).find("not the 3p"), std::string::npos);
  eval::EmbeddingSet broken = all;
  broken.data[2 * P + 1] += 1.0f;
  EXPECT_NE(error_of([&] { eval::tune_fusion(broken, proto, scales); }).find("not one part repeated"), std::string::npos);
  EXPECT_NE(error_of([] { eval::fusion_candidates(std::vector<double>{-1}); }).find(">= 0"), std::string::npos);
  EXPECT_NE(error_of([] { eval::fusion_candidates(std::vector<double>{}); }).find("no skeleton scales"), std::string::npos);
  // slice_parts keeps channels and keys and picks the parts of every channel.
  const eval::EmbeddingSet sil = eval::slice_parts(all, P, P);
  EXPECT_EQ(sil.parts, P);
  EXPECT_EQ(sil.keys, all.keys);
  EXPECT_EQ(sil.row(3)[1 * P + 1], all.row(3)[1 * 3 * P + P + 1]);
  EXPECT_THROW(eval::slice_parts(all, 5, 2), common::Error);
}

TEST(Rank1, HandComputedCase) {
  eval::EmbeddingSet set;
  set.channels = 1;
  set.parts = 1;
  auto add = [&](int subject, Condition c, int seq, int view, float x) { set.add({subject, c, seq, view}, std::span(&x, 1)); };
  const int views[3] = {0, 18, 36};
  const float base[5] = {0, 0, 0, 10, 20};
  for (int v : views) {
    for (int s = 2; s <= 4; ++s) add(s, Condition::NM, 1, v, (s == 3 && v == 18) ? 2.0f : base[s]);
    add(4, Condition::NM, 2, v, 21);
    for (int s = 2; s <= 4; ++s) add(s, Condition::NM, 5, v, base[s] + 0.2f);
    for (int s = 2; s <= 4; ++s) add(s, Condition::BG, 1, v, s == 2 ? (v == 36 ? 6.0f : 0.5f) : base[s]);
    for (int s = 2; s <= 4; ++s) add(s, Condition::CL, 1, v, s == 2 ? 3.0f : (s == 3 ? 10.5f : 20.0f));
    add(1, Condition::NM, 1, v, 3.0f);  // training subject on top of probes: must be ignored
    add(1, Condition::CL, 1, v, 0.0f);
  }
  Protocol p;
  p.train_last_subject = 1;
  const eval::Rank1Result r = eval::evaluate_rank1(set, p);
  ASSERT_EQ(r.views, (std::vector<int>{0, 18, 36}));
  EXPECT_EQ(r.gallery, 12u);
  EXPECT_EQ(r.probes[0], 9u);
  for (int a = 0; a < 3; ++a) EXPECT_DOUBLE_EQ(r.per_view[0][a], 100.0);
  EXPECT_DOUBLE_EQ(r.mean[0], 100.0);
  // BG
  EXPECT_DOUBLE_EQ(r.acc[1][2][0], 66.67);  // numpy.round(200 / 3, 2)
  EXPECT_DOUBLE_EQ(r.per_view[1][0], 100.0);
  EXPECT_DOUBLE_EQ(r.per_view[1][1], 100.0);
  EXPECT_DOUBLE_EQ(r.per_view[1][2], 66.67);
  EXPECT_NEAR(r.mean[1], (100 + 100 + 66.67) / 3, 1e-9);
  // CL: the identical-view cell is wrong but excluded.
  EXPECT_DOUBLE_EQ(r.acc[2][1][1], 66.67);
  EXPECT_DOUBLE_EQ(r.acc[2][0][1], 66.67);
  EXPECT_DOUBLE_EQ(r.acc[2][0][0], 100.0);
  EXPECT_DOUBLE_EQ(r.per_view[2][0], (66.67 + 100) / 2);
  EXPECT_DOUBLE_EQ(r.per_view[2][1], 100.0);
  EXPECT_DOUBLE_EQ(r.per_view[2][2], (100 + 66.67) / 2);
  EXPECT_NEAR(r.mean[2], (83.335 * 2 + 100) / 3, 1e-9);

  const std::string table = eval::format_rank1_table(r);
  EXPECT_NE(table.find("NM"), std::string::npos);
  EXPECT_NE(table.find("66.7"), std::string::npos) << table;
  const common::Image img = eval::render_rank1_heatmap(r, "test");
  EXPECT_GT(img.width, 300);
  EXPECT_EQ(img.channels, 3);
}

TEST(Rank1, PartDistanceIsTheMeanOfPerPartEuclideanDistances) {
  // [c = 2, p = 2] row-major: part 0 = (3, 4), part 1 = (0, 0) vs zeros -> (5 + 0) / 2.
  const float a[4] = {3, 0, 4, 0}, b[4] = {0, 0, 0, 0};
  EXPECT_DOUBLE_EQ(eval::part_distance(a, b, 2, 2), 2.5);
  const float c[4] = {0, 1, 0, 0};
  EXPECT_DOUBLE_EQ(eval::part_distance(a, c, 2, 2), 3.0);
}

TEST(Embeddings, FilesRoundTrip) {
  const fs::path d = temp_dir("emb");
  eval::EmbeddingSet set;
  set.channels = 3;
  set.parts = 2;
  for (int i = 0; i < 4; ++i) {
    std::vector<float> row(6);
    for (int j = 0; j < 6; ++j) row[j] = i * 10.0f + j * 0.5f;
    set.add({75 + i, i % 2 ? Condition::BG : Condition::NM, 1 + i % 2, 18 * i}, row);
  }
  eval::save_embeddings(d / "dump", set);
  const std::string npy = common::read_file(d / "dump.npy");
  EXPECT_EQ(npy.substr(1, 5), "NUMPY");
  EXPECT_EQ((npy.size() - 6 * 4 * 4) % 64, 0u);  // header padded to 64 bytes
  EXPECT_NE(npy.find("'shape': (4, 3, 2)"), std::string::npos);
  const eval::EmbeddingSet back = eval::load_embeddings(d / "dump");
  EXPECT_EQ(back.keys, set.keys);
  EXPECT_EQ(back.data, set.data);
  EXPECT_EQ(back.channels, 3);
  EXPECT_EQ(back.parts, 2);
  std::string bad = npy.substr(0, npy.size() - 4);
  std::vector<std::size_t> shape;
  EXPECT_NE(error_of([&] { eval::decode_npy_f32(bad, shape, "x.npy"); }).find("x.npy"), std::string::npos);
  fs::remove_all(d);
}

// Dumps that are well-formed files but bad data are refused naming the file and the row:
// non-finite values, a sequence listed twice, labels that disagree with the sequence id.
TEST(Embeddings, BadDataIsRefusedNamingFileAndRow) {
  const fs::path d = temp_dir("emb_bad");
  eval::EmbeddingSet set;
  set.channels = 2;
  set.parts = 1;
  set.add({75, Condition::NM, 1, 0}, std::vector<float>{1, 2});
  set.add({76, Condition::BG, 1, 90}, std::vector<float>{3, 4});
  eval::EmbeddingSet nan = set;
  nan.data[3] = std::numeric_limits<float>::quiet_NaN();
  eval::save_embeddings(d / "nan", nan);
  EXPECT_EQ(error_of([&] { eval::load_embeddings(d / "nan"); }),
            fmt::format("{}: row 2 (076-bg-01-090): value 2 of 2 is nan (non-finite values are refused)",
                        (d / "nan.npy").string()));
  eval::EmbeddingSet dup = set;
  dup.keys[1] = dup.keys[0];
  eval::save_embeddings(d / "dup", dup);
  const std::string e_dup = error_of([&] { eval::load_embeddings(d / "dup"); });
  EXPECT_NE(e_dup.find("dup.csv: rows 1 and 2 both hold sequence 075-nm-01-000"), std::string::npos) << e_dup;
  eval::save_embeddings(d / "ok", set);
  std::string csv = common::read_file(d / "ok.csv");
  common::write_file_atomic(d / "cond.npy", common::read_file(d / "ok.npy"));
  std::string bad_cond = csv;
  bad_cond.replace(bad_cond.find(",bg,"), 4, ",xx,");
  common::write_file_atomic(d / "cond.csv", bad_cond);
  const std::string e_cond = error_of([&] { eval::load_embeddings(d / "cond"); });
  EXPECT_NE(e_cond.find("cond.csv: row 2: condition 'xx' is not nm, bg or cl"), std::string::npos) << e_cond;
  std::string bad_view = csv;
  bad_view.replace(bad_view.rfind(",90"), 3, ",36");
  common::write_file_atomic(d / "cond.csv", bad_view);
  const std::string e_view = error_of([&] { eval::load_embeddings(d / "cond"); });
  EXPECT_NE(e_view.find("view '36' differs from sequence_id 076-bg-01-090"), std::string::npos) << e_view;
  // A shape whose element count overflows is refused, not allocated.
  std::vector<std::size_t> shape;
  std::string huge = eval::encode_npy_f32(std::vector<std::size_t>{1}, std::vector<float>{1});
  huge.replace(huge.find("(1,)"), 4, "(4294967296, 4294967296, 4)");
  EXPECT_NE(error_of([&] { eval::decode_npy_f32(huge, shape, "huge.npy"); }).find("huge.npy"), std::string::npos);
  fs::remove_all(d);
}

// ------------------------------------------------------------------------- graph

TEST(Graph, HopDistancesOnTheCocoTree) {
  const auto& g = nets::coco_graph();
  EXPECT_EQ(g.bones.size(), 16u);
  const auto d = nets::hop_distances(g);
  EXPECT_EQ(d[kNose][kLeftAnkle], 4);   // nose - shoulder - hip - knee - ankle
  EXPECT_EQ(d[kLeftWrist][kRightWrist], 6);
  EXPECT_EQ(d[kLeftEar][kRightEar], 4);
  for (int i = 0; i < nets::kJoints; ++i)
    for (int j = 0; j < nets::kJoints; ++j) {
      EXPECT_GE(d[i][j], 0);
      EXPECT_EQ(d[i][j], d[j][i]);
    }
  EXPECT_EQ(g.parent[kLeftAnkle], kLeftKnee);
  EXPECT_EQ(g.parent[kNose], kNose);
}

TEST(Graph, KHopOperatorsClosedForm) {
  const auto a = nets::k_hop_operators(nets::coco_graph(), 3);
  ASSERT_EQ(a.size(), 3u * 17 * 17);
  auto at = [&](int k, int i, int j) { return a[(k * 17 + i) * 17 + j]; };
  for (int i = 0; i < 17; ++i)
    for (int j = 0; j < 17; ++j) EXPECT_EQ(at(0, i, j), i == j ? 1.0f : 0.0f);
  // Scale 1: nose has 4 neighbours (degree 5 with the self loop), left eye 2 (3).
  EXPECT_FLOAT_EQ(at(1, kNose, kLeftEye), static_cast<float>(1 / std::sqrt(15.0)));
  EXPECT_FLOAT_EQ(at(1, kNose, kNose), 0.2f);
  EXPECT_EQ(at(1, kNose, kLeftKnee), 0.0f);
  // Scale 2: the nose reaches both ears, both elbows and both hips (6; degree 7); the
  // left hip reaches the nose, the left elbow and the left ankle (3; degree 4).
  EXPECT_FLOAT_EQ(at(2, kNose, kLeftHip), static_cast<float>(1 / std::sqrt(28.0)));
  EXPECT_EQ(at(2, kNose, kLeftEye), 0.0f);
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 17; ++i)
      for (int j = 0; j < 17; ++j) EXPECT_EQ(at(k, i, j), at(k, j, i));
}

// ------------------------------------------------------------------------- augmentation

TEST(Augment, MirrorSwapsSidesAndIsAnInvolution) {
  std::vector<float> clip(2 * 17 * 3);
  for (int f = 0; f < 2; ++f)
    for (int j = 0; j < 17; ++j) {
      clip[(f * 17 + j) * 3 + 0] = 100.0f + j + 5 * f;
      clip[(f * 17 + j) * 3 + 1] = 50.0f + 2 * j;
      clip[(f * 17 + j) * 3 + 2] = 0.5f + 0.01f * j;
    }
  const auto orig = clip;
  train::mirror_pose(clip.data(), 2);
  // Hip centre: mean of left/right hip x over both frames = 100 + 11.5 + 2.5 = 114.
  EXPECT_FLOAT_EQ(clip[kLeftHip * 3 + 0], 2 * 114.0f - orig[kRightHip * 3 + 0]);
  EXPECT_FLOAT_EQ(clip[kLeftHip * 3 + 1], orig[kRightHip * 3 + 1]);
  EXPECT_FLOAT_EQ(clip[kLeftHip * 3 + 2], orig[kRightHip * 3 + 2]);
  EXPECT_FLOAT_EQ(clip[kNose * 3 + 0], 2 * 114.0f - orig[kNose * 3 + 0]);
  train::mirror_pose(clip.data(), 2);
  for (std::size_t i = 0; i < clip.size(); ++i) EXPECT_NEAR(clip[i], orig[i], 1e-4) << i;
}

TEST(Augment, TimeFlipReversesFrames) {
  std::vector<float> clip(3 * 17 * 3);
  for (std::size_t i = 0; i < clip.size(); ++i) clip[i] = static_cast<float>(i);
  train::time_flip_pose(clip.data(), 3);
  EXPECT_EQ(clip[0], 2 * 51.0f);
  EXPECT_EQ(clip[51], 51.0f);
  EXPECT_EQ(clip[102], 0.0f);
}

TEST(Augment, SilhouetteShiftEraseAndIdentity) {
  std::vector<float> clip(2 * kSilPixels, 0.0f);
  clip[10 * kSilWidth + 20] = 1.0f;
  clip[kSilPixels + 10 * kSilWidth + 20] = 1.0f;
  auto copy = clip;
  train::transform_silhouettes(copy.data(), 2, 0, 0, 0);
  EXPECT_EQ(copy, clip);
  train::transform_silhouettes(copy.data(), 2, 0, 2, 1);  // 2 px right, 1 px down, in both frames
  EXPECT_FLOAT_EQ(copy[11 * kSilWidth + 22], 1.0f);
  EXPECT_FLOAT_EQ(copy[kSilPixels + 11 * kSilWidth + 22], 1.0f);
  EXPECT_FLOAT_EQ(copy[10 * kSilWidth + 20], 0.0f);
  std::fill(clip.begin(), clip.end(), 1.0f);
  train::erase_rectangle(clip.data(), 2, 5, 6, 3, 4);
  for (int f = 0; f < 2; ++f)
    for (int y = 0; y < kSilHeight; ++y)
      for (int x = 0; x < kSilWidth; ++x)
        EXPECT_EQ(clip[f * kSilPixels + y * kSilWidth + x], (y >= 5 && y < 8 && x >= 6 && x < 10) ? 0.0f : 1.0f);
}

TEST(Augment, BatchIsAFunctionOfTheSeed) {
  Batch b;
  b.n = 2;
  b.t = 4;
  b.sil.assign(2 * 4 * kSilPixels, 0.0f);
  for (std::size_t i = 0; i < b.sil.size(); i += 7) b.sil[i] = 1.0f;
  b.pose.assign(2 * 4 * 17 * 3, 1.0f);
  Batch c = b;
  train::AugmentConfig cfg;
  Rng r1(5), r2(5);
  Batch d = b;
  Rng r3(5);
  train::augment_batch(b, cfg, r1);
  train::augment_batch(c, cfg, r2);
  EXPECT_EQ(b.sil, c.sil);
  EXPECT_EQ(b.pose, c.pose);
  // The silhouette warps run on several threads: the same batch.
  train::augment_batch(d, cfg, r3, 3);
  EXPECT_EQ(b.sil, d.sil);
  EXPECT_EQ(b.pose, d.pose);
}

// The warp's taps are worked out once per clip: a rotated and shifted frame equals
// the per-pixel bilinear formula evaluated directly.
TEST(Augment, RotationMatchesDirectBilinearSampling) {
  std::vector<float> clip(2 * kSilPixels);
  for (std::size_t i = 0; i < clip.size(); ++i) clip[i] = static_cast<float>((i * 37) % 101) / 100.0f;
  const std::vector<float> orig = clip;
  const double deg = 3.5, dx = 1.25, dy = -0.5;
  train::transform_silhouettes(clip.data(), 2, deg, dx, dy);
  const double a = deg * 3.14159265358979323846 / 180.0, cy = (kSilHeight - 1) / 2.0, cx = (kSilWidth - 1) / 2.0;
  for (int f = 0; f < 2; ++f)
    for (int y = 0; y < kSilHeight; y += 3)
      for (int x = 0; x < kSilWidth; x += 3) {
        const double u = x - dx - cx, v = y - dy - cy;
        const double sx = std::cos(a) * u + std::sin(a) * v + cx, sy = -std::sin(a) * u + std::cos(a) * v + cy;
        const int x0 = int(std::floor(sx)), y0 = int(std::floor(sy));
        auto at = [&](int yy, int xx) {
          return (yy < 0 || yy >= kSilHeight || xx < 0 || xx >= kSilWidth)
                     ? 0.0
                     : double(orig[f * kSilPixels + yy * kSilWidth + xx]);
        };
        const double fx = sx - x0, fy = sy - y0;
        const double want = (at(y0, x0) * (1 - fx) + at(y0, x0 + 1) * fx) * (1 - fy) +
                            (at(y0 + 1, x0) * (1 - fx) + at(y0 + 1, x0 + 1) * fx) * fy;
        ASSERT_NEAR(clip[f * kSilPixels + y * kSilWidth + x], want, 1e-6) << f << " " << y << " " << x;
      }
}

// ------------------------------------------------------------------------- schedule

TEST(Schedule, StepCosineWarmup) {
  train::SchedulerConfig s;
  s.type = train::ScheduleType::Step;
  s.milestones = {10, 20};
  s.gamma = 0.1;
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 1.0, 9, 30), 1.0);
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 1.0, 10, 30), 0.1);
  EXPECT_NEAR(train::learning_rate(s, 1.0, 25, 30), 0.01, 1e-15);
  s.type = train::ScheduleType::Cosine;
  s.min_lr = 0.1;
  s.warmup_iterations = 10;
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 1.0, 0, 110), 0.01);
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 1.0, 10, 110), 1.0);
  EXPECT_NEAR(train::learning_rate(s, 1.0, 60, 110), 0.55, 1e-12);
  EXPECT_NEAR(train::learning_rate(s, 1.0, 110, 110), 0.1, 1e-12);
}

TEST(Schedule, CosineFollowsTheTimeBudget) {
  train::SchedulerConfig s;
  s.type = train::ScheduleType::Cosine;
  s.min_lr = 0.1;
  s.warmup_iterations = 10;
  // Progress is the larger of the iteration and the time fractions.
  EXPECT_NEAR(train::learning_rate(s, 1.0, 20, 110, 0.5), 0.55, 1e-12);   // time ahead: halfway
  EXPECT_NEAR(train::learning_rate(s, 1.0, 60, 110, 0.1), 0.55, 1e-12);   // iterations ahead: halfway
  EXPECT_NEAR(train::learning_rate(s, 1.0, 20, 110, 1.0), 0.1, 1e-12);    // budget spent: the floor
  EXPECT_NEAR(train::learning_rate(s, 1.0, 20, 110, 2.0), 0.1, 1e-12);    // clamped
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 1.0, 60, 110, 0.0), train::learning_rate(s, 1.0, 60, 110));
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 1.0, 5, 110, 0.9), 0.01 + 0.99 * 0.5);  // warm-up stays by iteration
  // Other schedules ignore the clock.
  s.type = train::ScheduleType::Step;
  s.milestones = {50};
  s.gamma = 0.1;
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 1.0, 20, 110, 0.99), 1.0);
}

TEST(Report, Rank1ByIterationRowsCsvJsonAndChart) {
  const fs::path d = temp_dir("byit");
  std::vector<eval::Rank1AtIteration> rows(2);
  for (int i = 0; i < 2; ++i) {
    rows[i].iteration = 40 * (i + 1);
    rows[i].train_seconds = 10.25 * (i + 1);
    rows[i].checkpoint = fmt::format("iter-{:07d}.gckpt", rows[i].iteration);
    rows[i].result.views = {0, 90};
    rows[i].result.mean = {50.0 + i, 40.0 + i, 30.0 + i};
    for (auto& pv : rows[i].result.per_view) pv = {1.0, 2.0};
  }
  rows[0].result.mean[2] = std::nan("");  // no CL probes at these views: "nan", and no point on the chart
  eval::write_rank1_by_iteration(d, rows, "test");
  EXPECT_EQ(common::read_file(d / "rank1_by_iteration.csv"),
            "iteration,train_seconds,NM,BG,CL,checkpoint\n"
            "40,10.2,50.0000,40.0000,nan,iter-0000040.gckpt\n"
            "80,20.5,51.0000,41.0000,31.0000,iter-0000080.gckpt\n");
  const json j = json::parse(common::read_file(d / "rank1_by_iteration.json"));
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[1]["iteration"], 80);
  EXPECT_EQ(j[1]["rank1"]["BG"]["mean"], 41.0);
  EXPECT_TRUE(j[0]["rank1"]["CL"]["mean"].is_null());
  if (common::plot::charts_available()) EXPECT_GT(fs::file_size(d / "rank1_by_iteration.png"), 1000u);
  const std::string table = eval::format_rank1_by_iteration(rows);
  EXPECT_NE(table.find("        40   50.00   40.00       -"), std::string::npos) << table;
  EXPECT_THROW(eval::write_rank1_by_iteration(d / "none", {}, "test"), common::Error);
  fs::remove_all(d);
}

TEST(Curves, DrawnFromTheLogAndRefusedNamingTheFile) {
  if (!common::plot::charts_available()) GTEST_SKIP() << "this build draws no charts";
  const fs::path d = temp_dir("curves");
  const std::string header = "iteration,loss,triplet,ce,accuracy,active,lr,seq_per_s,train_seconds,branch_losses\n";
  std::string rows;
  for (int i = 1; i <= 80; ++i)  // more rows than get markers, and branch heads logged
    rows += fmt::format("{},{},{},{},{},{},{},20,{},{}\n", 10 * i, 5.0 / i, 0.2, 1.5 / i, 0.01 * i, 0.5, 1e-4, i, 0.3);
  common::write_file_atomic(d / "train_log.csv", header + rows);
  train::write_train_curves(d / "train_log.csv", d / "curves.png", "run");
  const common::Image img = common::read_png(d / "curves.png", 3);
  EXPECT_EQ(img.width, 960);
  EXPECT_EQ(img.height, 3 * 400);  // losses, batch, learning rate
  // One row (a run stopped after its first log) still draws.
  common::write_file_atomic(d / "one.csv", header + "10,5,0.2,1.5,0.1,0.5,0.001,20,1,0\n");
  train::write_train_curves(d / "one.csv", d / "one.png", "run");
  EXPECT_GT(fs::file_size(d / "one.png"), 1000u);

  auto refused = [&](const std::string& text, const std::string& expect) {
    common::write_file_atomic(d / "bad.csv", text);
    common::write_file_atomic(d / "bad.png", "previous");
    const std::string e = error_of([&] { train::write_train_curves(d / "bad.csv", d / "bad.png", "run"); });
    EXPECT_NE(e.find("bad.csv"), std::string::npos) << e;
    EXPECT_NE(e.find(expect), std::string::npos) << e;
    EXPECT_EQ(common::read_file(d / "bad.png"), "previous");
  };
  refused(header, "no rows yet");
  refused("iteration,loss\n10,5\n", "triplet");
  refused(header + "10,5,0.2,nan,0.1,0.5,0.001,20,1,0\n", "'ce'");
  EXPECT_THROW(train::write_train_curves(d / "missing.csv", d / "m.png", "run"), common::Error);
  EXPECT_FALSE(fs::exists(d / "m.png"));
  fs::remove_all(d);
}

}  // namespace
}  // namespace gait
