"""The predictor from Python: plan() and OnlineScheduler on a synthetic loss curve."""

import json
import math
import os
import subprocess
import threading

import numpy as np
import pytest

import modelcast
from modelcast import predictor


def curve(total=600, every=10):
    steps = list(range(every, total + 1, every))
    loss = [2.0 + 3.0 * math.exp(-s / 150.0) for s in steps]
    time_s = [0.05 * s for s in steps]
    return predictor.curve_points(steps, loss, time_s)


def test_plan_forecasts_and_plans_optimally():
    points = curve()
    costs = predictor.PublishCosts(stall_s=0.5, delivery_s=0.2)
    plan = predictor.plan(points, warmup_step=200, total_steps=600, costs=costs)
    assert plan.publish_steps, "a decaying loss is worth publishing at least once"
    assert all(200 < s <= 600 for s in plan.publish_steps)
    assert plan.publish_steps == sorted(set(plan.publish_steps))
    assert plan.curve.steps[plan.warmup_index] == 200
    assert plan.curve.steps[-1] == 600 and len(plan.forecast.steps) > 0
    # The plan's CIL is what evaluate_cil says for its steps, and no baseline beats it.
    assert plan.cil == pytest.approx(predictor.evaluate_cil(plan.curve, plan.warmup_index, costs, plan.publish_steps))
    for baseline in (predictor.every_candidate_schedule(plan.curve, plan.warmup_index),
                     predictor.every_n_steps_schedule(plan.curve, plan.warmup_index, 100), []):
        assert plan.cil <= predictor.evaluate_cil(plan.curve, plan.warmup_index, costs, baseline) + 1e-9
    assert plan.slowdown_s == pytest.approx(0.5 * len(plan.publish_steps))


@pytest.mark.parametrize("warmup_step", [30, 200, 205])
def test_plan_is_what_the_tool_plans(tmp_path, warmup_step):
    # plan() once planned on the bare point forecast while the tool hedges over its scenarios; a
    # warm-up of 3 points also leaves the time axis in doubt (several time scenarios). Step 205
    # was not logged: both take the last point before it (plan() once refused it).
    tune = os.environ.get("MODELCAST_TUNE")
    if not tune:
        pytest.skip("MODELCAST_TUNE (the modelcast-tune binary) not set")
    points = curve()
    log = tmp_path / "log.csv"
    log.write_text("step,loss,time_s\n" + "".join(f"{p.step},{p.loss!r},{p.time_s!r}\n" for p in points))
    out = subprocess.run([tune, "plan", "--log", str(log), "--warmup-steps", str(warmup_step), "--total-steps", "600",
                          "--publish-cost", "0.5", "--update-latency", "0.2", "--json"],
                         check=True, capture_output=True, text=True).stdout
    tool = json.loads(out)
    plan = predictor.plan(points, warmup_step=warmup_step, total_steps=600,
                          costs=predictor.PublishCosts(stall_s=0.5, delivery_s=0.2))
    assert plan.curve.steps[plan.warmup_index] == tool["warmup_step"] == min(warmup_step, 200)
    assert list(plan.publish_steps) == tool["publish_steps"]
    assert plan.cil == pytest.approx(tool["predicted_cil"], rel=1e-12)
    assert plan.expected_cil == pytest.approx(tool["expected_cil"], rel=1e-12)
    assert list(plan.forecast.loss) == pytest.approx(tool["forecast"]["loss"], rel=1e-12)
    assert list(plan.point_forecast.loss) == pytest.approx(tool["forecast"]["point_loss"], rel=1e-12)
    assert plan.choice.picked == tool["choice"]["picked"]
    assert plan.choice.reason == tool["choice"]["reason"]
    assert list(plan.choice.best_evenly_spaced) == tool["choice"]["best_evenly_spaced"]["publish_steps"]
    assert plan.choice.expected_margin_pct == pytest.approx(tool["choice"]["expected_margin_pct"], rel=1e-12, abs=1e-12)


