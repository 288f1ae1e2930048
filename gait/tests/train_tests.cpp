// Training: checkpoints resume to the same next-step loss; damaged or foreign
// checkpoints fail with a clear message; the embedder and the evaluator run end to end
// on an in-memory dataset.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <filesystem>

#include "common/testing.hpp"
#include "common/check.hpp"
#include "common/csv.hpp"
#include "common/files.hpp"
#include "gait/eval/embedder.hpp"
#include "gait/eval/rank1.hpp"
#include "gait/seq_cache.hpp"  // crc32
#include "gait/train/adam.hpp"
#include "gait/train/checkpoint.hpp"
#include "gait/train/graph_step.hpp"
#include "gait/train/trainer.hpp"

namespace gait::train {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / fmt::format("gait_train_{}_{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A toy walker: a body of subject-dependent width with legs swinging at a
// subject-dependent rate; a matching COCO pose.
CachedSequence toy_sequence(int subject, Condition cond, int seq, int view, int frames) {
  CachedSequence s;
  s.key = {subject, cond, seq, view};
  const double width = 4 + subject, rate = 0.2 + 0.05 * subject, phase = 0.3 * seq + 0.01 * view;
  for (int t = 0; t < frames; ++t) {
    s.sil.frame_ids.push_back(t + 1);
    const double swing = 6 * std::sin(rate * t + phase);
    for (int y = 0; y < kSilHeight; ++y)
      for (int x = 0; x < kSilWidth; ++x) {
        const bool body = y < 36 && std::abs(x - 22) < width;
        const bool legs = y >= 36 && (std::abs(x - 22 - swing * (y - 36) / 28) < 2 || std::abs(x - 22 + swing * (y - 36) / 28) < 2);
        s.sil.pixels.push_back(body || legs ? 255 : 0);
      }
    PoseFrame f;
    for (int j = 0; j < kCocoJoints; ++j)
      f[j] = {static_cast<float>(160 + (j % 2 ? 1 : -1) * (width + swing * (j >= 11))), static_cast<float>(40 + 9 * j), 0.9f};
    s.pose.push_back(f);
  }
  return s;
}

std::vector<CachedSequence> toy_train_set() {
  std::vector<CachedSequence> v;
  for (int s = 1; s <= 4; ++s)
    for (int q = 1; q <= 3; ++q) v.push_back(toy_sequence(s, Condition::NM, q, 18 * q, 10 + q));
  return v;
}

Config tiny_config(const fs::path& out) {
  Config c;
  c.data.clip_length = 6;
  c.model.cnn.channels = {2, 4, 4};
  c.model.cnn.halving = 1;
  c.model.cnn.parts = 4;
  c.model.gcn.channels = {4, 4};
  c.model.gcn.scales = 2;
  c.model.fusion.embed_dim = 6;
  c.model.fusion.branch_loss_weight = 1.0;  // the two-branch extras, so resume and prefetch cover them
  c.model.fusion.modality_dropout = 0.5;
  c.optimizer.lr = 1e-2;
  c.scheduler.type = ScheduleType::Cosine;
  c.trainer.iterations = 6;
  c.trainer.batch_p = 2;
  c.trainer.batch_k = 2;
  c.trainer.device = "cpu";
  c.trainer.save_every = 3;
  c.trainer.log_every = 1;
  c.trainer.out_dir = out.string();
  return c;
}

using common::error_of;

TEST(Checkpoint, ResumeReproducesTheNextStepLoss) {
  const fs::path d = temp_dir("resume");
  for (OptimizerType opt : {OptimizerType::Adam, OptimizerType::Sgd}) {
    Config cfg = tiny_config(d);
    cfg.optimizer.type = opt;
    Trainer a(cfg, toy_train_set(), torch::kCPU);
    a.step();
    a.step();
    a.save(d / "it2.gckpt");
    const StepStats third = a.step();
    const StepStats fourth = a.step();
    ASSERT_TRUE(std::isfinite(third.loss));

    Trainer b(cfg, toy_train_set(), torch::kCPU);
    b.step();  // move it away from the checkpoint's state first
    b.resume(d / "it2.gckpt");
    EXPECT_EQ(b.iteration(), 2);
    const StepStats third_b = b.step();
    const StepStats fourth_b = b.step();
    EXPECT_EQ(third_b.loss, third.loss) << "optimizer " << static_cast<int>(opt);
    EXPECT_EQ(fourth_b.loss, fourth.loss);
    EXPECT_EQ(third_b.lr, third.lr);
  }
  fs::remove_all(d);
}

// The prefetched batch (prepared on a worker thread during the previous step) is the
// batch the step would have made itself: the same losses with and without it.
TEST(Trainer, PrefetchDoesNotChangeTheBatches) {
  const fs::path d = temp_dir("prefetch");
  Config on = tiny_config(d), off = tiny_config(d);
  on.trainer.prefetch = true;
  off.trainer.prefetch = false;
  Trainer a(on, toy_train_set(), torch::kCPU), b(off, toy_train_set(), torch::kCPU);
  for (int i = 0; i < 4; ++i) {
    const StepStats sa = a.step(), sb = b.step();
    EXPECT_EQ(sa.loss, sb.loss) << "step " << i;
    EXPECT_EQ(sa.accuracy, sb.accuracy) << "step " << i;
  }
  fs::remove_all(d);
}

// MultiTensorAdam is torch::optim::Adam computed over all parameters at once: the same
// parameters after every step, with weight decay, and with one parameter left without a
// gradient for a step (its step count then lags the others').
TEST(MultiTensorAdam, MatchesLibTorchAdam) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> a, b, inits;
  for (auto shape : {std::vector<int64_t>{5, 3}, {7}, {2, 2, 3}}) {
    const torch::Tensor init = torch::randn(shape);
    inits.push_back(init);
    a.push_back(init.clone().requires_grad_(true));
    b.push_back(init.clone().requires_grad_(true));
  }
  const auto opts = torch::optim::AdamOptions(3e-2).weight_decay(5e-4);
  MultiTensorAdam ours(a, opts);
  torch::optim::Adam theirs(b, opts);
  for (int step = 0; step < 6; ++step) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      const bool skip = step == 2 && i == 1;
      const torch::Tensor g = torch::randn(a[i].sizes());
      a[i].mutable_grad() = skip ? torch::Tensor() : g.clone();
      b[i].mutable_grad() = skip ? torch::Tensor() : g.clone();
    }
    ours.step();
    theirs.step();
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(torch::allclose(a[i], b[i], /*rtol=*/1e-6, /*atol=*/1e-7)) << "step " << step << " parameter " << i;
  }
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_FALSE(torch::allclose(a[i], inits[i], 1e-3, 1e-3)) << i;  // they moved
}

