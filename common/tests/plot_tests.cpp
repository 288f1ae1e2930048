#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <unistd.h>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"
#include "common/png.hpp"

namespace plot = common::plot;
namespace fs = std::filesystem;

namespace {

plot::Color pixel(const common::Image& img, int x, int y) {
  return {img.at(y, x, 0), img.at(y, x, 1), img.at(y, x, 2)};
}

bool is_white(plot::Color c) { return c.r == 255 && c.g == 255 && c.b == 255; }
bool is_dark(plot::Color c) { return c.r < 110 && c.g < 110 && c.b < 110; }

// Pixels in [x0, x1) x [y0, y1) that satisfy `pred`.
template <class Pred>
int count(const common::Image& img, int x0, int y0, int x1, int y1, Pred pred) {
  int n = 0;
  for (int y = std::max(0, y0); y < std::min(img.height, y1); ++y)
    for (int x = std::max(0, x0); x < std::min(img.width, x1); ++x) n += pred(pixel(img, x, y)) ? 1 : 0;
  return n;
}

int count_colour(const common::Image& img, plot::Color c, int tol = 0) {
  return count(img, 0, 0, img.width, img.height, [&](plot::Color p) {
    return std::abs(p.r - c.r) <= tol && std::abs(p.g - c.g) <= tol && std::abs(p.b - c.b) <= tol;
  });
}

plot::Chart two_series_chart() {
  plot::Chart c;
  c.title = "issue time vs burst";
  c.width = 640;
  c.height = 420;
  c.x = {.label = "bytes per SM", .scale = plot::Scale::log10};
  c.y = {.label = "ns", .scale = plot::Scale::log10};
  c.series.push_back({.label = "gap 0", .x = {1024, 4096, 16384, 65536}, .y = {50, 400, 6000, 25000},
                      .color = plot::Color{200, 30, 30}});
  c.series.push_back({.label = "gap 10us", .x = {1024, 4096, 16384, 65536}, .y = {40, 90, 330, 1300},
                      .color = plot::Color{20, 60, 200}, .line = plot::LineStyle::dashed,
                      .marker = plot::Marker::square});
  return c;
}

plot::Heatmap small_heatmap() {
  const double nan = std::nan("");
  plot::Heatmap h{.title = "rank-1", .x_label = "gallery view", .y_label = "probe view",
                  .columns = {"000", "090", "180"}, .rows = {"000", "090", "180"}, .lo = 0, .hi = 100,
                  .scale_label = "accuracy (%)", .cell_text = [](double v) { return fmt::format("{:.0f}", v); }};
  h.panels.push_back({.title = "NM", .values = {{100, 0, 50}, {0, 100, 100}, {nan, 25, 100}}});
  h.panels.push_back({.title = "BG", .values = {{90, 10, 50}, {5, 80, 70}, {60, 25, 100}},
                      .muted = {{true, false, false}, {false, true, false}, {false, false, true}}});
  return h;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("xs_plot_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(Plot, RendersRequestedSizeWithSeriesPixelsAtTheirPoints) {
  const auto chart = two_series_chart();
  const auto img = plot::render(chart);
  EXPECT_EQ(img.width, 640);
  EXPECT_EQ(img.height, 420);
  EXPECT_EQ(img.channels, 3);
  const auto frame = plot::layout(chart);
  EXPECT_GT(frame.left, 0);
  EXPECT_LT(frame.right, 640);
  for (const auto& s : chart.series) {
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      const int x = static_cast<int>(std::floor(frame.px(s.x[i])));
      const int y = static_cast<int>(std::floor(frame.py(s.y[i])));
      ASSERT_GE(x, frame.left);
      ASSERT_LE(x, frame.right);
      ASSERT_GE(y, frame.top);
      ASSERT_LE(y, frame.bottom);
      EXPECT_EQ(pixel(img, x, y), *s.color) << s.label << " point " << i;
    }
  }
  // Corners outside the frame stay background.
  EXPECT_TRUE(is_white(pixel(img, 0, 0)));
  EXPECT_TRUE(is_white(pixel(img, 639, 419)));
}

TEST(Plot, LinesConnectPoints) {
  plot::Chart c;
  c.width = 300;
  c.height = 200;
  c.legend = plot::LegendPos::none;
  c.series.push_back({.x = {0, 10}, .y = {0, 10}, .color = plot::Color{0, 0, 0}, .marker = plot::Marker::none});
  const auto img = plot::render(c);
  const auto f = plot::layout(c);
  const int x = static_cast<int>(std::floor(f.px(5))), y = static_cast<int>(std::floor(f.py(5)));
  EXPECT_LT(img.at(y, x, 0), 100) << "midpoint of the line should be dark";
  // ... and a point well off the line stays background.
  const int ox = static_cast<int>(std::floor(f.px(2))), oy = static_cast<int>(std::floor(f.py(8)));
  EXPECT_GT(img.at(oy, ox, 0), 200);
}

TEST(Plot, TitleAxisLabelsAndTickLabelsAreDrawn) {
  auto c = two_series_chart();
  c.legend = plot::LegendPos::none;
  const auto with = plot::render(c);
  const auto f = plot::layout(c);
  // Title band above the frame, x labels under it, y labels left of it: all carry dark text.
  EXPECT_GT(count(with, 0, 0, c.width, f.top - 8, is_dark), 40);
  EXPECT_GT(count(with, f.left, f.bottom + 6, f.right, c.height, is_dark), 80);
  EXPECT_GT(count(with, 0, f.top, f.left - 6, f.bottom, is_dark), 80);
  c.title.clear();
  c.x.label.clear();
  c.y.label.clear();
  const auto f2 = plot::layout(c);
  EXPECT_LT(f2.top, f.top) << "no title: the frame moves up";
  EXPECT_GT(f2.bottom, f.bottom) << "no x label: the frame grows down";
  EXPECT_LT(f2.left, f.left) << "no y label: the frame grows left";
}

TEST(Plot, LegendIsDrawnInsideOrOutside) {
  auto c = two_series_chart();
  c.legend = plot::LegendPos::none;
  const auto none = plot::render(c);
  c.legend = plot::LegendPos::upper_left;
  const auto inside = plot::render(c);
  const auto f = plot::layout(c);
  // The upper-left corner of the plot gains legend text (and series samples).
  const int box = 60;
  EXPECT_GT(count(inside, f.left + 2, f.top + 2, f.left + 2 * box, f.top + box, is_dark),
            count(none, f.left + 2, f.top + 2, f.left + 2 * box, f.top + box, is_dark) + 30);
  c.legend = plot::LegendPos::outside_right;
  const auto out_frame = plot::layout(c);
  EXPECT_LT(out_frame.right, f.right - 60) << "an outside legend takes room from the plot";
  const auto outside = plot::render(c);
  EXPECT_GT(count(outside, out_frame.right + 10, out_frame.top, c.width, out_frame.bottom, is_dark), 50);
  const auto red = [](plot::Color p) { return p == plot::Color{200, 30, 30}; };
  EXPECT_GT(count(outside, out_frame.right + 10, out_frame.top, c.width, out_frame.bottom, red), 10)
      << "the legend shows the series' line and marker";
}

TEST(Plot, LogAxesRejectNonPositiveData) {
  auto c = two_series_chart();
  c.series[0].y[1] = 0.0;
  EXPECT_THROW(plot::render(c), common::Error);
  c = two_series_chart();
  c.series[1].x[0] = -5.0;
  EXPECT_THROW(plot::render(c), common::Error);
  try {
    plot::render(c);
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("log10"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line";
  }
  c = two_series_chart();
  c.y.min = -1.0;
  EXPECT_THROW(plot::render(c), common::Error);
}

TEST(Plot, RejectsBadShapesAndData) {
  auto c = two_series_chart();
  c.series[0].y.pop_back();
  EXPECT_THROW(plot::render(c), common::Error);
  c = two_series_chart();
  c.series[0].y[0] = NAN;
  EXPECT_THROW(plot::render(c), common::Error);
  c = two_series_chart();
  c.series[0].x[2] = INFINITY;
  EXPECT_THROW(plot::render(c), common::Error);
  c = two_series_chart();
  c.width = 70;
  c.height = 70;
  EXPECT_THROW(plot::render(c), common::Error);
}

TEST(Plot, EmptyChartAndLegendOnlySeriesRender) {
  plot::Chart c;
  c.series.push_back({.label = "model (dashed)", .line = plot::LineStyle::dashed, .marker = plot::Marker::none});
  const auto img = plot::render(c);
  EXPECT_EQ(img.width, c.width);
  EXPECT_GT(count(img, 0, 0, img.width, img.height, is_dark), 100) << "frame, ticks and legend text";
}

TEST(Plot, EveryMarkerKindIsFilledAtItsPoint) {
  plot::Chart c;
  c.width = 500;
  c.height = 300;
  c.legend = plot::LegendPos::none;
  const plot::Marker kinds[] = {plot::Marker::circle, plot::Marker::square, plot::Marker::diamond,
                                plot::Marker::triangle, plot::Marker::cross};
  for (int i = 0; i < 5; ++i)
    c.series.push_back({.x = {static_cast<double>(i)}, .y = {static_cast<double>(i)},
                        .color = plot::Color{0, 120, 0}, .marker = kinds[i], .marker_radius = 6});
  const auto img = plot::render(c);
  const auto f = plot::layout(c);
  for (int i = 0; i < 5; ++i) {
    const int x = static_cast<int>(std::floor(f.px(i))), y = static_cast<int>(std::floor(f.py(i)));
    EXPECT_EQ(pixel(img, x, y), (plot::Color{0, 120, 0})) << "marker " << i;
    const int filled = count(img, x - 10, y - 10, x + 11, y + 11, [](plot::Color p) { return p.g == 120 && p.r == 0; });
    EXPECT_GT(filled, 20) << "marker " << i;
    EXPECT_LT(filled, 300) << "marker " << i;
  }
}

TEST(Plot, NiceTicks) {
  auto t = plot::nice_ticks(0, 10, plot::Scale::linear, 5);
  EXPECT_EQ(t, (std::vector<double>{0, 2, 4, 6, 8, 10}));
  t = plot::nice_ticks(0.13, 0.91, plot::Scale::linear, 4);
  ASSERT_FALSE(t.empty());
  EXPECT_NEAR(t.front(), 0.2, 1e-12);
  EXPECT_NEAR(t[1] - t[0], 0.2, 1e-12);
  t = plot::nice_ticks(3, 5e4, plot::Scale::log10);
  EXPECT_EQ(t, (std::vector<double>{10, 100, 1000, 10000}));
  t = plot::nice_ticks(30, 900, plot::Scale::log10);  // under two decades: 1-2-5
  EXPECT_EQ(t, (std::vector<double>{50, 100, 200, 500}));
  EXPECT_THROW(plot::nice_ticks(0, 10, plot::Scale::log10), common::Error);
  EXPECT_EQ(plot::format_tick(2500), "2.5k");
  EXPECT_EQ(plot::format_tick(0.25), "0.25");
  EXPECT_EQ(plot::format_tick(1e7), "10M");
  EXPECT_EQ(plot::format_tick(0), "0");
}

TEST(Plot, WritesADecodablePngOfTheRequestedSizeAndNoTempFile) {
  const fs::path dir = fresh_dir("write");
  plot::write_chart(two_series_chart(), dir / "sub" / "c.png");
  ASSERT_TRUE(fs::exists(dir / "sub" / "c.png"));
  const auto back = common::read_png(dir / "sub" / "c.png", 3);
  EXPECT_EQ(back.width, 640);
  EXPECT_EQ(back.height, 420);
  const int non_white = count(back, 0, 0, back.width, back.height, [](plot::Color p) { return !is_white(p); });
  EXPECT_GT(non_white, back.width * back.height / 100) << "not blank";
  EXPECT_GT(count_colour(back, {200, 30, 30}), 50) << "series colour present";
  EXPECT_GT(count_colour(back, {20, 60, 200}), 50) << "series colour present";
  EXPECT_EQ(names_in(dir / "sub"), (std::vector<std::string>{"c.png"})) << "no temporary file left";
  // The file written matches the in-memory rendering (same drawing, other cairo device).
  const auto mem = plot::render(two_series_chart());
  int differ = 0;
  for (std::size_t i = 0; i < mem.pixels.size(); ++i) differ += std::abs(mem.pixels[i] - back.pixels[i]) > 8;
  EXPECT_LT(differ, static_cast<int>(mem.pixels.size() / 200));
  fs::remove_all(dir);
}

TEST(Plot, FailedWritesLeaveTheExistingFileAndNoTempFile) {
  const fs::path dir = fresh_dir("fail");
  const fs::path png = dir / "c.png";
  common::write_file_atomic(png, "previous bytes");
  auto bad = two_series_chart();
  bad.series[0].y[1] = -3.0;  // log axis, non-positive value
  EXPECT_THROW(plot::write_chart(bad, png), common::Error);
  EXPECT_EQ(common::read_file(png), "previous bytes");
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"c.png"}));

  // The target is a directory: PLplot draws the temporary file, the rename fails.
  fs::create_directories(dir / "d.png");
  EXPECT_THROW(plot::write_chart(two_series_chart(), dir / "d.png"), common::Error);
  EXPECT_TRUE(fs::is_directory(dir / "d.png"));
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"c.png", "d.png"}));

  // A parent that is a file: nothing can be created.
  EXPECT_THROW(plot::write_chart(two_series_chart(), png / "x.png"), common::Error);
  EXPECT_EQ(common::read_file(png), "previous bytes");
  fs::remove_all(dir);
}

