#include "util/svg_plot.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace dspark {

namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

struct Range {
  double lo = 0, hi = 1;
  void Pad() {
    if (hi <= lo) hi = lo + 1;
    const double span = hi - lo;
    lo = std::max(0.0, lo - 0.05 * span) == 0.0 && lo >= 0 ? 0.0 : lo - 0.05 * span;
    hi += 0.08 * span;
  }
};

// "Nice" tick step for a range (1, 2, 5 × 10^k).
double TickStep(double span, int target_ticks) {
  const double raw = span / std::max(1, target_ticks);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

}  // namespace

std::string Plot::ToSvg() const {
  const double left = 70, right = 70, top = 40, bottom = x_categories.empty() ? 50 : 110;
  const double pw = width - left - right, ph = height - top - bottom;
  Range xr{1e300, -1e300}, yr{1e300, -1e300}, y2r{1e300, -1e300};
  bool any2 = false;
  for (const auto& s : series) {
    for (size_t i = 0; i < s.x.size(); ++i) {
      xr.lo = std::min(xr.lo, s.x[i]);
      xr.hi = std::max(xr.hi, s.x[i]);
      Range& r = s.secondary_axis ? y2r : yr;
      r.lo = std::min(r.lo, s.y[i]);
      r.hi = std::max(r.hi, s.y[i]);
      any2 |= s.secondary_axis;
    }
  }
  if (xr.lo > xr.hi) xr = {0, 1};
  if (yr.lo > yr.hi) yr = {0, 1};
  if (y2r.lo > y2r.hi) y2r = {0, 1};
  if (!x_categories.empty()) {
    xr.lo = -0.5;
    xr.hi = static_cast<double>(x_categories.size()) - 0.5;
  } else {
    xr.Pad();
  }
  yr.lo = std::min(0.0, yr.lo);
  yr.Pad();
  y2r.lo = std::min(0.0, y2r.lo);
  y2r.Pad();
  auto px = [&](double x) { return left + (x - xr.lo) / (xr.hi - xr.lo) * pw; };
  auto py = [&](double y, bool second) {
    const Range& r = second ? y2r : yr;
    return top + ph - (y - r.lo) / (r.hi - r.lo) * ph;
  };

  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height);
  o += fmt::format("<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n", width / 2.0,
                   Escape(title));
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", left, top,
                   pw, ph);
  // Y ticks and grid.
  const double ys = TickStep(yr.hi - yr.lo, 6);
  for (double v = std::ceil(yr.lo / ys) * ys; v <= yr.hi; v += ys) {
    o += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eee\"/>", left, left + pw,
                     py(v, false), py(v, false));
    o += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n", left - 6, py(v, false) + 4, v);
  }
  if (any2) {
    const double s2 = TickStep(y2r.hi - y2r.lo, 6);
    for (double v = std::ceil(y2r.lo / s2) * s2; v <= y2r.hi; v += s2)
      o += fmt::format("<text x=\"{}\" y=\"{:.1f}\">{:g}</text>\n", left + pw + 6, py(v, true) + 4, v);
    o += fmt::format("<text transform=\"translate({},{}) rotate(90)\" text-anchor=\"middle\">{}</text>\n",
                     width - 15, top + ph / 2, Escape(y2_label));
  }
  // X ticks.
  if (!x_categories.empty()) {
    for (size_t i = 0; i < x_categories.size(); ++i)
      o += fmt::format("<text transform=\"translate({:.1f},{}) rotate(-45)\" text-anchor=\"end\">{}</text>\n",
                       px(static_cast<double>(i)), top + ph + 14, Escape(x_categories[i]));
  } else {
    const double xs = TickStep(xr.hi - xr.lo, 8);
    for (double v = std::ceil(xr.lo / xs) * xs; v <= xr.hi; v += xs)
      o += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:g}</text>\n", px(v), top + ph + 16, v);
  }
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", left + pw / 2, height - 8,
                   Escape(x_label));
  o += fmt::format("<text transform=\"translate(16,{}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                   top + ph / 2, Escape(y_label));
  // Series.
  for (size_t si = 0; si < series.size(); ++si) {
    const PlotSeries& s = series[si];
    if (s.line && s.x.size() > 1) {
      std::string pts;
      for (size_t i = 0; i < s.x.size(); ++i) pts += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(s.y[i], s.secondary_axis));
      o += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", pts, s.color);
    }
    for (size_t i = 0; i < s.x.size(); ++i) {
      o += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"><title>{}: {:g}</title></circle>\n",
                       px(s.x[i]), py(s.y[i], s.secondary_axis), s.color, Escape(s.name), s.y[i]);
      if (i < s.labels.size() && !s.labels[i].empty())
        o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\">{}</text>\n", px(s.x[i]) + 6,
                         py(s.y[i], s.secondary_axis) - 6, Escape(s.labels[i]));
    }
    // Legend.
    o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                     left + 10, top + 10 + 18 * si, s.color, left + 28, top + 21 + 18 * si, Escape(s.name));
  }
  if (highlight_series >= 0 && highlight_series < static_cast<int>(series.size())) {
    const PlotSeries& s = series[highlight_series];
    if (highlight_point >= 0 && highlight_point < static_cast<int>(s.x.size())) {
      const double cx = px(s.x[highlight_point]), cy = py(s.y[highlight_point], s.secondary_axis);
      o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"22\" fill=\"#d62728\">&#9733;</text>\n",
                       cx, cy + 8);
      o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#d62728\">{}</text>\n", cx,
                       cy - 14, Escape(highlight_caption));
    }
  }
  o += "</svg>\n";
  return o;
}

}  // namespace dspark