// The split step that a CUDA graph captures (advance() on the host, update() reading the
// step's scalars from a tensor) is Adam: step()'s parameters within float rounding, with
// a learning rate that changes every step; a parameter without a gradient is refused.
TEST(MultiTensorAdam, SplitStepMatchesStep) {
  torch::manual_seed(5);
  std::vector<torch::Tensor> a, b;
  for (auto shape : {std::vector<int64_t>{4, 3}, {9}, {2, 3, 2}}) {
    const torch::Tensor init = torch::randn(shape);
    a.push_back(init.clone().requires_grad_(true));
    b.push_back(init.clone().requires_grad_(true));
  }
  const auto opts = torch::optim::AdamOptions(2e-2).weight_decay(5e-4);
  MultiTensorAdam split(a, opts), whole(b, opts);
  for (int step = 0; step < 6; ++step) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      const torch::Tensor g = torch::randn(a[i].sizes());
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    const double lr = 2e-2 * (1.0 - 0.15 * step);
    split.param_groups()[0].options().set_lr(lr);
    whole.param_groups()[0].options().set_lr(lr);
    split.advance();
    split.update();
    whole.step();
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(torch::allclose(a[i], b[i], /*rtol=*/1e-5, /*atol=*/1e-6)) << "step " << step << " parameter " << i;
  }
  a[1].mutable_grad() = torch::Tensor();
  EXPECT_NE(error_of([&] { split.advance(); }).find("1 of the group's 3 parameters have no gradient"),
            std::string::npos);
}

// common::remove_tree, not std::filesystem::remove_all (files.hpp says why).
void remove_tree(const fs::path& d) {
  std::error_code ec;
  common::remove_tree(d, ec);
}

