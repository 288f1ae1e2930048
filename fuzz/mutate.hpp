// Deterministic input mutations for the seed-corpus replay (and the property tests
// that corrupt files): the same seed gives the same sequence of inputs on every
// machine, so a failure found in CI is reproduced by its index.
#pragma once

#include <cstdint>
#include <vector>

namespace xs_fuzz {

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : state_(seed) {}
  // One to three edits of `in`: truncation, bit flips, random bytes, inserted or
  // deleted or repeated blocks, boundary tokens ("1e308", "nan", "-1", 0xffffffff, ...)
  // inserted or put in place of a number, or a block spliced from another seed of `pool`.
  std::vector<std::uint8_t> operator()(const std::vector<std::uint8_t>& in,
                                       const std::vector<std::vector<std::uint8_t>>& pool = {});
  std::uint64_t next();                   // splitmix64
  std::size_t below(std::size_t n);       // uniform in [0, n); 0 when n == 0

 private:
  void edit(std::vector<std::uint8_t>& b, const std::vector<std::vector<std::uint8_t>>& pool);
  std::uint64_t state_;
};

}  // namespace xs_fuzz
