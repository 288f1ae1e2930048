#include "gait/eval/embeddings.hpp"

#include <fmt/format.h>

#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>

#include "common/check.hpp"
#include "common/csv.hpp"
#include "common/files.hpp"
#include "common/validate.hpp"

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
    tok.erase(tok.find_last_not_of(' ') + 1);
    if (!tok.empty()) {
      std::size_t d = 0;
      const auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), d);
      XS_ASSERT(ec == std::errc() && end == tok.data() + tok.size(), "{}: bad dimension '{}' in the .npy shape", source,
                tok);
      // The data must be in the file, so no real shape can need more elements than bytes.
      XS_ASSERT(d == 0 || count <= b.size() / d, "{}: the .npy shape is larger than the file", source);
      shape.push_back(d);
      count *= d;
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  const std::size_t at = 10 + hl;
  XS_ASSERT(count <= (b.size() - at) / 4 && b.size() == at + count * 4, "{}: {} data bytes, the shape needs {}", source,
            b.size() - at, count * 4);
  std::vector<float> out(count);
  if (count > 0) std::memcpy(out.data(), b.data() + at, count * 4);  // data() of an empty vector may be null
  return out;
}

void save_embeddings(const fs::path& prefix, const EmbeddingSet& set) {
  const std::size_t shape[3] = {set.size(), static_cast<std::size_t>(set.channels), static_cast<std::size_t>(set.parts)};
  std::string csv = "index,sequence_id,subject,condition,seq,view\n";
  for (std::size_t i = 0; i < set.size(); ++i) {
    const auto& k = set.keys[i];
    csv += fmt::format("{},{},{},{},{},{}\n", i, sequence_id(k), k.subject, condition_name(k.cond), k.seq, k.view);
  }
  common::write_files_atomic({{fs::path(prefix.string() + ".npy"), encode_npy_f32(shape, set.data)},
                              {fs::path(prefix.string() + ".csv"), std::move(csv)}});
}

namespace {

// One label row: its sequence id, and the redundant columns (when present) agreeing
// with it, so an edited or mixed-up file is refused rather than silently re-read.
SequenceKey label_row(const common::CsvTable& t, std::size_t r) {
  const std::string where = fmt::format("{}: row {}", t.source(), r + 1);
  const std::string& id = t.cell(r, t.column("sequence_id"));
  const auto key = parse_sequence_id(id);
  if (!key) throw common::Error(fmt::format("{}: sequence_id '{}' is not a sequence id (001-nm-01-090)", where, id));
  if (t.has_column("condition")) {
    const std::string& c = t.cell(r, t.column("condition"));
    const auto cond = parse_condition(c);
    if (!cond) throw common::Error(fmt::format("{}: condition '{}' is not nm, bg or cl", where, c));
    if (*cond != key->cond)
      throw common::Error(fmt::format("{}: condition '{}' differs from sequence_id {}", where, c, id));
  }
  for (auto [name, want] : {std::pair{"subject", key->subject}, std::pair{"seq", key->seq}, std::pair{"view", key->view}})
    if (t.has_column(name) && t.integer(r, t.column(name)) != want)
      throw common::Error(fmt::format("{}: {} '{}' differs from sequence_id {}", where, name,
                                      t.cell(r, t.column(name)), id));
  return *key;
}

}  // namespace

EmbeddingSet load_embeddings(const fs::path& prefix) {
  const fs::path npy = prefix.string() + ".npy", csv_path = prefix.string() + ".csv";
  std::vector<std::size_t> shape;
  EmbeddingSet set;
  set.data = decode_npy_f32(common::read_file(npy), shape, npy.string());
  XS_ASSERT(shape.size() == 3, "{}: expected a [n, c, p] array, got {} dimensions", npy.string(), shape.size());
  XS_ASSERT(shape[1] > 0 && shape[2] > 0 && shape[1] * shape[2] <= (1u << 24), "{}: [{}, {}, {}] is not an embedding shape",
            npy.string(), shape[0], shape[1], shape[2]);
  set.channels = static_cast<int>(shape[1]);
  set.parts = static_cast<int>(shape[2]);
  const common::CsvTable t = common::CsvTable::parse(common::read_file(csv_path), csv_path.string());
  common::validate::columns(t, {"sequence_id"});
  XS_ASSERT(t.rows() == shape[0], "{}: {} rows, but {} holds {} embeddings", csv_path.string(), t.rows(), npy.string(),
            shape[0]);
  for (std::size_t r = 0; r < t.rows(); ++r) set.keys.push_back(label_row(t, r));
  const auto dup = common::validate::first_duplicate<SequenceKey>(set.keys);
  if (dup)
    throw common::Error(fmt::format("{}: rows {} and {} both hold sequence {} (each sequence once)", csv_path.string(),
                                    dup->first + 1, dup->second + 1, sequence_id(set.keys[dup->second])));
  common::validate::finite_rows(set.data, set.row_size(), npy.string(),
                                [&](std::size_t r) { return fmt::format("row {} ({})", r + 1, sequence_id(set.keys[r])); });
  return set;
}

}  // namespace gait::eval
