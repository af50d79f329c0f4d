#include "svg_plot.h"
#include "axis_ticks.h"
#include "common/shown_text.h"
#include "modelcast/error.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <utf8.h>

namespace modelcast::tune {
namespace {

constexpr double kWidth = 900, kHeight = 520, kLeft = 70, kRight = 20, kTop = 40, kBottom = 50;

struct Scale {
  double x0, x1, y0, y1;
  double px(double x) const { return kLeft + (x - x0) / (x1 - x0) * (kWidth - kLeft - kRight); }
  double py(double y) const { return kHeight - kBottom - (y - y0) / (y1 - y0) * (kHeight - kTop - kBottom); }
};

std::string fmt(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// A log with a point per step has far more points than the chart has pixels (200,000 rows once
// wrote an 11 MB file that viewers choke on), so what is drawn is thinned to what shows at the
// chart's resolution; everything that would be seen is kept.

// A line's vertices within one pixel column drawn as its first, lowest, highest and last (in
// their order): the same ink as every vertex, since the line passes through all four.
Series thin_line(const Series& s, const Scale& sc) {
  if (s.x.size() <= 4) return s;
  Series out;
  auto flush = [&](std::size_t from, std::size_t to) {  // [from, to): one column's run
    std::size_t lo = from, hi = from;
    for (std::size_t i = from; i < to; ++i) {
      if (s.y[i] < s.y[lo]) lo = i;
      if (s.y[i] > s.y[hi]) hi = i;
    }
    std::vector<std::size_t> keep = {from, lo, hi, to - 1};
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    for (std::size_t i : keep) out.x.push_back(s.x[i]), out.y.push_back(s.y[i]);
  };
  std::size_t from = 0;
  for (std::size_t i = 1; i <= s.x.size(); ++i) {
    if (i == s.x.size() || std::floor(sc.px(s.x[i])) != std::floor(sc.px(s.x[from]))) {
      flush(from, i);
      from = i;
    }
  }
  return out;
}

// Dots within one 2-pixel cell are one dot: a dot is 5 pixels wide, so the cell's first covers
// the others but for a pixel's rim. Dots outside the plot area are clipped, so not written.
Series thin_dots(const Series& s, const Scale& sc) {
  Series out;
  std::set<std::pair<long, long>> cells;
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    const double x = sc.px(s.x[i]), y = sc.py(s.y[i]);
    if (x < kLeft - 3 || x > kWidth - kRight + 3 || y < kTop - 3 || y > kHeight - kBottom + 3) continue;
    if (cells.emplace(std::lround(x / 2), std::lround(y / 2)).second) out.x.push_back(s.x[i]), out.y.push_back(s.y[i]);
  }
  return out;
}

std::string polyline(const Series& s, const Scale& sc) {
  std::ostringstream o;
  const Series thin = thin_line(s, sc);
  for (std::size_t i = 0; i < thin.x.size(); ++i) o << sc.px(thin.x[i]) << ',' << sc.py(thin.y[i]) << ' ';
  return o.str();
}

}  // namespace

std::string escape_xml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const auto shown = [&](std::string::const_iterator from, std::string::const_iterator to) {
    for (auto b = from; b != to; ++b) out += modelcast::printable_text(std::string_view(&*b, 1), 4, modelcast::Backslash::kKept);
  };
  // A control character (XML 1.0 has no place for one, not even as a reference), U+FFFE or
  // U+FFFF, or a byte that is no UTF-8 (a file name from the file system: utfcpp's RFC 3629 check,
  // as names are checked) made the plot a file no XML reader opens: shown as \xNN text instead,
  // as the logs show them.
  auto it = text.begin();
  while (it != text.end()) {
    const auto invalid = utf8::find_invalid(it, text.end());
    while (it != invalid) {
      const auto start = it;
      const std::uint32_t c = utf8::unchecked::next(it);
      if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f || c == 0xfffe || c == 0xffff) {
        shown(start, it);
        continue;
      }
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '\'': out += "&apos;"; break;
        case '"': out += "&quot;"; break;
        default: out.append(start, it);
      }
    }
    if (it != text.end()) shown(it, it + 1), ++it;
  }
  return out;
}

