// The embedded bitmap font used by common/plot: 5 columns x 9 rows per glyph,
// printable ASCII (32..126). Rows 0-6 sit above the baseline (capitals are 7
// rows tall, lower case 5); rows 7-8 hold descenders. Bit 4 of a row is the
// leftmost column.
#pragma once

#include <array>
#include <cstdint>

namespace common::plot::font {

inline constexpr int kGlyphW = 5;
inline constexpr int kGlyphH = 9;
inline constexpr int kAdvance = 6;  // glyph width + one column of spacing

using Glyph = std::array<std::uint8_t, kGlyphH>;

// The glyph for `c`; characters outside 32..126 draw as '?'.
const Glyph& glyph(char c);

}  // namespace common::plot::font
