// modelcast-tune's chart of a publish schedule: the observed loss, what inference serves
// (a staircase: each version is servable c x publishes so far + d after its step) and the
// publish markers, plus any forecast the caller put in the plot already.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "modelcast/predictor.h"
#include "svg_plot.h"

namespace modelcast::tune {

// Throws Error(kResource) when the file cannot be written.
void write_schedule_plot(PlotData d, const std::vector<predictor::CurvePoint>& observed,
                         const predictor::Trajectory& curve, std::size_t w, const predictor::PublishCosts& costs,
                         const std::vector<std::int64_t>& steps, const std::string& path);

}  // namespace modelcast::tune