def test_a_stated_loss_floor_plans_a_loss_with_a_constant_in_it_as_the_loss_without():
    points = curve()
    offset = predictor.curve_points([p.step for p in points], [p.loss + 1000.0 for p in points],
                                    [p.time_s for p in points])
    costs = predictor.PublishCosts(stall_s=0.5, delivery_s=0.2)
    plain = predictor.plan(points, warmup_step=200, total_steps=600, costs=costs)
    stated = predictor.plan(offset, warmup_step=200, total_steps=600, costs=costs, loss_floor=1000)
    assert list(stated.publish_steps) == list(plain.publish_steps)
    assert stated.point_forecast.loss_floor == 1000.0 and plain.point_forecast.loss_floor == 0.0
    assert [v - 1000.0 for v in stated.forecast.loss] == pytest.approx(list(plain.forecast.loss), abs=1e-3)
    with pytest.raises(modelcast.InvalidArgumentError, match="loss_floor must be a real number"):
        predictor.plan(points, warmup_step=200, total_steps=600, costs=costs, loss_floor="0")
    # The scheduler refuses a loss below the floor it was given, keeping nothing of it.
    options = predictor.online_options(total_steps=600, warmup_step=200, stall_s=0.5, delivery_s=0.2, loss_floor=1.5)
    assert options.forecast.loss_floor == 1.5
    scheduler = predictor.OnlineScheduler(options)
    with pytest.raises(modelcast.InvalidArgumentError, match="below the stated loss_floor"):
        scheduler.observe(10, 1.0, 0.5)
    scheduler.observe(10, 4.0, 0.5)
    # A bool is no step (it was taken as 1), nor a warm-up index.
    with pytest.raises(modelcast.InvalidArgumentError, match=r"observe\(\): step must be an integer, got True"):
        scheduler.observe(True, 4.0, 0.6)
    with pytest.raises(modelcast.InvalidArgumentError, match=r"should_publish\(\): step must be an integer"):
        scheduler.should_publish(np.True_)
    with pytest.raises(modelcast.InvalidArgumentError, match=r"observe\(\): step must be an integer, got array\(2.5\)"):
        scheduler.observe(np.array(2.5), 4.0, 0.6)
    with pytest.raises(modelcast.InvalidArgumentError, match=r"evaluate_cil\(\): warmup_index must be an integer"):
        predictor.evaluate_cil(predictor.trajectory_of(points), True, costs, [300])
    # Every other function taking a warm-up index refuses a bool too, naming itself; where an
    # index is right, each gives what it gave for the integer.
    trajectory = predictor.trajectory_of(points)
    for name, call in (("validate_problem", lambda w: predictor.validate_problem(trajectory, w, costs)),
                       ("plan_optimal", lambda w: predictor.plan_optimal(trajectory, w, costs).publish_steps),
                       ("every_candidate_schedule", lambda w: predictor.every_candidate_schedule(trajectory, w)),
                       ("every_n_steps_schedule", lambda w: predictor.every_n_steps_schedule(trajectory, w, 100)),
                       ("fixed_interval_schedule", lambda w: predictor.fixed_interval_schedule(trajectory, w, costs)),
                       ("threshold_schedule", lambda w: predictor.threshold_schedule(trajectory, w, costs)),
                       ("snap_to_candidates", lambda w: predictor.snap_to_candidates([250, 400], trajectory, w))):
        for slip in (True, np.True_, np.array(False)):
            with pytest.raises(modelcast.InvalidArgumentError, match=name + r"\(\): warmup_index must be an integer"):
                call(slip)
        assert call(np.int64(1)) == call(1)
    with pytest.raises(modelcast.InvalidArgumentError, match=r"every_n_steps_schedule\(\): every_steps must be an integer"):
        predictor.every_n_steps_schedule(trajectory, 1, True)
    with pytest.raises(modelcast.InvalidArgumentError, match=r"CurvePoint\(\): step must be an integer, got True"):
        predictor.CurvePoint(True, 1.0)
    assert predictor.CurvePoint(np.int64(7), 1.0).step == 7


def test_costlier_publishes_mean_fewer_publishes():
    full = predictor.trajectory_of(curve())
    cheap = predictor.plan_optimal(full, 19, predictor.PublishCosts(stall_s=0.01))
    dear = predictor.plan_optimal(full, 19, predictor.PublishCosts(stall_s=5.0))
    capped = predictor.plan_optimal(full, 19, predictor.PublishCosts(stall_s=0.01, max_slowdown_s=0.02))
    assert len(dear.publish_steps) < len(cheap.publish_steps)
    assert len(capped.publish_steps) <= 2


