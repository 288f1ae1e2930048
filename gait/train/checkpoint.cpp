#include "gait/train/checkpoint.hpp"

#include <ATen/CPUGeneratorImpl.h>  // at::detail::getDefaultCPUGenerator (1.13 and 2.x)

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/validate.hpp"
#include "gait/train/config.hpp"
#include "gait/seq_cache.hpp"  // crc32

namespace gait::train {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'G', 'A', 'I', 'T', 'C', 'K', 'P', 'T'};

template <class T>
void put(std::string& s, std::size_t at, T v) {
  std::memcpy(s.data() + at, &v, sizeof(T));
}
template <class T>
T get(const std::string& s, std::size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

// What the CRC cannot tell: a checkpoint that is intact but impossible. The stored
// config must parse, the iteration and time must be reachable by a run of that config,
// and the identities must be distinct subject ids.
void check_meta(const CheckpointMeta& m, const std::string& name) {
  auto need = [&](bool ok, const std::string& why) {
    if (!ok) throw common::Error(fmt::format("{}: impossible checkpoint: {}", name, why));
  };
  const Config cfg = parse_config(m.config, name + " (stored config)");
  need(m.iteration >= 0, fmt::format("iteration {} is negative", m.iteration));
  need(m.iteration <= cfg.trainer.iterations,
       fmt::format("iteration {} is beyond its config's trainer.iterations {}", m.iteration, cfg.trainer.iterations));
  need(std::isfinite(m.train_seconds) && m.train_seconds >= 0,
       fmt::format("train_seconds {} is not a finite time >= 0", m.train_seconds));
  need(!m.classes.empty(), "no identities (classes is empty)");
  for (int c : m.classes) need(c >= 1, fmt::format("classes: {} is not a subject id (>= 1)", c));
  common::validate::unique<int>(m.classes, name + ": impossible checkpoint: classes");
}

struct Parsed {
  CheckpointMeta meta;
  std::string bytes;
  std::size_t archive_at = 0, archive_size = 0;
};

// A JSON integer that fits an int (nlohmann's get<int> would wrap a larger one).
int int32_field(const nlohmann::json& v, const char* field, const std::string& name) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < INT32_MIN || v.get<std::int64_t>() > INT32_MAX)
    throw common::Error(fmt::format("{}: bad checkpoint metadata: {} {} is not a 32-bit integer", name, field, v.dump()));
  return static_cast<int>(v.get<std::int64_t>());
}

Parsed parse(std::string bytes, const std::string& name) {
  Parsed p;
  p.bytes = std::move(bytes);
  const std::string& b = p.bytes;
  if (b.size() < kCheckpointHeaderBytes || std::memcmp(b.data(), kMagic, 8) != 0) {
    if (b.size() >= 8 && std::memcmp(b.data(), kMagic, 8) == 0)
      throw common::Error(fmt::format("{}: truncated checkpoint: {} bytes, shorter than its {}-byte header", name,
                                      b.size(), kCheckpointHeaderBytes));
    throw common::Error(fmt::format("{}: not a gait checkpoint (no GAITCKPT magic)", name));
  }
  const auto version = get<std::uint32_t>(b, 8);
  if (version != kCheckpointVersion)
    throw common::Error(fmt::format("{}: checkpoint format version {}, but this build reads version {}", name, version,
                                    kCheckpointVersion));
  const auto meta_bytes = get<std::uint32_t>(b, 12);
  const auto archive_bytes = get<std::uint64_t>(b, 16);
  // Compared one by one first: a huge archive size could wrap the sum around.
  const std::uint64_t want = archive_bytes > b.size() ? ~std::uint64_t{0}
                                                      : kCheckpointHeaderBytes + std::uint64_t{meta_bytes} + archive_bytes;
  if (b.size() < want)
    throw common::Error(fmt::format("{}: truncated checkpoint: {} bytes, the header announces {}", name, b.size(),
                                    want == ~std::uint64_t{0} ? std::string("more") : std::to_string(want)));
  if (b.size() > want)
    throw common::Error(fmt::format("{}: {} bytes after the end of the checkpoint", name, b.size() - want));
  const auto crc = get<std::uint32_t>(b, 24);
  if (crc32(b.data() + kCheckpointHeaderBytes, want - kCheckpointHeaderBytes) != crc)
    throw common::Error(fmt::format("{}: corrupt checkpoint (checksum mismatch)", name));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(b.substr(kCheckpointHeaderBytes, meta_bytes));
    p.meta.iteration = int32_field(j.at("iteration"), "iteration", name);
    p.meta.config = j.at("config");
    for (const auto& c : j.at("classes").get<std::vector<nlohmann::json>>())  // throws unless an array
      p.meta.classes.push_back(int32_field(c, "classes", name));
    p.meta.train_seconds = j.at("train_seconds").get<double>();
    p.meta.torch_version = j.at("torch_version").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw common::Error(fmt::format("{}: bad checkpoint metadata: {}", name, e.what()));
  }
  check_meta(p.meta, name);
  p.archive_at = kCheckpointHeaderBytes + meta_bytes;
  p.archive_size = archive_bytes;
  return p;
}

