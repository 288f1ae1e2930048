#include "common/png.hpp"

#include <png.h>

#include <cstring>
#include <string>

#include "common/check.hpp"
#include "common/files.hpp"

namespace common {

Image Image::blank(int width, int height, int channels, std::uint8_t fill) {
  XS_ASSERT(width > 0 && height > 0 && (channels == 1 || channels == 3), "bad image shape {}x{}x{}", width,
            height, channels);
  Image img;
  img.width = width;
  img.height = height;
  img.channels = channels;
  img.pixels.assign(static_cast<std::size_t>(width) * height * channels, fill);
  return img;
}

namespace {

struct Reader {
  const std::uint8_t* data;
  std::size_t size, pos;
};

void read_cb(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<Reader*>(png_get_io_ptr(png));
  if (r->pos + n > r->size) png_error(png, "truncated file");
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

struct ErrorSink {
  std::string message;
};

void error_cb(png_structp png, png_const_charp msg) {
  auto* sink = static_cast<ErrorSink*>(png_get_error_ptr(png));
  sink->message = msg;
  png_longjmp(png, 1);
}
void warning_cb(png_structp, png_const_charp) {}

void write_cb(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<std::vector<std::uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}
void flush_cb(png_structp) {}

}  // namespace

Image decode_png(const std::uint8_t* data, std::size_t size, int channels, const std::string& source_name) {
  XS_ASSERT(channels == 1 || channels == 3, "channels must be 1 or 3");
  if (size < 8 || png_sig_cmp(data, 0, 8) != 0) throw Error(fmt::format("{}: not a PNG file", source_name));
  ErrorSink sink;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &sink, error_cb, warning_cb);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw Error(fmt::format("{}: out of memory", source_name));
  }
  Reader reader{data, size, 0};
  Image img;  // declared before setjmp so the longjmp path does not skip its destructor
  std::vector<png_bytep> rows;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw Error(fmt::format("{}: corrupt PNG ({})", source_name, sink.message));
  }
  png_set_read_fn(png, &reader, read_cb);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (w == 0 || h == 0 || w > 1u << 15 || h > 1u << 15) png_error(png, "implausible image size");
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_packing(png);
  png_set_palette_to_rgb(png);
  png_set_expand_gray_1_2_4_to_8(png);
  const int color = png_get_color_type(png, info);
  const bool is_gray = (color & PNG_COLOR_MASK_COLOR) == 0;
  if (channels == 1 && !is_gray) png_set_rgb_to_gray_fixed(png, 1, -1, -1);
  if (channels == 3 && is_gray) png_set_gray_to_rgb(png);
  png_read_update_info(png, info);
  if (static_cast<int>(png_get_channels(png, info)) != channels) png_error(png, "unsupported channel layout");
  img.width = static_cast<int>(w);
  img.height = static_cast<int>(h);
  img.channels = channels;
  img.pixels.resize(static_cast<std::size_t>(w) * h * channels);
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = img.pixels.data() + static_cast<std::size_t>(y) * w * channels;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return img;
}

Image read_png(const std::filesystem::path& path, int channels) {
  const std::string bytes = read_file(path);
  return decode_png(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), channels, path.string());
}

std::vector<std::uint8_t> encode_png(const Image& img) {
  XS_ASSERT(img.channels == 1 || img.channels == 3, "can only write gray or RGB PNG");
  XS_ASSERT(img.pixels.size() == static_cast<std::size_t>(img.width) * img.height * img.channels,
            "image buffer size does not match {}x{}x{}", img.width, img.height, img.channels);
  std::vector<std::uint8_t> out;
  ErrorSink sink;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &sink, error_cb, warning_cb);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_write_struct(&png, &info);
    XS_FAIL("out of memory creating a PNG writer");
  }
  std::vector<png_bytep> rows(static_cast<std::size_t>(img.height));
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    XS_FAIL("PNG encoding failed: {}", sink.message);
  }
  png_set_write_fn(png, &out, write_cb, flush_cb);
  png_set_IHDR(png, info, img.width, img.height, 8, img.channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(png, 6);
  png_write_info(png, info);
  for (int y = 0; y < img.height; ++y)
    rows[y] = const_cast<png_bytep>(img.pixels.data() + static_cast<std::size_t>(y) * img.width * img.channels);
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

void write_png(const Image& img, const std::filesystem::path& path) {
  const auto bytes = encode_png(img);
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace common
