// safetensors reader and writer (BF16, F32), and the denoiser's weights in it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/check.hpp"
#include "common/files.hpp"
#include "xstage/attention/attention.hpp"
#include "xstage/dit/safetensors.hpp"

namespace xstage::dit {

namespace {
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit on the JSON header

int64_t elem_bytes(StDType t) { return t == StDType::bf16 ? 2 : 4; }

StDType parse_dtype(const std::string& s, const std::string& what, const std::string& name) {
  if (s == "BF16") return StDType::bf16;
  if (s == "F32") return StDType::f32;
  XS_FAIL("{}: tensor '{}' has dtype {}, which is not supported (BF16, F32)", what, name, s);
}
}  // namespace

const char* to_string(StDType t) { return t == StDType::bf16 ? "BF16" : "F32"; }

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> StTensor::to_f32() const {
  const size_t n = size_t(numel());
  XS_ASSERT(bytes.size() == n * size_t(elem_bytes(dtype)), "safetensors: {} bytes for {} {} values", bytes.size(), n,
            to_string(dtype));
  std::vector<float> v(n);
  if (dtype == StDType::f32) {
    std::memcpy(v.data(), bytes.data(), n * 4);
  } else {
    for (size_t i = 0; i < n; ++i)
      v[i] = attention::bf16_bits_to_float(uint16_t(bytes[2 * i] | (uint16_t(bytes[2 * i + 1]) << 8)));
  }
  return v;
}

StTensor StTensor::from_f32(const std::vector<float>& values, std::vector<int64_t> shape, StDType dtype) {
  StTensor t{dtype, std::move(shape), {}};
  XS_ASSERT(t.numel() == int64_t(values.size()), "safetensors: {} values for shape [{}]", values.size(),
            fmt::join(t.shape, ", "));
  t.bytes.resize(values.size() * size_t(elem_bytes(dtype)));
  if (dtype == StDType::f32) {
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  } else {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t b = attention::float_to_bf16_bits(values[i]);
      t.bytes[2 * i] = uint8_t(b & 0xff);
      t.bytes[2 * i + 1] = uint8_t(b >> 8);
    }
  }
  return t;
}

StFile parse_safetensors(const std::string& bytes, const std::string& what) {
  XS_ASSERT(bytes.size() >= 8, "{}: {} bytes is too short for a safetensors file (8-byte header length missing)", what,
            bytes.size());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  XS_ASSERT(n <= kMaxHeaderBytes, "{}: header length {} is over the format's {} MiB limit (corrupt file?)", what, n,
            kMaxHeaderBytes >> 20);
  XS_ASSERT(n <= bytes.size() - 8, "{}: header length {} runs past the end of the {}-byte file (truncated?)", what, n,
            bytes.size());
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + int64_t(n));
  } catch (const nlohmann::json::exception& e) {
    XS_FAIL("{}: header is not valid JSON ({})", what, e.what());
  }
  XS_ASSERT(h.is_object(), "{}: header is not a JSON object", what);
  const uint64_t data_bytes = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;
  StFile f;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<std::string> range_names;
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") {
      XS_ASSERT(e.is_object(), "{}: __metadata__ is not an object", what);
      for (const auto& [k, v] : e.items()) {
        XS_ASSERT(v.is_string(), "{}: __metadata__ value of '{}' is not a string", what, k);
        f.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    XS_ASSERT(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"),
              "{}: tensor '{}' lacks dtype, shape or data_offsets", what, name);
    XS_ASSERT(e["dtype"].is_string(), "{}: tensor '{}': dtype is not a string", what, name);
    StTensor t;
    t.dtype = parse_dtype(e["dtype"].get<std::string>(), what, name);
    XS_ASSERT(e["shape"].is_array(), "{}: tensor '{}': shape is not an array", what, name);
    for (const auto& d : e["shape"]) {
      XS_ASSERT(d.is_number_integer() && d.get<int64_t>() >= 0, "{}: tensor '{}': shape {} has a bad dimension", what,
                name, e["shape"].dump());
      t.shape.push_back(d.get<int64_t>());
    }
    const auto& off = e["data_offsets"];
    XS_ASSERT(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
              "{}: tensor '{}': data_offsets {} is not [begin, end]", what, name, off.dump());
    const uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    XS_ASSERT(b <= end, "{}: tensor '{}': data_offsets [{}, {}] run backwards", what, name, b, end);
    XS_ASSERT(end <= data_bytes, "{}: tensor '{}' ends at byte {} of data, but the file holds {} (truncated?)", what,
              name, end, data_bytes);
    const int64_t want = t.numel() * elem_bytes(t.dtype);
    XS_ASSERT(end - b == uint64_t(want), "{}: tensor '{}': {} bytes for {} shape [{}] (expected {})", what, name,
              end - b, to_string(t.dtype), fmt::join(t.shape, ", "), want);
    t.bytes.assign(data + b, data + end);
    ranges.push_back({b, end});
    range_names.push_back(name);
    f.tensors[name] = std::move(t);
  }
  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  for (size_t i = 1; i < order.size(); ++i)
    XS_ASSERT(ranges[order[i]].first >= ranges[order[i - 1]].second, "{}: tensors '{}' and '{}' overlap", what,
              range_names[order[i - 1]], range_names[order[i]]);
  return f;
}

StFile read_safetensors(const std::filesystem::path& path) {
  return parse_safetensors(common::read_file(path), path.string());
}

std::string serialize_safetensors(const StFile& f) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& [name, t] : f.tensors) {
    XS_ASSERT(name != "__metadata__", "safetensors: '__metadata__' is not a tensor name");
    XS_ASSERT(int64_t(t.bytes.size()) == t.numel() * elem_bytes(t.dtype), "safetensors: tensor '{}' has {} bytes for "
              "{} shape [{}]", name, t.bytes.size(), to_string(t.dtype), fmt::join(t.shape, ", "));
    h[name] = {{"dtype", to_string(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  if (!f.metadata.empty()) h["__metadata__"] = f.metadata;
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  out += header;
  out.reserve(out.size() + off);
  for (const auto& [name, t] : f.tensors) out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  return out;
}

void write_safetensors(const std::filesystem::path& path, const StFile& f) {
  common::write_file_atomic(path, serialize_safetensors(f));
}

void save_weights(const std::filesystem::path& path, const Config& c, int blocks, const Weights& w, StDType dtype) {
  check_weights(c, blocks, w);
  StFile f;
  f.metadata = {{"format", "xstage-dit"}, {"preset", c.name}, {"blocks", std::to_string(blocks)}};
  for (const auto& [name, t] : w) f.tensors[name] = StTensor::from_f32(t.data, t.shape, dtype);
  write_safetensors(path, f);
}

Weights load_weights(const std::filesystem::path& path, const Config& c, int blocks) {
  const StFile f = read_safetensors(path);
  Weights w;
  for (const auto& [name, t] : f.tensors) w[name] = Tensor{t.shape, t.to_f32()};
  try {
    check_weights(c, blocks, w);
  } catch (const common::Error& e) {
    XS_FAIL("{}: {}", path.string(), e.what());
  }
  return w;
}

}  // namespace xstage::dit
