#!/usr/bin/env python3
"""Why Viper's rules publish what they publish in the simulation-coupled workflow: the forecast
they plan on, drawn against what the run did.

Viper (Ye et al., ICPP 2024) plans once, at warm-up, on its own forecast of the loss
(modelcast.predictor.forecast_viper: the lowest-MSE of its four fitted functions). Its greedy
rule publishes where that forecast falls below the last published loss by more than the mean +
standard deviation of the drops between consecutive warm-up losses; its fixed interval keeps the
interval with the lowest predicted CIL, "none" included. This script takes a workflow run's
evaluation log (every run of a seed trains the same way), redoes that forecast from the same
warm-up prefix, prints the numbers the rules compare, and draws an SVG: the logged validation
loss, the warm-up, the forecast, the last warm-up loss and the greedy threshold below it (linear
scale: Viper's functions may extrapolate below zero).

usage: PYTHONPATH=build/python bench/workflow_viper.py --eval-log DIR/eval.csv --warmup-step 600
           --total-steps 6000 [--svg OUT.svg] [--title TEXT]
"""

import argparse
import csv
import math
import pathlib
import statistics
import sys

from modelcast import predictor


def read_eval_log(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f)]
    if not rows:
        sys.exit(f"workflow_viper.py: {path} has no evaluations")
    return [(int(r["step"]), float(r["val_loss"])) for r in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval-log", required=True, help="a trainer's --eval-log CSV")
    ap.add_argument("--warmup-step", type=int, required=True)
    ap.add_argument("--total-steps", type=int, required=True)
    ap.add_argument("--svg")
    ap.add_argument("--title", default="")
    args = ap.parse_args()

    log = read_eval_log(args.eval_log)
    prefix = [(s, l) for s, l in log if s <= args.warmup_step]
    if not prefix or prefix[-1][0] != args.warmup_step:
        sys.exit(f"workflow_viper.py: step {args.warmup_step} was not logged in {args.eval_log}")
    if len(prefix) < 3:  # Viper's fit and the greedy threshold need two drops
        sys.exit(f"workflow_viper.py: {args.eval_log} logs {len(prefix)} points up to the warm-up step; at least 3 needed")
    eval_every = log[1][0] - log[0][0]
    options = predictor.ForecastOptions()
    options.total_steps = args.total_steps
    options.future_steps = list(range(args.warmup_step + eval_every, args.total_steps, eval_every)) + [args.total_steps]
    forecast = predictor.forecast_viper(predictor.curve_points([s for s, _ in prefix], [l for _, l in prefix]), options)

    # The greedy rule's threshold, as predictor/viper_rules.cpp computes it: drops between
    # consecutive warm-up losses (earlier minus later, from the first logged step), mean +
    # population sd.
    drops = [a - b for (_, a), (_, b) in zip(prefix, prefix[1:])]
    threshold = statistics.fmean(drops) + statistics.pstdev(drops)
    last = prefix[-1][1]
    lowest = min(forecast.loss)
    after = [l for s, l in log if s > args.warmup_step]
    print(f"forecast: {forecast.note}")
    print(f"last warm-up loss {last:.6g}; forecast's lowest after warm-up {lowest:.6g} "
          f"(fall {last - lowest:.6g}); greedy threshold (mean + sd of {len(drops)} warm-up drops) {threshold:.6g}")
    print(f"logged after warm-up: lowest {min(after):.6g}, last {after[-1]:.6g}; "
          f"the forecast's fall is {100 * (last - lowest) / threshold:.1f} % of the threshold")

    if not args.svg:
        return
    # Linear scale, from the warm-up's second half on: Viper's functions may extrapolate below
    # zero, which a log scale could not show.
    width, height, left, right, top, bottom = 900, 480, 80, 220, 40, 50
    first = args.warmup_step // 2
    shown = [(s, l) for s, l in log if s >= first]
    lo = min(0.0, lowest, last - threshold, min(l for _, l in shown))
    hi = max(l for _, l in shown)
    pad = 0.05 * (hi - lo)
    lo, hi = lo - pad, hi + pad
    plot_w, plot_h = width - left - right, height - top - bottom
    X = lambda s: left + plot_w * (s - first) / (args.total_steps - first)
    Y = lambda v: top + plot_h * (hi - min(max(v, lo), hi)) / (hi - lo)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14">{args.title or "Viper forecast at warm-up against the logged validation loss"}</text>',
           f'<rect x="{left}" y="{top}" width="{X(args.warmup_step) - left:.1f}" height="{plot_h}" fill="#f0f0f0"/>',
           f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="black"/>']
    tick = 10 ** math.floor(math.log10((hi - lo) / 5))
    tick *= 5 if (hi - lo) / tick > 25 else 2 if (hi - lo) / tick > 10 else 1
    for k in range(math.ceil(lo / tick), math.floor(hi / tick) + 1):
        v = k * tick
        colour = "#999" if k == 0 else "#ddd"
        out.append(f'<line x1="{left - 4}" y1="{Y(v):.1f}" x2="{left + plot_w}" y2="{Y(v):.1f}" stroke="{colour}"/>')
        out.append(f'<text x="{left - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    for s in range(0, args.total_steps + 1, max(1, args.total_steps // 10)):
        if s >= first:
            out.append(f'<text x="{X(s):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h + 34}" text-anchor="middle">training step (shaded: warm-up)</text>')
    series = [("logged validation loss", "#1f77b4", shown, ""),
              ("Viper forecast", "#d62728", list(zip(forecast.steps, forecast.loss)), ' stroke-dasharray="6,4"')]
    for i, (label, colour, points, dash) in enumerate(series):
        pts = " ".join(f"{X(s):.1f},{Y(l):.1f}" for s, l in points)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} points="{pts}"/>')
        out.append(f'<text x="{left + plot_w + 10}" y="{top + 14 + 18 * i}" fill="{colour}">{label}</text>')
    for i, (label, value, colour) in enumerate([("last warm-up loss", last, "#555"),
                                                ("minus greedy threshold", last - threshold, "#ff7f0e")]):
        out.append(f'<line x1="{X(args.warmup_step):.1f}" y1="{Y(value):.1f}" x2="{left + plot_w}" y2="{Y(value):.1f}" stroke="{colour}" stroke-dasharray="2,3"/>')
        out.append(f'<text x="{left + plot_w + 10}" y="{top + 50 + 18 * i}" fill="{colour}">{label} {value:.3g}</text>')
    out.append("</svg>")
    pathlib.Path(args.svg).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
