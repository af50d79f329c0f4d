#!/usr/bin/env python3
"""A publish rule without a forecast, replayed on the development runs and scored as the
harness scores the online scheduler (20 % warm-up, stall c = 0.5 / 2 / 8 x the run's median
time between logged points, delivery c / 2, regret against the exact optimum on the logged
curve, runs without a gain left out). A record of an experiment that was not kept
(bench/RESULTS.md, "Tried in this round and not kept"); nothing in the build uses it.

The rule: publish at a point that is a new low since the last publish, once the wall time since
that publish is at least alpha * sqrt(c * T), T the time left in the window (the run's length
taken from its time per step so far). sqrt(c * T) is the best fixed interval for a loss that
falls at a constant rate: between publishes the served version lags by about s * (interval / 2
+ c + d), and each publish delays every later one by c, which costs about s * c * T / 2, so the
total over T is least at interval = sqrt(c * T), whatever the rate s.

Usage (the Python bindings built, e.g. PYTHONPATH=build/python):
  bench/predictor/experiments/interval_rule.py [--held-out] ALPHA...
The held-out families are read only with --held-out.
"""
import argparse
import collections
import csv
import math
import os

from modelcast import predictor as p

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data")


def load(path, family=None, cap=24):
    """Runs of a curves CSV as (name, family, total_steps, [(step, loss, time)]), at most `cap` per
    family in file order (the harness's --max-runs-per-family takes the first as well)."""
    runs = collections.OrderedDict()
    with open(path) as f:
        for row in csv.DictReader(f):
            run = runs.setdefault(row["run"], [family or row["track"], int(row["total_steps"]), []])
            run[2].append((int(row["step"]), float(row["val_loss"]), float(row["train_time_s"])))
    kept, per_family = [], collections.Counter()
    for name, (family_name, total, points) in runs.items():
        if per_family[family_name] < cap:
            per_family[family_name] += 1
            kept.append((name, family_name, total, points))
    return kept


def interval_rule(steps, loss, times, w, stall, delivery, total, alpha):
    published, served, lowest, since = [], loss[w], loss[w], times[w]
    for i in range(w + 1, len(steps)):
        wall = times[i] + stall * len(published)
        new_low = loss[i] < lowest
        lowest = min(lowest, loss[i])
        if not (new_low and loss[i] < served):
            continue
        per_step = (times[i] - times[0]) / max(1, steps[i] - steps[0])
        window_end = times[w] + (times[i] + per_step * (total - steps[i]) - times[w])
        left = window_end - wall
        if left > stall + delivery and wall - since >= alpha * math.sqrt(stall * left):
            published.append(steps[i])
            served, since = loss[i], wall + stall
    return published


def quantile(values, q):
    values = sorted(values)
    at = q * (len(values) - 1)
    low = int(math.floor(at))
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (at - low)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("alpha", type=float, nargs="+")
    parser.add_argument("--held-out", action="store_true", help="score the held-out families instead")
    args = parser.parse_args()
    if args.held_out:
        runs = load(os.path.join(DATA, "curves", "heldout_val_loss.csv"))
    else:
        runs = (load(os.path.join(DATA, "curves", "dev_val_loss.csv")) +
                load(os.path.join(DATA, "curves", "stdlib_val_loss.csv")) +
                load(os.path.join(DATA, "nanogpt_val_loss.csv"), "nanogpt"))
    multiples = (0.5, 2.0, 8.0)
    for alpha in args.alpha:
        regrets = {m: [] for m in multiples}
        for _, _, total, points in runs:
            steps, loss, times = ([q[i] for q in points] for i in range(3))
            k = max(2, math.ceil(0.2 * len(points)))
            if k + 2 > len(points):
                continue
            w = k - 1
            truth = p.Trajectory(steps, loss, times)
            gaps = sorted(b - a for a, b in zip(times, times[1:]))
            gap = gaps[len(gaps) // 2]
            for m in multiples:
                costs = p.PublishCosts(stall_s=m * gap, delivery_s=0.5 * m * gap)
                best = p.plan_optimal(truth, w, costs).cil
                none = p.evaluate_cil(truth, w, costs, [])
                if not none - best > 1e-9 * none:
                    continue
                schedule = interval_rule(steps, loss, times, w, costs.stall_s, costs.delivery_s,
                                         max(total, steps[-1]), alpha)
                regrets[m].append(100.0 * (p.evaluate_cil(truth, w, costs, schedule) - best) / (none - best))
        print(f"alpha {alpha}: " + ", ".join(
            f"{m:g}x {quantile(r, 0.5):.2f} / {quantile(r, 0.9):.2f} % ({len(r)} runs)" for m, r in regrets.items()))


if __name__ == "__main__":
    main()
