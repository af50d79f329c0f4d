"""Choosing when to publish: loss-curve forecasting, exact planning and the online scheduler.

The functions and types of ``modelcast::predictor`` (include/modelcast/predictor_*.h) that a
training script or a tuning notebook uses are here under the same names: forecasting, the exact
planner, the baselines, evaluate_cil, the online scheduler. The hedging layer's own parts
(HedgeOptions, plan_hedged, regret_spread, explain_plan), Viper's rules (viper_fixed_interval,
viper_drop_threshold, viper_greedy; forecast_viper is bound) and the
OnlineOptions fields hedge, hindsight_check and band_trigger_width are not bound: plan() and the
scheduler use them with their defaults. :func:`plan` and :func:`online_options` are conveniences
on top.
"""

import collections
import math

from ._core.predictor import (CurvePoint, Forecast, ForecastMember, ForecastOptions, LossLog, LrSchedule,
                              OnlineOptions, OnlineScheduler, OnlineStats, PlanChoiceReport, PublishCosts, ReferenceCurve,
                              ScheduleResult, Trajectory, every_candidate_schedule, every_n_steps_schedule,
                              evaluate_cil, extend_with_forecast, fixed_interval_schedule, forecast_curve,
                              forecast_viper, plan_from, plan_optimal, plan_prefix, read_loss_log_file, snap_to_candidates,
                              threshold_schedule, trajectory_of, validate_problem)
from ._service import INT64, integer, real, set_option
from .errors import InvalidArgumentError

Plan = collections.namedtuple("Plan", "publish_steps cil slowdown_s forecast curve warmup_index expected_cil point_forecast "
                                       "choice")