std::string shape_text(const torch::Tensor& t) {
  std::string s;
  for (auto d : t.sizes()) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "[" + s + "]";
}

// Every parameter and buffer of `m` is in the archive with the same shape (LibTorch's
// own load would silently take a tensor of another shape and fail later, in a forward
// pass, with an error that names no file).
void check_shapes(const torch::nn::Module& m, torch::serialize::InputArchive& ar, const std::string& prefix,
                  const std::string& file) {
  auto check = [&](const std::string& key, const torch::Tensor& want, bool buffer) {
    torch::Tensor got;
    if (!ar.try_read(key, got, buffer))
      throw common::Error(fmt::format("{}: the weights do not fit the stored config: no {} '{}{}'", file,
                                      buffer ? "buffer" : "parameter", prefix, key));
    if (got.sizes() != want.sizes())
      throw common::Error(fmt::format("{}: the weights do not fit the stored config: '{}{}' is {} in the file, {} "
                                      "for the config",
                                      file, prefix, key, shape_text(got), shape_text(want)));
  };
  for (const auto& p : m.named_parameters(/*recurse=*/false)) check(p.key(), p.value(), false);
  for (const auto& b : m.named_buffers(/*recurse=*/false)) check(b.key(), b.value(), true);
  for (const auto& c : m.named_children()) {
    if (!c.value()->is_serializable()) continue;
    torch::serialize::InputArchive sub;
    if (!ar.try_read(c.key(), sub))
      throw common::Error(fmt::format("{}: the weights do not fit the stored config: no module '{}{}'", file, prefix,
                                      c.key()));
    check_shapes(*c.value(), sub, prefix + c.key() + ".", file);
  }
}

// Weights that are NaN or infinite would rank every probe by a distance of nan.
void check_finite_weights(const torch::nn::Module& m, const std::string& file) {
  torch::NoGradGuard no_grad;
  for (const auto& p : m.named_parameters())
    if (!torch::isfinite(p.value()).all().item<bool>())
      throw common::Error(fmt::format("{}: parameter '{}' holds non-finite values (a diverged run?)", file, p.key()));
}

}  // namespace

void save_checkpoint(const fs::path& path, const CheckpointMeta& meta, const torch::nn::Module& model,
                     const torch::optim::Optimizer* optimizer) {
  torch::serialize::OutputArchive root, model_ar, opt_ar;
  model.save(model_ar);
  root.write("model", model_ar);
  if (optimizer) {
    optimizer->save(opt_ar);
    root.write("optimizer", opt_ar);
  }
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    root.write("rng_cpu", gen.get_state());
  }
  std::ostringstream archive;
  root.save_to(archive);
  const std::string payload = archive.str();
  const std::string meta_json = nlohmann::json{{"format", "gait-checkpoint"},
                                               {"iteration", meta.iteration},
                                               {"config", meta.config},
                                               {"classes", meta.classes},
                                               {"train_seconds", meta.train_seconds},
                                               {"torch_version", TORCH_VERSION}}
                                    .dump(1);
  std::string out(kCheckpointHeaderBytes, '\0');
  std::memcpy(out.data(), kMagic, 8);
  put<std::uint32_t>(out, 8, kCheckpointVersion);
  put<std::uint32_t>(out, 12, static_cast<std::uint32_t>(meta_json.size()));
  put<std::uint64_t>(out, 16, payload.size());
  out += meta_json;
  out += payload;
  put<std::uint32_t>(out, 24, crc32(out.data() + kCheckpointHeaderBytes, out.size() - kCheckpointHeaderBytes));
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  common::write_file_atomic(path, out);
}

CheckpointMeta parse_checkpoint_meta(std::string bytes, const std::string& name) {
  return parse(std::move(bytes), name).meta;
}

CheckpointMeta read_checkpoint_meta(const fs::path& path) { return parse(common::read_file(path), path.string()).meta; }

CheckpointMeta load_checkpoint(const fs::path& path, torch::nn::Module& model, torch::optim::Optimizer* optimizer,
                               const torch::Device& device) {
  Parsed p = parse(common::read_file(path), path.string());
  const char* what = "archive";
  try {
    torch::serialize::InputArchive root, model_ar;
    root.load_from(p.bytes.data() + p.archive_at, p.archive_size, device);
    what = "model";
    root.read("model", model_ar);
    check_shapes(model, model_ar, "", path.string());
    model.load(model_ar);
    check_finite_weights(model, path.string());
    if (optimizer) {
      what = "optimizer state";
      torch::serialize::InputArchive opt_ar;
      root.read("optimizer", opt_ar);
      optimizer->load(opt_ar);
      what = "RNG state";
      torch::Tensor state;
      root.read("rng_cpu", state);
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state.to(torch::kCPU));
    }
  } catch (const c10::Error& e) {
    throw common::Error(fmt::format("{}: cannot restore the {} (does the model config match?): {}", path.string(), what,
                                    e.what_without_backtrace()));
  }
  return p.meta;
}

}  // namespace gait::train
