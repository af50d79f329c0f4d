// Reads a loss log (the CSV reader, libcsv's) and forecasts the rest of the run (the fitting):
// what a schedule-tuning program does first. Built and run by tests/abi/install_package_test.cmake.
#include <cmath>
#include <cstdio>
#include <sstream>

#include <modelcast/predictor_csv.h>
#include <modelcast/predictor_forecast.h>

int main() {
  std::ostringstream text;
  text << "step,loss\n";
  for (int step = 0; step <= 400; step += 20) text << step << ',' << 2.0 / std::sqrt(1.0 + step / 50.0) + 0.5 << '\n';
  std::istringstream in(text.str());
  const auto log = modelcast::predictor::read_loss_log(in, "generated", {});
  modelcast::predictor::ForecastOptions options;
  options.total_steps = 1000;
  const auto forecast = modelcast::predictor::forecast_curve(log.points, options);
  if (forecast.loss.empty() || !(forecast.loss.back() < log.points.back().loss)) {
    std::printf("tiny_predictor: the forecast does not go on falling\n");
    return 1;
  }
  std::printf("tiny_predictor: ok, %zu points read, loss %.3f forecast at step %lld\n", log.points.size(),
              forecast.loss.back(), static_cast<long long>(forecast.steps.back()));
  return 0;
}
