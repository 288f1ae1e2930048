// The run configuration: one JSON file with the sections OpenGait uses
//
//   { "data": {...}, "model": {...}, "loss": {...}, "optimizer": {...},
//     "scheduler": {...}, "trainer": {...}, "evaluator": {...} }
//
// Parsing is strict: an unknown key anywhere (a typo such as "stc_attn") is an error
// that names the key's full path and the keys that section knows; a value of the
// wrong type is an error naming the path. A missing key takes the default below, so a
// config states only what differs from the defaults.
//
// A config may start from another one: "base": "full-gpu.json" (a path relative to
// the config's own folder) is loaded first and the rest of the file is merged over it
// (JSON merge patch, RFC 7386), then the merged document is parsed strictly.
//
// Every field is listed once, in config.cpp's visit_fields(), which both reads and
// writes it, so to_json(parse_config(j)) names every field with its effective value.
// This header is torch-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gait::train {

enum class ModelMode { TwoBranch, Silhouette, Skeleton };     // "two_branch" | "silhouette" | "skeleton"
enum class GraphOperator { Natural, FullyConnected };         // "natural" | "fc"
enum class TripletMining { BatchAll, Hard };                  // "batch_all" | "hard"
enum class OptimizerType { Adam, Sgd };                       // "adam" | "sgd"
enum class ScheduleType { Constant, Step, Cosine };           // "constant" | "step" | "cosine"
enum class EvalFeature { Embedding, BnFeature };              // "embedding" | "bn"
// Which heads make the test embedding (two_branch with branch heads may use any; the
// others have only the fused head): "fused" | "fused+branches" | "branches" | "silhouette" | "skeleton".
enum class EvalHeads { Fused, FusedAndBranches, Branches, SilhouetteHead, SkeletonHead };

struct DataConfig {
  std::string root;         // dataset root: a `gait synth` output, or a CASIA-B silhouette root
  std::string pose;         // pose CSV file or folder for a CASIA-B root ("" = none / ROOT/pose)
  std::string cache;        // preprocessed cache folder ("" = ROOT/cache)
  int clip_length = 30;     // frames per training clip
  int train_last_subject = 0;  // 0: the protocol's split for the dataset's subject count
  int loader_threads = 0;   // threads reading the cache (0: all hardware threads)
  // Read the sequences from the cache alone, without listing the dataset (which reads
  // every pose CSV: ~20 s for the full synthetic set). For a cache that `gait preprocess`
  // has completed; a cache without sequences is an error.
  bool cache_only = false;
  bool operator==(const DataConfig&) const = default;
};

// GaitGL-style silhouette branch (gait/nets/cnn_branch.hpp).
struct CnnConfig {
  std::vector<int> channels = {32, 64, 128};  // stem + block A0, block A1, block B2
  int halving = 3;          // local convs see 2^halving horizontal strips
  int parts = 64;           // horizontal parts of the output (divides the final feature height 64)
  bool operator==(const CnnConfig&) const = default;
};

// Skeleton branch (gait/nets/gcn_branch.hpp).
struct GcnConfig {
  GraphOperator op = GraphOperator::FullyConnected;
  int scales = 3;                               // k-hop scales 0..scales-1 merged into one operator
  bool stc_att = true;                          // spatial-temporal-channel attention in every block
  std::vector<int> channels = {64, 64, 128, 128};  // one block per entry
  int temporal_kernel = 9;
  int att_reduction = 4;                        // STC-Att bottleneck: channels / reduction
  bool operator==(const GcnConfig&) const = default;
};

struct FusionConfig {
  int embed_dim = 256;      // per-part output of the separate FCs (the embedding's c)
  // two_branch only (ignored by the single-branch modes). Without these the fused head
  // learns the training identities from the skeleton alone long before the CNN is any
  // good, its triplet loss runs out of active triplets and the CNN stops learning
  // (measured: docs/gait-model.md, third GPU run).
  // Weight of each branch's own head (separate FCs + BNNeck + classifier on that
  // branch's features alone, the same triplet + CE): every branch keeps a loss of its
  // own. 0: no branch heads. The embedding stays the fused head's.
  double branch_loss_weight = 0;
  // Per training step, with probability p/2 the skeleton feature and with p/2 the
  // silhouette features enter the fused FCs as zeros (the whole batch), so the fused
  // head cannot lean on one branch. Evaluation never drops. 0: off.
  double modality_dropout = 0;
  bool operator==(const FusionConfig&) const = default;
};

struct ModelConfig {
  ModelMode mode = ModelMode::TwoBranch;
  CnnConfig cnn;
  GcnConfig gcn;
  FusionConfig fusion;
  bool operator==(const ModelConfig&) const = default;
};

struct LossConfig {
  double triplet_margin = 0.2;
  TripletMining mining = TripletMining::BatchAll;
  double triplet_weight = 1.0;
  double ce_weight = 1.0;
  double label_smoothing = 0.1;
  bool operator==(const LossConfig&) const = default;
};

struct OptimizerConfig {
  OptimizerType type = OptimizerType::Adam;
  double lr = 1e-4;
  double weight_decay = 5e-4;
  double momentum = 0.9;    // SGD only
  bool nesterov = false;    // SGD only
  bool operator==(const OptimizerConfig&) const = default;
};