// The CUDA tests' config: the tiny two-branch model in fp32 (eager and replayed kernels
// compared closely) with modality dropout, so all three drop graphs are captured.
Config cuda_config(const fs::path& out, bool graphs) {
  Config c = tiny_config(out);
  c.trainer.device = "cuda";
  c.trainer.amp = false;
  c.trainer.iterations = 24;
  c.trainer.cuda_graph = graphs;
  return c;
}

// Within 1 %: over tens of steps the split Adam step's last-bit differences grow (see below).
bool near_loss(double a, double b) { return std::abs(a - b) <= 1e-2 * std::max(1.0, std::abs(a)); }

// On CUDA the trainer captures its step as CUDA graphs after the first eager steps, one
// per modality drop: the same training as eager steps. Losses agree step by step; the
// parameters moved the same way, up to a small fraction of how far they moved (Adam
// turns the rounding of near-zero gradients into whole steps of size lr, and the
// backward's atomic sums round differently from run to run, so elementwise closeness is
// not the test; a second eager run measures that spread).
TEST(CudaGraph, GraphStepsTrainLikeEagerSteps) {
  if (!GraphStep::available()) GTEST_SKIP() << "LibTorch without CUDA, or no CUDA device";
  const fs::path d = temp_dir("cuda_graph");
  const Config eager = cuda_config(d / "eager", false), graph = cuda_config(d / "graph", true);
  Trainer a(eager, toy_train_set(), torch::kCUDA), a2(eager, toy_train_set(), torch::kCUDA),
      b(graph, toy_train_set(), torch::kCUDA);
  std::vector<torch::Tensor> init;
  for (const auto& p : a.model()->parameters()) init.push_back(p.detach().clone());
  for (int i = 0; i < eager.trainer.iterations; ++i) {
    const StepStats sa = a.step(), sb = b.step();
    a2.step();
    EXPECT_TRUE(near_loss(sa.loss, sb.loss)) << "step " << i << ": eager " << sa.loss << ", graph " << sb.loss;
  }
  EXPECT_EQ(a.cuda_graphs(), 0);
  EXPECT_EQ(b.cuda_graphs(), 3) << "one graph per modality drop (none, silhouette, skeleton)";
  const auto pa = a.model()->parameters(), pa2 = a2.model()->parameters(), pb = b.model()->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  double apart = 0, spread = 0, moved = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    apart += (pb[i] - pa[i]).pow(2).sum().item<double>();
    spread += (pa2[i] - pa[i]).pow(2).sum().item<double>();
    moved += (pa[i] - init[i]).pow(2).sum().item<double>();
  }
  EXPECT_GT(moved, 0.0);
  EXPECT_LT(std::sqrt(apart), std::max(0.1 * std::sqrt(moved), 2 * std::sqrt(spread)))
      << "parameters moved " << std::sqrt(moved) << ", graph - eager " << std::sqrt(apart) << ", eager - eager "
      << std::sqrt(spread);
  remove_tree(d);
}

// Checkpoints between replays, and a resume on a trainer that had captured graphs: a
// checkpoint saved between replays resumes (in a new trainer) to the steps the graphs
// took after it, and the resumed trainer captures again.
TEST(CudaGraph, CheckpointsBetweenReplaysResume) {
  if (!GraphStep::available()) GTEST_SKIP() << "LibTorch without CUDA, or no CUDA device";
  const fs::path d = temp_dir("cuda_graph_ckpt");
  const Config cfg = cuda_config(d, true);
  Trainer b(cfg, toy_train_set(), torch::kCUDA);
  for (int i = 0; i < 12; ++i) b.step();
  ASSERT_GT(b.cuda_graphs(), 0);
  b.save(d / "mid.gckpt");
  std::vector<StepStats> after;
  for (int i = 0; i < 6; ++i) after.push_back(b.step());  // replays after the save
  Trainer c(cfg, toy_train_set(), torch::kCUDA);
  c.resume(d / "mid.gckpt");
  for (std::size_t i = 0; i < after.size(); ++i) {
    const StepStats s = c.step();
    EXPECT_TRUE(near_loss(after[i].loss, s.loss)) << "step " << i << ": " << after[i].loss << " vs " << s.loss;
  }
  b.resume(d / "mid.gckpt");
  EXPECT_EQ(b.cuda_graphs(), 0);
  for (std::size_t i = 0; i < after.size(); ++i) {
    const StepStats s = b.step();
    EXPECT_TRUE(near_loss(after[i].loss, s.loss)) << "step " << i << " after resume: " << after[i].loss << " vs " << s.loss;
  }
  EXPECT_GT(b.cuda_graphs(), 0);
  remove_tree(d);
}

