#!/usr/bin/env python3
"""Does the online scheduler decide the same when every loss of a run carries a constant?

Replays every run of a curves file (bench/data/curves/README.md) with `modelcast-tune replay` at
publish costs 0.5, 2 and 8 times the run's median logging interval (update latency half of it,
warm-up at 20 % of the points, as `bench/run.sh predictor`), once per variant of its losses:

  plain          the logged loss
  +1000 floor    the loss + 1000, with --loss-floor 1000 (should decide as plain)
  +1000 none     the loss + 1000, with --loss-floor none
  plain none     the logged loss, with --loss-floor none (should decide as "+1000 none")
  -50            the loss - 50 (no floor by default: should decide as "-5000")
  -5000          the loss - 5000
  +1000          the loss + 1000 with the default floor (0: the case the option exists for)

and prints the median and p90 regret (% of the achievable gain lost) per variant and cost.
Usage: loss_offsets.py MODELCAST_TUNE CURVES.csv [--json]
"""
import collections
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

VARIANTS = [("plain", 0.0, []), ("+1000 floor", 1000.0, ["--loss-floor", "1000"]),
            ("+1000 none", 1000.0, ["--loss-floor", "none"]), ("plain none", 0.0, ["--loss-floor", "none"]),
            ("-50", -50.0, []), ("-5000", -5000.0, []), ("+1000", 1000.0, [])]
COSTS = (0.5, 2.0, 8.0)


def quantile(values, q):
    values = sorted(values)
    return values[int(q * (len(values) - 1))]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    tune, path = sys.argv[1], sys.argv[2]
    runs = collections.OrderedDict()
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            runs.setdefault(row["run"], []).append(row)
    regrets = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as scratch:
        for run_id, points in runs.items():
            times = [float(p["train_time_s"]) for p in points]
            interval = statistics.median(b - a for a, b in zip(times, times[1:]))
            warmup = points[max(0, int(0.2 * len(points)) - 1)]["step"]
            for name, offset, extra in VARIANTS:
                log = os.path.join(scratch, "log.csv")
                with open(log, "w") as out:
                    out.write("step,loss,time_s\n")
                    for p in points:
                        out.write(f"{p['step']},{float(p['val_loss']) + offset!r},{p['train_time_s']}\n")
                for cost in COSTS:
                    c = cost * interval
                    done = subprocess.run([tune, "replay", "--log", log, "--publish-cost", repr(c), "--update-latency",
                                           repr(c / 2), "--warmup-steps", warmup, "--json"] + extra,
                                          capture_output=True, text=True)
                    if done.returncode != 0:
                        print(f"{run_id} {name} {cost}x: {done.stderr.strip()[:160]}", file=sys.stderr)
                        continue
                    regret = json.loads(done.stdout)["regret_pct"]
                    if regret is not None:  # runs without a gain are left out, as in the harness
                        regrets[(name, cost)].append(regret)
    rows = []
    for cost in COSTS:
        for name, _, _ in VARIANTS:
            r = regrets[(name, cost)]
            if r:
                rows.append({"variant": name, "cost": cost, "runs": len(r), "median": statistics.median(r),
                             "p90": quantile(r, 0.9)})
    if "--json" in sys.argv:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'cost':>5} {'variant':<12} {'runs':>4} {'median':>7} {'p90':>7}")
    for row in rows:
        print(f"{row['cost']:>4}x {row['variant']:<12} {row['runs']:>4} {row['median']:>7.2f} {row['p90']:>7.2f}")


if __name__ == "__main__":
    main()
