#!/usr/bin/env python3
"""report.py on made-up run directories: what it charges the replay, which seeds it reports, and
the inputs it refuses. usage: report_inputs_test.py PATH/TO/report.py (exit 0 when all hold)."""
import json
import pathlib
import subprocess
import sys
import tempfile

REPORT = sys.argv[1]


def report(*args):
    return subprocess.run([sys.executable, REPORT, *map(str, args)], capture_output=True, text=True)


def trainer_json(policy, stall_median, warmup_stall=0.0002, publishes=3, decide=0.01):
    return {"policy": policy, "seed": 1, "steps": 100, "epoch_steps": 10, "publishes": publishes, "train_s": 10.0,
            "stall_s": 0.001, "decide_s": decide, "training_slowdown_pct": 0.01, "final_val_loss": 0.5,
            "stall_median_s": stall_median, "warmup_stall_s": warmup_stall, "delivery_median_s": 0.002}


def write_run(directory, policy, requests, **summary):
    directory.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"{0.1 * i},1,100,0.5\n" for i in range(requests))
    (directory / "server.csv").write_text("time_s,version,step,loss\n" + rows)
    (directory / "trainer.json").write_text(json.dumps(trainer_json(policy, **summary)))


failures = []


def expect(condition, what):
    if not condition:
        failures.append(what)


with tempfile.TemporaryDirectory() as tmp:
    root = pathlib.Path(tmp)
    # The replay's stall: policies that published nothing after warm-up (null) are left out; they
    # counted as 0 s and pulled the median down to the smallest real stall.
    live = root / "costs/live"
    for policy, stall in [("online", 0.0003), ("every_epoch", 0.0005), ("every_n", 0.0004),
                          ("viper_fixed", None), ("viper_greedy", None)]:
        write_run(live / policy, policy, 10, stall_median=stall)
    r = report("--replay-costs", live)
    expect(r.returncode == 0 and r.stdout.split()[0] == "0.0004", f"replay stall: {r.stdout!r} {r.stderr!r}")
    expect(r.returncode == 0 and r.stdout.split()[2] == "0.01", f"online decide: {r.stdout!r}")
    # No policy published after warm-up: the warm-up stalls.
    none = root / "none/live"
    for policy in ("online", "every_epoch"):
        write_run(none / policy, policy, 10, stall_median=None, warmup_stall=0.0007)
    r = report("--replay-costs", none)
    expect(r.returncode == 0 and r.stdout.split()[0] == "0.0007", f"warm-up stall fallback: {r.stdout!r} {r.stderr!r}")

    # Seeds of an earlier invocation, and a copied directory, stay out of the report.
    runs = root / "runs"
    for seed in (1, 2):
        for policy in ("online", "every_epoch"):
            write_run(runs / f"seed{seed}/run1/live/{policy}", policy, 10, stall_median=0.0003)
    write_run(runs / "seed1.bak/run1/live/online", "online", 10, stall_median=0.0003)
    # A copied run directory too (it ended the report in a traceback: int('1.bak')).
    write_run(runs / "seed1/run1.bak/live/online", "online", 10, stall_median=0.0003)
    r = report("--dir", runs, "--seeds", "1", "--json")
    seeds = {json.loads(line)["seed"] for line in r.stdout.splitlines()}
    expect(r.returncode == 0 and seeds == {1}, f"--seeds 1 reported seeds {seeds}: {r.stderr!r}")
    r = report("--dir", runs, "--json")
    seeds = {json.loads(line)["seed"] for line in r.stdout.splitlines()}
    expect(r.returncode == 0 and seeds == {1, 2}, f"every seed: {seeds} {r.stderr!r}")

    # Publishes are a median, not its integer part (36 and 37 runs: 36.5).
    odd = root / "odd"
    write_run(odd / "seed1/run1/live/online", "online", 10, stall_median=0.0003, publishes=36)
    write_run(odd / "seed1/run2/live/online", "online", 10, stall_median=0.0003, publishes=37)
    r = report("--dir", odd, "--json")
    expect(r.returncode == 0 and json.loads(r.stdout.splitlines()[0])["publishes"] == 36.5, f"publishes: {r.stdout!r}")

    # A server log cut short (fewer requests than the other policy's) would lower its CIL.
    cut = root / "cut"
    write_run(cut / "seed1/run1/live/online", "online", 5, stall_median=0.0003)
    write_run(cut / "seed1/run1/live/every_epoch", "every_epoch", 10, stall_median=0.0003)
    r = report("--dir", cut, "--check")
    expect(r.returncode != 0 and "served different numbers of requests ([5, 10])" in r.stderr, f"cut log: {r.stderr!r}")

    # A truncated row and a broken summary are named, not a traceback.
    broken = root / "broken"
    write_run(broken / "seed1/run1/live/online", "online", 3, stall_median=0.0003)
    with (broken / "seed1/run1/live/online/server.csv").open("a") as f:
        f.write("0.9,1\n")
    r = report("--dir", broken)
    expect(r.returncode != 0 and "server.csv: unreadable request row" in r.stderr and "Traceback" not in r.stderr,
           f"truncated row: {r.stderr!r}")
    write_run(broken / "seed1/run1/live/online", "online", 3, stall_median=0.0003)
    (broken / "seed1/run1/live/online/trainer.json").write_text('{"policy": "onl')
    r = report("--dir", broken)
    expect(r.returncode != 0 and "trainer.json: not JSON" in r.stderr and "Traceback" not in r.stderr,
           f"broken summary: {r.stderr!r}")

    # A diverged model's NaN request losses: the chart leaves them out (math.log10 of NaN ended
    # the report in a traceback), and draws the finite ones.
    diverged = root / "diverged"
    write_run(diverged / "seed1/run1/live/online", "online", 40, stall_median=0.0003)
    csv_path = diverged / "seed1/run1/live/online/server.csv"
    rows = csv_path.read_text().splitlines()
    # NaN from request 20 to 34 (of 40): a gap between two lines.
    csv_path.write_text("\n".join(rows[:21] + [row.rsplit(",", 1)[0] + ",nan" for row in rows[21:36]] + rows[36:]) + "\n")
    summary = diverged / "seed1/run1/live/online/trainer.json"
    summary.write_text(summary.read_text().replace('"final_val_loss": 0.5', '"final_val_loss": null'))
    r = report("--dir", diverged, "--svg", root / "diverged.svg")
    svg = (root / "diverged.svg").read_text() if (root / "diverged.svg").exists() else ""
    expect(r.returncode == 0 and svg.count("<polyline") == 2 and "nan" not in svg.lower(), f"NaN losses: {r.stderr!r}")

    # A plot that cannot be written is named with its path, not a traceback.
    r = report("--dir", runs, "--svg", root / "absent/dir/x.svg")
    expect(r.returncode != 0 and "cannot write --svg" in r.stderr and "absent/dir/x.svg" in r.stderr and
           "Traceback" not in r.stderr, f"unwritable plot: {r.stderr!r}")

for f in failures:
    print("FAILED:", f)
print(f"report_inputs: {'ok' if not failures else str(len(failures)) + ' failed'}")
sys.exit(1 if failures else 0)