def _sequence(name, values):
    """``values`` as a list when it is a sized, ordered collection; InvalidArgumentError naming
    ``name`` otherwise (len() or iteration raised a TypeError naming nothing)."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__") or not hasattr(values, "__iter__"):
        raise InvalidArgumentError(f"{name} must be a sequence, not {type(values).__name__}")
    return list(values)


def _instance(name, value, kind, none_ok=False):
    """``value`` when it is a ``kind`` (or None, if allowed); InvalidArgumentError naming ``name`` otherwise."""
    if (value is None and none_ok) or isinstance(value, kind):
        return value
    raise InvalidArgumentError(f"{name} must be a {kind.__name__}{' or None' if none_ok else ''}, "
                               f"not {type(value).__name__}")


def curve_points(steps, loss, time_s=None):
    """CurvePoints from parallel sequences (time_s optional: NaN when unknown)."""
    steps = _sequence("curve_points(): steps", steps)
    loss = _sequence("curve_points(): loss", loss)
    time_s = [math.nan] * len(steps) if time_s is None else _sequence("curve_points(): time_s", time_s)
    if not len(steps) == len(loss) == len(time_s):
        raise InvalidArgumentError(f"steps, loss and time_s differ in length ({len(steps)}, {len(loss)}, {len(time_s)})")
    return [CurvePoint(integer(f"steps[{i}]", s, *INT64), real(f"loss[{i}]", l), real(f"time_s[{i}]", t))
            for i, (s, l, t) in enumerate(zip(steps, loss, time_s))]


def plan(points, warmup_step, total_steps, costs, *, reference=None, lr_schedule=None, loss_floor=None):
    """The publish plan ``modelcast-tune plan`` makes, through the same library call (plan_prefix):
    forecast the run from the points logged up to ``warmup_step`` (inference starts from the last
    of them, as the tool's ``--warmup-steps`` takes it; ``warmup_index`` says which) until
    ``total_steps``, turn the forecast into weighted scenarios (hedge), and
    take the schedule with the lowest expected cumulative inference loss over them under ``costs``
    (a PublishCosts), unless the best evenly spaced schedule does at least as well in most of them.

    Returns a Plan: publish_steps, cil (on ``curve``, the tool's "predicted CIL"), slowdown_s,
    forecast (the scenarios' expected path the plan is made on), curve (the points up to the
    warm-up step, then that forecast), warmup_index, expected_cil (over the scenarios, the tool's
    ``expected_cil``; equal to cil unless the time axis is in doubt), point_forecast (the
    forecast before hedging) and choice (a PlanChoiceReport, the tool's ``choice``: whether the plan
    departs from the best evenly spaced schedule, by how much and how surely, and why). Pure;
    raises InvalidArgumentError naming the argument for a wrong type, points whose steps do not
    increase or that lack a time (the costs are in seconds), a warm-up step before the first logged
    step or after the last, fewer than 2 points up to it, or total_steps not beyond the warm-up.
    ``loss_floor``: the lowest loss the run can reach (ForecastOptions.loss_floor, the tool's
    ``--loss-floor``); None: 0 when every loss is positive, else none; -math.inf: none.
    """
    points = _sequence("plan(): points", points)
    for i, point in enumerate(points):
        _instance(f"plan(): points[{i}]", point, CurvePoint)
        if i > 0 and point.step <= points[i - 1].step:
            raise InvalidArgumentError(f"plan(): points[{i}] (step {point.step}) does not come after points[{i - 1}] "
                                       f"(step {points[i - 1].step}): steps must increase")
    warmup_step = integer("warmup_step", warmup_step, *INT64)
    total_steps = integer("total_steps", total_steps, *INT64)
    _instance("plan(): costs", costs, PublishCosts)
    _instance("plan(): reference", reference, ReferenceCurve, none_ok=True)
    _instance("plan(): lr_schedule", lr_schedule, LrSchedule, none_ok=True)
    prefix = [p for p in points if p.step <= warmup_step]
    # The planner's own refusal named a "non-finite loss or time at step 0", for a finite loss.
    for point in prefix:
        if not math.isfinite(point.time_s):
            raise InvalidArgumentError(f"plan(): the point at step {point.step} has no time (time_s {point.time_s}): "
                                       f"a plan needs the training time of every point up to the warm-up, as "
                                       f"its costs are in seconds")
    # An unlogged warm-up step means the last point logged before it, as in the tool: a round
    # number of steps (a fifth of the run) rarely falls on an evaluation.
    if not prefix:
        first = f" {points[0].step}" if points else " (none was logged)"
        raise InvalidArgumentError(f"warm-up step {warmup_step} is before the first logged step{first}")
    # As the tool: the last point instead would plan a warm-up the caller did not ask for.
    if warmup_step > points[-1].step:
        raise InvalidArgumentError(f"warm-up step {warmup_step} is beyond the points, which end at step "
                                   f"{points[-1].step} ({len(points)} points)")
    if len(prefix) < 2:
        raise InvalidArgumentError("too few points up to the warm-up step (need at least 2)")
    if total_steps <= prefix[-1].step:
        raise InvalidArgumentError(f"total_steps ({total_steps}) must exceed the warm-up step ({prefix[-1].step})")
    options = ForecastOptions()
    options.total_steps = total_steps
    options.reference = reference
    options.lr_schedule = lr_schedule
    if loss_floor is not None:
        options.loss_floor = real("plan(): loss_floor", loss_floor)
    planned = plan_prefix(prefix, options, costs)
    forecast = planned.forecast
    curve = extend_with_forecast(prefix, forecast)
    steps = planned.plan.publish_steps
    cil = evaluate_cil(curve, len(prefix) - 1, costs, steps)
    return Plan(steps, cil, planned.plan.slowdown_s, forecast, curve, len(prefix) - 1, planned.plan.cil,
                planned.point_forecast, planned.choice)


def online_options(total_steps, warmup_step, stall_s, delivery_s, request_rate=1.0, loss_floor=None, **settings):
    """OnlineOptions for a run of ``total_steps`` serving from ``warmup_step`` on, with a publish stall
    and delivery latency in seconds; ``loss_floor`` as in plan(); ``settings`` sets further
    OnlineOptions fields by name (InvalidArgumentError naming it for an unknown one, or a value of
    the wrong type: a switch takes True or False, a number no bool)."""
    options = OnlineOptions()
    forecast = options.forecast
    forecast.total_steps = integer("total_steps", total_steps, *INT64)
    if loss_floor is not None:
        forecast.loss_floor = real("online_options(): loss_floor", loss_floor)
    options.forecast = forecast
    options.costs = PublishCosts(stall_s=real("online_options(): stall_s", stall_s),
                                 delivery_s=real("online_options(): delivery_s", delivery_s),
                                 request_rate=real("online_options(): request_rate", request_rate))
    options.warmup_step = integer("warmup_step", warmup_step, *INT64)
    # The Producer's and Consumer's checks: pybind11 took reuse_plans=None as False and
    # max_candidates=False as 0.
    for key, value in settings.items():
        set_option(options, key, value, "online_options()")
    return options
