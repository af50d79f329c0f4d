// modelcast-tune's chart: round tick values on both axes and XML-escaped text.
#include <gtest/gtest.h>

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

TEST(SvgPlot, EscapesTextAndLabelsTicksRoundly) {
  EXPECT_EQ(escape_xml("a<b & 'c'>\"d\""), "a&lt;b &amp; &apos;c&apos;&gt;&quot;d&quot;");
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