void write_svg(const std::string& path, const PlotData& d) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  auto extend = [&](const Series& s, bool y_too) {
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      if (y_too) {
        y0 = std::min(y0, s.y[i]);
        y1 = std::max(y1, s.y[i]);
      }
    }
  };
  // The loss axis follows the part of the run that matters for serving (after the first
  // observed points, which are often an order of magnitude higher).
  Series tail = d.observed;
  if (tail.x.size() > 3) {
    tail.x.erase(tail.x.begin(), tail.x.begin() + static_cast<std::ptrdiff_t>(tail.x.size() / 4));
    tail.y.erase(tail.y.begin(), tail.y.begin() + static_cast<std::ptrdiff_t>(tail.y.size() / 4));
  }
  extend(d.observed, false);
  extend(tail, true);
  extend(d.forecast, true);
  extend(d.band_lower, true);
  extend(d.band_upper, true);
  extend(d.served, true);
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  // A range at least a millionth of its values' magnitude: at 1e17, y0 + 1 == y0 and every point
  // was drawn at NaN; a loss varying in its last bits had a range of 1e-16.
  const auto widen = [](double& lo, double& hi) {
    const double least = std::max({1e-6 * std::max(std::abs(lo), std::abs(hi)), 1e-9});
    if (hi - lo < least) {
      const double mid = lo / 2 + hi / 2;
      lo = mid - least / 2;
      hi = mid + least / 2;
    }
  };
  widen(x0, x1);
  widen(y0, y1);
  const double pad = 0.05 * (y1 - y0);
  const Scale sc{x0, x1, y0 - pad, y1 + pad};

  // The stream's failures carry no reason of their own; errno holds the system's when it set one.
  auto reason = [] { return errno != 0 ? std::string(": ") + std::strerror(errno) : std::string(); };
  errno = 0;
  std::ofstream out(path);
  if (!out) throw modelcast::Error(modelcast::ErrorCode::kResource, "cannot write plot file " + path + reason());
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='" << kWidth << "' height='" << kHeight
      << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
  out << "<defs><clipPath id='plot'><rect x='" << kLeft << "' y='" << kTop << "' width='" << kWidth - kLeft - kRight
      << "' height='" << kHeight - kTop - kBottom << "'/></clipPath></defs>\n";
  out << "<text x='" << kLeft << "' y='24' font-size='15'>" << escape_xml(d.title) << "</text>\n";
  // Axes with about 5 round ticks each.
  out << "<g stroke='#444'><line x1='" << kLeft << "' y1='" << kHeight - kBottom << "' x2='" << kWidth - kRight << "' y2='"
      << kHeight - kBottom << "'/><line x1='" << kLeft << "' y1='" << kTop << "' x2='" << kLeft << "' y2='" << kHeight - kBottom
      << "'/></g>\n";
  const AxisTicks xt = nice_ticks(sc.x0, sc.x1), yt = nice_ticks(sc.y0, sc.y1);
  for (std::size_t i = 0; i < xt.values.size(); ++i)
    out << "<text x='" << sc.px(xt.values[i]) << "' y='" << kHeight - kBottom + 18 << "' text-anchor='middle'>" << xt.labels[i] << "</text>\n";
  for (std::size_t i = 0; i < yt.values.size(); ++i)
    out << "<text x='" << kLeft - 6 << "' y='" << sc.py(yt.values[i]) + 4 << "' text-anchor='end'>" << yt.labels[i] << "</text>\n";
  out << "<text x='" << (kLeft + kWidth - kRight) / 2 << "' y='" << kHeight - 10 << "' text-anchor='middle'>training time (s)</text>\n";
  out << "<text x='16' y='" << (kTop + kHeight - kBottom) / 2 << "' transform='rotate(-90 16 " << (kTop + kHeight - kBottom) / 2
      << ")' text-anchor='middle'>loss</text>\n<g clip-path='url(#plot)'>\n";
  if (!d.band_lower.x.empty()) {
    Series band = d.band_upper;
    for (std::size_t i = d.band_lower.x.size(); i-- > 0;) {
      band.x.push_back(d.band_lower.x[i]);
      band.y.push_back(d.band_lower.y[i]);
    }
    out << "<polygon fill='#1f77b4' fill-opacity='0.15' stroke='none' points='" << polyline(band, sc) << "'/>\n";
  }
  long last_marker = std::numeric_limits<long>::min();  // markers at the same pixel are one marker
  for (double t : d.publish_times) {
    if (std::lround(sc.px(t)) == last_marker) continue;
    last_marker = std::lround(sc.px(t));
    out << "<line stroke='#2ca02c' stroke-dasharray='4,3' x1='" << sc.px(t) << "' y1='" << kTop << "' x2='" << sc.px(t)
        << "' y2='" << kHeight - kBottom << "'/>\n";
  }
  if (!d.forecast.x.empty())
    out << "<polyline fill='none' stroke='#1f77b4' stroke-width='2' points='" << polyline(d.forecast, sc) << "'/>\n";
  if (!d.served.x.empty())
    out << "<polyline fill='none' stroke='#d62728' stroke-width='2' points='" << polyline(d.served, sc) << "'/>\n";
  const Series dots = thin_dots(d.observed, sc);
  for (std::size_t i = 0; i < dots.x.size(); ++i)
    out << "<circle r='2.5' fill='#333' cx='" << sc.px(dots.x[i]) << "' cy='" << sc.py(dots.y[i]) << "'/>\n";
  out << "</g>\n";
  // Legend: an entry for each thing drawn, and only those (replay and evaluate draw no forecast).
  const double lx = kWidth - kRight - 230, ly = kTop + 10;
  const std::string x = fmt(lx), x_from = fmt(lx - 5), x_to = fmt(lx + 5);
  std::vector<std::string> entries;
  // `mark(y)`: the symbol centred at height y.
  auto entry = [&](const std::function<std::string(double)>& mark, const std::string& label) {
    const double y = ly + 18 * static_cast<double>(entries.size());
    entries.push_back(mark(y) + "<text x='" + fmt(lx + 12) + "' y='" + fmt(y + 4) + "'>" + label + "</text>");
  };
  auto line = [&](const std::string& colour) {
    return [=](double y) {
      return "<line stroke='" + colour + "' stroke-width='2' x1='" + x_from + "' y1='" + fmt(y) + "' x2='" + x_to +
             "' y2='" + fmt(y) + "'/>";
    };
  };
  if (!d.observed.x.empty()) {
    entry([&](double y) { return "<circle r='3' fill='#333' cx='" + x + "' cy='" + fmt(y) + "'/>"; }, "observed loss");
  }
  if (!d.band_lower.x.empty()) {
    entry([&](double y) {
      return "<rect x='" + x_from + "' y='" + fmt(y - 6) + "' width='10' height='12' fill='#1f77b4' fill-opacity='0.15'/>";
    }, "forecast band");
  }
  if (!d.forecast.x.empty()) entry(line("#1f77b4"), "forecast");
  if (!d.served.x.empty()) entry(line("#d62728"), "served loss (staircase)");
  if (!d.publish_times.empty()) {
    entry([&](double y) {
      return "<line stroke='#2ca02c' stroke-dasharray='4,3' x1='" + x + "' y1='" + fmt(y - 6) + "' x2='" + x + "' y2='" +
             fmt(y + 6) + "'/>";
    }, "publish (step completes)");
  }
  if (!entries.empty()) {
    out << "<g><rect x='" << lx - 8 << "' y='" << ly - 12 << "' width='236' height='" << 18 * entries.size() + 6
        << "' fill='white' stroke='#ccc'/>";
    for (const auto& e : entries) out << e;
    out << "</g>\n";
  }
  out << "</svg>\n";
  // Checked after close(): what is still buffered is written there, and a full disk (or
  // /dev/full) shows only then; before, such a plot was reported as written.
  out.close();
  if (!out) throw modelcast::Error(modelcast::ErrorCode::kResource, "failed writing plot file " + path + reason());
}

}  // namespace modelcast::tune
