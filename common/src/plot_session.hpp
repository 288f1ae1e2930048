// PLplot plumbing shared by plot.cpp (charts) and plot_heatmap.cpp: one process-wide
// lock (PLplot keeps global state and is not thread-safe), one fresh stream per
// picture on a cairo device, PLplot's errors as common::Error, and atomic PNG output.
//
// Inside a `draw` callback the stream is current and the page is blank white. The
// helpers below work in "pixel world": the viewport is the whole page and world
// coordinates are pixels with y growing downwards, so layouts computed in pixels
// map 1:1 onto the image.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "common/plot.hpp"

namespace common::plot::detail {

// Colour-map-0 slots every picture has; callers' own colours start at kFirstFree.
enum Slot : int { kBackground = 0, kInk, kFrame, kGridMajor, kGridMinor, kWhite, kMuted, kMutedInk, kFirstFree };

// Runs `draw` on a new stream of width x height pixels with `slots` cmap0 entries
// (the base slots already set) on the "memcairo" device; returns the RGB image.
Image draw_to_image(int width, int height, int slots, const std::function<void()>& draw);
// The same on the "pngcairo" device, writing "<path>.tmp.<pid>" and renaming it onto
// `path` once PLplot has finished and the file decodes as a width x height PNG. On any
// failure the temporary file is removed and `path` is left as it was.
void draw_to_png(int width, int height, int slots, const std::filesystem::path& path,
                 const std::function<void()>& draw);

void set_colour(int slot, Color c);
// Viewport = the page, world = pixels (y down).
void pixel_world(int width, int height);
// Text size as the height of capitals in pixels; bold for titles.
void set_text(double cap_px, bool bold = false);
// Text with its reference point at (x, y) in pixel world: `just` 0 = left end,
// 0.5 = centre, 1 = right end; y is the middle of the capitals. `vertical` reads
// bottom to top.
void text(double x, double y, const std::string& s, double just, bool vertical = false);
// `s` with PLplot's escape character '#' doubled (labels reach PLplot verbatim).
std::string escape(const std::string& s);
// A rough width (pixels) of `s` at capital height `cap`, for margins and overlap
// checks; PLplot does not export its text metrics. Errs on the wide side.
double text_width_estimate(const std::string& s, double cap);
// A straight line in the current world coordinates.
void line(double x0, double y0, double x1, double y1);

}  // namespace common::plot::detail
