// PLplot streams for common/plot.hpp; see plot_session.hpp.
#include "plot_session.hpp"

#include <fmt/format.h>
#include <plplot/plplot.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string_view>

#include "common/check.hpp"

namespace common::plot::detail {

namespace fs = std::filesystem;

namespace {

constexpr double kPixelsPerMm = 72.0 / 25.4;  // PLplot's cairo devices work at 72 dpi

std::mutex& plplot_lock() {
  static std::mutex m;
  return m;
}

// plabort() (a PLplot call used wrongly) only prints a warning by default: keep the
// first message and raise it when the picture is finished.
std::string g_abort_message;
// plexit() (a fatal PLplot error) ends the process once its handler returns, so the
// handler throws instead; the stream is then left alone, not ended.
bool g_fatal = false;

void on_plabort(PLCHAR_VECTOR msg) {
  if (g_abort_message.empty()) g_abort_message = msg && *msg ? msg : "unknown error";
}

int on_plexit(PLCHAR_VECTOR msg) {
  g_fatal = true;
  throw Error(fmt::format("PLplot: {}", msg && *msg ? msg : "fatal error"));
}

// Called with the lock held. plinit() with an unknown device falls back to asking
// on stdin, so check that the cairo driver is there first.
void require_device(const char* name) {
  static bool checked_png = false, checked_mem = false;
  bool& checked = std::strcmp(name, "pngcairo") == 0 ? checked_png : checked_mem;
  if (checked) return;
  const char* menu[128];
  const char* devices[128];
  const char** pm = menu;
  const char** pd = devices;
  int n = 128;
  plgDevs(&pm, &pd, &n);
  for (int i = 0; i < n; ++i)
    if (std::strcmp(devices[i], name) == 0) {
      checked = true;
      return;
    }
  throw Error(fmt::format("PLplot has no \"{}\" device: install Debian's plplot-driver-cairo", name));
}

constexpr Color kBaseColours[kFirstFree] = {
    {255, 255, 255},  // background
    {40, 40, 40},     // ink: text
    {70, 70, 70},     // frame and ticks
    {222, 222, 222},  // major grid, legend box
    {240, 240, 240},  // minor grid
    {255, 255, 255},  // white: marker halos, legend background
    {200, 200, 200},  // muted: excluded heatmap cells
    {90, 90, 90},     // muted ink
};

// One PLplot stream, current from construction to finish() or destruction. The
// caller holds plplot_lock().
class Stream {
 public:
  Stream(int width, int height, int slots, const std::string& file, std::uint8_t* memory) {
    XS_ASSERT(slots >= kFirstFree, "plot: {} colour slots are too few", slots);
    const char* device = memory ? "memcairo" : "pngcairo";
    require_device(device);
    plsexit(on_plexit);
    plsabort(on_plabort);
    g_abort_message.clear();
    g_fatal = false;
    plgstrm(&previous_);
    plmkstrm(&id_);
    try {
      plsdev(device);
      if (memory) plsmem(width, height, memory);
      else plsfnam(file.c_str());
      plspage(0, 0, width, height, 0, 0);
      plscmap0n(slots);
      for (int i = 0; i < kFirstFree; ++i) set_colour(i, kBaseColours[i]);
      plinit();
      pladv(0);
      plsfont(PL_FCI_SANS, PL_FCI_UPRIGHT, PL_FCI_MEDIUM);
    } catch (...) {
      plsstrm(previous_);  // the stream is abandoned: plexit() fired inside PLplot
      throw;
    }
  }

  // Ends the stream (a file device writes its file here); throws PLplot's complaint.
  void finish() {
    ended_ = true;
    plend1();
    plsstrm(previous_);
    if (!g_abort_message.empty()) throw Error(fmt::format("PLplot: {}", g_abort_message));
  }

  ~Stream() {
    if (ended_) return;
    if (!g_fatal) plend1();
    plsstrm(previous_);
  }

  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

 private:
  PLINT previous_ = 0, id_ = 0;
  bool ended_ = false;
};

fs::path temp_path_for(const fs::path& path) { return fs::path(path.string() + ".tmp." + std::to_string(::getpid())); }

}  // namespace

Image draw_to_image(int width, int height, int slots, const std::function<void()>& draw) {
  Image img = Image::blank(width, height, 3, 255);
  std::lock_guard lock(plplot_lock());
  Stream stream(width, height, slots, {}, img.pixels.data());
  draw();
  stream.finish();
  return img;
}

void draw_to_png(int width, int height, int slots, const fs::path& path, const std::function<void()>& draw) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  if (ec) throw Error(fmt::format("{}: cannot create its directory ({})", path.string(), ec.message()));
  const fs::path tmp = temp_path_for(path);
  {
    // PLplot ends the process when it cannot open its output: find out here instead.
    std::ofstream probe(tmp, std::ios::binary | std::ios::trunc);
    if (!probe) throw Error(fmt::format("{}: cannot open for writing", tmp.string()));
  }
  try {
    {
      std::lock_guard lock(plplot_lock());
      Stream stream(width, height, slots, tmp.string(), nullptr);
      draw();
      stream.finish();
    }
    // The cairo driver ignores write errors (a full disk): accept only a whole PNG.
    const Image back = read_png(tmp, 3);
    if (back.width != width || back.height != height)
      throw Error(fmt::format("{}: PLplot wrote {}x{} pixels, not {}x{}", path.string(), back.width, back.height,
                              width, height));
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error(fmt::format("{}: cannot rename into place", path.string()));
  }
}

void set_colour(int slot, Color c) { plscol0(slot, c.r, c.g, c.b); }

void pixel_world(int width, int height) {
  plvpor(0, 1, 0, 1);
  plwind(0, width, height, 0);
}

void set_text(double cap_px, bool bold) {
  plschr(cap_px / kPixelsPerMm, 1.0);
  plsfont(PL_FCI_SANS, PL_FCI_UPRIGHT, bold ? PL_FCI_BOLD : PL_FCI_MEDIUM);
}

std::string escape(const std::string& s) {
  std::string out;  // '#' starts PLplot's text escapes ("#u", "#d", ...)
  for (char c : s) {
    out += c;
    if (c == '#') out += '#';
  }
  return out;
}

void text(double x, double y, const std::string& s, double just, bool vertical) {
  if (s.empty()) return;
  const std::string escaped = escape(s);
  if (vertical) plptex(x, y, 0, -1, just, escaped.c_str());  // y grows downwards: (0, -1) points up
  else plptex(x, y, 1, 0, just, escaped.c_str());
}

double text_width_estimate(const std::string& s, double cap) {
  // DejaVu Sans (the usual fontconfig "sans"): digits 0.87 of the capital height,
  // capitals up to 1.0, lower case about 0.8, space 0.45.
  double w = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) == 0x80) continue;  // UTF-8 continuation byte
    w += c == ' ' ? 0.45 : (c == 'm' || c == 'w' || c == 'M' || c == 'W') ? 1.25 : (c >= 'A' && c <= 'Z') ? 1.0 : 0.88;
  }
  return w * cap;
}

void line(double x0, double y0, double x1, double y1) { pljoin(x0, y0, x1, y1); }

}  // namespace common::plot::detail
