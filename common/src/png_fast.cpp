#include "common/png_fast.hpp"

#include <png.h>

#include <string>

#include "common/check.hpp"

namespace common {

namespace {
struct Sink {
  std::vector<std::uint8_t>* out;
  std::string message;
};
void on_error(png_structp png, png_const_charp msg) {
  static_cast<Sink*>(png_get_error_ptr(png))->message = msg;
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}
void on_write(png_structp png, png_bytep data, png_size_t n) {
  auto* s = static_cast<Sink*>(png_get_io_ptr(png));
  s->out->insert(s->out->end(), data, data + n);
}
void on_flush(png_structp) {}
}  // namespace

std::vector<std::uint8_t> encode_png_fast(const Image& img) {
  XS_ASSERT(img.channels == 1 || img.channels == 3, "can only write gray or RGB PNG");
  XS_ASSERT(img.pixels.size() == static_cast<std::size_t>(img.width) * img.height * img.channels,
            "image buffer size does not match {}x{}x{}", img.width, img.height, img.channels);
  std::vector<std::uint8_t> out;
  Sink sink{&out, {}};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &sink, on_error, on_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_write_struct(&png, &info);
    XS_FAIL("out of memory creating a PNG writer");
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    XS_FAIL("PNG encoding failed: {}", sink.message);
  }
  png_set_write_fn(png, &sink, on_write, on_flush);
  png_set_IHDR(png, info, img.width, img.height, 8, img.channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
  png_set_compression_level(png, 6);
  png_set_compression_strategy(png, 3);  // Z_RLE
  png_write_info(png, info);
  for (int y = 0; y < img.height; ++y)
    png_write_row(png, const_cast<png_bytep>(img.pixels.data() + static_cast<std::size_t>(y) * img.width * img.channels));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

}  // namespace common
