#include "gait/train/checkpoint.hpp"

#include <ATen/CPUGeneratorImpl.h>  // at::detail::getDefaultCPUGenerator (1.13 and 2.x)

#include <fmt/format.h>

#include <cstring>
#include <sstream>

#include "common/check.hpp"
#include "common/files.hpp"
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

struct Parsed {
  CheckpointMeta meta;
  std::string bytes;
  std::size_t archive_at = 0, archive_size = 0;
};

Parsed parse(const fs::path& path) {
  Parsed p;
  p.bytes = common::read_file(path);
  const std::string& b = p.bytes;
  const std::string name = path.string();
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
  const std::uint64_t want = kCheckpointHeaderBytes + std::uint64_t{meta_bytes} + archive_bytes;
  if (b.size() < want)
    throw common::Error(fmt::format("{}: truncated checkpoint: {} of {} bytes", name, b.size(), want));
  if (b.size() > want)
    throw common::Error(fmt::format("{}: {} bytes after the end of the checkpoint", name, b.size() - want));
  const auto crc = get<std::uint32_t>(b, 24);
  if (crc32(b.data() + kCheckpointHeaderBytes, want - kCheckpointHeaderBytes) != crc)
    throw common::Error(fmt::format("{}: corrupt checkpoint (checksum mismatch)", name));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(b.substr(kCheckpointHeaderBytes, meta_bytes));
    p.meta.iteration = j.at("iteration").get<int>();
    p.meta.config = j.at("config");
    p.meta.classes = j.at("classes").get<std::vector<int>>();
    p.meta.train_seconds = j.at("train_seconds").get<double>();
    p.meta.torch_version = j.at("torch_version").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw common::Error(fmt::format("{}: bad checkpoint metadata: {}", name, e.what()));
  }
  p.archive_at = kCheckpointHeaderBytes + meta_bytes;
  p.archive_size = archive_bytes;
  return p;
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

CheckpointMeta read_checkpoint_meta(const fs::path& path) { return parse(path).meta; }

CheckpointMeta load_checkpoint(const fs::path& path, torch::nn::Module& model, torch::optim::Optimizer* optimizer,
                               const torch::Device& device) {
  Parsed p = parse(path);
  const char* what = "archive";
  try {
    torch::serialize::InputArchive root, model_ar;
    root.load_from(p.bytes.data() + p.archive_at, p.archive_size, device);
    what = "model";
    root.read("model", model_ar);
    model.load(model_ar);
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