def test_online_scheduler_publishes_after_warmup_only():
    options = predictor.online_options(total_steps=600, warmup_step=200, stall_s=0.5, delivery_s=0.2)
    scheduler = predictor.OnlineScheduler(options)
    decided = []
    for p in curve():
        scheduler.observe(p.step, p.loss, p.time_s)
        if scheduler.should_publish(p.step):
            decided.append(p.step)
    assert decided, "a decaying loss is worth publishing at least once"
    assert all(s > 200 for s in decided)
    assert list(scheduler.published_steps) == decided
    assert scheduler.stats.plans > 0 and scheduler.stats.fits > 0
    assert not scheduler.last_forecast.fallback


def wavy_points(count, every=20):
    for i in range(count):
        step = i * every
        yield step, 3.0 * math.exp(-step / 40000.0) + 1.0 + 0.01 * math.sin(step), step * 0.001


def test_last_forecast_and_stats_are_copies_that_outlive_refits():
    # last_forecast was a reference into the scheduler, freed by its next refit: the forecast
    # held read garbage steps and raised UnicodeDecodeError on its note.
    scheduler = predictor.OnlineScheduler(predictor.online_options(100000, 400, 0.001, 0.0005))
    points = list(wavy_points(3000))
    for step, loss, time_s in points[:30]:
        scheduler.observe(step, loss, time_s)
        scheduler.should_publish(step)
    held, stats = scheduler.last_forecast, scheduler.stats
    steps, note, members = list(held.steps), held.note, [(m.family, m.weight) for m in held.members]
    fits = stats.fits
    for step, loss, time_s in points[30:]:
        scheduler.observe(step, loss, time_s)
        scheduler.should_publish(step)
    assert scheduler.stats.fits > fits, "no refit happened: the test shows nothing"
    assert list(held.steps) == steps and held.note == note
    assert [(m.family, m.weight) for m in held.members] == members
    assert stats.fits == fits


