// Minimal SVG chart for modelcast-tune: observed loss, forecast with its band, publish points
// and the served-loss staircase, all against training time.
#pragma once

#include <string>
#include <vector>

namespace modelcast::tune {

struct Series {
  std::vector<double> x, y;
};

struct PlotData {
  std::string title;
  Series observed;             // dots
  Series forecast;             // line
  Series band_lower, band_upper;  // shaded (same x as forecast)
  Series served;               // staircase (already expanded into horizontal/vertical moves)
  std::vector<double> publish_times;  // vertical markers
};

// `text` with XML's five special characters replaced by entities (titles hold file names), and
// control characters and bytes that are no UTF-8, which no XML document may hold, as \xNN.
std::string escape_xml(const std::string& text);

// Writes an SVG file; throws Error(kResource) when the file cannot be written.
void write_svg(const std::string& path, const PlotData& data);

}  // namespace modelcast::tune
