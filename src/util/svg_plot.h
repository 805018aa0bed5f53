// Minimal SVG charts for benchmark reports (no dependencies): line/scatter series on numeric
// axes, optional secondary y axis, point labels and a highlighted point. Used by `dspark bench`.
#pragma once

#include <string>
#include <vector>

namespace dspark {

struct PlotSeries {
  std::string name;
  std::string color = "#1f77b4";
  std::vector<double> x, y;
  std::vector<std::string> labels;  // optional, one per point
  bool secondary_axis = false;      // plot against the right-hand y axis
  bool line = true;                 // connect points
};

struct Plot {
  std::string title, x_label, y_label, y2_label;
  std::vector<PlotSeries> series;
  // Optional category names for x = 0, 1, 2, ... (drawn instead of numeric ticks).
  std::vector<std::string> x_categories;
  int highlight_series = -1, highlight_point = -1;  // drawn as a star with a caption
  std::string highlight_caption;
  int width = 900, height = 480;

  std::string ToSvg() const;
};

}  // namespace dspark
