#include "gait/eval/embeddings.hpp"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "common/check.hpp"
#include "common/csv.hpp"
#include "common/files.hpp"

namespace gait::eval {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, ".npy files are written little-endian");

void EmbeddingSet::add(const SequenceKey& key, std::span<const float> r) {
  XS_ASSERT(r.size() == row_size(), "embedding of {} has {} values, the set holds rows of {} x {}", sequence_id(key),
            r.size(), channels, parts);
  keys.push_back(key);
  data.insert(data.end(), r.begin(), r.end());
}

double part_distance(const float* a, const float* b, int channels, int parts) {
  double total = 0;
  for (int p = 0; p < parts; ++p) {
    double s = 0;
    for (int c = 0; c < channels; ++c) {
      const double d = static_cast<double>(a[c * parts + p]) - b[c * parts + p];
      s += d * d;
    }
    total += std::sqrt(s);
  }
  return total / parts;
}

std::string encode_npy_f32(std::span<const std::size_t> shape, std::span<const float> data) {
  std::string dims;
  for (std::size_t d : shape) dims += fmt::format("{}, ", d);
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  else if (shape.size() == 1) dims.resize(dims.size() - 1);
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims);
  // Magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of 64, ending in '\n'.
  const std::size_t total = ((10 + header.size() + 1 + 63) / 64) * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  const auto hl = static_cast<std::uint16_t>(header.size());
  out += static_cast<char>(hl & 0xFF);
  out += static_cast<char>(hl >> 8);
  out += header;
  const std::size_t at = out.size();
  out.resize(at + data.size() * 4);
  std::memcpy(out.data() + at, data.data(), data.size() * 4);
  return out;
}

std::vector<float> decode_npy_f32(const std::string& b, std::vector<std::size_t>& shape, const std::string& source) {
  XS_ASSERT(b.size() >= 10 && b.compare(0, 6, "\x93NUMPY") == 0, "{}: not a .npy file", source);
  XS_ASSERT(b[6] == 1 && b[7] == 0, "{}: only .npy version 1.0 is read", source);
  const std::size_t hl = static_cast<unsigned char>(b[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(b[9])) << 8);
  XS_ASSERT(b.size() >= 10 + hl, "{}: truncated .npy header", source);
  const std::string h = b.substr(10, hl);
  XS_ASSERT(h.find("'descr': '<f4'") != std::string::npos, "{}: expected little-endian float32 ('<f4')", source);
  XS_ASSERT(h.find("'fortran_order': False") != std::string::npos, "{}: expected C order", source);
  const auto open = h.find("'shape': (");
  XS_ASSERT(open != std::string::npos, "{}: no shape in the .npy header", source);
  const auto close = h.find(')', open);
  XS_ASSERT(close != std::string::npos, "{}: bad shape in the .npy header", source);
  shape.clear();
  std::size_t count = 1;
  std::string dims = h.substr(open + 10, close - open - 10);
  for (std::size_t pos = 0; pos < dims.size();) {
    const auto comma = dims.find(',', pos);
    std::string tok = dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    tok.erase(0, tok.find_first_not_of(' '));
    if (!tok.empty()) {
      shape.push_back(std::stoull(tok));
      count *= shape.back();
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  const std::size_t at = 10 + hl;
  XS_ASSERT(b.size() == at + count * 4, "{}: {} data bytes, the shape needs {}", source, b.size() - at, count * 4);
  std::vector<float> out(count);
  std::memcpy(out.data(), b.data() + at, count * 4);
  return out;
}

void save_embeddings(const fs::path& prefix, const EmbeddingSet& set) {
  const std::size_t shape[3] = {set.size(), static_cast<std::size_t>(set.channels), static_cast<std::size_t>(set.parts)};
  std::error_code ec;
  if (prefix.has_parent_path()) fs::create_directories(prefix.parent_path(), ec);
  common::write_file_atomic(fs::path(prefix.string() + ".npy"), encode_npy_f32(shape, set.data));
  std::string csv = "index,sequence_id,subject,condition,seq,view\n";
  for (std::size_t i = 0; i < set.size(); ++i) {
    const auto& k = set.keys[i];
    csv += fmt::format("{},{},{},{},{},{}\n", i, sequence_id(k), k.subject, condition_name(k.cond), k.seq, k.view);
  }
  common::write_file_atomic(fs::path(prefix.string() + ".csv"), csv);
}

EmbeddingSet load_embeddings(const fs::path& prefix) {
  const fs::path npy = prefix.string() + ".npy", csv_path = prefix.string() + ".csv";
  std::vector<std::size_t> shape;
  EmbeddingSet set;
  set.data = decode_npy_f32(common::read_file(npy), shape, npy.string());
  XS_ASSERT(shape.size() == 3, "{}: expected a [n, c, p] array, got {} dimensions", npy.string(), shape.size());
  set.channels = static_cast<int>(shape[1]);
  set.parts = static_cast<int>(shape[2]);
  const common::CsvTable t = common::CsvTable::read(csv_path);
  XS_ASSERT(t.rows() == shape[0], "{}: {} rows, but {} holds {} embeddings", csv_path.string(), t.rows(), npy.string(),
            shape[0]);
  const std::size_t col = t.column("sequence_id");
  for (std::size_t r = 0; r < t.rows(); ++r) {
    const auto key = parse_sequence_id(t.cell(r, col));
    XS_ASSERT(key.has_value(), "{}: row {}: '{}' is not a sequence id", csv_path.string(), r + 1, t.cell(r, col));
    set.keys.push_back(*key);
  }
  return set;
}

}  // namespace gait::eval
