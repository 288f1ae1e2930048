// Contact sheets of a dataset as its readers see it: each tile is a silhouette frame
// cropped around the person, with the pose CSV's skeleton of that frame drawn over it
// (left limbs orange, right limbs blue, the centre line green, joints red; limbs and
// joints under kVisibleConf grey). `gait strip` writes them as PNG.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/png.hpp"
#include "gait/dataset.hpp"

namespace gait {

inline constexpr int kStripTileW = 96, kStripTileH = 150;  // px: a 125 px walker with room for a bag
inline constexpr int kStripGap = 4;                       // px between tiles and around them

struct StripSpec {
  int subject = 1;
  std::vector<int> views{36, 90, 144};  // the grid: nm-01, bg-01, cl-01 (rows) at these views (columns)
  std::optional<int> walk_view;         // set: successive frames of one sequence in a row instead
  std::string sequence = "nm-01";       // the walk's sequence
  int count = 8, every = 3;             // the walk's frames: `count`, `every` frames apart, around the middle
};

// The grid tiles show each sequence's middle frame that has a pose row (else the middle
// frame). Throws one line for a sequence without frames or a malformed --sequence.
common::Image render_strip(const DatasetIndex& idx, const StripSpec& spec);

}  // namespace gait
