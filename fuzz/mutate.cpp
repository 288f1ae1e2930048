#include "mutate.hpp"

#include <array>
#include <cctype>
#include <string_view>

namespace xs_fuzz {

namespace {

// Values at the edges of what parsers convert: overflow, non-finite, negative, empty,
// structure characters of CSV and JSON, and little-endian sizes near 2^32 and 2^63.
constexpr std::array<std::string_view, 24> kTokens = {
    "0", "-1", "1e308", "-1e308", "1e999", "nan", "inf", "-inf", "4294967296", "9223372036854775807",
    "-2147483649", "1.5", ",", "\n", "\"", "{", "}", "[", "]", ":", "null",
    std::string_view("\0\0\0\0", 4), "\xff\xff\xff\xff", std::string_view("\x00\x00\x00\x80", 4)};

}  // namespace

std::uint64_t Mutator::next() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::size_t Mutator::below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }

void Mutator::edit(std::vector<std::uint8_t>& b, const std::vector<std::vector<std::uint8_t>>& pool) {
  const std::size_t at = below(b.size() + 1);
  switch (below(9)) {
    case 0: b.resize(below(b.size() + 1)); break;
    case 1:
      for (std::size_t i = 0, n = 1 + below(8); i < n && !b.empty(); ++i) b[below(b.size())] ^= 1u << below(8);
      break;
    case 2:
      for (std::size_t i = 0, n = 1 + below(16); i < n && !b.empty(); ++i) b[below(b.size())] = static_cast<std::uint8_t>(next());
      break;
    case 3: b.insert(b.begin() + at, 1 + below(64), static_cast<std::uint8_t>(next())); break;
    case 4: b.erase(b.begin() + at, b.begin() + at + below(b.size() - at + 1)); break;
    case 5: {  // repeat a block in place
      const std::size_t len = below(b.size() - at + 1);
      const std::vector<std::uint8_t> block(b.begin() + at, b.begin() + at + len);
      b.insert(b.begin() + at, block.begin(), block.end());
      break;
    }
    case 6: {
      const auto t = kTokens[below(kTokens.size())];
      b.insert(b.begin() + at, t.begin(), t.end());
      break;
    }
    case 7: {  // the number at or after `at` becomes a boundary token
      std::size_t s = at;
      while (s < b.size() && !std::isdigit(b[s])) ++s;
      std::size_t e = s;
      while (e < b.size() && (std::isdigit(b[e]) || b[e] == '.' || b[e] == 'e' || b[e] == '-')) ++e;
      const auto t = kTokens[below(12)];  // the numeric ones
      b.erase(b.begin() + s, b.begin() + e);
      b.insert(b.begin() + s, t.begin(), t.end());
      break;
    }
    default: {  // splice a block of another seed
      if (pool.empty()) break;
      const auto& other = pool[below(pool.size())];
      const std::size_t from = below(other.size() + 1), len = below(other.size() - from + 1);
      b.insert(b.begin() + at, other.begin() + from, other.begin() + from + len);
    }
  }
}

std::vector<std::uint8_t> Mutator::operator()(const std::vector<std::uint8_t>& in,
                                              const std::vector<std::vector<std::uint8_t>>& pool) {
  std::vector<std::uint8_t> out = in;
  for (std::size_t i = 0, n = 1 + below(3); i < n; ++i) edit(out, pool);
  return out;
}

}  // namespace xs_fuzz