TEST(Plot, WritesChartsStackedTopToBottom) {
  const fs::path dir = fresh_dir("stack");
  auto narrow = two_series_chart();
  narrow.width = 480;
  narrow.height = 300;
  plot::write_charts({two_series_chart(), narrow}, dir / "s.png");
  const auto back = common::read_png(dir / "s.png", 3);
  ASSERT_EQ(back.width, 640);
  ASSERT_EQ(back.height, 420 + 300);
  // Each part is its chart's own rendering, in place; the narrower one is padded white.
  const auto top = plot::render(two_series_chart()), bottom = plot::render(narrow);
  int differ = 0;
  for (int y = 0; y < 420; ++y)
    for (int x = 0; x < 640; ++x) differ += pixel(back, x, y) == pixel(top, x, y) ? 0 : 1;
  for (int y = 0; y < 300; ++y)
    for (int x = 0; x < 480; ++x) differ += pixel(back, x, 420 + y) == pixel(bottom, x, y) ? 0 : 1;
  EXPECT_LT(differ, (640 * 420 + 480 * 300) / 200);
  EXPECT_EQ(count(back, 480, 420, 640, 720, [](plot::Color p) { return !is_white(p); }), 0);
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"s.png"}));

  common::write_file_atomic(dir / "s.png", "previous bytes");
  auto bad = narrow;
  bad.series[0].y[1] = -3.0;  // log axis, non-positive value: nothing is written
  EXPECT_THROW(plot::write_charts({two_series_chart(), bad}, dir / "s.png"), common::Error);
  EXPECT_THROW(plot::write_charts({}, dir / "s.png"), common::Error);
  EXPECT_EQ(common::read_file(dir / "s.png"), "previous bytes");
  fs::remove_all(dir);
}

