// torch.ops.gait.* and torch.classes.gait.Model: the gait library (gait/) from PyTorch.
// A trained checkpoint embeds silhouette (and skeleton) clips; OpenGait's silhouette
// pretreatment and the CASIA-B rank-1 evaluation run on a researcher's own tensors; the
// preprocessed cache files read into tensors; `gait train`'s P x K identity sampler draws
// batches. The numbers are those of the `gait` CLI: the same Embedder,
// preprocess_silhouette, evaluate_rank1 and PxKSampler.
#include <torch/custom_class.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "checks.hpp"
#include "gait/cache_build.hpp"
#include "gait/eval/embedder.hpp"
#include "gait/eval/rank1.hpp"
#include "gait/eval/report.hpp"
#include "gait/preprocess.hpp"
#include "gait/protocol.hpp"
#include "gait/sampler.hpp"
#include "gait/seq_cache.hpp"
#include "gait/silhouettes.hpp"

namespace xstage::torch_ops {

namespace {
constexpr const char* kEmbed = "gait.Model.embed";
constexpr const char* kPreprocess = "gait.preprocess";
constexpr const char* kRank1 = "gait.rank1";

// A clip [T, A, B] or a batch of clips [n, T, A, B] as a batch (`batched` says which it
// was), with its dtype and last two sizes checked.
at::Tensor clip_batch(const Arg& a, at::ScalarType dtype, int64_t a_size, const char* a_what, int64_t b_size,
                      const char* b_what, const char* layout, bool& batched) {
  check_dtype(a, dtype);
  batched = a.t.dim() == 4;
  if (!batched) check_dims(a, 3, layout);
  const at::Tensor x = batched ? a.t : a.t.unsqueeze(0);
  check_size({a.op, a.name, x}, 2, a_size, a_what);
  check_size({a.op, a.name, x}, 3, b_size, b_what);
  return x;
}

at::Tensor silhouette_batch(const Arg& a, bool& batched) {
  return clip_batch(a, at::kByte, gait::kSilHeight, "the silhouette height", gait::kSilWidth, "the silhouette width",
                    "[T, 64, 44]", batched);
}
at::Tensor pose_batch(const Arg& a, bool& batched) {
  return clip_batch(a, at::kFloat, gait::kCocoJoints, "the COCO joints", 3, "(x, y, confidence)", "[T, 17, 3]",
                    batched);
}

// One clip: silhouettes [T, 64, 44] uint8 and/or pose [T, 17, 3] float32 (undefined: not
// given) -> a sequence of T frames (a skeleton-only model reads no silhouettes: zeros).
gait::CachedSequence clip_sequence(const at::Tensor& sil, const at::Tensor& pose, int64_t t) {
  gait::CachedSequence q;
  q.key = {1, gait::Condition::NM, 1, 0};  // a placeholder: only messages show it
  for (int64_t f = 0; f < t; ++f) q.sil.frame_ids.push_back(static_cast<int>(f + 1));
  q.sil.pixels.assign(static_cast<std::size_t>(t) * gait::kSilPixels, 0);
  if (sil.defined()) {
    const at::Tensor s = sil.cpu().contiguous();
    std::memcpy(q.sil.pixels.data(), s.data_ptr<std::uint8_t>(), q.sil.pixels.size());
  }
  if (pose.defined()) {
    const at::Tensor p = pose.cpu().contiguous();
    q.pose.resize(static_cast<std::size_t>(t));
    static_assert(sizeof(gait::PoseFrame) == sizeof(float) * gait::kCocoJoints * 3, "PoseFrame must be packed floats");
    std::memcpy(static_cast<void*>(q.pose.data()), p.data_ptr<float>(), q.pose.size() * sizeof(gait::PoseFrame));
  }
  return q;
}
}  // namespace

// A trained checkpoint (gait train's .gckpt) and the embedding of `gait embed` / `gait eval`.
class GaitModel : public torch::CustomClassHolder {
 public:
  GaitModel(const std::string& checkpoint, const std::string& device)
      : emb_(translate_errors("gait.Model", [&] {
          const torch::Device d(device);
          check_value(!d.is_cuda() || torch::cuda::is_available(), "gait.Model",
                      "device '" + device + "' asked for, but this PyTorch sees no CUDA GPU");
          return std::make_unique<gait::eval::Embedder>(checkpoint, d);
        })) {}

