#!/usr/bin/env python3
"""Report of the simulation-coupled workflow: reads what run_workflow.sh left in --dir
(seed*/run*/{live,replay}/<policy>/{server.csv,trainer.json}) and prints, per mode, seed and
policy, the medians over runs of the cumulative inference loss (sum of the per-request losses),
the training slowdown and the publishes; as a table or JSON rows; writes an SVG plot of the
served model's loss over time with publish marks (replay, first seed, first run).

--check: exit 1 unless online's cumulative inference loss is not above every_epoch's on every
seed, compared in the replay (same training for both; live runs differ also by the machine's
load during each run) when there is one, else live.
Standard library only."""
import argparse
import csv
import json
import math
import pathlib
import statistics
import sys

POLICIES = ["online", "every_epoch", "every_n", "viper_fixed", "viper_greedy"]
COLOURS = {"online": "#d62728", "every_epoch": "#1f77b4", "every_n": "#2ca02c",
           "viper_fixed": "#9467bd", "viper_greedy": "#ff7f0e"}


def load_run(path):
    """One trainer + server run: the server's per-request rows and the trainer's summary."""
    server = path / "server.csv"
    trainer = path / "trainer.json"
    for f in (server, trainer):
        if not f.is_file():
            sys.exit(f"report.py: missing {f} (did the run fail?)")
    with server.open() as f:
        try:
            rows = [{"time_s": float(r["time_s"]), "version": int(r["version"]), "step": int(r["step"]),
                     "loss": float(r["loss"])} for r in csv.DictReader(f)]
        except (KeyError, TypeError, ValueError) as e:  # a cut or foreign row: name the file
            sys.exit(f"report.py: {server}: unreadable request row ({type(e).__name__}: {e})")
    if not rows:
        sys.exit(f"report.py: {server} has no requests")
    try:
        summary = json.loads(trainer.read_text())
    except ValueError as e:
        sys.exit(f"report.py: {trainer}: not JSON ({e})")
    return {"rows": rows, "summary": summary, "cil": sum(r["loss"] for r in rows)}


def collect(root, seeds=None):
    """Every run under root (seeds: only those seed numbers). Directories other than seed<N> are
    passed over (a copy such as seed1.bak is not a seed)."""
    runs = {}  # (mode, seed, policy) -> [run, ...]
    for seed_dir in sorted(root.glob("seed*")):
        if not seed_dir.name[4:].isdigit():
            continue
        seed = int(seed_dir.name[4:])
        if seeds is not None and seed not in seeds:
            continue
        # run<N> only, as seed<N> above: a copy such as run1.bak ended the report in a traceback.
        run_dirs = [p for p in seed_dir.glob("run*") if p.name[3:].isdigit()]
        for run_dir in sorted(run_dirs, key=lambda p: int(p.name[3:])):
            for mode in ("live", "replay"):
                if not (run_dir / mode).is_dir():
                    continue
                for policy_dir in sorted((run_dir / mode).iterdir()):
                    if policy_dir.name not in POLICIES:
                        sys.exit(f"report.py: unknown policy directory {policy_dir}")
                    runs.setdefault((mode, seed, policy_dir.name), []).append(load_run(policy_dir))
    if not runs:
        sys.exit(f"report.py: no runs under {root}" + (f" for seeds {sorted(seeds)}" if seeds else ""))
    # Every policy of a seed and mode serves the same requests: a server log cut short would
    # otherwise lower that policy's CIL (a sum over requests) and pass --check.
    served = {}  # (mode, seed) -> the request counts of its runs
    for (mode, seed, _), group in runs.items():
        served.setdefault((mode, seed), set()).update(len(r["rows"]) for r in group)
    for (mode, seed), counts in sorted(served.items()):
        if len(counts) > 1:
            sys.exit(f"report.py: {mode} runs of seed {seed} served different numbers of requests "
                     f"({sorted(counts)}): a server log was cut short, or runs of other settings are mixed")
    return runs


