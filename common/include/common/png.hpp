// PNG input/output over libpng with errors instead of aborts.
// Images are 8-bit, row-major, `channels` interleaved (1 = gray, 3 = RGB).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace common {

struct Image {
  int width = 0, height = 0, channels = 1;
  std::vector<std::uint8_t> pixels;  // height * width * channels
  std::uint8_t& at(int y, int x, int c = 0) { return pixels[(static_cast<std::size_t>(y) * width + x) * channels + c]; }
  std::uint8_t at(int y, int x, int c = 0) const { return pixels[(static_cast<std::size_t>(y) * width + x) * channels + c]; }
  static Image blank(int width, int height, int channels, std::uint8_t fill = 0);
};

// Reads any PNG (palette, 16-bit, alpha, gray) and converts it to `channels`
// (1: luminance, 3: RGB). Throws common::Error naming the file on an unreadable,
// truncated or corrupt file.
Image read_png(const std::filesystem::path& path, int channels = 1);
Image decode_png(const std::uint8_t* data, std::size_t size, int channels, const std::string& source_name);
// Writes 1- or 3-channel images atomically.
void write_png(const Image& img, const std::filesystem::path& path);
std::vector<std::uint8_t> encode_png(const Image& img);

}  // namespace common