  // silhouettes [T, 64, 44] or [n, T, 64, 44] uint8 (0 background, 255 person; the
  // preprocessed form) and/or pose [T, 17, 3] or [n, T, 17, 3] float32 (COCO-17 x, y in
  // video pixels, confidence) -> [c, p] or [n, c, p] float32 on the CPU.
  at::Tensor embed(const c10::optional<at::Tensor>& silhouettes, const c10::optional<at::Tensor>& pose) {
    check_inputs(silhouettes.has_value(), pose.has_value());
    bool batched = false, pose_batched = false;
    at::Tensor s, p;  // as batches [n, T, ...]
    if (silhouettes) s = silhouette_batch({kEmbed, "silhouettes", *silhouettes}, batched);
    if (pose) {
      p = pose_batch({kEmbed, "pose", *pose}, pose_batched);
      if (s.defined()) {
        check_value(pose_batched == batched, kEmbed,
                    "silhouettes and pose must both have a batch dimension or neither");
        check_size({kEmbed, "pose", p}, 0, s.size(0), "n of silhouettes");
        check_size({kEmbed, "pose", p}, 1, s.size(1), "T of silhouettes");
      }
      batched = pose_batched;
    }
    const int64_t n = (s.defined() ? s : p).size(0), t = (s.defined() ? s : p).size(1);
    check_value(n >= 1, kEmbed, "the batch is empty");
    check_value(t >= 3, kEmbed, "a clip needs at least 3 frames, got " + std::to_string(t));
    std::vector<gait::CachedSequence> seqs;
    for (int64_t i = 0; i < n; ++i)
      seqs.push_back(clip_sequence(s.defined() ? s[i] : at::Tensor(), p.defined() ? p[i] : at::Tensor(), t));
    const at::Tensor out = embed_sequences(seqs);
    return batched ? out : out.squeeze(0);
  }

  // Clips of any lengths: silhouettes[i] [T_i, 64, 44] uint8 and/or pose[i] [T_i, 17, 3]
  // float32 (an empty list: not given) -> [n, c, p]. Equal lengths share forward passes,
  // as in `gait eval`.
  at::Tensor embed_list(const c10::List<at::Tensor>& silhouettes, const c10::List<at::Tensor>& pose) {
    check_inputs(!silhouettes.empty(), !pose.empty());
    check_value(silhouettes.empty() || pose.empty() || silhouettes.size() == pose.size(), kEmbed,
                std::to_string(silhouettes.size()) + " silhouette clips but " + std::to_string(pose.size()) +
                    " pose clips");
    const std::size_t n = std::max(silhouettes.size(), pose.size());
    std::vector<gait::CachedSequence> seqs;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string sname = "silhouettes[" + std::to_string(i) + "]", pname = "pose[" + std::to_string(i) + "]";
      bool batched = false;
      at::Tensor s, p;
      if (!silhouettes.empty()) s = silhouette_batch({kEmbed, sname.c_str(), silhouettes.get(i)}, batched);
      check_value(!batched, kEmbed, sname + " must be one clip [T, 64, 44]");
      if (!pose.empty()) p = pose_batch({kEmbed, pname.c_str(), pose.get(i)}, batched);
      check_value(!batched, kEmbed, pname + " must be one clip [T, 17, 3]");
      if (s.defined() && p.defined()) check_size({kEmbed, pname.c_str(), p}, 1, s.size(1), ("T of " + sname).c_str());
      const int64_t t = (s.defined() ? s : p).size(1);
      check_value(t >= 3, kEmbed, "a clip needs at least 3 frames, got " + std::to_string(t) + " in clip " +
                                      std::to_string(i));
      seqs.push_back(clip_sequence(s.defined() ? s[0] : at::Tensor(), p.defined() ? p[0] : at::Tensor(), t));
    }
    return embed_sequences(seqs);
  }

