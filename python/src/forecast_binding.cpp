// The predictor's forecasting and planning functions for Python. All are pure (thread-safe);
// they run with the GIL released since fits of long logs take tens of milliseconds.
#include <pybind11/stl.h>

#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "gil_released.h"
#include "arguments.h"
#include "bindings.h"
#include "errors.h"
#include "modelcast/predictor.h"

namespace modelcast::python {

namespace mp = modelcast::predictor;
using Points = std::vector<mp::CurvePoint>;
using Steps = std::vector<std::int64_t>;

namespace {

// `f` run without the GIL on copies of its arguments, made while the GIL is held: an argument of
// a bound class is a reference into its Python object, which another thread may change (or free a
// member of) once the GIL is released. (pybind11's call_guard releases it before by-value
// parameters are copied.)
template <typename R, typename... A>
auto without_gil(R (*f)(A...)) {
  return [f](const std::decay_t<A>&... a) {
    std::tuple<std::decay_t<A>...> copies(a...);
    GilReleased released;
    return std::apply(f, std::move(copies));
  };
}

// A warm-up index as Python's indexing takes it, a bool refused (pybind11's size_t caster took
// True as 1), InvalidArgumentError naming `function`'s argument otherwise.
std::size_t warmup_argument(const py::handle& value, const std::string& function) {
  return index_argument(value, function + ": warmup_index");
}

}  // namespace

void bind_forecast(py::module_& m) {
  py::class_<mp::CurvePoint>(m, "CurvePoint", "One logged point: step, loss, time_s (training time; NaN if unknown).")
      .def(py::init([](const py::object& step, double loss, double time_s) {
             return mp::CurvePoint{integer_argument(step, "CurvePoint(): step"), loss, time_s};
           }),
           py::arg("step"), py::arg("loss"), py::arg("time_s") = std::numeric_limits<double>::quiet_NaN())
      .def_readwrite("step", &mp::CurvePoint::step)
      .def_readwrite("loss", &mp::CurvePoint::loss)
      .def_readwrite("time_s", &mp::CurvePoint::time_s)
      .def("__repr__", [](const mp::CurvePoint& p) {
        return "CurvePoint(" + std::to_string(p.step) + ", " + std::to_string(p.loss) + ", " + std::to_string(p.time_s) + ")";
      });

  py::class_<mp::Trajectory>(m, "Trajectory", "Logged or forecast points: steps, loss, time_s.")
      .def(py::init([](Steps s, std::vector<double> l, std::vector<double> t) { return mp::Trajectory{std::move(s), std::move(l), std::move(t)}; }),
           py::arg("steps"), py::arg("loss"), py::arg("time_s"))
      .def_readwrite("steps", &mp::Trajectory::steps)
      .def_readwrite("loss", &mp::Trajectory::loss)
      .def_readwrite("time_s", &mp::Trajectory::time_s);

  py::class_<mp::PublishCosts>(m, "PublishCosts", "Publish stall c, delivery latency d, request rate, window, slowdown cap.")
      .def(py::init([](double stall_s, double delivery_s, double request_rate, double window_s, double max_slowdown_s) {
             return mp::PublishCosts{stall_s, delivery_s, request_rate, window_s, max_slowdown_s};
           }),
           py::arg("stall_s") = 0.0, py::arg("delivery_s") = 0.0, py::arg("request_rate") = 1.0,
           py::arg("window_s") = std::numeric_limits<double>::quiet_NaN(),
           py::arg("max_slowdown_s") = std::numeric_limits<double>::infinity())
      .def_readwrite("stall_s", &mp::PublishCosts::stall_s)
      .def_readwrite("delivery_s", &mp::PublishCosts::delivery_s)
      .def_readwrite("request_rate", &mp::PublishCosts::request_rate)
      .def_readwrite("window_s", &mp::PublishCosts::window_s)
      .def_readwrite("max_slowdown_s", &mp::PublishCosts::max_slowdown_s);

  py::class_<mp::ScheduleResult>(m, "ScheduleResult", "Publish steps, their cumulative inference loss, total stall.")
      .def_readonly("publish_steps", &mp::ScheduleResult::publish_steps)
      .def_readonly("cil", &mp::ScheduleResult::cil)
      .def_readonly("slowdown_s", &mp::ScheduleResult::slowdown_s);

  py::class_<mp::LrSchedule>(m, "LrSchedule", "Piecewise-linear learning-rate schedule (steps, lr).")
      .def(py::init([](Steps s, std::vector<double> lr) { return mp::LrSchedule{std::move(s), std::move(lr)}; }),
           py::arg("steps"), py::arg("lr"));
  py::class_<mp::ReferenceCurve>(m, "ReferenceCurve", "Curve of a comparable earlier run by progress in [0, 1].")
      .def(py::init([](std::vector<double> p, std::vector<double> l, std::vector<double> t) {
             return mp::ReferenceCurve{std::move(p), std::move(l), std::move(t)};
           }),
           py::arg("progress"), py::arg("loss"), py::arg("time_fraction") = std::vector<double>{});

  py::class_<mp::ForecastOptions>(m, "ForecastOptions", "Mirrors predictor::ForecastOptions (total_steps required).")
      .def(py::init<>())
      .def_readwrite("total_steps", &mp::ForecastOptions::total_steps)
      .def_readwrite("future_steps", &mp::ForecastOptions::future_steps)
      .def_readwrite("max_future_points", &mp::ForecastOptions::max_future_points)
      .def_readwrite("max_fit_points", &mp::ForecastOptions::max_fit_points)
      .def_readwrite("lr_schedule", &mp::ForecastOptions::lr_schedule)
      .def_readwrite("anneal_drop", &mp::ForecastOptions::anneal_drop)
      .def_readwrite("reference", &mp::ForecastOptions::reference)
      .def_readwrite("starts_per_family", &mp::ForecastOptions::starts_per_family)
      .def_readwrite("backtest_fraction", &mp::ForecastOptions::backtest_fraction)
      .def_readwrite("max_members", &mp::ForecastOptions::max_members)
      .def_readwrite("band_z", &mp::ForecastOptions::band_z)
      .def_readwrite("loss_floor", &mp::ForecastOptions::loss_floor,
                     "lowest loss the run can reach; NaN: 0 when every loss is positive, else none; -inf: none");

  py::class_<mp::ForecastMember>(m, "ForecastMember")
      .def_readonly("family", &mp::ForecastMember::family)
      .def_readonly("weight", &mp::ForecastMember::weight)
      .def_readonly("backtest_rmse", &mp::ForecastMember::backtest_rmse);
  py::class_<mp::Forecast>(m, "Forecast", "Forecast at future logged steps, with band and ensemble members.")
      .def_readonly("steps", &mp::Forecast::steps)
      .def_readonly("loss", &mp::Forecast::loss)
      .def_readonly("lower", &mp::Forecast::lower)
      .def_readonly("upper", &mp::Forecast::upper)
      .def_readonly("time_s", &mp::Forecast::time_s)
      .def_readonly("members", &mp::Forecast::members)
      .def_readonly("fallback", &mp::Forecast::fallback)
      .def_readonly("note", &mp::Forecast::note)
      .def_readonly("loss_floor", &mp::Forecast::loss_floor);

  // These run without the GIL, on copies of their arguments (without_gil).
  m.def("forecast_curve",
        without_gil(+[](const Points& p, const mp::ForecastOptions& o) { return mp::forecast_curve(p, o); }),
        py::arg("observed"), py::arg("options"),
        "Forecast of the rest of the curve (ensemble). InvalidArgumentError on bad input.");
  m.def("forecast_viper",
        without_gil(+[](const Points& p, const mp::ForecastOptions& o) { return mp::forecast_viper(p, o); }),
        py::arg("observed"), py::arg("options"), "Viper's single-family forecaster (baseline).");
  m.def("trajectory_of", without_gil(+[](const Points& p) { return mp::trajectory_of(p); }), py::arg("points"));
  m.def("extend_with_forecast",
        without_gil(+[](const Points& p, const mp::Forecast& f) { return mp::extend_with_forecast(p, f); }),
        py::arg("prefix"), py::arg("forecast"), "The logged prefix followed by the forecast.");
  m.def("validate_problem",
        [](const mp::Trajectory& c, const py::object& w, const mp::PublishCosts& k) {
          return without_gil(&mp::validate_problem)(c, warmup_argument(w, "validate_problem()"), k);
        },
        py::arg("curve"), py::arg("warmup_index"), py::arg("costs"));
  m.def("evaluate_cil",
        [](const mp::Trajectory& c, const py::object& warmup_index, const mp::PublishCosts& k, const Steps& s) {
          const auto w = warmup_argument(warmup_index, "evaluate_cil()");
          // Copied first, as without_gil does (it says why).
          mp::Trajectory curve = c;
          mp::PublishCosts costs = k;
          GilReleased released;
          return mp::evaluate_cil(curve, w, costs, s);
        },
        py::arg("curve"), py::arg("warmup_index"), py::arg("costs"),
        py::arg("publish_steps"),
        "Cumulative inference loss of publishing at publish_steps; InvalidArgumentError naming a bad step.");
  m.def("plan_optimal",
        [](const mp::Trajectory& c, const py::object& w, const mp::PublishCosts& k) {
          return without_gil(&mp::plan_optimal)(c, warmup_argument(w, "plan_optimal()"), k);
        },
        py::arg("curve"), py::arg("warmup_index"), py::arg("costs"),
        "Exact minimum-CIL schedule on `curve` with inference starting at curve.steps[warmup_index].");
  py::class_<mp::PlanChoiceReport>(m, "PlanChoiceReport",
                                   "Whether a plan departs from the best evenly spaced schedule (picked: forecast, "
                                   "no_publish) or keeps to it (evenly_spaced), and why.")
      .def_readonly("picked", &mp::PlanChoiceReport::picked)
      .def_readonly("publish_steps", &mp::PlanChoiceReport::publish_steps)
      .def_readonly("candidate", &mp::PlanChoiceReport::candidate)
      .def_readonly("candidate_cil", &mp::PlanChoiceReport::candidate_cil)
      .def_readonly("required_confidence", &mp::PlanChoiceReport::required_confidence)
      .def_readonly("best_evenly_spaced", &mp::PlanChoiceReport::best_evenly_spaced)
      .def_readonly("best_evenly_spaced_cil", &mp::PlanChoiceReport::best_evenly_spaced_cil)
      .def_readonly("expected_margin_pct", &mp::PlanChoiceReport::expected_margin_pct)
      .def_readonly("win_probability", &mp::PlanChoiceReport::win_probability)
      .def_readonly("reason", &mp::PlanChoiceReport::reason)
      .def("__repr__", [](const mp::PlanChoiceReport& c) { return "PlanChoiceReport(" + c.picked + ": " + c.reason + ")"; });
  py::class_<mp::PrefixPlan>(m, "PrefixPlan", "What modelcast-tune plan computes: point forecast, hedged forecast, plan.")
      .def_readonly("point_forecast", &mp::PrefixPlan::point_forecast)
      .def_property_readonly("forecast", [](const mp::PrefixPlan& p) { return p.hedged.forecast; })
      .def_readonly("plan", &mp::PrefixPlan::plan)
      .def_readonly("choice", &mp::PrefixPlan::choice);
  m.def("plan_prefix",
        without_gil(+[](const Points& p, const mp::ForecastOptions& o, const mp::PublishCosts& c) {
          return mp::plan_prefix(p, o, c);
        }),
        py::arg("prefix"), py::arg("options"), py::arg("costs"),
        "The forecast from the prefix hedged over its scenarios and the plan with the lowest expected CIL, "
        "held to the best evenly spaced schedule (PrefixPlan.choice says which and why).");
  m.def("plan_from", without_gil(&mp::plan_from), py::arg("origin_loss"), py::arg("origin_servable_s"), py::arg("publishes_done"),
        py::arg("window_end_s"), py::arg("future"), py::arg("costs"), "Mid-run planning (see predictor_planner.h).");
  m.def("every_candidate_schedule",
        [](const mp::Trajectory& c, const py::object& w) {
          return without_gil(&mp::every_candidate_schedule)(c, warmup_argument(w, "every_candidate_schedule()"));
        },
        py::arg("curve"), py::arg("warmup_index"));
  m.def("every_n_steps_schedule",
        [](const mp::Trajectory& c, const py::object& w, const py::object& every) {
          return without_gil(&mp::every_n_steps_schedule)(c, warmup_argument(w, "every_n_steps_schedule()"),
                                                          integer_argument(every, "every_n_steps_schedule(): every_steps"));
        },
        py::arg("curve"), py::arg("warmup_index"), py::arg("every_steps"));
  m.def("fixed_interval_schedule",
        [](const mp::Trajectory& p, const py::object& w, const mp::PublishCosts& k) {
          return without_gil(&mp::fixed_interval_schedule)(p, warmup_argument(w, "fixed_interval_schedule()"), k);
        },
        py::arg("predicted"), py::arg("warmup_index"), py::arg("costs"));
  m.def("threshold_schedule",
        [](const mp::Trajectory& p, const py::object& w, const mp::PublishCosts& k) {
          return without_gil(&mp::threshold_schedule)(p, warmup_argument(w, "threshold_schedule()"), k);
        },
        py::arg("predicted"), py::arg("warmup_index"), py::arg("costs"));
  m.def("snap_to_candidates",
        [](const Steps& s, const mp::Trajectory& c, const py::object& w) {
          return without_gil(+[](const Steps& planned, const mp::Trajectory& curve, std::size_t at) {
            return mp::snap_to_candidates(planned, curve, at);
          })(s, c, warmup_argument(w, "snap_to_candidates()"));
        },
        py::arg("planned"), py::arg("curve"), py::arg("warmup_index"));

  py::class_<mp::LossLog>(m, "LossLog", "A loss log read from CSV.")
      .def_readonly("points", &mp::LossLog::points)
      .def_readonly("total_steps", &mp::LossLog::total_steps)
      .def_readonly("has_time", &mp::LossLog::has_time)
      .def_readonly("run", &mp::LossLog::run)
      .def_readonly("warnings", &mp::LossLog::warnings);
  m.def("read_loss_log_file", [](const py::object& path, const py::object& run, const py::object& loss_column,
                                 const py::object& min_points) {
          // A path may be a pathlib.Path (os.fspath), as open() takes it.
          const py::object fspath = py::module_::import("os").attr("fspath");
          py::object text_path;
          try {
            text_path = fspath(path);
          } catch (const py::error_already_set&) {
            throw_invalid(std::string("read_loss_log_file(): path must be a str or a path, not ") +
                          Py_TYPE(path.ptr())->tp_name);
          }
          const std::string file = text_argument(text_path, "read_loss_log_file(): path");
          mp::CsvOptions o;
          o.run = text_argument(run, "read_loss_log_file(): run");
          o.loss_column = text_argument(loss_column, "read_loss_log_file(): loss_column");
          o.min_points = index_argument(min_points, "read_loss_log_file(): min_points");
          GilReleased released;
          return mp::read_loss_log_file(file, o);
        },
        py::arg("path"), py::arg("run") = "", py::arg("loss_column") = "", py::arg("min_points") = 2,
        "Reads a step,loss[,time_s] CSV or the curves format; InvalidArgumentError naming file and line.\n"
        "loss_column: the loss column's header name; empty: val_loss in the curves format, loss otherwise.");
}

}  // namespace modelcast::python