def rows_of(runs):
    out = []
    for (mode, seed, policy), group in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1], POLICIES.index(kv[0][2]))):
        med = lambda f: statistics.median(f(r) for r in group)
        out.append({
            "mode": mode, "seed": seed, "schedule": policy, "runs": len(group),
            "requests": len(group[0]["rows"]),
            "cil": round(med(lambda r: r["cil"]), 4),
            "mean_inference_loss": round(med(lambda r: r["cil"] / len(r["rows"])), 6),
            "slowdown_pct": round(med(lambda r: r["summary"]["training_slowdown_pct"]), 3),
            "publishes": med(lambda r: r["summary"]["publishes"]),  # 36.5 of 36 and 37, not 36
            "stall_s": round(med(lambda r: r["summary"]["stall_s"]), 5),
            "decide_s": round(med(lambda r: r["summary"]["decide_s"]), 4),
            "train_s": round(med(lambda r: r["summary"]["train_s"]), 3),
            # null in trainer.json for a diverged run (NaN): the median of the others, or null.
            "final_val_loss": statistics.median(finite) if (finite := [r["summary"]["final_val_loss"] for r in group
                                                                       if r["summary"]["final_val_loss"] is not None])
                              else None,
        })
    return out


def smooth(values, width):
    """Running mean over `width` values, of the finite ones among them (NaN where there is none):
    one NaN request loss (a diverged model) made every later mean NaN."""
    out, acc, count = [], 0.0, 0
    for i, v in enumerate(values):
        if math.isfinite(v):
            acc, count = acc + v, count + 1
        if i >= width and math.isfinite(values[i - width]):
            acc, count = acc - values[i - width], count - 1
        out.append(acc / count if count else math.nan)
    return out