  int64_t channels() const { return emb_->channels(); }
  int64_t parts() const { return emb_->parts(); }
  bool needs_silhouettes() const { return emb_->model()->uses_silhouettes(); }
  bool needs_pose() const { return emb_->needs_pose(); }
  std::string heads() const { return gait::train::to_string(emb_->config().evaluator.heads); }
  void set_heads(const std::string& heads) {
    translate_errors("gait.Model.set_heads", [&] { emb_->set_heads(gait::train::parse_eval_heads(heads)); });
  }
  double skeleton_scale() const { return emb_->config().evaluator.skeleton_scale; }
  void set_skeleton_scale(double a) {
    translate_errors("gait.Model.set_skeleton_scale", [&] { emb_->set_skeleton_scale(a); });
  }
  // JSON: the checkpoint's iteration, classes (classifier index -> subject) and full config.
  std::string info() const {
    const gait::train::CheckpointMeta& m = emb_->meta();
    return nlohmann::json{{"iteration", m.iteration},
                          {"classes", m.classes},
                          {"config", m.config},
                          {"train_seconds", m.train_seconds},
                          {"torch_version", m.torch_version}}
        .dump();
  }

 private:
  void check_inputs(bool have_sil, bool have_pose) const {
    check_value(!needs_silhouettes() || have_sil, kEmbed, "this model reads silhouettes; pass silhouettes");
    check_value(!needs_pose() || have_pose, kEmbed, "this model reads skeletons; pass pose [T, 17, 3]");
    check_value(have_sil || have_pose, kEmbed, "pass silhouettes, pose or both");
  }
  // The sequences' embeddings [n, c, p], float32 on the CPU.
  at::Tensor embed_sequences(const std::vector<gait::CachedSequence>& seqs) {
    const gait::eval::EmbeddingSet set = translate_errors(kEmbed, [&] { return emb_->embed_all(seqs, false); });
    at::Tensor out = at::empty({static_cast<int64_t>(seqs.size()), emb_->channels(), emb_->parts()}, at::kFloat);
    std::memcpy(out.data_ptr<float>(), set.data.data(), set.data.size() * sizeof(float));
    return out;
  }

  std::unique_ptr<gait::eval::Embedder> emb_;
};

// frames [T, H, W] uint8 (gray, any size) -> (silhouettes [T', 64, 44] uint8, kept [T']
// int64: the input index of each output frame; dropped frames are near-empty or centreless).
std::tuple<at::Tensor, at::Tensor> gait_preprocess(const at::Tensor& frames) {
  const Arg a{kPreprocess, "frames", frames};
  check_dtype(a, at::kByte);
  check_dims(a, 3, "[T, H, W]");
  const at::Tensor f = frames.cpu().contiguous();
  const int64_t t = f.size(0), h = f.size(1), w = f.size(2);
  std::vector<gait::SilFrame> out;
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < t; ++i) {
    common::Image img{static_cast<int>(w), static_cast<int>(h), 1, {}};
    const std::uint8_t* src = f.data_ptr<std::uint8_t>() + i * h * w;
    img.pixels.assign(src, src + h * w);
    gait::PreprocessResult r = gait::preprocess_silhouette(img);
    if (!r.frame) continue;
    out.push_back(*r.frame);
    kept.push_back(i);
  }
  at::Tensor sil = at::empty({static_cast<int64_t>(out.size()), gait::kSilHeight, gait::kSilWidth}, at::kByte);
  if (!out.empty()) std::memcpy(sil.data_ptr<std::uint8_t>(), out.data(), out.size() * sizeof(gait::SilFrame));
  at::Tensor idx = at::empty({static_cast<int64_t>(kept.size())}, at::kLong);
  if (!kept.empty()) std::memcpy(idx.data_ptr<int64_t>(), kept.data(), kept.size() * sizeof(int64_t));
  return {sil, idx};
}

