#include "gait/train/curves.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "common/check.hpp"
#include "common/csv.hpp"
#include "common/plot.hpp"

namespace gait::train {

namespace plot = common::plot;

namespace {

std::vector<double> column(const common::CsvTable& t, const std::string& name) {
  const std::size_t c = t.column(name);
  std::vector<double> v(t.rows());
  for (std::size_t r = 0; r < t.rows(); ++r) v[r] = t.number(r, c);
  return v;
}

plot::Chart panel(std::string title, std::string y_label) {
  plot::Chart c;
  c.title = std::move(title);
  c.width = 960;
  c.height = 400;
  c.x = {.label = "iteration"};
  c.y = {.label = std::move(y_label), .include_zero = true};
  return c;
}

void add(plot::Chart& c, std::string label, const std::vector<double>& x, std::vector<double> y) {
  // A long run logs thousands of rows: markers would hide the lines.
  const plot::Marker m = x.size() > 60 ? plot::Marker::none : plot::Marker::circle;
  c.series.push_back({.label = std::move(label), .x = x, .y = std::move(y), .marker = m, .marker_radius = 3.0});
}

}  // namespace

void write_train_curves(const std::filesystem::path& log_csv, const std::filesystem::path& png,
                        const std::string& title) {
  const common::CsvTable t = common::CsvTable::read(log_csv);
  XS_ASSERT(t.rows() > 0, "{}: no rows yet (training logs one every trainer.log_every iterations)", log_csv.string());
  const std::vector<double> it = column(t, "iteration");

  plot::Chart losses = panel(fmt::format("{}: training losses", title), "loss");
  add(losses, "total", it, column(t, "loss"));
  add(losses, "triplet", it, column(t, "triplet"));
  add(losses, "cross-entropy", it, column(t, "ce"));
  // The branch heads' losses are logged as 0 where the model has none.
  const std::vector<double> branches = column(t, "branch_losses");
  if (std::any_of(branches.begin(), branches.end(), [](double v) { return v != 0; }))
    add(losses, "branch heads", it, branches);

  plot::Chart batch = panel("batch", "fraction");
  batch.y.min = 0;
  batch.y.max = 1;
  add(batch, "identity accuracy", it, column(t, "accuracy"));
  add(batch, "active triplets", it, column(t, "active"));

  plot::Chart lr = panel("learning rate", "lr");
  lr.legend = plot::LegendPos::none;
  add(lr, "", it, column(t, "lr"));

  plot::write_charts({losses, batch, lr}, png);
}

}  // namespace gait::train
