// Training checkpoints: one file, written atomically (temp file + rename, through
// common::write_file_atomic), so a crash never leaves a half-written checkpoint under
// the real name.
//
//   offset size  field
//        0    8  magic "GAITCKPT"
//        8    4  format version (kCheckpointVersion; readers refuse any other)
//       12    4  M: bytes of the metadata JSON
//       16    8  P: bytes of the tensor archive
//       24    4  CRC-32 (IEEE) of metadata + archive
//       28    4  reserved, 0
//       32    M  metadata JSON: iteration, the run's full config, class -> subject ids,
//                train seconds, LibTorch version
//     32+M    P  a LibTorch archive (torch::serialize): "model" (parameters and
//                buffers), "optimizer" (its state: Adam moments / SGD momentum and step
//                counts), "rng_cpu" (the default CPU generator's state)
//
// The sampler and the augmentation need no stored state: the P x K sampler is replayed
// for `iteration` batches and every step's random draws come from a seed derived from
// (trainer.seed, iteration), so a resumed run draws the same next batch and, with the
// restored weights and optimizer, computes the same next-step loss.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gait/nets/torch.hpp"

namespace gait::train {

inline constexpr std::uint32_t kCheckpointVersion = 1;
inline constexpr std::size_t kCheckpointHeaderBytes = 32;
inline constexpr const char* kCheckpointExtension = ".gckpt";

struct CheckpointMeta {
  int iteration = 0;            // optimizer steps taken
  nlohmann::json config;        // to_json(Config) of the run
  std::vector<int> classes;     // classifier index -> subject id
  double train_seconds = 0;     // wall time spent in steps, summed over resumed runs
  std::string torch_version;    // of the writer (information only)
};

void save_checkpoint(const std::filesystem::path& path, const CheckpointMeta& meta, const torch::nn::Module& model,
                     const torch::optim::Optimizer* optimizer);

// Validates magic, version, sizes and checksum; throws common::Error naming the file
// and the problem (not a checkpoint, version N vs M, truncated at X of Y bytes, corrupt,
// impossible content).
CheckpointMeta read_checkpoint_meta(const std::filesystem::path& path);
// The same on a checkpoint's bytes; `name` names it in errors. After the checksum the
// content is checked too: the stored config parses, 0 <= iteration <= its
// trainer.iterations, train_seconds is a finite time, the identities are distinct ids.
CheckpointMeta parse_checkpoint_meta(std::string bytes, const std::string& name);

// read_checkpoint_meta + restores the model (and the optimizer and the CPU RNG when
// `optimizer` is given) onto `device`. Every parameter and buffer of `model` must be in
// the file with the same shape, and the weights must be finite (one line naming the
// file and the parameter otherwise, not LibTorch's own error).
CheckpointMeta load_checkpoint(const std::filesystem::path& path, torch::nn::Module& model,
                               torch::optim::Optimizer* optimizer, const torch::Device& device);

}  // namespace gait::train