TEST(Plot, ChartsFromManyThreadsComeOutTheSame) {
  const auto one = plot::render(two_series_chart());
  std::vector<common::Image> out(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&out, t] { out[t] = plot::render(two_series_chart()); });
  for (auto& th : threads) th.join();
  for (const auto& img : out) EXPECT_EQ(img.pixels, one.pixels);
}

TEST(Plot, HorizontalLineIsDashedWithoutMarkers) {
  const plot::Series s = plot::horizontal_line("1x", 1.0, 2.0, 8.0);
  EXPECT_EQ(s.label, "1x");
  EXPECT_EQ(s.x, (std::vector<double>{2.0, 8.0}));
  EXPECT_EQ(s.y, (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(s.line, plot::LineStyle::dashed);
  EXPECT_EQ(s.marker, plot::Marker::none);
}

TEST(Heatmap, RendersCellsInScaleColoursWithMutedCellsGrey) {
  const auto img = plot::render(small_heatmap());
  EXPECT_GT(img.width, 300);
  EXPECT_GT(img.height, 150);
  EXPECT_EQ(img.channels, 3);
  // Top and bottom of the scale, and the grey of excluded / missing cells, each fill cells.
  EXPECT_GT(count_colour(img, plot::sequential(1.0), 6), 400);
  EXPECT_GT(count_colour(img, plot::sequential(0.0), 6), 400);
  EXPECT_GT(count_colour(img, {200, 200, 200}, 2), 3 * 300);
  EXPECT_GT(count(img, 0, 0, img.width, img.height, is_dark), 200) << "labels and cell values";
}

TEST(Heatmap, WritesAtomicallyAndRejectsBadShapes) {
  const fs::path dir = fresh_dir("heat");
  auto h = small_heatmap();
  plot::write_heatmap(h, dir / "h.png");
  const auto back = common::read_png(dir / "h.png", 3);
  const auto mem = plot::render(h);
  EXPECT_EQ(back.width, mem.width);
  EXPECT_EQ(back.height, mem.height);
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"h.png"}));
  h.width = 900;
  h.height = 400;
  EXPECT_EQ(plot::render(h).width, 900);
  h.panels[1].values.pop_back();
  EXPECT_THROW(plot::write_heatmap(h, dir / "h.png"), common::Error);
  h = small_heatmap();
  h.panels[0].muted = {{true}};
  EXPECT_THROW(plot::render(h), common::Error);
  h = small_heatmap();
  h.lo = h.hi;
  EXPECT_THROW(plot::render(h), common::Error);
  EXPECT_EQ(common::read_png(dir / "h.png", 3).pixels, back.pixels) << "failed writes leave the file";
  fs::remove_all(dir);
}
