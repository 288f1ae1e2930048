// `gait eval`, `gait embed`, `gait identify`, `gait bench-infer`, `gait tune-fusion`: see gait/eval/commands.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/progress.hpp"
#include "common/stats.hpp"
#include "common/validate.hpp"
#include "gait/cache_build.hpp"
#include "gait/dataset.hpp"
#include "gait/eval/commands.hpp"
#include "gait/eval/embedder.hpp"
#include "gait/eval/fusion.hpp"
#include "gait/eval/rank1.hpp"
#include "gait/eval/report.hpp"
#include "gait/rng.hpp"
#include "gait/train/amp.hpp"
#include "gait/train/checkpoint.hpp"
#include "gait/train/data_source.hpp"

namespace gait::cli {

namespace fs = std::filesystem;
using eval::EmbeddingSet;

namespace {

struct Common {
  std::string ckpt, data, pose, cache, device = "auto", cudnn = "on", heads, fusion;
  std::optional<double> skeleton_scale;  // empty: the checkpoint's evaluator.skeleton_scale
  std::optional<int> threads;            // empty: the model config's trainer.threads
  bool no_progress = false, cache_only = false;
};

void add_common(CLI::App* c, Common& a, bool ckpt_required) {
  auto* o = c->add_option("--ckpt", a.ckpt, "checkpoint (.gckpt) written by gait train");
  if (ckpt_required) o->required();
  o->check(common::validate::readable_file());
  c->add_option("--data", a.data, "dataset root (default: the checkpoint's data.root)")
      ->check(common::validate::existing_folder());
  c->add_option("--pose", a.pose, "pose CSV file or folder for a CASIA-B root");
  c->add_option("--cache", a.cache, "preprocessed cache folder (default ROOT/cache)");
  c->add_flag("--cache-only", a.cache_only, "read the preprocessed cache without listing the dataset (data.cache_only)");
  c->add_option("--device", a.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  c->add_option("--threads", a.threads, "CPU threads (0 = all; default: the config's trainer.threads)")
      ->check(common::validate::min(0, "threads", "0: all cores"));
  c->add_flag("--no-progress", a.no_progress, "no progress bar");
  c->add_option("--cudnn", a.cudnn, "on: cuDNN convolutions on CUDA; off: LibTorch's own (no per-shape cuDNN set-up)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  c->add_option("--heads", a.heads,
                "test embedding from: fused, fused+branches, branches, silhouette or skeleton (default: the checkpoint's "
                "evaluator.heads; all but fused need a two-branch model with branch heads)")
      ->check(CLI::IsMember({"fused", "fused+branches", "branches", "silhouette", "skeleton"}));
  c->add_option("--skeleton-scale", a.skeleton_scale,
                "weight of the skeleton head beside the others in fused+branches and branches (default: the "
                "checkpoint's evaluator.skeleton_scale)")
      ->check(common::validate::range(0.0, 1000.0, "x the skeleton head"));
  c->add_option("--fusion", a.fusion,
                "heads and skeleton scale from a `gait tune-fusion` result (fusion_tuning.json) of this checkpoint")
      ->check(common::validate::readable_file())
      ->excludes("--heads")
      ->excludes("--skeleton-scale");
}

// --fusion, or --heads / --skeleton-scale, applied to a model's test embedding.
void apply_embedding_options(eval::Embedder& e, const Common& a) {
  if (!a.fusion.empty()) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(common::read_file(a.fusion));
      const int64_t it = j.at("iteration").get<int64_t>();
      XS_ASSERT(it == e.meta().iteration && j.at("mode").get<std::string>() == train::to_string(e.config().model.mode),
                "{}: tuned for a {} checkpoint at iteration {}, but {} is a {} checkpoint at iteration {}", a.fusion,
                j.at("mode").get<std::string>(), it, a.ckpt, train::to_string(e.config().model.mode),
                e.meta().iteration);
      e.set_heads(train::parse_eval_heads(j.at("best").at("heads").get<std::string>()));
      e.set_skeleton_scale(j.at("best").at("skeleton_scale").get<double>());
    } catch (const nlohmann::json::exception& ex) {
      throw common::Error(fmt::format("{}: not a gait tune-fusion result ({})", a.fusion, ex.what()));
    }
    return;
  }
  if (!a.heads.empty()) e.set_heads(train::parse_eval_heads(a.heads));
  if (a.skeleton_scale) e.set_skeleton_scale(*a.skeleton_scale);
}

// The checkpoint's model with apply_embedding_options.
eval::Embedder open_embedder(const Common& a, torch::Device device) {
  eval::Embedder e(a.ckpt, device);
  apply_embedding_options(e, a);
  return e;
}

// --device resolved, and cuDNN switched as --cudnn asks (CUDA only).
torch::Device device_of(const Common& a) {
  const torch::Device d = train::resolve_device(a.device);
  if (d.is_cuda()) at::globalContext().setUserEnabledCuDNN(a.cudnn == "on");
  return d;
}

// `requested` from --threads (empty: not given), else the config's trainer.threads; 0 = all cores.
void set_threads(std::optional<int> requested, const train::Config& cfg) {
  const int t = requested.value_or(cfg.trainer.threads);
  at::set_num_threads(t > 0 ? t : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

train::DataConfig data_config(const eval::Embedder& e, const Common& a) {
  train::DataConfig d = e.config().data;
  if (!a.data.empty()) {
    d.root = a.data;
    d.cache.clear();  // a different dataset: its own cache, unless given
    d.pose.clear();
    d.cache_only = false;  // and listed, unless --cache-only
  }
  if (a.cache_only) d.cache_only = true;
  if (!a.pose.empty()) d.pose = a.pose;
  if (!a.cache.empty()) d.cache = a.cache;
  return d;
}

// A sequence named on the command line: a sequence id ("075-nm-01-090", with --data) or
// a silhouette folder ROOT[/silhouettes]/<sid>/<cond>-<nn>/<view>.
CachedSequence load_sequence(const std::string& arg, const train::DataConfig& data) {
  std::optional<SequenceKey> key = parse_sequence_id(arg);
  fs::path root = data.root, cache = data.cache, pose_path = data.pose;
  if (!key) {
    // Absolute, so that a folder given relative to the working directory still has its dataset root above it.
    std::error_code aec;
    const fs::path p = fs::absolute(fs::path(arg), aec).lexically_normal();
    const fs::path dir = p.has_filename() ? p : p.parent_path();
    const auto view = parse_view(dir.filename().string());
    const auto seq = parse_seq_dir(dir.parent_path().filename().string());
    const auto sid = parse_subject(dir.parent_path().parent_path().filename().string());
    XS_ASSERT(view && seq && sid, "'{}' is neither a sequence id (001-nm-01-090) nor a folder <sid>/<cond>-<nn>/<view>", arg);
    key = SequenceKey{*sid, seq->first, seq->second, *view};
    // The folder's own dataset, unless it is the configured one (then its cache applies).
    fs::path own = dir.parent_path().parent_path().parent_path();
    if (own.filename() == "silhouettes") own = own.parent_path();
    std::error_code ec;
    if (data.root.empty() || !fs::equivalent(own, data.root, ec)) {
      root = own;
      cache.clear();
      pose_path.clear();  // a synth output's pose is found at ROOT/pose
    }
  }
  XS_ASSERT(!root.empty(), "'{}': give the dataset root with --data", arg);
  const fs::path cached = cache_path(cache.empty() ? root / "cache" : cache, *key);
  std::error_code ec;
  if (fs::exists(cached, ec)) return read_cached_sequence(cached);
  std::optional<fs::path> pose;
  if (!pose_path.empty()) pose = pose_path;
  const DatasetIndex index = scan_dataset(resolve_dataset(root, pose));
  const auto it = std::find_if(index.entries.begin(), index.entries.end(), [&](const IndexEntry& e) { return e.key == *key; });
  XS_ASSERT(it != index.entries.end(), "{}: no sequence {} in this dataset", root.string(), sequence_id(*key));
  SilReadStats stats;
  std::size_t no_pose = 0;
  std::string why;
  CachedSequence s = preprocess_entry(index, *it, stats, no_pose, why);
  XS_ASSERT(s.sil.frames() > 0, "{}: sequence {} is unusable: {}", root.string(), sequence_id(*key), why);
  return s;
}

// The report files appear together or not at all (a staged folder).
void write_reports(const fs::path& out, const eval::Rank1Result& r, const std::string& title, nlohmann::json info) {
  common::OutputStage stage(out);
  eval::write_rank1_csv(stage.dir(), r);
  eval::write_rank1_heatmap(stage.dir() / "rank1_heatmap.png", r, title);
  info["rank1"] = eval::rank1_json(r);
  common::write_file_atomic(stage.dir() / "rank1.json", info.dump(2) + "\n");
  stage.commit();
  fmt::print("{}reports: {}/rank1_{{per_view,matrix,summary}}.csv, rank1_heatmap.png, rank1.json\n",
             eval::format_rank1_table(r), out.string());
}

// ------------------------------------------------------------------------- eval

// The protocol's gallery and probe sequences of `src` (its test subjects), embedded.
struct EmbeddedSet {
  EmbeddingSet set;
  double seconds = 0;  // embedding alone, not reading
};
std::vector<CachedSequence> protocol_sequences(const train::DataSource& src, const train::DataConfig& data) {
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < src.entries.size(); ++i) {
    const auto& k = src.entries[i].key;
    if (src.protocol.is_gallery(k) || src.protocol.probe_set(k)) idx.push_back(i);
  }
  XS_ASSERT(!idx.empty(), "{}: no test sequences (subjects after {})", data.root, src.protocol.train_last_subject);
  return train::load_sequences(src, idx, data.loader_threads);
}

EmbeddedSet embed_protocol_sequences(eval::Embedder& emb, const train::DataSource& src, const train::DataConfig& data,
                                     bool progress) {
  const std::vector<CachedSequence> seqs = protocol_sequences(src, data);
  const auto t0 = std::chrono::steady_clock::now();
  EmbeddedSet out{emb.embed_all(seqs, progress), 0};
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

struct EvalArgs : Common {
  std::string out, dump, embeddings, checkpoints;
  bool test_all = false;
};

// The report folder: --out, else beside the dump, the checkpoint or the run.
fs::path eval_out(const EvalArgs& a) {
  if (!a.out.empty()) return a.out;
  if (!a.checkpoints.empty()) return (fs::path(a.checkpoints) / "").parent_path().parent_path() / "eval_by_iteration";
  return !a.embeddings.empty() ? fs::path(a.embeddings + "_eval") : fs::path(a.ckpt).parent_path() / "eval";
}

// A run's checkpoints (iter-<n>.gckpt, as gait train names them), in iteration order.
std::vector<fs::path> run_checkpoints(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.starts_with("iter-") && e.path().extension() == train::kCheckpointExtension)
      out.push_back(e.path());
  }
  XS_ASSERT(!out.empty(), "--checkpoints {}: no iter-*{} files (gait train writes them into OUT/checkpoints)",
            dir.string(), train::kCheckpointExtension);
  std::sort(out.begin(), out.end());  // the iteration is zero-padded in the name
  return out;
}

// Every checkpoint of a run on the same test sequences (read once): rank-1 against the iteration.
void run_eval_checkpoints(const EvalArgs& a) {
  const std::vector<fs::path> ckpts = run_checkpoints(a.checkpoints);
  const fs::path out = eval_out(a);
  common::check_output_dir(out, a.out.empty() ? "eval: the report folder" : "eval: --out");
  const torch::Device device = device_of(a);
  Common at = a;
  at.ckpt = ckpts.front().string();
  eval::Embedder first = open_embedder(at, device);  // its config names the data
  set_threads(a.threads, first.config());
  const train::DataConfig data = data_config(first, a);
  train::DataSource src = train::open_data_source(data, !a.no_progress);
  if (a.test_all) src.protocol.train_last_subject = 0;
  const std::vector<CachedSequence> seqs = protocol_sequences(src, data);
  std::vector<eval::Rank1AtIteration> rows;
  common::ProgressBar bar("eval", ckpts.size(), !a.no_progress);
  auto evaluate = [&](eval::Embedder& emb, const fs::path& c) {
    const eval::Rank1Result r = eval::evaluate_rank1(emb.embed_all(seqs, false), src.protocol);
    rows.push_back({emb.meta().iteration, emb.meta().train_seconds, c.filename().string(), r});
    bar.set_status(fmt::format("iteration {}: NM {:.2f} BG {:.2f} CL {:.2f}", emb.meta().iteration, r.mean[0],
                               r.mean[1], r.mean[2]));
    bar.tick();
  };
  evaluate(first, ckpts.front());
  for (std::size_t i = 1; i < ckpts.size(); ++i) {
    at.ckpt = ckpts[i].string();
    eval::Embedder emb = open_embedder(at, device);
    evaluate(emb, ckpts[i]);
  }
  bar.finish();
  common::OutputStage stage(out);
  const std::string title = fmt::format("{} on {}: rank-1 by iteration", train::to_string(first.config().model.mode),
                                        fs::path(data.root).filename().string());
  eval::write_rank1_by_iteration(stage.dir(), rows, title);
  stage.commit();
  fmt::print("{}{} test sequences, {} checkpoints; reports: {}/rank1_by_iteration.{{csv,json,png}}\n",
             eval::format_rank1_by_iteration(rows), seqs.size(), rows.size(), out.string());
}

void run_eval(const EvalArgs& a) {
  if (!a.checkpoints.empty()) return run_eval_checkpoints(a);
  XS_ASSERT(!a.ckpt.empty() || !a.embeddings.empty(),
            "give --ckpt (a trained checkpoint), --checkpoints (a run's checkpoint folder) or --embeddings (a dump)");
  // Before any embedding: a path that cannot be written fails now, not after the run.
  common::check_output_dir(eval_out(a), a.out.empty() ? "eval: the report folder" : "eval: --out");
  if (!a.dump.empty()) common::check_output_path(a.dump + ".npy", "eval: --dump-embeddings");
  if (!a.embeddings.empty()) {
    const EmbeddingSet set = eval::load_embeddings(a.embeddings);
    XS_ASSERT(set.size() > 0, "{}: no embeddings", a.embeddings);
    int lo = set.keys.front().subject;
    for (const auto& k : set.keys) lo = std::min(lo, k.subject);
    Protocol p;
    p.train_last_subject = lo - 1;  // a dump holds only evaluated (test) sequences
    const eval::Rank1Result r = eval::evaluate_rank1(set, p);
    write_reports(eval_out(a), r,
                  "CASIA-B rank-1 from " + fs::path(a.embeddings).filename().string(), {{"embeddings", a.embeddings}});
    return;
  }
  const torch::Device device = device_of(a);
  eval::Embedder emb = open_embedder(a, device);
  set_threads(a.threads, emb.config());
  const train::DataConfig data = data_config(emb, a);
  train::DataSource src = train::open_data_source(data, !a.no_progress);
  if (a.test_all) src.protocol.train_last_subject = 0;
  const auto [set, secs] = embed_protocol_sequences(emb, src, data, !a.no_progress);
  const eval::Rank1Result r = eval::evaluate_rank1(set, src.protocol);
  const fs::path out = eval_out(a);
  fmt::print("embedded {} test sequences (subjects {}..{}) in {:.1f} s ({:.1f} ms each), {} model at iteration {}, "
             "{} heads\n",
             set.size(), src.protocol.train_last_subject + 1, src.max_subject, secs, 1000 * secs / set.size(),
             train::to_string(emb.config().model.mode), emb.meta().iteration,
             train::to_string(emb.config().evaluator.heads));
  write_reports(out, r,
                fmt::format("{} ({} it.) on {}", train::to_string(emb.config().model.mode), emb.meta().iteration,
                            fs::path(data.root).filename().string()),
                {{"checkpoint", a.ckpt},
                 {"iteration", emb.meta().iteration},
                 {"mode", train::to_string(emb.config().model.mode)},
                 {"heads", train::to_string(emb.config().evaluator.heads)},
                 {"skeleton_scale", emb.config().evaluator.skeleton_scale},
                 {"fusion_from", a.fusion},
                 {"data", data.root},
                 {"test_subjects_from", src.protocol.train_last_subject + 1},
                 {"sequences", set.size()},
                 {"embed_seconds", secs},
                 {"train_seconds", emb.meta().train_seconds},
                 {"device", device.str()},
                 {"threads", at::get_num_threads()}});
  if (!a.dump.empty()) {
    eval::save_embeddings(a.dump, set);
    fmt::print("embeddings: {}.npy ([{}, {}, {}] float32) and {}.csv\n", a.dump, set.size(), set.channels, set.parts, a.dump);
  }
}

// ------------------------------------------------------------------------- embed

struct EmbedArgs : Common {
  std::string out;
  std::vector<std::string> seqs;
  bool gallery_set = false;
};

void run_embed(const EmbedArgs& a) {
  common::check_output_path(a.out + ".npy", "embed: --out");
  eval::Embedder emb = open_embedder(a, device_of(a));
  set_threads(a.threads, emb.config());
  const train::DataConfig data = data_config(emb, a);
  std::vector<CachedSequence> seqs;
  if (a.gallery_set) {
    const train::DataSource src = train::open_data_source(data, !a.no_progress);
    std::vector<std::size_t> idx;
    for (std::size_t i = 0; i < src.entries.size(); ++i)
      if (src.protocol.is_gallery(src.entries[i].key)) idx.push_back(i);
    seqs = train::load_sequences(src, idx, data.loader_threads);
  }
  for (const auto& s : a.seqs) seqs.push_back(load_sequence(s, data));
  XS_ASSERT(!seqs.empty(), "nothing to embed: name sequences or pass --gallery-set");
  const EmbeddingSet set = emb.embed_all(seqs, !a.no_progress && seqs.size() > 1);
  eval::save_embeddings(a.out, set);
  fmt::print("wrote {} embeddings [{} x {}] to {}.npy and {}.csv\n", set.size(), set.channels, set.parts, a.out, a.out);
}

// ------------------------------------------------------------------------- identify

struct IdentifyArgs : Common {
  std::string gallery, probe;
  int top = 5;
};

void run_identify(const IdentifyArgs& a) {
  eval::Embedder emb = open_embedder(a, device_of(a));
  set_threads(a.threads, emb.config());
  const EmbeddingSet gallery = eval::load_embeddings(a.gallery);
  XS_ASSERT(gallery.channels == emb.channels() && gallery.parts == emb.parts(),
            "{}: embeddings are [{} x {}] but this model produces [{} x {}]", a.gallery, gallery.channels, gallery.parts,
            emb.channels(), emb.parts());
  const CachedSequence probe = load_sequence(a.probe, data_config(emb, a));
  const std::vector<float> f = emb.embed(probe);
  struct Best {
    double d;
    std::size_t row;
  };
  std::map<int, Best> best;  // subject -> nearest gallery sequence
  for (std::size_t i = 0; i < gallery.size(); ++i) {
    const double d = eval::part_distance(f.data(), gallery.row(i), gallery.channels, gallery.parts);
    auto [it, fresh] = best.try_emplace(gallery.keys[i].subject, Best{d, i});
    if (!fresh && d < it->second.d) it->second = {d, i};
  }
  std::vector<std::pair<int, Best>> ranked(best.begin(), best.end());
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) { return x.second.d < y.second.d; });
  fmt::print("probe {} ({} frames) against {} gallery sequences of {} identities\n", sequence_id(probe.key),
             probe.sil.frames(), gallery.size(), ranked.size());
  fmt::print("{:>4}  {:>7}  {:>9}  {}\n", "rank", "subject", "distance", "nearest gallery sequence");
  for (std::size_t r = 0; r < ranked.size() && static_cast<int>(r) < a.top; ++r)
    fmt::print("{:>4}  {:>7}  {:>9.4f}  {}\n", r + 1, subject_name(ranked[r].first), ranked[r].second.d,
               sequence_id(gallery.keys[ranked[r].second.row]));
  for (std::size_t r = 0; r < ranked.size(); ++r)
    if (ranked[r].first == probe.key.subject) fmt::print("the probe's own subject {} ranks {}\n", subject_name(probe.key.subject), r + 1);
}

