// Strict JSON <-> Config. visit_fields() lists every field once; the Reader visitor
// consumes keys (and reports the ones left over), the Writer visitor emits them.
#include "gait/train/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <set>
#include <utility>

#include "common/check.hpp"
#include "common/files.hpp"

namespace gait::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// ---------------------------------------------------------------- enum names

template <class E>
struct EnumNames;
// One line per enum: its values and their names in the config file.
#define GAIT_ENUM_NAMES(E, ...)                                                     \
  template <>                                                                       \
  struct EnumNames<E> {                                                             \
    static constexpr auto v = std::to_array<std::pair<E, const char*>>({__VA_ARGS__}); \
  };
GAIT_ENUM_NAMES(ModelMode, {ModelMode::TwoBranch, "two_branch"}, {ModelMode::Silhouette, "silhouette"},
                {ModelMode::Skeleton, "skeleton"})
GAIT_ENUM_NAMES(GraphOperator, {GraphOperator::Natural, "natural"}, {GraphOperator::FullyConnected, "fc"})
GAIT_ENUM_NAMES(TripletMining, {TripletMining::BatchAll, "batch_all"}, {TripletMining::Hard, "hard"})
GAIT_ENUM_NAMES(OptimizerType, {OptimizerType::Adam, "adam"}, {OptimizerType::Sgd, "sgd"})
GAIT_ENUM_NAMES(ScheduleType, {ScheduleType::Constant, "constant"}, {ScheduleType::Step, "step"},
                {ScheduleType::Cosine, "cosine"})
GAIT_ENUM_NAMES(EvalFeature, {EvalFeature::Embedding, "embedding"}, {EvalFeature::BnFeature, "bn"})
GAIT_ENUM_NAMES(EvalHeads, {EvalHeads::Fused, "fused"}, {EvalHeads::FusedAndBranches, "fused+branches"},
                {EvalHeads::Branches, "branches"}, {EvalHeads::SilhouetteHead, "silhouette"},
                {EvalHeads::SkeletonHead, "skeleton"})

template <class E>
std::string enum_name(E e) {
  for (const auto& [k, n] : EnumNames<E>::v)
    if (k == e) return n;
  return "?";
}

template <class E>
std::optional<E> enum_from_name(const std::string& name) {
  for (const auto& [k, n] : EnumNames<E>::v)
    if (name == n) return k;
  return std::nullopt;
}