// trainer.profile_phases only adds synchronisation and timing: the same losses, and one
// sample of each of the 7 phases per step, in train_summary.json as medians.
TEST(Trainer, PhaseProfileTimesEveryPhaseWithoutChangingTheSteps) {
  const fs::path d = temp_dir("phases");
  Config plain = tiny_config(d / "plain"), prof = tiny_config(d / "prof");
  prof.trainer.profile_phases = true;
  Trainer a(plain, toy_train_set(), torch::kCPU), b(prof, toy_train_set(), torch::kCPU);
  const RunSummary sa = a.run(/*progress=*/false), sb = b.run(/*progress=*/false);
  EXPECT_EQ(sa.phases.steps(), 0u);
  ASSERT_EQ(sb.phases.steps(), static_cast<std::size_t>(prof.trainer.iterations));
  // The loss column of every logged step.
  auto losses = [](const fs::path& log) {
    std::vector<std::string> out;
    std::istringstream rows(common::read_file(log));
    std::string row;
    std::getline(rows, row);  // header
    while (std::getline(rows, row)) out.push_back(common::split_csv_line(row).at(1));
    return out;
  };
  const std::vector<std::string> la = losses(d / "plain" / "train_log.csv");
  EXPECT_EQ(la.size(), static_cast<std::size_t>(plain.trainer.iterations));
  EXPECT_EQ(la, losses(d / "prof" / "train_log.csv"));
  const auto j = nlohmann::json::parse(common::read_file(d / "prof" / "train_summary.json"));
  EXPECT_FALSE(nlohmann::json::parse(common::read_file(d / "plain" / "train_summary.json")).contains("phase_median_ms"));
  ASSERT_EQ(j["phase_median_ms"].size(), static_cast<std::size_t>(PhaseTimes::kCount));
  double sum = 0;
  for (const char* name : PhaseTimes::kNames) {
    ASSERT_TRUE(j["phase_median_ms"].contains(name)) << name;
    sum += j["phase_median_ms"][name].get<double>();
  }
  EXPECT_GT(j["phase_median_ms"]["forward"].get<double>(), 0.0);
  EXPECT_GT(j["phase_median_ms"]["backward"].get<double>(), 0.0);
  EXPECT_GT(sum, 0.0);
  EXPECT_EQ(j["phase_steps"], prof.trainer.iterations);
  fs::remove_all(d);
}

TEST(Checkpoint, DamagedOrForeignFilesGiveClearErrors) {
  const fs::path d = temp_dir("damaged");
  const Config cfg = tiny_config(d);
  Trainer t(cfg, toy_train_set(), torch::kCPU);
  t.step();
  t.save(d / "ok.gckpt");
  const std::string bytes = common::read_file(d / "ok.gckpt");
  EXPECT_EQ(read_checkpoint_meta(d / "ok.gckpt").iteration, 1);

  common::write_file_atomic(d / "short.gckpt", bytes.substr(0, bytes.size() - 100));
  const std::string e1 = error_of([&] { read_checkpoint_meta(d / "short.gckpt"); });
  EXPECT_NE(e1.find("short.gckpt: truncated checkpoint"), std::string::npos) << e1;
  common::write_file_atomic(d / "header.gckpt", bytes.substr(0, 20));
  EXPECT_NE(error_of([&] { read_checkpoint_meta(d / "header.gckpt"); }).find("truncated"), std::string::npos);

  std::string v = bytes;
  v[8] = 99;
  common::write_file_atomic(d / "version.gckpt", v);
  const std::string e2 = error_of([&] { read_checkpoint_meta(d / "version.gckpt"); });
  EXPECT_NE(e2.find("format version 99, but this build reads version 1"), std::string::npos) << e2;

  std::string c = bytes;
  c[c.size() / 2] ^= 0x5A;
  common::write_file_atomic(d / "corrupt.gckpt", c);
  EXPECT_NE(error_of([&] { read_checkpoint_meta(d / "corrupt.gckpt"); }).find("checksum"), std::string::npos);

  common::write_file_atomic(d / "other.gckpt", "PK\x03\x04 some zip file");
  EXPECT_NE(error_of([&] { read_checkpoint_meta(d / "other.gckpt"); }).find("not a gait checkpoint"), std::string::npos);

  // A checkpoint of another architecture cannot be resumed: the error names the key.
  Config other = cfg;
  other.model.gcn.scales = 3;
  Trainer u(other, toy_train_set(), torch::kCPU);
  const std::string e3 = error_of([&] { u.resume(d / "ok.gckpt"); });
  EXPECT_NE(e3.find("model.gcn.scales"), std::string::npos) << e3;
  fs::remove_all(d);
}