// embeddings [n, c, p] float32, one CASIA-B sequence id per row ("075-nm-05-090") ->
// the rank-1 table as JSON (gait eval's rank1.json). Subjects up to train_last_subject
// are training identities and left out.
std::string gait_rank1(const at::Tensor& embeddings, const c10::List<std::string>& sequence_ids,
                       int64_t train_last_subject) {
  const Arg a{kRank1, "embeddings", embeddings};
  check_dtype(a, at::kFloat);
  check_dims(a, 3, "[n, c, p]");
  check_value(
      static_cast<int64_t>(sequence_ids.size()) == embeddings.size(0), kRank1,
      std::to_string(sequence_ids.size()) + " sequence ids for " + std::to_string(embeddings.size(0)) + " embeddings");
  check_value(train_last_subject >= 0, kRank1, "train_last_subject must be >= 0");
  const at::Tensor e = embeddings.cpu().contiguous();
  gait::eval::EmbeddingSet set;
  set.channels = static_cast<int>(e.size(1));
  set.parts = static_cast<int>(e.size(2));
  for (std::size_t i = 0; i < sequence_ids.size(); ++i) {
    const std::string id = sequence_ids.get(i);
    const auto key = gait::parse_sequence_id(id);
    check_value(
        key.has_value(), kRank1,
        "sequence id " + std::to_string(i) + " '" + id + "' is not <sid>-<cond>-<nn>-<view>, e.g. 075-nm-05-090");
    set.add(*key, {e.data_ptr<float>() + i * set.row_size(), set.row_size()});
  }
  gait::Protocol protocol;
  protocol.train_last_subject = static_cast<int>(train_last_subject);
  return translate_errors(kRank1,
                          [&] { return gait::eval::rank1_json(gait::eval::evaluate_rank1(set, protocol)).dump(); });
}

// A CASIA-B view folder of silhouette PNGs (<sid>-<cond>-<nn>-<view>-<frame>.png) ->
// (frames [T, H, W] uint8 as decoded, frame_ids [T] int64, one line per frame skipped as
// `gait preprocess` skips it: unreadable, too small, or of another size).
std::tuple<at::Tensor, at::Tensor, c10::List<std::string>> gait_read_frames(const std::string& folder) {
  gait::SilReadStats stats;
  const std::vector<gait::RawFrame> raw = gait::read_frame_images(folder, stats);
  check_value(!raw.empty(), "gait.read_frames", folder + ": no readable frame");
  const int64_t h = raw[0].image.height, w = raw[0].image.width;
  at::Tensor frames = at::empty({static_cast<int64_t>(raw.size()), h, w}, at::kByte);
  at::Tensor ids = at::empty({static_cast<int64_t>(raw.size())}, at::kLong);
  for (std::size_t i = 0; i < raw.size(); ++i) {
    std::memcpy(frames.data_ptr<std::uint8_t>() + i * h * w, raw[i].image.pixels.data(), h * w);
    ids.data_ptr<int64_t>()[i] = raw[i].frame_id;
  }
  c10::List<std::string> skipped;
  for (const std::string& p : stats.problems) skipped.push_back(p);
  return {frames, ids, skipped};
}

// A preprocessed cache file (.gseq) -> (silhouettes [T, 64, 44] uint8, pose [T, 17, 3]
// float32 or [0, 17, 3] without pose, the sequence id).
std::tuple<at::Tensor, at::Tensor, std::string> gait_read_sequence(const std::string& path) {
  const gait::CachedSequence s =
      translate_errors("gait.read_sequence", [&] { return gait::read_cached_sequence(path); });
  const auto t = static_cast<int64_t>(s.sil.frames());
  at::Tensor sil = at::empty({t, gait::kSilHeight, gait::kSilWidth}, at::kByte);
  std::memcpy(sil.data_ptr<std::uint8_t>(), s.sil.pixels.data(), s.sil.pixels.size());
  at::Tensor pose = at::empty({static_cast<int64_t>(s.pose.size()), gait::kCocoJoints, 3}, at::kFloat);
  if (!s.pose.empty())
    std::memcpy(pose.data_ptr<float>(), static_cast<const void*>(s.pose.data()),
                s.pose.size() * sizeof(gait::PoseFrame));
  return {sil, pose, gait::sequence_id(s.key)};
}