def test_threads_sharing_a_scheduler_take_turns():
    # A trainer thread deciding while a monitoring thread reads the forecast crashed the
    # interpreter (the C++ scheduler is for one thread at a time, and the calls release the GIL).
    scheduler = predictor.OnlineScheduler(predictor.online_options(10**7, 400, 0.001, 0.0005))
    done = threading.Event()
    failures, reads = [], [0]

    def monitor():
        try:
            while not done.is_set():
                forecast = scheduler.last_forecast
                _ = (list(forecast.loss), [m.family for m in forecast.members], forecast.note,
                     scheduler.published_steps, scheduler.stats.fits)
                reads[0] += 1
        except Exception as e:  # noqa: BLE001 - any exception here is the failure
            failures.append(repr(e))

    readers = [threading.Thread(target=monitor) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for step, loss, time_s in wavy_points(3000):
            scheduler.observe(step, loss, time_s)
            scheduler.should_publish(step)
    finally:
        done.set()
        for reader in readers:
            reader.join()
    assert not failures, failures[:3]
    assert reads[0] > 0 and scheduler.stats.fits > 1


def test_online_scheduler_reuses_plans_and_refits_in_the_background():
    # A long run with a slow decay: publishes are far enough apart that most decisions are a
    # "wait" the last plan still answers (on a short one every decision is near a publish).
    steps = list(range(10, 3001, 10))
    long_run = predictor.curve_points(steps, [2.0 + 3.0 * math.exp(-s / 750.0) for s in steps],
                                      [0.05 * s for s in steps])

    def run(**settings):
        scheduler = predictor.OnlineScheduler(predictor.online_options(3000, 1000, 0.5, 0.2, **settings))
        decided = []
        for p in long_run:
            scheduler.observe(p.step, p.loss, p.time_s)
            if scheduler.should_publish(p.step):
                decided.append(p.step)
            scheduler.wait_for_background()
        return decided, scheduler.stats

    fresh, fresh_stats = run(reuse_plans=False)
    reused, reused_stats = run()
    assert reused == fresh, "reusing plans changed the decisions"
    assert fresh_stats.plans_reused == 0 and reused_stats.plans_reused > 0
    assert reused_stats.plans < fresh_stats.plans
    background, background_stats = run(work_mode="background")
    assert background and all(s > 1000 for s in background)
    assert background_stats.background_fits > 0 and fresh_stats.background_fits == 0
    # Every plan ran on the worker; points logged at a regular interval are answered by the
    # threshold prepared for them.
    assert background_stats.background_plans == background_stats.plans > 0
    assert background_stats.answered_ahead > len(long_run) // 2
    # The worker does not preempt the thread that wakes it (OnlineOptions.batch_scheduled_workers),
    # unless that is turned off (and this test was not itself started under SCHED_BATCH).
    assert background_stats.batch_scheduled_workers == 1
    if os.sched_getscheduler(0) != os.SCHED_BATCH:
        _, inherited_stats = run(work_mode="background", batch_scheduled_workers=False)
        assert inherited_stats.background_plans > 0 and inherited_stats.batch_scheduled_workers == 0


def test_predictor_errors_carry_codes():
    scheduler = predictor.OnlineScheduler(predictor.online_options(600, 200, 0.5, 0.2))
    scheduler.observe(10, 4.0, 0.5)
    with pytest.raises(modelcast.InvalidArgumentError) as info:
        scheduler.observe(10, 3.9, 0.6)  # step not increasing
    assert info.value.code == modelcast.ErrorCode.INVALID_ARGUMENT
    with pytest.raises(modelcast.InvalidArgumentError, match="warm-up step 5 is before the first logged step 10"):
        predictor.plan(curve(), warmup_step=5, total_steps=600, costs=predictor.PublishCosts())
    with pytest.raises(modelcast.InvalidArgumentError,
                       match=r"warm-up step 605 is beyond the points, which end at step 600 \(60 points\)"):
        predictor.plan(curve(), warmup_step=605, total_steps=900, costs=predictor.PublishCosts())
    with pytest.raises(modelcast.InvalidArgumentError, match="unknown option 'refit_grwoth'"):
        predictor.online_options(600, 200, 0.5, 0.2, refit_grwoth=1.0)
    # pybind11 took reuse_plans=None as False (plan reuse silently off) and max_candidates=False as 0.
    for key, value, said in (("reuse_plans", None, "takes True or False, not NoneType"),
                             ("reuse_plans", 0.3, "takes True or False, not float"),
                             ("batch_scheduled_workers", None, "takes True or False"),
                             ("refit_band_points", True, "takes int, not bool"),
                             ("max_candidates", False, "takes int, not bool")):
        with pytest.raises(modelcast.InvalidArgumentError, match=f"online_options\\(\\): option '{key}' {said}"):
            predictor.online_options(600, 200, 0.5, 0.2, **{key: value})
    assert predictor.online_options(600, 200, 0.5, 0.2, reuse_plans=False, max_candidates=7).max_candidates == 7
    # Costs out of range are refused when the scheduler is made, naming the field (they were
    # once refused only at the first decision after the warm-up).
    for bad in (dict(request_rate=0.0), dict(request_rate=math.inf), dict(request_rate=math.nan)):
        with pytest.raises(modelcast.InvalidArgumentError, match="costs.request_rate"):
            predictor.OnlineScheduler(predictor.online_options(600, 200, 0.5, 0.2, **bad))
    options = predictor.online_options(600, 200, 0.5, 0.2)
    options.costs = predictor.PublishCosts(stall_s=0.5, delivery_s=0.2, max_slowdown_s=math.nan)
    with pytest.raises(modelcast.InvalidArgumentError, match="costs.max_slowdown_s"):
        predictor.OnlineScheduler(options)


def test_a_loss_log_with_odd_bytes_or_path_is_an_error_naming_it(tmp_path):
    # A byte that is not UTF-8 in a quoted field once turned the error into a UnicodeDecodeError
    # that lost its file and line; a NUL in the path read the file named before it.
    log = tmp_path / "odd.csv"
    log.write_bytes(b"step,loss,time_s\n10,4.0,1\n20,\xff,2\n")
    with pytest.raises(modelcast.InvalidArgumentError, match=r"odd\.csv:3: .*\\xff"):
        predictor.read_loss_log_file(str(log))
    good = tmp_path / "good.csv"
    good.write_text("step,loss,time_s\n10,4.0,1\n20,3.0,2\n")
    with pytest.raises(modelcast.InvalidArgumentError, match="past a NUL byte at byte"):
        predictor.read_loss_log_file(str(good) + "\x00junk")
    with pytest.raises(modelcast.InvalidArgumentError, match="cannot open file: No such file or directory"):
        predictor.read_loss_log_file(str(tmp_path / "missing.csv"))
    # Once pybind11's TypeError naming no parameter; a pathlib.Path was refused too.
    assert len(predictor.read_loss_log_file(good).points) == 2
    with pytest.raises(modelcast.InvalidArgumentError, match=r"read_loss_log_file\(\): min_points must not be negative"):
        predictor.read_loss_log_file(good, min_points=-1)
    # min_points=0 takes a log of no points (a header alone ended the process).
    header_only = tmp_path / "header_only.csv"
    header_only.write_text("step,loss,time_s\n")
    assert len(predictor.read_loss_log_file(header_only, min_points=0).points) == 0
    with pytest.raises(modelcast.InvalidArgumentError, match=r"read_loss_log_file\(\): path must be a str or a path"):
        predictor.read_loss_log_file(None)
    with pytest.raises(modelcast.InvalidArgumentError, match=r"read_loss_log_file\(\): run must be a str, not int"):
        predictor.read_loss_log_file(good, run=3)


def test_a_step_that_is_not_an_integer_is_refused_naming_it():
    # int() made step 1.7 step 1 and a run of 600.7 steps one of 600, without a word.
    with pytest.raises(modelcast.InvalidArgumentError, match=r"steps\[1\] must be an integer, got 1.7"):
        predictor.curve_points([1, 1.7], [2.0, 1.0])
    costs = predictor.PublishCosts(stall_s=0.5, delivery_s=0.2)
    with pytest.raises(modelcast.InvalidArgumentError, match="total_steps must be an integer, got 600.7"):
        predictor.plan(curve(), warmup_step=200, total_steps=600.7, costs=costs)
    with pytest.raises(modelcast.InvalidArgumentError, match="warmup_step must be an integer, got True"):
        predictor.online_options(600, True, 0.5, 0.2)
    assert predictor.curve_points([np.int64(3)], [1.0])[0].step == 3  # integer types other than int are integers
    # Past an int64 it was pybind11's TypeError listing every argument, not a parameter's name.
    with pytest.raises(modelcast.InvalidArgumentError, match="total_steps must be at most 9223372036854775807"):
        predictor.plan(curve(), warmup_step=200, total_steps=2**63, costs=costs)
    with pytest.raises(modelcast.InvalidArgumentError, match="warmup_step must be at least -9223372036854775808"):
        predictor.online_options(600, -2**63 - 1, 0.5, 0.2)
    with pytest.raises(modelcast.InvalidArgumentError, match=r"steps\[0\] must be at most 9223372036854775807"):
        predictor.curve_points([2**64], [1.0])
    # float() read the str "1.5" as a loss, and NumPy's complex lost its imaginary part with a warning.
    with pytest.raises(modelcast.InvalidArgumentError, match=r"loss\[1\] must be a real number, not str \('1.5'\)"):
        predictor.curve_points([0, 1], [2.0, "1.5"])
    with pytest.raises(modelcast.InvalidArgumentError, match=r"loss\[0\] must be a real number, not complex128"):
        predictor.curve_points([0], np.array([1 + 2j]))
    with pytest.raises(modelcast.InvalidArgumentError, match=r"time_s\[0\] must be a real number, not bool"):
        predictor.curve_points([0], [1.0], [True])
    assert predictor.curve_points([0], [np.float32(1.5)], [np.int64(2)])[0].loss == 1.5  # NumPy reals are reals
    # A 0-d array is its number, as a 0-d integer one was for a step (a loss was refused).
    assert predictor.curve_points([np.array(4)], [np.array(2.5)], [np.array(1.0)])[0].loss == 2.5
    with pytest.raises(modelcast.InvalidArgumentError, match=r"loss\[0\] must be a real number, not ndarray"):
        predictor.curve_points([0], [np.array(1 + 2j)])


def test_curve_points_take_a_loss_as_torch_computes_it():
    torch = pytest.importorskip("torch")
    point = predictor.curve_points([torch.tensor(30)], [torch.tensor(0.25)], [torch.tensor(1.5)])[0]
    assert (point.step, point.loss, point.time_s) == (30, 0.25, 1.5)


def test_online_options_refuse_an_unknown_work_mode():
    with pytest.raises(modelcast.InvalidArgumentError, match="work_mode"):
        predictor.online_options(600, 200, 0.5, 0.2, work_mode="sometimes")


def test_plan_and_online_options_refuse_wrong_types_naming_the_argument():
    # Each was a TypeError or AttributeError naming nothing (pybind11's "incompatible function
    # arguments", "'tuple' object has no attribute 'step'"), against the documented
    # InvalidArgumentError.
    costs = predictor.PublishCosts(stall_s=0.5, delivery_s=0.2)
    points = curve()
    refused = {
        "plan\\(\\): points must be a sequence, not NoneType": lambda: predictor.plan(None, 200, 600, costs),
        "plan\\(\\): points\\[0\\] must be a CurvePoint, not tuple": lambda: predictor.plan([(0, 1.0)], 200, 600, costs),
        "plan\\(\\): costs must be a PublishCosts, not NoneType": lambda: predictor.plan(points, 200, 600, None),
        "plan\\(\\): reference must be a ReferenceCurve or None, not str":
            lambda: predictor.plan(points, 200, 600, costs, reference="run.csv"),
        "plan\\(\\): lr_schedule must be a LrSchedule or None, not list":
            lambda: predictor.plan(points, 200, 600, costs, lr_schedule=[1.0]),
        "online_options\\(\\): delivery_s must be a real number, not NoneType":
            lambda: predictor.online_options(600, 200, 0.5, None),
        "online_options\\(\\): option 'refit_growth' takes float, not str \\('x'\\)":
            lambda: predictor.online_options(600, 200, 0.5, 0.2, refit_growth="x"),
        "curve_points\\(\\): steps must be a sequence, not generator":
            lambda: predictor.curve_points((s for s in [0, 1]), [1.0, 0.5]),
    }
    for words, call in refused.items():
        with pytest.raises(modelcast.InvalidArgumentError, match=words):
            call()


def test_plan_refuses_what_the_tool_refuses():
    # A clock that stands still before the warm-up, and an empty window: the tool refused both,
    # plan() returned no publishes.
    costs = predictor.PublishCosts(stall_s=0.5, delivery_s=0.2)
    stopped = predictor.curve_points([0, 10, 20, 30], [1.0, 0.9, 0.8, 0.7], [5.0, 5.0, 5.0, 5.0])
    with pytest.raises(modelcast.InvalidArgumentError,
                       match=r"time_s does not advance before the warm-up step \(5 s at step 0, 5 s at step 30\)"):
        predictor.plan(stopped, 30, 1000, costs)
    with pytest.raises(modelcast.InvalidArgumentError, match="window must be finite and > 0"):
        predictor.plan(curve(), 200, 600, predictor.PublishCosts(stall_s=0.5, delivery_s=0.2, window_s=0.0))


def test_plan_refuses_points_without_times_or_out_of_order_saying_so():
    costs = predictor.PublishCosts(stall_s=0.5, delivery_s=0.2)
    # curve_points takes time_s as optional; the planner said "non-finite loss or time at step 0".
    untimed = predictor.curve_points([0, 10, 20, 30], [1.0, 0.9, 0.8, 0.7])
    with pytest.raises(modelcast.InvalidArgumentError, match="the point at step 0 has no time"):
        predictor.plan(untimed, 30, 1000, costs)
    # Said "warm-up step 20 is not a logged step" of a logged step.
    shuffled = predictor.curve_points([0, 20, 10, 30], [1.0, 0.9, 0.8, 0.7], [0, 1, 2, 3])
    with pytest.raises(modelcast.InvalidArgumentError, match=r"points\[2\] \(step 10\) does not come after"):
        predictor.plan(shuffled, 20, 1000, costs)