def write_svg(path, runs):
    """Served loss (running mean over 1 s of requests, log scale) against the server's time, one
    line per policy, and a row of ticks per policy where a new version began to be served."""
    mode = "replay" if any(k[0] == "replay" for k in runs) else "live"
    seed = min(s for m, s, _ in runs if m == mode)
    lines = {p: runs[(mode, seed, p)][0]["rows"] for p in POLICIES if (mode, seed, p) in runs}
    # The lane labels stand right-aligned left of the axis: the margin holds the longest one
    # (about 6 px a character at font size 10), or "viper_greedy" is cut at the left edge.
    left = max(70, 12 + 6 * max(len(p) for p in lines))
    width, height, right, top, bottom = 900, 520, 170, 40, 60 + 14 * len(lines)
    t_max = max(r[-1]["time_s"] for r in lines.values())
    per_second = lambda rows: max(1, round(len(rows) / max(rows[-1]["time_s"], 1e-9)))  # requests in 1 s
    series = {p: ([r["time_s"] for r in rows], smooth([r["loss"] for r in rows], per_second(rows)))
              for p, rows in lines.items()}
    # On a log scale only finite losses above 0 can be drawn (a diverged run's NaN, and any loss
    # of 0 or below, are left out of the lines); with none at all, the axes alone.
    drawable = lambda v: math.isfinite(v) and v > 0
    shown = [v for _, y in series.values() for v in y if drawable(v)] or [1.0]
    lo, hi = min(shown), max(shown)
    llo, lhi = math.log10(lo), math.log10(hi)
    plot_h = height - top - bottom
    X = lambda t: left + (width - left - right) * t / t_max
    Y = lambda v: top + plot_h * (lhi - math.log10(v)) / max(lhi - llo, 1e-9)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14">Served surrogate loss per request (running mean over 1 s, log scale), {mode}, seed {seed}</text>',
           f'<line x1="{left}" y1="{top + plot_h}" x2="{width - right}" y2="{top + plot_h}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="black"/>']
    for k in range(int(math.floor(llo)), int(math.ceil(lhi)) + 1):
        for m in (1, 2, 5):
            v = m * 10 ** k
            if lo <= v <= hi:
                out.append(f'<line x1="{left - 4}" y1="{Y(v):.1f}" x2="{width - right}" y2="{Y(v):.1f}" stroke="#ddd"/>')
                out.append(f'<text x="{left - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    step = max(1, round(t_max / 10))
    for t in range(0, int(t_max) + 1, step):
        out.append(f'<text x="{X(t):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{t}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{top + plot_h + 32}" text-anchor="middle">server time since the warm-up version (s)</text>')
    for i, (p, (xs, ys)) in enumerate(series.items()):
        # One polyline per run of drawable points: a line across what cannot be drawn would show
        # losses nobody served.
        segments, segment = [], []
        for x, y in zip(xs[::5], ys[::5]):
            if drawable(y):
                segment.append(f"{X(x):.1f},{Y(y):.1f}")
            elif segment:
                segments.append(segment)
                segment = []
        if segment:
            segments.append(segment)
        for pts in segments:
            out.append(f'<polyline fill="none" stroke="{COLOURS[p]}" stroke-width="1.5" points="{" ".join(pts)}"/>')
        out.append(f'<text x="{width - right + 10}" y="{top + 14 + 16 * i}" fill="{COLOURS[p]}">{p}</text>')
        row_y = top + plot_h + 44 + 14 * i
        out.append(f'<text x="{left - 6}" y="{row_y + 4}" text-anchor="end" fill="{COLOURS[p]}" font-size="10">{p}</text>')
        prev = None
        for r in lines[p]:
            if r["version"] != prev:
                out.append(f'<line x1="{X(r["time_s"]):.1f}" y1="{row_y - 5}" x2="{X(r["time_s"]):.1f}" y2="{row_y + 5}" stroke="{COLOURS[p]}"/>')
                prev = r["version"]
    out.append("</svg>")
    pathlib.Path(path).write_text("\n".join(out) + "\n")


def replay_costs(live_dir):
    """What the replay charges (run_workflow.sh): the median over the live runs of each one's median
    publish stall and delivery time, and the online run's decision time (-1 without one)."""
    runs = []
    for path in sorted(pathlib.Path(live_dir).glob("*/trainer.json")):
        try:
            runs.append(json.loads(path.read_text()))
        except ValueError as e:
            sys.exit(f"report.py: {path}: not JSON ({e})")
    if not runs:
        sys.exit(f"report.py: no */trainer.json under {live_dir}")
    online = [r["decide_s"] for r in runs if r["policy"] == "online"]
    # A policy that published nothing after warm-up has no stall median (null): counted as 0 s it
    # pulled the median down. With none at all, the warm-up publishes' stalls.
    stalls = [r["stall_median_s"] for r in runs if r["stall_median_s"] is not None] or [r["warmup_stall_s"] for r in runs]
    return statistics.median(stalls), statistics.median(r["delivery_median_s"] for r in runs), online[0] if online else -1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=pathlib.Path)
    ap.add_argument("--replay-costs", metavar="LIVE_DIR",
                    help="print the stall, delivery and online decision seconds the replay charges, from "
                         "LIVE_DIR/<policy>/trainer.json, and exit")
    ap.add_argument("--svg")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--seeds", help="report only these seeds (comma-separated; default: every seed<N> under --dir)")
    args = ap.parse_args()
    if args.replay_costs:
        print(*replay_costs(args.replay_costs))
        return
    if args.dir is None:
        ap.error("--dir is required")
    seeds = None
    if args.seeds:
        try:
            seeds = {int(x) for x in args.seeds.split(",")}
        except ValueError:
            ap.error(f"--seeds: expected numbers separated by commas, got {args.seeds!r}")
    runs = collect(args.dir, seeds)
    rows = rows_of(runs)
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(f"{'mode':<6} {'seed':>4} {'policy':<13} {'runs':>4} {'CIL':>10} {'mean loss':>10} {'slowdown %':>10} "
              f"{'publishes':>9} {'stall s':>8} {'decide s':>8} {'train s':>8}")
        for r in rows:
            print(f"{r['mode']:<6} {r['seed']:>4} {r['schedule']:<13} {r['runs']:>4} {r['cil']:>10.3f} "
                  f"{r['mean_inference_loss']:>10.5f} {r['slowdown_pct']:>10.3f} {r['publishes']:>9g} "
                  f"{r['stall_s']:>8.4f} {r['decide_s']:>8.3f} {r['train_s']:>8.2f}")
    if args.svg:
        try:
            write_svg(args.svg, runs)
        except OSError as e:  # a traceback named the line of this script, not the path's problem
            sys.exit(f"report.py: cannot write --svg {args.svg}: {e.strerror}")
    if args.check:
        mode = "replay" if any(r["mode"] == "replay" for r in rows) else "live"
        by = {(r["seed"], r["schedule"]): r for r in rows if r["mode"] == mode}
        seeds = sorted({s for s, _ in by})
        failed = False
        for s in seeds:
            if (s, "online") not in by or (s, "every_epoch") not in by:
                sys.exit(f"report.py: --check needs online and every_epoch runs for seed {s}")
            on, ep = by[(s, "online")], by[(s, "every_epoch")]
            ok = on["cil"] <= ep["cil"]
            print(f"check ({mode}) seed {s}: online CIL {on['cil']} "
                  f"{'<=' if ok else '>'} every_epoch CIL {ep['cil']}", file=sys.stderr)
            failed |= not ok
        if failed:
            sys.exit(1)


if __name__ == "__main__":
    main()