// Every cache file below `cache` (headers only), in key order ->
// (sequence ids, paths, frames [n] int64, one line per file left out: unreadable or stale).
std::tuple<c10::List<std::string>, c10::List<std::string>, at::Tensor, c10::List<std::string>> gait_scan_cache(
    const std::string& cache) {
  std::vector<std::string> problems;
  const std::vector<gait::CacheEntry> entries =
      translate_errors("gait.scan_cache", [&] { return gait::scan_cache(cache, problems); });
  c10::List<std::string> ids, paths, skipped;
  at::Tensor frames = at::empty({static_cast<int64_t>(entries.size())}, at::kLong);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    ids.push_back(gait::sequence_id(entries[i].key));
    paths.push_back(entries[i].path.string());
    frames.data_ptr<int64_t>()[i] = entries[i].frames;
  }
  for (const std::string& p : problems) skipped.push_back(p);
  return {ids, paths, frames, skipped};
}

// The last training subject of a set whose highest subject id is `subjects`, as `gait
// train` and `gait eval` split it (gait::protocol_for_subjects: 74 of CASIA-B's 124).
int64_t gait_train_last_subject(int64_t subjects) {
  check_value(subjects >= 1 && subjects <= 1 << 20, "gait.train_last_subject",
              "subjects must be in 1 .. 1048576, got " + std::to_string(subjects));
  return gait::protocol_for_subjects(static_cast<int>(subjects)).train_last_subject;
}

// gait train's batches: P identities, K items of each (labels[i] is item i's identity).
class PxKSampler : public torch::CustomClassHolder {
 public:
  PxKSampler(const std::vector<int64_t>& labels, int64_t p, int64_t k, int64_t seed)
      : s_(translate_errors("gait.PxKSampler", [&] {
          check_value(p <= 1 << 20 && k <= 1 << 20, "gait.PxKSampler", "P and K must be at most 1048576");
          check_value(std::all_of(labels.begin(), labels.end(),
                                  [](int64_t l) { return l >= INT32_MIN && l <= INT32_MAX; }),
                      "gait.PxKSampler", "labels must fit in 32 bits");
          return gait::PxKSampler(std::vector<int>(labels.begin(), labels.end()), static_cast<int>(p),
                                  static_cast<int>(k), static_cast<std::uint64_t>(seed));
        })) {}
  std::vector<int64_t> next_batch() {
    const std::vector<std::size_t> b = s_.next_batch();
    return {b.begin(), b.end()};
  }
  int64_t identities() const { return s_.identities(); }

 private:
  gait::PxKSampler s_;
};

}  // namespace xstage::torch_ops

TORCH_LIBRARY(gait, m) {
  m.class_<xstage::torch_ops::PxKSampler>("PxKSampler")
      .def(torch::init<std::vector<int64_t>, int64_t, int64_t, int64_t>())
      .def("next_batch", &xstage::torch_ops::PxKSampler::next_batch)
      .def("identities", &xstage::torch_ops::PxKSampler::identities);
  using xstage::torch_ops::GaitModel;
  m.class_<GaitModel>("Model")
      .def(torch::init<std::string, std::string>())
      .def("embed", &GaitModel::embed)
      .def("embed_list", &GaitModel::embed_list)
      .def("channels", &GaitModel::channels)
      .def("parts", &GaitModel::parts)
      .def("needs_silhouettes", &GaitModel::needs_silhouettes)
      .def("needs_pose", &GaitModel::needs_pose)
      .def("heads", &GaitModel::heads)
      .def("set_heads", &GaitModel::set_heads)
      .def("skeleton_scale", &GaitModel::skeleton_scale)
      .def("set_skeleton_scale", &GaitModel::set_skeleton_scale)
      .def("info", &GaitModel::info);
  m.def("preprocess(Tensor frames) -> (Tensor silhouettes, Tensor kept)", &xstage::torch_ops::gait_preprocess);
  m.def("rank1(Tensor embeddings, str[] sequence_ids, int train_last_subject=74) -> str",
        &xstage::torch_ops::gait_rank1);
  m.def("read_frames(str folder) -> (Tensor frames, Tensor frame_ids, str[] skipped)",
        &xstage::torch_ops::gait_read_frames);
  m.def("read_sequence(str path) -> (Tensor silhouettes, Tensor pose, str sequence_id)",
        &xstage::torch_ops::gait_read_sequence);
  m.def("train_last_subject(int subjects) -> int", &xstage::torch_ops::gait_train_last_subject);
  m.def("scan_cache(str cache) -> (str[] sequence_ids, str[] paths, Tensor frames, str[] skipped)",
        &xstage::torch_ops::gait_scan_cache);
}