// A trainer of tiny_config(d) one step in, saved as d/ok.gckpt.
std::unique_ptr<Trainer> one_step(const fs::path& d) {
  auto t = std::make_unique<Trainer>(tiny_config(d), toy_train_set(), torch::kCPU);
  t->step();
  t->save(d / "ok.gckpt");
  return t;
}

// A checkpoint whose CRC is right but whose content is impossible: refused after the CRC,
// naming the file (training resumed at a negative iteration had a negative learning rate).
TEST(Checkpoint, ImpossibleContentIsRefusedAfterTheChecksum) {
  const fs::path d = temp_dir("impossible");
  one_step(d);
  const std::string bytes = common::read_file(d / "ok.gckpt");
  std::uint32_t m = 0;
  std::memcpy(&m, bytes.data() + 12, 4);
  const std::string archive = bytes.substr(kCheckpointHeaderBytes + m);
  // The same file with edited metadata and a recomputed checksum.
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json meta = nlohmann::json::parse(bytes.substr(kCheckpointHeaderBytes, m));
    edit(meta);
    const std::string mj = meta.dump();
    std::string out = bytes.substr(0, kCheckpointHeaderBytes) + mj + archive;
    const auto len = static_cast<std::uint32_t>(mj.size());
    std::memcpy(out.data() + 12, &len, 4);
    const std::uint32_t crc = crc32(out.data() + kCheckpointHeaderBytes, out.size() - kCheckpointHeaderBytes);
    std::memcpy(out.data() + 24, &crc, 4);
    return out;
  };
  auto refusal = [&](const std::function<void(nlohmann::json&)>& edit) {
    return error_of([&] { parse_checkpoint_meta(with(edit), "x.gckpt"); });
  };
  EXPECT_EQ(refusal([](nlohmann::json&) {}), "");
  EXPECT_EQ(refusal([](nlohmann::json& j) { j["iteration"] = -3; }),
            "x.gckpt: impossible checkpoint: iteration -3 is negative");
  EXPECT_NE(refusal([](nlohmann::json& j) { j["iteration"] = 1000000; }).find("beyond its config's trainer.iterations"),
            std::string::npos);
  EXPECT_NE(refusal([](nlohmann::json& j) { j["iteration"] = 1e20; }).find("not a 32-bit integer"), std::string::npos);
  EXPECT_NE(refusal([](nlohmann::json& j) { j["train_seconds"] = -1; }).find("train_seconds"), std::string::npos);
  EXPECT_NE(refusal([](nlohmann::json& j) { j["classes"] = {1, 1}; }).find("1 is given twice"), std::string::npos);
  EXPECT_NE(refusal([](nlohmann::json& j) { j["config"]["optimizer"]["lr"] = -1; }).find("x.gckpt (stored config)"),
            std::string::npos);
  fs::remove_all(d);
}

