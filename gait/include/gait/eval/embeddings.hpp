// A set of sequence embeddings with their labels, and its files (torch-free).
//
// Files: PREFIX.npy holds the features as a float32 array [n, c, p] (NumPy's .npy
// format, version 1.0, little-endian, C order); PREFIX.csv holds one row per sequence
// in the same order: index,sequence_id,subject,condition,seq,view. So anyone can load
// them (numpy.load + a CSV reader) and recompute the metric; `gait eval --embeddings
// PREFIX` does it here. `gait embed` writes a gallery in the same form.
#pragma once

#include <filesystem>
#include <span>
#include <vector>

#include "gait/casiab.hpp"

namespace gait::eval {

struct EmbeddingSet {
  int channels = 0, parts = 0;      // each row is [c, p], row-major
  std::vector<SequenceKey> keys;
  std::vector<float> data;          // [n, c, p]
  std::size_t size() const { return keys.size(); }
  std::size_t row_size() const { return static_cast<std::size_t>(channels) * parts; }
  const float* row(std::size_t i) const { return data.data() + i * row_size(); }
  void add(const SequenceKey& key, std::span<const float> row);  // row.size() == c * p
};

// OpenGait's distance: Euclidean distance per part, averaged over parts.
double part_distance(const float* a, const float* b, int channels, int parts);

void save_embeddings(const std::filesystem::path& prefix, const EmbeddingSet& set);   // atomic writes
EmbeddingSet load_embeddings(const std::filesystem::path& prefix);                    // throws naming the file

// NumPy .npy float32 I/O (exposed for tests).
std::string encode_npy_f32(std::span<const std::size_t> shape, std::span<const float> data);
std::vector<float> decode_npy_f32(const std::string& bytes, std::vector<std::size_t>& shape, const std::string& source);

}  // namespace gait::eval