template <class E>
std::string enum_choices() {
  std::string s;
  for (const auto& [k, n] : EnumNames<E>::v) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

// ---------------------------------------------------------------- the field list

template <class V>
void visit_fields(V& v, DataConfig& c) {
  v("root", c.root), v("pose", c.pose), v("cache", c.cache), v("clip_length", c.clip_length),
    v("train_last_subject", c.train_last_subject), v("loader_threads", c.loader_threads),
    v("cache_only", c.cache_only);
}
template <class V>
void visit_fields(V& v, CnnConfig& c) {
  v("channels", c.channels), v("halving", c.halving), v("parts", c.parts);
}
template <class V>
void visit_fields(V& v, GcnConfig& c) {
  v("operator", c.op), v("scales", c.scales), v("stc_att", c.stc_att), v("channels", c.channels),
    v("temporal_kernel", c.temporal_kernel), v("att_reduction", c.att_reduction);
}
template <class V>
void visit_fields(V& v, FusionConfig& c) {
  v("embed_dim", c.embed_dim), v("branch_loss_weight", c.branch_loss_weight),
    v("modality_dropout", c.modality_dropout);
}
template <class V>
void visit_fields(V& v, ModelConfig& c) {
  v("mode", c.mode), v("cnn", c.cnn), v("gcn", c.gcn), v("fusion", c.fusion);
}
template <class V>
void visit_fields(V& v, LossConfig& c) {
  v("triplet_margin", c.triplet_margin), v("mining", c.mining), v("triplet_weight", c.triplet_weight),
    v("ce_weight", c.ce_weight), v("label_smoothing", c.label_smoothing);
}
template <class V>
void visit_fields(V& v, OptimizerConfig& c) {
  v("type", c.type), v("lr", c.lr), v("weight_decay", c.weight_decay), v("momentum", c.momentum),
    v("nesterov", c.nesterov);
}
template <class V>
void visit_fields(V& v, SchedulerConfig& c) {
  v("type", c.type), v("milestones", c.milestones), v("gamma", c.gamma),
    v("warmup_iterations", c.warmup_iterations), v("min_lr", c.min_lr);
}
template <class V>
void visit_fields(V& v, AugmentConfig& c) {
  v("enabled", c.enabled), v("sil_erase_p", c.sil_erase_p), v("sil_rotate_deg", c.sil_rotate_deg),
    v("sil_shift_px", c.sil_shift_px), v("pose_noise_px", c.pose_noise_px),
    v("pose_mirror_p", c.pose_mirror_p), v("pose_time_flip_p", c.pose_time_flip_p);
}
template <class V>
void visit_fields(V& v, TrainerConfig& c) {
  v("iterations", c.iterations), v("batch_p", c.batch_p), v("batch_k", c.batch_k), v("seed", c.seed),
    v("device", c.device), v("amp", c.amp), v("threads", c.threads), v("save_every", c.save_every),
    v("log_every", c.log_every), v("out_dir", c.out_dir), v("max_minutes", c.max_minutes),
    v("fit_schedule_to_time", c.fit_schedule_to_time), v("prefetch", c.prefetch),
    v("profile_phases", c.profile_phases), v("cuda_graph", c.cuda_graph), v("augment", c.augment);
}
template <class V>
void visit_fields(V& v, EvaluatorConfig& c) {
  v("feature", c.feature), v("heads", c.heads), v("skeleton_scale", c.skeleton_scale),
    v("max_frames", c.max_frames), v("batch_frames", c.batch_frames), v("length_quantum", c.length_quantum);
}
template <class V>
void visit_fields(V& v, Config& c) {
  v("data", c.data), v("model", c.model), v("loss", c.loss), v("optimizer", c.optimizer),
    v("scheduler", c.scheduler), v("trainer", c.trainer), v("evaluator", c.evaluator);
}

// ---------------------------------------------------------------- reading

template <class T>
void read_value(const json& j, T& out, const std::string& path, const std::string& source);

struct KeyLister {
  std::vector<std::string> keys;
  template <class T>
  void operator()(const char* key, T&) { keys.emplace_back(key); }
};

template <class S>
std::string known_keys() {
  KeyLister l;
  S s{};
  visit_fields(l, s);
  std::string out;
  for (const auto& k : l.keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

struct Reader {
  const json& obj;
  std::string path, source;
  std::set<std::string> seen;
  template <class T>
  void operator()(const char* key, T& field) {
    seen.insert(key);
    auto it = obj.find(key);
    if (it != obj.end()) read_value(*it, field, path.empty() ? key : path + "." + key, source);
  }
};

[[noreturn]] void type_error(const std::string& source, const std::string& path, const char* expected, const json& j) {
  throw common::Error(fmt::format("{}: {}: expected {}, got {}", source, path, expected, j.dump()));
}

template <class S>
void read_section(const json& j, S& out, const std::string& path, const std::string& source) {
  if (!j.is_object()) type_error(source, path.empty() ? "(top level)" : path, "an object", j);
  Reader r{j, path, source, {}};
  visit_fields(r, out);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!r.seen.count(it.key())) {
      const std::string full = path.empty() ? it.key() : path + "." + it.key();
      throw common::Error(fmt::format("{}: unknown key '{}' (known in {}: {})", source, full,
                                      path.empty() ? "the top level" : "'" + path + "'", known_keys<S>()));
    }
  }
}

template <class T>
void read_value(const json& j, T& out, const std::string& path, const std::string& source) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) type_error(source, path, "true or false", j);
    out = j.get<bool>();
  } else if constexpr (std::is_same_v<T, int>) {
    if (!j.is_number_integer()) type_error(source, path, "an integer", j);
    const auto v = j.get<long long>();
    if (v < -(1LL << 31) || v >= (1LL << 31)) type_error(source, path, "a 32-bit integer", j);
    out = static_cast<int>(v);
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    if (!j.is_number_unsigned()) type_error(source, path, "a non-negative integer", j);
    out = j.get<std::uint64_t>();
  } else if constexpr (std::is_same_v<T, double>) {
    if (!j.is_number()) type_error(source, path, "a number", j);
    out = j.get<double>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) type_error(source, path, "a string", j);
    out = j.get<std::string>();
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    if (!j.is_array()) type_error(source, path, "an array of integers", j);
    out.clear();
    for (std::size_t i = 0; i < j.size(); ++i) {
      int v = 0;
      read_value(j[i], v, fmt::format("{}[{}]", path, i), source);
      out.push_back(v);
    }
  } else if constexpr (std::is_enum_v<T>) {
    if (!j.is_string()) type_error(source, path, fmt::format("one of: {}", enum_choices<T>()).c_str(), j);
    const std::string s = j.get<std::string>();
    const std::optional<T> e = enum_from_name<T>(s);
    if (!e) throw common::Error(fmt::format("{}: {}: '{}' is not one of: {}", source, path, s, enum_choices<T>()));
    out = *e;
  } else {
    read_section(j, out, path, source);
  }
}