// ------------------------------------------------------------------------- bench-infer

struct BenchArgs : Common {
  std::string config, json;
  int frames = 30, repeats = 30, warmup = 3;
};

// A stand-in sequence: an upright blob with swinging legs and a plausible COCO pose.
CachedSequence synthetic_sequence(int frames) {
  CachedSequence s;
  s.key = {1, Condition::NM, 1, 90};
  Rng rng(7);
  for (int t = 0; t < frames; ++t) {
    s.sil.frame_ids.push_back(t + 1);
    for (int y = 0; y < kSilHeight; ++y)
      for (int x = 0; x < kSilWidth; ++x) {
        const double half = y < 40 ? 7.0 : 4.0 + 6.0 * std::abs(std::sin(t * 0.4)) * (y - 40) / 24.0;
        s.sil.pixels.push_back(std::abs(x - 22 + (y < 40 ? 0 : (x < 22 ? -half / 2 : half / 2))) < half ? 255 : 0);
      }
    PoseFrame f;
    for (int j = 0; j < kCocoJoints; ++j)
      f[j] = {static_cast<float>(160 + rng.normal(0, 15)), static_cast<float>(60 + 8 * j + rng.normal(0, 2)), 0.9f};
    s.pose.push_back(f);
  }
  return s;
}

void run_bench(const BenchArgs& a) {
  XS_ASSERT(a.config.empty() != a.ckpt.empty(), "give exactly one of --config (random weights) and --ckpt");
  XS_ASSERT(a.frames >= 3 && a.repeats >= 1, "--frames must be >= 3 and --repeats >= 1");
  if (!a.json.empty()) common::check_output_path(a.json, "bench-infer: --json");
  const torch::Device device = device_of(a);
  std::unique_ptr<eval::Embedder> emb;
  if (!a.ckpt.empty()) {
    emb = std::make_unique<eval::Embedder>(a.ckpt, device);
  } else {
    const train::Config cfg = train::load_config(a.config);
    torch::manual_seed(cfg.trainer.seed);
    emb = std::make_unique<eval::Embedder>(nets::GaitNet(cfg.model, 74), cfg, device);
  }
  apply_embedding_options(*emb, a);
  set_threads(a.threads, emb->config());
  const CachedSequence seq = synthetic_sequence(a.frames);
  for (int i = 0; i < a.warmup; ++i) emb->embed(seq);
  std::vector<double> ms;
  for (int i = 0; i < a.repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto f = emb->embed(seq);
    if (device.is_cuda()) torch::cuda::synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const common::Summary s = common::summarize(ms);
  const std::string mode = train::to_string(emb->config().model.mode);
  fmt::print("{:<12} {:>6} {:>7} {:>9} {:>9} {:>9} {:>5}\n", "mode", "frames", "threads", "median_ms", "p10_ms", "p90_ms", "runs");
  fmt::print("{:<12} {:>6} {:>7} {:>9.2f} {:>9.2f} {:>9.2f} {:>5}\n", mode, a.frames, at::get_num_threads(), s.median,
             s.p10, s.p90, s.n);
  if (!a.json.empty()) {
    const nlohmann::json j = {{"mode", mode},         {"frames", a.frames},   {"threads", at::get_num_threads()},
                              {"device", device.str()}, {"median_ms", s.median}, {"p10_ms", s.p10},
                              {"p90_ms", s.p90},       {"runs", s.n},          {"torch", TORCH_VERSION},
                              {"source", a.ckpt.empty() ? a.config : a.ckpt}};
    common::write_file_atomic(a.json, j.dump(2) + "\n");
  }
}

// ------------------------------------------------------------------------- tune-fusion

struct TuneArgs : Common {
  std::string out;
  std::vector<double> scales = {0, 0.125, 0.25, 0.375, 0.5, 0.75, 1, 1.5, 2};
};

void run_tune(const TuneArgs& a) {
  XS_ASSERT(!a.data.empty(), "give the development set with --data (identities neither trained on nor tested)");
  XS_ASSERT(a.heads.empty() && !a.skeleton_scale && a.fusion.empty(),
            "tune-fusion tries every heads choice and skeleton scale: --heads, --skeleton-scale and --fusion do not apply");
  const fs::path out = a.out.empty() ? fs::path(a.ckpt).parent_path() / "fusion" : fs::path(a.out);
  common::check_output_dir(out, "tune-fusion: --out");
  const torch::Device device = device_of(a);
  eval::Embedder emb(a.ckpt, device);
  emb.set_heads(train::EvalHeads::FusedAndBranches);  // refuses a model without branch heads
  emb.set_skeleton_scale(1.0);
  set_threads(a.threads, emb.config());
  {
    std::error_code ec;
    XS_ASSERT(!fs::equivalent(a.data, emb.config().data.root, ec),
              "{} is the checkpoint's training data; the development set must hold other identities", a.data);
  }
  const train::DataConfig data = data_config(emb, a);
  train::DataSource src = train::open_data_source(data, !a.no_progress);
  src.protocol.train_last_subject = 0;  // every subject of the development set
  const auto [set, secs] = embed_protocol_sequences(emb, src, data, !a.no_progress);
  const eval::FusionTuning t = eval::tune_fusion(set, src.protocol, a.scales, a.threads.value_or(0));
  common::OutputStage stage(out);
  nlohmann::json j = eval::fusion_json(t);
  j["checkpoint"] = a.ckpt;
  j["iteration"] = emb.meta().iteration;
  j["mode"] = train::to_string(emb.config().model.mode);
  j["feature"] = emb.config().evaluator.feature == train::EvalFeature::BnFeature ? "bn" : "embedding";
  j["development_data"] = data.root;
  j["development_subjects"] = src.max_subject;
  j["sequences"] = set.size();
  j["embed_seconds"] = secs;
  common::write_file_atomic(stage.dir() / "fusion_tuning.json", j.dump(2) + "\n");
  std::string csv = "heads,skeleton_scale,NM,BG,CL,score\n";
  for (const auto& r : j["rows"])
    csv += fmt::format("{},{},{},{},{},{}\n", r["heads"].get<std::string>(), r["skeleton_scale"].get<double>(),
                       r["NM"].get<double>(), r["BG"].get<double>(), r["CL"].get<double>(), r["score"].get<double>());
  common::write_file_atomic(stage.dir() / "fusion_tuning.csv", csv);
  eval::write_fusion_chart(stage.dir() / "fusion_tuning.png", t,
                           fmt::format("test embedding on {} ({} it.)", fs::path(data.root).filename().string(),
                                       emb.meta().iteration));
  stage.commit();
  const eval::FusionRow& best = t.rows[t.best];
  fmt::print("development set {}: {} sequences of {} subjects embedded in {:.1f} s\n{}", data.root, set.size(),
             src.max_subject, secs, eval::format_fusion_table(t));
  fmt::print("best: heads {} with skeleton scale {:g}; wrote {}/fusion_tuning.{{json,csv,png}}\n"
             "apply: gait eval --ckpt {} --fusion {}\n",
             best.candidate.heads, best.candidate.skeleton_scale, out.string(), a.ckpt,
             (out / "fusion_tuning.json").string());
}

}  // namespace

