"""Choosing when to publish: loss-curve forecasting, exact planning and the online scheduler.

Everything from ``modelcast::predictor`` (see include/modelcast/predictor_*.h) is here under
the same names; :func:`plan` and :func:`online_options` are conveniences on top.
"""

import collections
import math

from ._core.predictor import (CurvePoint, Forecast, ForecastMember, ForecastOptions, LossLog, LrSchedule,
                              OnlineOptions, OnlineScheduler, OnlineStats, PublishCosts, ReferenceCurve,
                              ScheduleResult, Trajectory, every_candidate_schedule, every_n_steps_schedule,
                              evaluate_cil, extend_with_forecast, fixed_interval_schedule, forecast_curve,
                              forecast_viper, plan_from, plan_optimal, plan_prefix, read_loss_log_file, snap_to_candidates,
                              threshold_schedule, trajectory_of, validate_problem)
from ._service import INT64, integer, real
from .errors import InvalidArgumentError

Plan = collections.namedtuple("Plan", "publish_steps cil slowdown_s forecast curve warmup_index expected_cil point_forecast")


def curve_points(steps, loss, time_s=None):
    """CurvePoints from parallel sequences (time_s optional: NaN when unknown)."""
    if time_s is None:
        time_s = [math.nan] * len(steps)
    if not len(steps) == len(loss) == len(time_s):
        raise InvalidArgumentError(f"steps, loss and time_s differ in length ({len(steps)}, {len(loss)}, {len(time_s)})")
    return [CurvePoint(integer(f"steps[{i}]", s, *INT64), real(f"loss[{i}]", l), real(f"time_s[{i}]", t))
            for i, (s, l, t) in enumerate(zip(steps, loss, time_s))]


def plan(points, warmup_step, total_steps, costs, *, reference=None, lr_schedule=None):
    """The publish plan ``modelcast-tune plan`` makes, through the same library call (plan_prefix):
    forecast the run from the points logged up to ``warmup_step`` (a logged step: inference starts
    when it completes) until ``total_steps``, turn the forecast into weighted scenarios (hedge), and
    take the schedule with the lowest expected cumulative inference loss over them under ``costs``
    (a PublishCosts).

    Returns a Plan: publish_steps, cil (on ``curve``, the tool's "predicted CIL"), slowdown_s,
    forecast (the scenarios' expected path the plan is made on), curve (the points up to the
    warm-up step, then that forecast), warmup_index, expected_cil (over the scenarios, the tool's
    ``expected_cil``; equal to cil unless the time axis is in doubt) and point_forecast (the
    forecast before hedging). Pure; raises InvalidArgumentError for a warm-up step that was not
    logged, fewer than 2 points up to it, or total_steps not beyond it.
    """
    warmup_step = integer("warmup_step", warmup_step, *INT64)
    total_steps = integer("total_steps", total_steps, *INT64)
    prefix = [p for p in points if p.step <= warmup_step]
    if not prefix or prefix[-1].step != warmup_step:
        raise InvalidArgumentError(f"warm-up step {warmup_step} is not a logged step")
    if len(prefix) < 2:
        raise InvalidArgumentError("too few points up to the warm-up step (need at least 2)")
    if total_steps <= warmup_step:
        raise InvalidArgumentError(f"total_steps ({total_steps}) must exceed the warm-up step ({warmup_step})")
    options = ForecastOptions()
    options.total_steps = total_steps
    options.reference = reference
    options.lr_schedule = lr_schedule
    planned = plan_prefix(prefix, options, costs)
    forecast = planned.forecast
    curve = extend_with_forecast(prefix, forecast)
    steps = planned.plan.publish_steps
    cil = evaluate_cil(curve, len(prefix) - 1, costs, steps)
    return Plan(steps, cil, planned.plan.slowdown_s, forecast, curve, len(prefix) - 1, planned.plan.cil,
                planned.point_forecast)


def online_options(total_steps, warmup_step, stall_s, delivery_s, request_rate=1.0, **settings):
    """OnlineOptions for a run of ``total_steps`` serving from ``warmup_step`` on, with a publish stall
    and delivery latency in seconds; ``settings`` sets further OnlineOptions fields by name
    (InvalidArgumentError for an unknown one)."""
    options = OnlineOptions()
    forecast = options.forecast
    forecast.total_steps = integer("total_steps", total_steps, *INT64)
    options.forecast = forecast
    options.costs = PublishCosts(stall_s=stall_s, delivery_s=delivery_s, request_rate=request_rate)
    options.warmup_step = integer("warmup_step", warmup_step, *INT64)
    for key, value in settings.items():
        if key.startswith("_") or not hasattr(options, key):
            raise InvalidArgumentError(f"OnlineOptions has no field '{key}'")
        setattr(options, key, value)
    return options