// ---------------------------------------------------------------- writing

struct Writer {
  json& obj;
  template <class T>
  void operator()(const char* key, T& field) {
    if constexpr (std::is_enum_v<T>) {
      obj[key] = enum_name(field);
    } else if constexpr (std::is_class_v<T> && !std::is_same_v<T, std::string> && !std::is_same_v<T, std::vector<int>>) {
      json sub = json::object();
      Writer w{sub};
      visit_fields(w, field);
      obj[key] = std::move(sub);
    } else {
      obj[key] = field;
    }
  }
};

// ---------------------------------------------------------------- validation

void validate(const Config& c, const std::string& src) {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw common::Error(fmt::format("{}: {}", src, what));
  };
  need(c.data.clip_length >= 3, "data.clip_length must be at least 3 (the temporal aggregation takes 3 frames)");
  need(c.data.train_last_subject >= 0, "data.train_last_subject must be >= 0");
  const auto& m = c.model;
  if (m.mode != ModelMode::Skeleton) {
    need(m.cnn.channels.size() == 3, "model.cnn.channels must list 3 widths (stem/A0, A1, B2)");
    for (int w : m.cnn.channels) need(w > 0, "model.cnn.channels must be positive");
    need(m.cnn.halving >= 0 && m.cnn.halving <= 5, "model.cnn.halving must be in 0..5 (2^halving strips of 32 rows)");
    need(m.cnn.parts > 0 && 64 % m.cnn.parts == 0, "model.cnn.parts must divide 64 (the final feature height)");
  }
  if (m.mode != ModelMode::Silhouette) {
    need(!m.gcn.channels.empty(), "model.gcn.channels must list at least one block");
    for (int w : m.gcn.channels) need(w > 0, "model.gcn.channels must be positive");
    need(m.gcn.scales >= 1 && m.gcn.scales <= 8, "model.gcn.scales must be in 1..8");
    need(m.gcn.temporal_kernel >= 1 && m.gcn.temporal_kernel % 2 == 1, "model.gcn.temporal_kernel must be odd");
    need(m.gcn.att_reduction >= 1, "model.gcn.att_reduction must be >= 1");
  }
  need(m.fusion.embed_dim > 0, "model.fusion.embed_dim must be positive");
  need(m.fusion.branch_loss_weight >= 0, "model.fusion.branch_loss_weight must be >= 0 (0: no branch heads)");
  need(m.fusion.modality_dropout >= 0 && m.fusion.modality_dropout < 1,
       "model.fusion.modality_dropout must be in [0, 1)");
  need(c.loss.triplet_margin >= 0, "loss.triplet_margin must be >= 0");
  need(c.loss.triplet_weight >= 0 && c.loss.ce_weight >= 0, "loss weights must be >= 0");
  need(c.loss.triplet_weight + c.loss.ce_weight > 0, "loss.triplet_weight and loss.ce_weight cannot both be 0");
  need(c.loss.label_smoothing >= 0 && c.loss.label_smoothing < 1, "loss.label_smoothing must be in [0, 1)");
  need(c.optimizer.lr > 0, "optimizer.lr must be positive");
  need(c.optimizer.weight_decay >= 0, "optimizer.weight_decay must be >= 0");
  need(std::is_sorted(c.scheduler.milestones.begin(), c.scheduler.milestones.end()),
       "scheduler.milestones must be ascending");
  need(c.scheduler.gamma > 0, "scheduler.gamma must be positive");
  need(c.scheduler.warmup_iterations >= 0, "scheduler.warmup_iterations must be >= 0");
  const auto& t = c.trainer;
  need(t.iterations >= 1, "trainer.iterations must be >= 1");
  need(t.batch_p >= 2, "trainer.batch_p must be >= 2 (triplets need two identities)");
  need(t.batch_k >= 2, "trainer.batch_k must be >= 2 (triplets need two sequences of an identity)");
  need(t.device == "auto" || t.device == "cpu" || t.device == "cuda", "trainer.device must be auto, cpu or cuda");
  need(t.threads >= 0, "trainer.threads must be >= 0");
  need(t.save_every >= 1 && t.log_every >= 1, "trainer.save_every and trainer.log_every must be >= 1");
  need(t.max_minutes >= 0, "trainer.max_minutes must be >= 0 (0: no time limit)");
  need(!t.fit_schedule_to_time || t.max_minutes > 0, "trainer.fit_schedule_to_time needs trainer.max_minutes > 0");
  const auto& a = t.augment;
  for (double p : {a.sil_erase_p, a.pose_mirror_p, a.pose_time_flip_p})
    need(p >= 0 && p <= 1, "trainer.augment probabilities must be in [0, 1]");
  need(a.sil_rotate_deg >= 0 && a.sil_shift_px >= 0 && a.pose_noise_px >= 0, "trainer.augment magnitudes must be >= 0");
  need(c.evaluator.heads == EvalHeads::Fused || (m.mode == ModelMode::TwoBranch && m.fusion.branch_loss_weight > 0),
       fmt::format("evaluator.heads \"{}\" needs the branch heads (model.mode two_branch with "
                   "model.fusion.branch_loss_weight > 0)",
                   enum_name(c.evaluator.heads)));
  need(std::isfinite(c.evaluator.skeleton_scale) && c.evaluator.skeleton_scale >= 0,
       "evaluator.skeleton_scale must be finite and >= 0");
  need(c.evaluator.max_frames >= 3, "evaluator.max_frames must be >= 3");
  need(c.evaluator.batch_frames >= 1, "evaluator.batch_frames must be >= 1");
  need(c.evaluator.length_quantum >= 1, "evaluator.length_quantum must be >= 1 (1: every frame)");
}