void add_eval_commands(CLI::App& app) {
  {
    auto a = std::make_shared<EvalArgs>();
    CLI::App* c = app.add_subcommand("eval", "CASIA-B rank-1 evaluation of a checkpoint (or of dumped embeddings)");
    add_common(c, *a, false);
    c->add_option("--out", a->out, "report folder (default: CKPT's folder/eval)");
    c->add_option("--dump-embeddings", a->dump, "also write PREFIX.npy [n, c, p] and PREFIX.csv (labels)");
    c->add_option("--embeddings", a->embeddings, "evaluate a dump (PREFIX.npy + PREFIX.csv) instead of a checkpoint");
    c->add_flag("--test-all", a->test_all, "every subject of the dataset is a test subject (unseen identities)");
    c->add_option("--checkpoints", a->checkpoints,
                  "evaluate every checkpoint of a run (RUN/checkpoints) on the same test sequences: rank-1 by "
                  "iteration (default --out: RUN/eval_by_iteration)")
        ->check(common::validate::existing_folder())
        ->excludes("--ckpt")
        ->excludes("--embeddings")
        ->excludes("--dump-embeddings")
        ->excludes("--fusion");
    c->callback([a] { run_eval(*a); });
  }
  {
    auto a = std::make_shared<EmbedArgs>();
    CLI::App* c = app.add_subcommand("embed", "Embed sequences (ids or silhouette folders) into a gallery file");
    add_common(c, *a, true);
    c->add_option("--out", a->out, "output PREFIX (.npy + .csv)")->required();
    c->add_flag("--gallery-set", a->gallery_set, "embed the protocol's gallery (test subjects, nm-01..04)");
    c->add_option("sequences", a->seqs, "sequence ids (001-nm-01-090) or folders ROOT/<sid>/<cond>-<nn>/<view>");
    c->callback([a] { run_embed(*a); });
  }
  {
    auto a = std::make_shared<IdentifyArgs>();
    CLI::App* c = app.add_subcommand("identify", "Rank gallery identities by distance to a probe sequence");
    add_common(c, *a, true);
    c->add_option("--gallery", a->gallery, "gallery PREFIX written by gait embed or --dump-embeddings")->required();
    c->add_option("--top", a->top, "identities to list")->check(common::validate::min(1, "identities"));
    c->add_option("probe", a->probe, "sequence id or silhouette folder")->required();
    c->callback([a] { run_identify(*a); });
  }
  {
    auto a = std::make_shared<BenchArgs>();
    CLI::App* c = app.add_subcommand("bench-infer", "Time the embedding of one sequence (default 30 frames)");
    add_common(c, *a, false);
    c->add_option("--config", a->config, "model from a config, random weights")
        ->check(common::validate::readable_file());
    c->add_option("--frames", a->frames, "frames in the sequence")->check(common::validate::range(3, 100000, "frames"));
    c->add_option("--repeats", a->repeats, "timed runs")->check(common::validate::range(1, 1000000, "runs"));
    c->add_option("--warmup", a->warmup, "untimed runs first")->check(common::validate::range(0, 1000000, "runs"));
    c->add_option("--json", a->json, "write the figures as JSON")->check(common::validate::output_file());
    c->callback([a] { run_bench(*a); });
  }
  {
    auto a = std::make_shared<TuneArgs>();
    CLI::App* c = app.add_subcommand(
        "tune-fusion", "Choose a two-branch model's test embedding (heads, skeleton weight) on a development set");
    add_common(c, *a, true);
    c->add_option("--out", a->out, "report folder (default: CKPT's folder/fusion)");
    c->add_option("--scales", a->scales, "skeleton scales to try (default 0 0.125 0.25 0.375 0.5 0.75 1 1.5 2)")
        ->check(common::validate::range(0.0, 1000.0, "x the skeleton head"));
    c->callback([a] {
      common::validate::unique<double>(a->scales, "--scales");
      run_tune(*a);
    });
  }
}

}  // namespace gait::cli