// Weights that do not fit the stored config, or that are not finite, are refused in one
// line naming the file and the parameter (LibTorch alone would take the tensor and fail
// later, in a forward pass, with an error that names no file).
TEST(Checkpoint, WeightsMustFitTheConfigAndBeFinite) {
  const fs::path d = temp_dir("weights");
  const Config cfg = tiny_config(d);
  const auto trainer = one_step(d);
  Trainer& t = *trainer;
  Config wider = cfg;
  wider.model.fusion.embed_dim = 8;
  nets::GaitNet other(wider.model, 4);
  const std::string e = error_of([&] { load_checkpoint(d / "ok.gckpt", *other, nullptr, torch::kCPU); });
  EXPECT_NE(e.find("ok.gckpt: the weights do not fit the stored config: '"), std::string::npos) << e;
  EXPECT_NE(e.find("in the file"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  {
    torch::NoGradGuard no_grad;
    t.model()->parameters().front().fill_(std::numeric_limits<float>::quiet_NaN());
  }
  const std::string s = error_of([&] { t.save(d / "nan.gckpt"); });
  EXPECT_NE(s.find("the weights are not finite after the step"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(d / "nan.gckpt"));
  CheckpointMeta meta = read_checkpoint_meta(d / "ok.gckpt");
  save_checkpoint(d / "nan.gckpt", meta, *t.model(), nullptr);  // bypasses the trainer's check
  nets::GaitNet same(cfg.model, 4);
  const std::string l = error_of([&] { load_checkpoint(d / "nan.gckpt", *same, nullptr, torch::kCPU); });
  EXPECT_NE(l.find("nan.gckpt: parameter '"), std::string::npos) << l;
  EXPECT_NE(l.find("holds non-finite values"), std::string::npos) << l;
  fs::remove_all(d);
}

// One short training run shared by the tests below, which read its files and embedder
// and change neither.
class TrainerRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<fs::path>(temp_dir("run"));
    Trainer t(tiny_config(*dir_), toy_train_set(), torch::kCPU);
    t.run(/*progress=*/false);
    iterations_ = t.iteration();
    emb_ = std::make_unique<eval::Embedder>(*dir_ / "latest.gckpt", torch::kCPU);
    // Test subjects 5..6: gallery nm-01, probes nm-05, bg-01, cl-01, at views 0 and 90.
    test_ = std::make_unique<std::vector<CachedSequence>>();
    for (int s = 5; s <= 6; ++s)
      for (int v : {0, 90})
        for (auto [c, q] : {std::pair{Condition::NM, 1}, {Condition::NM, 5}, {Condition::BG, 1}, {Condition::CL, 1}})
          test_->push_back(toy_sequence(s, c, q, v, 9));
  }
  static void TearDownTestSuite() {
    emb_.reset();
    test_.reset();
    fs::remove_all(*dir_);
    dir_.reset();
  }
  static inline std::unique_ptr<fs::path> dir_;
  static inline int iterations_ = 0;
  static inline std::unique_ptr<eval::Embedder> emb_;
  static inline std::unique_ptr<std::vector<CachedSequence>> test_;
};

TEST_F(TrainerRun, WritesCheckpointsConfigAndLog) {
  const fs::path& d = *dir_;
  EXPECT_EQ(iterations_, 6);
  EXPECT_TRUE(fs::exists(d / "latest.gckpt"));
  EXPECT_TRUE(fs::exists(d / "checkpoints" / "iter-0000003.gckpt"));
  EXPECT_TRUE(fs::exists(d / "config.json"));
  const std::string log = common::read_file(d / "train_log.csv");
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 7);  // header + 6 rows
}

TEST_F(TrainerRun, TheEmbedderEvaluatesTheCheckpoint) {
  eval::Embedder& emb = *emb_;
  const std::vector<CachedSequence>& test = *test_;
  EXPECT_EQ(emb.meta().iteration, 6);
  const eval::EmbeddingSet set = emb.embed_all(test, false);
  EXPECT_EQ(set.size(), test.size());
  EXPECT_EQ(set.row_size(), 6u * 4u);
  Protocol p;
  p.train_last_subject = 4;
  const eval::Rank1Result r = eval::evaluate_rank1(set, p);
  EXPECT_EQ(r.views, (std::vector<int>{0, 90}));
  for (double m : r.mean) EXPECT_TRUE(m >= 0 && m <= 100) << m;
  EXPECT_EQ(emb.embed(test[0]), emb.embed(test[0]));  // deterministic in eval mode
}

// Frames used: the first multiple of evaluator.length_quantum. With 8, a 12-frame
// sequence embeds as its first 8 frames; with the default 1 every frame counts.
TEST_F(TrainerRun, LengthQuantumDecidesTheFramesUsed) {
  eval::Embedder& emb = *emb_;
  const CachedSequence whole = toy_sequence(5, Condition::NM, 2, 0, 12);
  CachedSequence cut = whole;
  cut.sil.pixels.resize(8 * kSilPixels);
  cut.sil.frame_ids.resize(8);
  cut.pose.resize(8);
  ASSERT_EQ(cut.sil.frames(), 8u);
  EXPECT_EQ(emb.config().evaluator.length_quantum, 1);
  EXPECT_NE(emb.embed(cut), emb.embed(whole));
  Config q8 = emb.config();
  q8.evaluator.length_quantum = 8;
  eval::Embedder eights(emb.model(), q8, torch::kCPU);
  EXPECT_EQ(eights.embed(cut), eights.embed(whole));
}

