// safetensors files: reader and writer (BF16 and F32 tensors).
//
// Format: 8 bytes little-endian u64 = n, then n bytes of JSON
//   {"name": {"dtype": "BF16", "shape": [a, b], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}   (optional, strings only)
// then the data; offsets are relative to the first byte after the header.
// The reader checks every rule and names the file and the tensor on failure:
// header length within the file, JSON an object, dtype known, shape
// non-negative, end - begin == numel x element size, end within the data,
// tensors not overlapping.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "xstage/dit/dit.hpp"

namespace xstage::dit {

enum class StDType { bf16, f32 };
const char* to_string(StDType t);

struct StTensor {
  StDType dtype = StDType::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // little-endian element data
  int64_t numel() const;
  std::vector<float> to_f32() const;
  static StTensor from_f32(const std::vector<float>& values, std::vector<int64_t> shape, StDType dtype);
};

struct StFile {
  std::map<std::string, StTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Parses a whole file held in memory; `what` names it in errors.
StFile parse_safetensors(const std::string& bytes, const std::string& what);
StFile read_safetensors(const std::filesystem::path& path);
std::string serialize_safetensors(const StFile& f);
void write_safetensors(const std::filesystem::path& path, const StFile& f);  // atomic (tmp + rename)

// The denoiser's weights as a safetensors file (metadata: preset name, blocks).
void save_weights(const std::filesystem::path& path, const Config& c, int blocks, const Weights& w, StDType dtype);
// Loads and checks against the schema of (c, blocks): every parameter present
// with its shape, nothing unknown.
Weights load_weights(const std::filesystem::path& path, const Config& c, int blocks);

}  // namespace xstage::dit
