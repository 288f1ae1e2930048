// PNG charts through PLplot (cairo drivers, anti-aliased): line + marker series on
// linear or log10 axes, with nice ticks, grid, axis labels, title and legend; and
// heatmap panels with a colour bar. This layer validates the data, picks ranges,
// ticks and the legend corner; PLplot draws (lines, polygons, text, legend,
// colour bar). write_* use PLplot's "pngcairo" device on a temporary file next to
// the target, renamed into place only after a complete PNG came out; render()
// draws the same chart into memory ("memcairo"). PLplot is not thread-safe: every
// chart takes one process-wide lock and its own PLplot stream.
//
//   common::plot::Chart c;
//   c.title = "issue time vs burst";
//   c.x = {.label = "bytes per SM", .scale = common::plot::Scale::log10};
//   c.series.push_back({.label = "gap 0", .x = {...}, .y = {...}});
//   common::plot::write_chart(c, "out/issue.png");
//
// Errors (common::Error, one line): a log axis with a non-positive value, non-finite
// data, x/y of different lengths, an image too small for its labels, a missing
// PLplot cairo driver, an output that could not be written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/png.hpp"

namespace common::plot {

// ---------------------------------------------------------------- declarations

struct Color {
  std::uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Color&, const Color&) = default;
};

enum class Scale { linear, log10 };
enum class LineStyle { solid, dashed, none };
enum class Marker { none, circle, square, diamond, triangle, cross };
// automatic: the inside corner covering the fewest data points; outside_right:
// a column right of the plot (for many series).
enum class LegendPos { automatic, upper_left, upper_right, lower_left, lower_right, outside_right, none };

struct Axis {
  std::string label;
  Scale scale = Scale::linear;
  std::optional<double> min, max;         // data range when unset (padded a little)
  bool include_zero = false;              // linear only: stretch the range to 0
  std::vector<double> ticks;              // explicit major ticks; empty = automatic
  std::function<std::string(double)> tick_format;  // empty = format_tick()
};

struct Series {
  std::string label;                      // empty = not in the legend
  std::vector<double> x, y;               // may be empty: a legend-only entry
  std::optional<Color> color;             // unset = next palette colour
  LineStyle line = LineStyle::solid;
  Marker marker = Marker::circle;
  double line_width = 2.0;                // pixels
  double marker_radius = 4.0;             // pixels
};

struct Chart {
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  int width = 960, height = 640;          // pixels
  bool grid = true;
  LegendPos legend = LegendPos::automatic;
  int text_scale = 2;                     // text size 1..8; capitals are about 5.5 px per step
};

// Plot rectangle (pixels, [left, right] x [top, bottom]) and the data->pixel map.
struct Frame {
  int left = 0, top = 0, right = 0, bottom = 0;
  Scale x_scale = Scale::linear, y_scale = Scale::linear;
  double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;  // axis range in data units
  double px(double x) const;
  double py(double y) const;
};

// A dashed horizontal reference line at y over [x0, x1] (e.g. "1x" on speedup charts).
inline Series horizontal_line(std::string label, double y, double x0, double x1) {
  return {.label = std::move(label), .x = {x0, x1}, .y = {y, y}, .color = std::nullopt, .line = LineStyle::dashed,
          .marker = Marker::none};
}

// Whether this build draws charts: PLplot is an optional dependency (a GPU node
// without it still runs every bench). Without it the functions that draw throw the
// one-line error of require_charts().
bool charts_available();
// Throws, naming `what` (e.g. "bench moe: --png out.png"), when charts_available() is
// false; CLIs call it before long work.
void require_charts(const std::string& what);

// Validates the chart and returns its plot rectangle (throws on bad data). Draws the
// chart in memory on the way: an outside legend's width is PLplot's to tell.
Frame layout(const Chart& chart);
// Renders to a white RGB image of chart.width x chart.height.
Image render(const Chart& chart);
// Writes the chart as a PNG, atomically: nothing is left at `path` (nor a
// temporary file) when drawing or writing fails, and an existing file stays as it was.
void write_chart(const Chart& chart, const std::filesystem::path& path);
// Writes several charts into one PNG, top to bottom (each its own size; a narrower one
// is padded white on the right), atomically as write_chart. Throws on an empty list.
void write_charts(const std::vector<Chart>& charts, const std::filesystem::path& path);

// ---------------------------------------------------------------- heatmaps

// One grid of cells; every panel of a Heatmap has rows.size() x columns.size() cells.
struct HeatmapPanel {
  std::string title;                          // above the panel
  std::vector<std::vector<double>> values;    // [row][column]; NaN = no value (grey, "-")
  std::vector<std::vector<bool>> muted;       // [row][column]; true = excluded (grey); empty = none
};

struct Heatmap {
  std::string title;
  std::string x_label, y_label;               // under the columns, left of the rows
  std::vector<std::string> columns, rows;     // cell labels, left to right and top to bottom
  std::vector<HeatmapPanel> panels;           // side by side, one shared colour scale
  double lo = 0, hi = 1;                      // colour range (sequential(); values outside clamp)
  std::string scale_label;                    // caption right of the colour bar
  std::function<std::string(double)> cell_text;  // text in each cell; empty = none
  int width = 0, height = 0;                  // pixels; 0 = sized from the grid
  int text_scale = 2;                         // as Chart::text_scale
};

// Renders to a white RGB image (width x height, or the size the grid asks for).
Image render(const Heatmap& heatmap);
// Writes the heatmap as a PNG, atomically (as write_chart).
void write_heatmap(const Heatmap& heatmap, const std::filesystem::path& path);

// The palette used for series without a colour (colour-blind friendly, 8 entries).
Color palette(std::size_t i);
// A sequential colour map for ordered series (viridis-like: dark blue-purple at 0,
// green at 0.6, yellow at 1; keep t <= 0.85 for contrast on white).
Color sequential(double t);

// Major ticks for [lo, hi]: 1-2-5 steps on linear axes (about `target` of them);
// decades on log axes (1-2-5 within each decade when fewer than three decades show).
std::vector<double> nice_ticks(double lo, double hi, Scale scale, int target = 6);
// Compact tick text: "0", "0.25", "15", "2.5k", "10M", "1e-05".
std::string format_tick(double v);

}  // namespace common::plot