// Test embeddings from the branch heads: fused+branches is [fused p | silhouette p |
// skeleton x p] along the part axis; each head alone is its own slice of it, and
// evaluator.skeleton_scale multiplies the skeleton head's parts beside the others.
TEST_F(TrainerRun, BranchHeadsAreSlicesOfTheFusedAndBranchesEmbedding) {
  eval::Embedder& emb = *emb_;
  const std::vector<CachedSequence>& test = *test_;
  const int c = emb.channels(), p4 = emb.parts();
  ASSERT_EQ(p4, 4);
  std::map<EvalHeads, std::vector<float>> by;
  for (EvalHeads h : {EvalHeads::Fused, EvalHeads::FusedAndBranches, EvalHeads::Branches, EvalHeads::SilhouetteHead,
                      EvalHeads::SkeletonHead}) {
    Config hc = emb.config();
    hc.evaluator.heads = h;
    eval::Embedder e(emb.model(), hc, torch::kCPU);
    by[h] = e.embed(test[0]);
    EXPECT_EQ(by[h].size(), static_cast<std::size_t>(c * e.parts()));
    const eval::EmbeddingSet hs = e.embed_all({test[0], test[1]}, false);
    EXPECT_EQ(hs.parts, e.parts());
  }
  EXPECT_EQ(by[EvalHeads::Fused], emb.embed(test[0]));
  const std::vector<float>& all = by[EvalHeads::FusedAndBranches];  // [c, 12] row-major
  ASSERT_EQ(all.size(), static_cast<std::size_t>(c * 12));
  for (int ch = 0; ch < c; ++ch)
    for (int q = 0; q < p4; ++q) {
      EXPECT_FLOAT_EQ(all[ch * 12 + q], by[EvalHeads::Fused][ch * p4 + q]);
      EXPECT_FLOAT_EQ(all[ch * 12 + p4 + q], by[EvalHeads::SilhouetteHead][ch * p4 + q]);
      EXPECT_FLOAT_EQ(all[ch * 12 + 2 * p4 + q], by[EvalHeads::SkeletonHead][ch]);
      EXPECT_FLOAT_EQ(by[EvalHeads::Branches][ch * 8 + q], all[ch * 12 + p4 + q]);
      EXPECT_FLOAT_EQ(by[EvalHeads::Branches][ch * 8 + p4 + q], all[ch * 12 + 2 * p4 + q]);
    }
  EXPECT_NE(by[EvalHeads::SilhouetteHead], by[EvalHeads::Fused]);
  Config sc = emb.config();
  sc.evaluator.heads = EvalHeads::Branches;
  eval::Embedder scaled(emb.model(), sc, torch::kCPU);
  scaled.set_skeleton_scale(0.25);
  const std::vector<float> quarter = scaled.embed(test[0]);
  for (int ch = 0; ch < c; ++ch)
    for (int q = 0; q < p4; ++q) {
      EXPECT_FLOAT_EQ(quarter[ch * 8 + q], by[EvalHeads::Branches][ch * 8 + q]);
      EXPECT_FLOAT_EQ(quarter[ch * 8 + p4 + q], 0.25f * by[EvalHeads::SkeletonHead][ch]);
    }
  EXPECT_THROW(scaled.set_skeleton_scale(-1), common::Error);
}

TEST_F(TrainerRun, AModelWithoutBranchHeadsRefusesThem) {
  Config plain = emb_->config();
  plain.model.fusion.branch_loss_weight = 0;
  eval::Embedder fused_only(nets::GaitNet(plain.model, 4), plain, torch::kCPU);
  const std::string e = error_of([&] { fused_only.set_heads(EvalHeads::SkeletonHead); });
  EXPECT_NE(e.find("need the branch heads"), std::string::npos) << e;
}