struct SchedulerConfig {
  ScheduleType type = ScheduleType::Step;
  std::vector<int> milestones;  // step: iterations at which lr *= gamma
  double gamma = 0.1;
  int warmup_iterations = 0;    // linear warm-up from lr/100 (all types)
  double min_lr = 0.0;          // cosine floor
  bool operator==(const SchedulerConfig&) const = default;
};

struct AugmentConfig {
  bool enabled = true;
  double sil_erase_p = 0.5;       // random erasing: one rectangle per clip (all frames)
  double sil_rotate_deg = 4.0;    // uniform in +-deg, one angle per clip
  double sil_shift_px = 2.0;      // uniform in +-px, x and y, one shift per clip
  double pose_noise_px = 1.0;     // Gaussian joint noise (video pixels), per joint and frame
  double pose_mirror_p = 0.5;     // mirror x and swap COCO left/right joints
  double pose_time_flip_p = 0.5;  // reverse the clip's frame order
  bool operator==(const AugmentConfig&) const = default;
};

struct TrainerConfig {
  int iterations = 80000;
  int batch_p = 8;          // identities per batch
  int batch_k = 8;          // sequences per identity
  std::uint64_t seed = 1;
  std::string device = "auto";  // "auto" (CUDA when available) | "cpu" | "cuda"
  bool amp = true;          // bf16 autocast on CUDA; ignored on CPU
  int threads = 0;          // CPU intra-op threads (0: all hardware threads)
  int save_every = 5000;    // iterations between checkpoints (the last one is always saved)
  int log_every = 100;      // iterations between rows of train_log.csv
  std::string out_dir = "out/gait/run";
  // Wall-clock budget of one `gait train` run in minutes (0: none). The run stops after
  // the step that reaches it, saves its checkpoint and records the iterations done
  // (OUT/train_summary.json); trainer.iterations is then a ceiling.
  double max_minutes = 0;
  // With max_minutes: the cosine schedule's progress is max(iteration / iterations,
  // elapsed / max_minutes), so it ends at the budget (or at trainer.iterations, if that
  // comes first) instead of being cut at a high rate, whatever the step time does.
  bool fit_schedule_to_time = false;
  bool prefetch = true;     // prepare the next batch on a worker thread during this step (same batches either way)
  // Synchronise after each phase of a step and report the phases' times (RunSummary,
  // train_summary.json): where the time goes, at the cost of all overlap.
  bool profile_phases = false;
  // On CUDA, capture the step's device work as CUDA graphs after the first steps and
  // replay them (graph_step.hpp): the same computation without its thousands of launches.
  // Needs optimizer.type adam; profile_phases steps stay eager (their phases are the
  // eager operations').
  bool cuda_graph = true;
  AugmentConfig augment;
  bool operator==(const TrainerConfig&) const = default;
};

struct EvaluatorConfig {
  EvalFeature feature = EvalFeature::BnFeature;  // which head output is the embedding
  // fused: the fused head's [d, p]. fused+branches: the fused head's p parts, the
  // silhouette head's p parts and the skeleton head's one part repeated p times, [d, 3p]
  // (per-part distances averaged over the 3p parts: each head weighs a third).
  // branches: the two branch heads without the fused one, [d, 2p] (half each).
  // silhouette / skeleton: one branch head alone (ablations), [d, p] / [d, 1].
  EvalHeads heads = EvalHeads::Fused;
  // Multiplies the skeleton head's embedding in fused+branches and branches (so its
  // distances weigh a times as much; `gait tune-fusion` picks it on a development set).
  double skeleton_scale = 1.0;
  int max_frames = 720;     // frames of a sequence used at test time (OpenGait: all, capped at 720)
  int batch_frames = 2048;  // frames per forward pass when embedding many sequences (same-length ones batched; 1: one at a time)
  int length_quantum = 1;   // frames used rounded down to a multiple of this (1: all, as OpenGait): fewer input shapes
  bool operator==(const EvaluatorConfig&) const = default;
};

struct Config {
  DataConfig data;
  ModelConfig model;
  LossConfig loss;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  TrainerConfig trainer;
  EvaluatorConfig evaluator;
  bool operator==(const Config&) const = default;
};

// Strict parse of a merged document; `source` names it in errors. Also validates
// ranges (positive sizes, parts dividing 64, milestones ascending, ...).
Config parse_config(const nlohmann::json& j, const std::string& source);
// Reads a file, resolves "base" chains (relative paths, cycles are errors), parses.
Config load_config(const std::filesystem::path& path);
// Every field with its effective value.
nlohmann::json to_json(const Config& c);

// Names used in files and logs: "two_branch", "fc", ...
std::string to_string(ModelMode m);
std::string to_string(GraphOperator o);
std::string to_string(EvalHeads h);
// A heads name as in evaluator.heads ("fused", "fused+branches", "branches", "silhouette", "skeleton"); common::Error otherwise.
EvalHeads parse_eval_heads(const std::string& name);

// The parts of a model that must match for a checkpoint to be resumed or evaluated
// with a config: the first differing key path, or "" when they agree.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& path = "");

}  // namespace gait::train
