#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/check.hpp"
#include "common/plot.hpp"
#include "common/png.hpp"

namespace plot = common::plot;
namespace fs = std::filesystem;

namespace {

plot::Color pixel(const common::Image& img, int x, int y) {
  return {img.at(y, x, 0), img.at(y, x, 1), img.at(y, x, 2)};
}

bool is_white(plot::Color c) { return c.r == 255 && c.g == 255 && c.b == 255; }

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
}

TEST(Plot, LogAxesRejectNonPositiveData) {
  auto c = two_series_chart();
  c.series[0].y[1] = 0.0;
  EXPECT_THROW(plot::render(c), common::Error);
  c = two_series_chart();
  c.series[1].x[0] = -5.0;
  EXPECT_THROW(plot::render(c), common::Error);
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
  c.width = 70;
  c.height = 70;
  EXPECT_THROW(plot::render(c), common::Error);
}

TEST(Plot, EmptyChartAndLegendOnlySeriesRender) {
  plot::Chart c;
  c.series.push_back({.label = "model (dashed)", .line = plot::LineStyle::dashed, .marker = plot::Marker::none});
  const auto img = plot::render(c);
  EXPECT_EQ(img.width, c.width);
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

TEST(Plot, TextDrawsInk) {
  auto img = common::Image::blank(80, 30, 3, 255);
  plot::draw_text(img, 2, 2, "Ag9", {0, 0, 0}, 2);
  int ink = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) ink += img.at(y, x, 0) == 0;
  EXPECT_GT(ink, 40);
  EXPECT_EQ(plot::text_width("Ag9", 2), (3 * 6 - 1) * 2);
  EXPECT_EQ(plot::text_height(2), 18);
}

TEST(Plot, WritesAPngThatReadsBack) {
  const fs::path dir = fs::temp_directory_path() / "xs_plot_test";
  fs::remove_all(dir);
  plot::write_chart(two_series_chart(), dir / "c.png");
  const auto back = common::read_png(dir / "c.png", 3);
  EXPECT_EQ(back.width, 640);
  EXPECT_EQ(back.height, 420);
  fs::remove_all(dir);
}

TEST(Plot, HorizontalLineIsDashedWithoutMarkers) {
  const plot::Series s = plot::horizontal_line("1x", 1.0, 2.0, 8.0);
  EXPECT_EQ(s.label, "1x");
  EXPECT_EQ(s.x, (std::vector<double>{2.0, 8.0}));
  EXPECT_EQ(s.y, (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(s.line, plot::LineStyle::dashed);
  EXPECT_EQ(s.marker, plot::Marker::none);
}