// embed_all batches equal-length sequences; mixed lengths, and a batch cap that splits a
// length group, give the one-at-a-time embeddings in the input order.
TEST_F(TrainerRun, EmbedAllGivesTheOneAtATimeEmbeddingsInOrder) {
  eval::Embedder& emb = *emb_;
  const std::vector<CachedSequence>& test = *test_;
  const std::vector<CachedSequence> mixed = {toy_sequence(5, Condition::NM, 2, 0, 12), test[0], test[1],
                                             toy_sequence(6, Condition::CL, 2, 90, 7), test[2],
                                             toy_sequence(5, Condition::BG, 2, 0, 12)};
  for (int batch_frames : {2048, 20}) {
    Config ecfg = emb.config();
    ecfg.evaluator.batch_frames = batch_frames;
    eval::Embedder batched(emb.model(), ecfg, torch::kCPU);
    const eval::EmbeddingSet ms = batched.embed_all(mixed, false);
    ASSERT_EQ(ms.size(), mixed.size());
    for (std::size_t i = 0; i < mixed.size(); ++i) {
      EXPECT_EQ(ms.keys[i], mixed[i].key);
      const std::vector<float> one = emb.embed(mixed[i]);
      for (std::size_t j = 0; j < one.size(); ++j)
        ASSERT_NEAR(ms.data[i * ms.row_size() + j], one[j], 1e-4f * (1.0f + std::abs(one[j]))) << i << "," << j;
    }
  }
}

TEST(Trainer, TimeLimitStopsTheRunAndSavesWhereItStopped) {
  const fs::path d = temp_dir("timelimit");
  Config cfg = tiny_config(d);
  cfg.trainer.iterations = 100000;
  cfg.trainer.save_every = 50000;
  cfg.trainer.log_every = 50000;
  cfg.trainer.max_minutes = 1e-6;  // 60 us: over after the first step
  Trainer t(cfg, toy_train_set(), torch::kCPU);
  const RunSummary sum = t.run(/*progress=*/false);
  EXPECT_TRUE(sum.stopped_by_time);
  EXPECT_EQ(sum.iterations, 1);
  EXPECT_EQ(sum.planned_iterations, 100000);
  EXPECT_EQ(read_checkpoint_meta(d / "latest.gckpt").iteration, 1);
  EXPECT_TRUE(fs::exists(d / "checkpoints" / "iter-0000001.gckpt"));
  const auto j = nlohmann::json::parse(common::read_file(d / "train_summary.json"));
  EXPECT_EQ(j["iterations"], 1);
  EXPECT_EQ(j["stopped_by_time"], true);
  const std::string log = common::read_file(d / "train_log.csv");
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 2);  // header + the row of the stopping step

  // fit_schedule_to_time: the run ends by the clock far below the ceiling, and the
  // cosine has followed the elapsed time down to near its floor at the last step (its
  // rate was taken at the step's start, one step before the limit).
  const fs::path d2 = temp_dir("timefit");
  Config fit = tiny_config(d2);
  fit.trainer.iterations = 1000000;
  fit.trainer.save_every = 1000000;
  fit.trainer.log_every = 1000000;
  fit.trainer.max_minutes = 0.05;  // 3 s
  fit.trainer.fit_schedule_to_time = true;
  fit.scheduler.type = ScheduleType::Cosine;
  fit.scheduler.warmup_iterations = 0;
  fit.scheduler.min_lr = 0;
  Trainer f(fit, toy_train_set(), torch::kCPU);
  const RunSummary sum2 = f.run(/*progress=*/false);
  EXPECT_TRUE(sum2.stopped_by_time);
  EXPECT_EQ(sum2.planned_iterations, 1000000);
  EXPECT_GT(sum2.iterations, 3);
  EXPECT_LE(sum2.run_seconds, 3.0 + 1.0);
  const std::string log2 = common::read_file(d2 / "train_log.csv");
  const std::string last = log2.substr(log2.rfind('\n', log2.size() - 2) + 1);
  const double last_lr = std::stod(common::split_csv_line(last.substr(0, last.find('\n'))).at(6));  // lr column
  EXPECT_LT(last_lr, 0.3 * fit.optimizer.lr) << last;  // iteration progress alone would leave it at ~lr
  EXPECT_GT(last_lr, 0.0) << last;
  fs::remove_all(d);
  fs::remove_all(d2);
}

}  // namespace
}  // namespace gait::train
