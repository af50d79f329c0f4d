// modelcast-tune's chart: round tick values on both axes and XML-escaped text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "axis_ticks.h"
#include "svg_plot.h"

namespace modelcast::tune {
namespace {

TEST(AxisTicks, AreRoundMultiplesOfOneTwoOrFive) {
  const auto t = nice_ticks(3.172, 4.931);
  EXPECT_DOUBLE_EQ(t.step, 0.5);
  EXPECT_EQ(t.labels, (std::vector<std::string>{"3.5", "4.0", "4.5"}));
  const auto x = nice_ticks(-117, 12345);
  EXPECT_DOUBLE_EQ(x.step, 5000);
  EXPECT_EQ(x.labels, (std::vector<std::string>{"0", "5000", "10000"}));
  const auto small = nice_ticks(0.00013, 0.00091);
  EXPECT_DOUBLE_EQ(small.step, 0.0002);
  EXPECT_EQ(small.labels.front(), "0.0002");
  EXPECT_EQ(small.labels.back(), "0.0008");
}

TEST(AxisTicks, EmptyForAnEmptyOrNonFiniteRange) {
  EXPECT_TRUE(nice_ticks(1, 1).values.empty());
  EXPECT_TRUE(nice_ticks(0, std::numeric_limits<double>::infinity()).values.empty());
}

// A loss varying in its last bit (stuck at ln 10) gave tick indices past 2^53, where k + 1 == k:
// the loop never ended and took every byte of memory; a constant loss of 1e17 was drawn at NaN.
TEST(SvgPlot, ACurveFlatToItsLastBitsOrAtAHugeValueIsDrawnWithFiniteCoordinates) {
  EXPECT_TRUE(nice_ticks(2.302585092994046, 2.3025850929940463).values.empty());
  for (const double level : {2.302585092994046, 1e17}) {
    PlotData d;
    d.observed.x = {0, 1000, 2000, 3000};
    d.observed.y = {level, std::nextafter(level, 10 * level), level, level};
    const auto path = (std::filesystem::temp_directory_path() / "mc_tune_plot_flat.svg").string();
    write_svg(path, d);
    std::ifstream in(path);
    const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(svg.find("nan"), std::string::npos) << level;
    EXPECT_NE(svg.find("<circle"), std::string::npos) << level;
  }
}

TEST(SvgPlot, EscapesTextAndLabelsTicksRoundly) {
  EXPECT_EQ(escape_xml("a<b & 'c'>\"d\""), "a&lt;b &amp; &apos;c&apos;&gt;&quot;d&quot;");
  // A file name may hold what XML may not: a control character, bytes that are no UTF-8. The
  // plot was then no XML document; UTF-8 itself (tabs, newlines, any script) is kept.
  EXPECT_EQ(escape_xml("run\x01.csv"), "run\\x01.csv");
  EXPECT_EQ(escape_xml("run\xff\xc3.csv\x7f"), "run\\xff\\xc3.csv\\x7f");
  EXPECT_EQ(escape_xml("l\xc3\xa4uft\t\xe6\x97\xa5\xf0\x9f\x93\x88\n"), "l\xc3\xa4uft\t\xe6\x97\xa5\xf0\x9f\x93\x88\n");
  EXPECT_EQ(escape_xml("\xed\xa0\x80|\xc0\xaf|\xe2\x82"), "\\xed\\xa0\\x80|\\xc0\\xaf|\\xe2\\x82") << "a surrogate, an overlong form, a cut sequence";
  EXPECT_EQ(escape_xml("\xef\xbf\xbe\xef\xbf\xbf\xef\xbf\xbd"), "\\xef\\xbf\\xbe\\xef\\xbf\\xbf\xef\xbf\xbd")
      << "U+FFFE and U+FFFF are no XML characters; U+FFFD is";
  PlotData d;
  d.title = "run <A&B> 'x'.csv";
  d.observed.x = {0, 130, 260, 391};
  d.observed.y = {4.9, 3.17, 3.4, 3.3};
  const auto path = (std::filesystem::temp_directory_path() / "mc_tune_plot_test.svg").string();
  write_svg(path, d);
  std::ifstream in(path);
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(svg.find("run &lt;A&amp;B&gt; &apos;x&apos;.csv"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("<A&B>"), std::string::npos);
  EXPECT_NE(svg.find("text-anchor='middle'>100</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("text-anchor='end'>3.2</text>"), std::string::npos) << svg;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A log with a point per step (200,000 rows) once wrote an 11 MB chart: a circle per point and a
// marker per publish. What is drawn is thinned to the chart's pixels, and what shows is kept: the
// curve's lowest and highest points and the served line's extremes.
TEST(SvgPlot, AChartOfAHugeLogIsThinnedToItsPixelsAndKeepsItsExtremes) {
  PlotData d;
  const std::size_t n = 200000;
  for (std::size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i);
    d.observed.x.push_back(t);
    // A falling curve with a deterministic scatter of +-0.05 and one deep dip late in the run.
    d.observed.y.push_back(i == 150000 ? 0.5 : 2.0 + 1.0 / (1.0 + t / 1000.0) + 0.05 * std::sin(t * 12.9898));
    if (i % 2 == 1) d.publish_times.push_back(t);
  }
  d.served.x = {0};
  d.served.y = {3};
  for (std::size_t i = 1; i < n; i += 2) {
    d.served.x.push_back(static_cast<double>(i)), d.served.y.push_back(d.served.y.back());
    d.served.x.push_back(static_cast<double>(i)), d.served.y.push_back(i == 150001 ? 0.5 : d.observed.y[i]);
  }
  const auto path = (std::filesystem::temp_directory_path() / "mc_tune_huge_plot.svg").string();
  write_svg(path, d);
  const std::string svg = read_text(path);
  EXPECT_LT(svg.size(), 2u << 20) << "bytes";
  EXPECT_LT(count_of(svg, "<circle r='2.5'"), 50000u);
  EXPECT_LE(count_of(svg, "stroke-dasharray='4,3' x1"), 900u);  // a marker per pixel column at most
  // The dip (0.5, the lowest y: the bottom of the padded axis) is drawn as a dot and in the served line.
  PlotData dip_only;
  dip_only.observed.x = {0, 150000, 199999};
  dip_only.observed.y = {d.observed.y[0], 0.5, d.observed.y[n - 1]};
  const auto small = (std::filesystem::temp_directory_path() / "mc_tune_dip_plot.svg").string();
  write_svg(small, dip_only);
  const std::string reference = read_text(small);
  // The dip's circle, as the three-point chart draws it on the same axes' bottom.
  const auto cy_of_dip = [](const std::string& text) {
    double lowest = 0;
    for (auto at = text.find("<circle r='2.5'"); at != std::string::npos; at = text.find("<circle r='2.5'", at + 1)) {
      const auto cy = text.find("cy='", at) + 4;
      lowest = std::max(lowest, std::strtod(text.c_str() + cy, nullptr));
    }
    return lowest;
  };
  EXPECT_NEAR(cy_of_dip(svg), cy_of_dip(reference), 1.0);
}

// The legend names what is drawn and nothing else: replay and evaluate draw no forecast, and
// their legends once listed "forecast (band shaded)" all the same.
TEST(SvgPlot, TheLegendListsOnlyWhatIsDrawn) {
  PlotData d;
  d.observed.x = {0, 10, 20};
  d.observed.y = {3, 2, 1.5};
  d.served.x = {10, 20};
  d.served.y = {2, 2};
  d.publish_times = {15};
  const auto path = (std::filesystem::temp_directory_path() / "mc_tune_legend_test.svg").string();
  auto legend_of = [&](const PlotData& data) {
    write_svg(path, data);
    std::ifstream in(path);
    const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string labels;
    for (const char* label : {">observed loss<", ">forecast band<", ">forecast<", ">served loss (staircase)<",
                              ">publish (step completes)<"}) {
      if (svg.find(label) != std::string::npos) labels += label;
    }
    return labels;
  };
  EXPECT_EQ(legend_of(d), ">observed loss<>served loss (staircase)<>publish (step completes)<");
  d.forecast.x = {20, 30};
  d.forecast.y = {1.5, 1.2};
  d.band_lower = d.band_upper = d.forecast;
  EXPECT_EQ(legend_of(d), ">observed loss<>forecast band<>forecast<>served loss (staircase)<>publish (step completes)<");
}

}  // namespace
}  // namespace modelcast::tune
