// The predictor's OnlineScheduler for Python: the trainer feeds it losses and asks it, at each
// logged step, whether to publish. Decisions re-plan and sometimes refit, so they run with the
// GIL released. The C++ class is for one thread at a time; a Python program that shares one
// (a trainer thread deciding, a monitoring thread reading last_forecast) crashed the interpreter,
// so every call here holds the object's mutex, and the getters return copies: a reference into
// the scheduler was freed by its next refit.
#include <pybind11/stl.h>

#include <mutex>

#include "arguments.h"
#include "gil_released.h"
#include "bindings.h"
#include "modelcast/predictor.h"

namespace modelcast::python {

namespace mp = modelcast::predictor;

namespace {
const char* work_mode_name(mp::OnlineOptions::WorkMode mode) {
  switch (mode) {
    case mp::OnlineOptions::WorkMode::kInline: return "inline";
    case mp::OnlineOptions::WorkMode::kRefitsInBackground: return "refits_in_background";
    case mp::OnlineOptions::WorkMode::kBackground: return "background";
  }
  return "unknown";
}

mp::OnlineOptions::WorkMode parse_work_mode(const std::string& name) {
  for (auto mode : {mp::OnlineOptions::WorkMode::kInline, mp::OnlineOptions::WorkMode::kRefitsInBackground,
                    mp::OnlineOptions::WorkMode::kBackground})
    if (name == work_mode_name(mode)) return mode;
  throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                         "work_mode must be 'inline', 'refits_in_background' or 'background', got '" + name + "'");
}
// The scheduler with the mutex every binding call holds (after releasing the GIL, so that a
// call waiting for another thread's decision holds up no other Python thread).
struct LockedScheduler {
  explicit LockedScheduler(mp::OnlineOptions options) : scheduler(std::move(options)) {}
  template <typename Call>
  auto with_lock(Call&& call) {
    GilReleased released;
    std::lock_guard lock(mutex);
    return call(scheduler);
  }
  std::mutex mutex;
  mp::OnlineScheduler scheduler;
};

}  // namespace

void bind_online(py::module_& m) {
  py::class_<mp::OnlineOptions>(m, "OnlineOptions",
                                "Mirrors predictor::OnlineOptions (forecast.total_steps required). A custom "
                                "forecaster is not exposed to Python.")
      .def(py::init<>())
      .def_readwrite("forecast", &mp::OnlineOptions::forecast)
      .def_readwrite("costs", &mp::OnlineOptions::costs)
      .def_readwrite("warmup_step", &mp::OnlineOptions::warmup_step)
      .def_readwrite("refit_growth", &mp::OnlineOptions::refit_growth)
      .def_readwrite("refit_band_points", &mp::OnlineOptions::refit_band_points)
      .def_readwrite("refit_every_below", &mp::OnlineOptions::refit_every_below)
      .def_readwrite("max_candidates", &mp::OnlineOptions::max_candidates)
      .def_readwrite("reuse_plans", &mp::OnlineOptions::reuse_plans)
      .def_readwrite("replan_time_tolerance", &mp::OnlineOptions::replan_time_tolerance)
      .def_property(
          "work_mode",
          [](const mp::OnlineOptions& o) { return work_mode_name(o.work_mode); },
          [](mp::OnlineOptions& o, const std::string& name) { o.work_mode = parse_work_mode(name); },
          "Where refits and plans run: 'inline', 'refits_in_background' or 'background' (OnlineOptions::WorkMode).")
      .def_readwrite("batch_scheduled_workers", &mp::OnlineOptions::batch_scheduled_workers,
                     "Workers under Linux's SCHED_BATCH: a woken worker does not preempt the trainer "
                     "(OnlineOptions::batch_scheduled_workers).");

  py::class_<mp::OnlineStats>(m, "OnlineStats")
      .def_readonly("fits", &mp::OnlineStats::fits)
      .def_readonly("band_refits", &mp::OnlineStats::band_refits)
      .def_readonly("plans", &mp::OnlineStats::plans)
      .def_readonly("plans_reused", &mp::OnlineStats::plans_reused)
      .def_readonly("deferred", &mp::OnlineStats::deferred)
      .def_readonly("background_fits", &mp::OnlineStats::background_fits)
      .def_readonly("background_plans", &mp::OnlineStats::background_plans)
      .def_readonly("answered_ahead", &mp::OnlineStats::answered_ahead)
      .def_readonly("answered_late", &mp::OnlineStats::answered_late)
      .def_readonly("worker_s", &mp::OnlineStats::worker_s)
      .def_readonly("batch_scheduled_workers", &mp::OnlineStats::batch_scheduled_workers)
      .def_readonly("horizon_extensions", &mp::OnlineStats::horizon_extensions)
      .def_readonly("horizon_end", &mp::OnlineStats::horizon_end)
      .def("__repr__", &fields_repr);

  py::class_<LockedScheduler>(m, "OnlineScheduler",
                              "Decides at each logged step whether to publish. Calls from several threads "
                              "take turns; InvalidArgumentError on non-increasing steps, non-finite values, bad costs.")
      .def(py::init<mp::OnlineOptions>(), py::arg("options"))
      .def(
          "observe",
          [](LockedScheduler& s, const py::object& step, double loss, double wall_time_s) {
            const auto at = integer_argument(step, "OnlineScheduler.observe(): step");
            s.with_lock([&](mp::OnlineScheduler& o) { o.observe(at, loss, wall_time_s); });
          },
          py::arg("step"), py::arg("loss"), py::arg("wall_time_s"),
          "Records a logged loss; wall_time_s is the trainer's clock including past publish stalls.")
      .def(
          "should_publish",
          [](LockedScheduler& s, const py::object& step) {
            const auto at = integer_argument(step, "OnlineScheduler.should_publish(): step");
            return s.with_lock([&](mp::OnlineScheduler& o) { return o.should_publish(at); });
          },
          py::arg("step"),
          "True when publishing now starts the best plan for the rest of the run (the publish is then "
          "recorded). `step` must be the latest observed step.")
      .def(
          "wait_for_background",
          [](LockedScheduler& s) { s.with_lock([](mp::OnlineScheduler& o) { o.wait_for_background(); }); },
          "With in_background: waits for the refit and plan under way, so the next decision uses them.")
      .def(
          "set_costs",
          [](LockedScheduler& s, double stall_s, double delivery_s) {
            s.with_lock([&](mp::OnlineScheduler& o) { o.set_costs(stall_s, delivery_s); });
          },
          py::arg("stall_s"), py::arg("delivery_s"), "Updates the publish stall and delivery latency from measurements.")
      .def_property_readonly(
          "published_steps",
          [](LockedScheduler& s) { return s.with_lock([](mp::OnlineScheduler& o) { return o.published_steps(); }); },
          "The steps it decided to publish at (a copy).")
      .def_property_readonly(
          "last_forecast",
          [](LockedScheduler& s) { return s.with_lock([](mp::OnlineScheduler& o) { return o.last_forecast(); }); },
          "The forecast of the last decision (a copy: the scheduler's own is replaced at each refit).")
      .def_property_readonly(
          "stats", [](LockedScheduler& s) { return s.with_lock([](mp::OnlineScheduler& o) { return o.stats(); }); },
          "A snapshot of the counters (OnlineStats).");
}

}  // namespace modelcast::python
