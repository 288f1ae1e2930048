// Whitespace tokenizer with line numbers, shared by the BVH and ASF/AMC readers so
// every syntax error names file:line.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "common/check.hpp"

namespace gait::detail {

struct Token {
  std::string_view text;
  std::size_t line;
};

class Tokens {
 public:
  Tokens(std::string_view text, std::string source) : source_(std::move(source)) {
    std::size_t line = 1, i = 0;
    while (i < text.size()) {
      const char c = text[i];
      if (c == '\n') {
        ++line;
        ++i;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++i;
      } else {
        std::size_t j = i;
        while (j < text.size() && text[j] != ' ' && text[j] != '\t' && text[j] != '\r' && text[j] != '\n') ++j;
        toks_.push_back({text.substr(i, j - i), line});
        i = j;
      }
    }
  }
  bool done() const { return pos_ >= toks_.size(); }
  const Token& peek() const {
    if (done()) fail_eof();
    return toks_[pos_];
  }
  Token next() {
    const Token& t = peek();
    ++pos_;
    return t;
  }
  void expect(std::string_view word) {
    const Token t = next();
    if (t.text != word) fail(t, fmt::format("expected '{}', found '{}'", word, t.text));
  }
  double number() {
    const Token t = next();
    return to_number(t);
  }
  int integer() {
    const Token t = next();
    const double v = to_number(t);
    // The range first: converting a double beyond long long's range is undefined.
    if (v < 0 || v > 1e8 || v != std::floor(v)) fail(t, fmt::format("'{}' is not a count", t.text));
    return static_cast<int>(v);
  }
  double to_number(const Token& t) const {
    std::string s(t.text);
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || !std::isfinite(v)) fail(t, fmt::format("'{}' is not a number", t.text));
    return v;
  }
  [[noreturn]] void fail(const Token& t, const std::string& what) const {
    throw common::Error(fmt::format("{}:{}: {}", source_, t.line, what));
  }
  [[noreturn]] void fail_eof() const { throw common::Error(fmt::format("{}: unexpected end of file", source_)); }
  std::size_t line() const { return done() ? (toks_.empty() ? 0 : toks_.back().line) : toks_[pos_].line; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<Token> toks_;
  std::size_t pos_ = 0;
};

}  // namespace gait::detail
