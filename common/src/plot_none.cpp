// common/plot.hpp in a build without PLplot: every function that draws throws one line
// that says how to get charts; the helpers that need no drawing are in plot_ticks.cpp.
#include "common/check.hpp"
#include "common/plot.hpp"

namespace common::plot {

namespace {
[[noreturn]] void no_charts(const std::string& what) {
  XS_FAIL("{}: this build draws no charts (PLplot was not found: install libplplot-dev and "
          "plplot-driver-cairo, then rebuild)", what);
}
}  // namespace

bool charts_available() { return false; }
void require_charts(const std::string& what) { no_charts(what); }
Frame layout(const Chart&) { no_charts("chart layout"); }
Image render(const Chart&) { no_charts("chart"); }
void write_chart(const Chart&, const std::filesystem::path& path) { no_charts(path.string()); }
void write_charts(const std::vector<Chart>&, const std::filesystem::path& path) { no_charts(path.string()); }
Image render(const Heatmap&) { no_charts("heatmap"); }
void write_heatmap(const Heatmap&, const std::filesystem::path& path) { no_charts(path.string()); }

}  // namespace common::plot