// RFC 7386 merge patch.
void merge_patch(json& target, const json& patch) {
  if (!patch.is_object()) {
    target = patch;
    return;
  }
  if (!target.is_object()) target = json::object();
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    if (it->is_null()) target.erase(it.key());
    else merge_patch(target[it.key()], *it);
  }
}

json load_merged(const fs::path& path, std::vector<fs::path>& chain) {
  const fs::path canon = fs::weakly_canonical(path);
  for (const auto& p : chain)
    if (p == canon) throw common::Error(fmt::format("{}: \"base\" chain loops back to this file", path.string()));
  chain.push_back(canon);
  json j;
  try {
    j = json::parse(common::read_file(path));
  } catch (const json::exception& e) {  // parse errors, and numbers beyond the double range (1e999)
    throw common::Error(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
  }
  if (!j.is_object()) throw common::Error(fmt::format("{}: the top level must be an object", path.string()));
  if (auto it = j.find("base"); it != j.end()) {
    if (!it->is_string()) throw common::Error(fmt::format("{}: \"base\" must be a path string", path.string()));
    const fs::path base = path.parent_path() / it->get<std::string>();
    json merged = load_merged(base, chain);
    j.erase("base");
    merge_patch(merged, j);
    return merged;
  }
  return j;
}

// JSON has no NaN, but a literal beyond the double range (1e999) reads as infinity.
void check_finite_numbers(const json& j, const std::string& path, const std::string& source) {
  if (j.is_number_float() && !std::isfinite(j.get<double>()))
    throw common::Error(fmt::format("{}: {}: {} is not a finite number", source, path.empty() ? "(top level)" : path,
                                    j.dump()));
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it)
      check_finite_numbers(*it, path.empty() ? it.key() : path + "." + it.key(), source);
  if (j.is_array())
    for (std::size_t i = 0; i < j.size(); ++i) check_finite_numbers(j[i], fmt::format("{}[{}]", path, i), source);
}

}  // namespace

Config parse_config(const json& j, const std::string& source) {
  check_finite_numbers(j, "", source);
  Config c;
  read_section(j, c, "", source);
  validate(c, source);
  return c;
}

Config load_config(const fs::path& path) {
  std::vector<fs::path> chain;
  return parse_config(load_merged(path, chain), path.string());
}

json to_json(const Config& c) {
  json j = json::object();
  Config copy = c;
  Writer w{j};
  visit_fields(w, copy);
  return j;
}

std::string to_string(ModelMode m) { return enum_name(m); }
std::string to_string(GraphOperator o) { return enum_name(o); }
std::string to_string(EvalHeads h) { return enum_name(h); }

EvalHeads parse_eval_heads(const std::string& name) {
  const std::optional<EvalHeads> h = enum_from_name<EvalHeads>(name);
  if (!h) throw common::Error(fmt::format("--heads '{}': expected one of {}", name, enum_choices<EvalHeads>()));
  return *h;
}

std::string first_difference(const json& a, const json& b, const std::string& path) {
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (auto it = a.begin(); it != a.end(); ++it) keys.insert(it.key());
    for (auto it = b.begin(); it != b.end(); ++it) keys.insert(it.key());
    for (const auto& k : keys) {
      const std::string p = path.empty() ? k : path + "." + k;
      if (!a.contains(k) || !b.contains(k)) return p;
      std::string d = first_difference(a[k], b[k], p);
      if (!d.empty()) return d;
    }
    return "";
  }
  return a == b ? "" : (path.empty() ? "(top level)" : path);
}

}  // namespace gait::train
