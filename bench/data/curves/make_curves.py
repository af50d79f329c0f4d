#!/usr/bin/env python3
"""Development learning curves from real (small, CPU-only) training runs.

Writes bench/data/curves/dev_val_loss.csv in the shared curves format
(run,track,record,step,total_steps,val_loss,train_time_s); `track` is the family:
  fmnist_mlp    MLP classifiers on Fashion-MNIST (SGD, momentum, Adam; constant, step, cosine,
                warm-up-cosine, warmup-stable-decay schedules; several batch sizes)
  fmnist_cnn    small CNNs on Fashion-MNIST, same spread of optimisers and schedules
  fmnist_shift  Fashion-MNIST runs whose data change mid-run (classes arriving late, or a
                new input domain that both training and validation move to)
  lorenz        MLP surrogates of a Lorenz-63 simulation trained online on its stream
                (one run whose simulation parameters change mid-run)
train_time_s is the measured CPU time of the training steps alone (evaluation excluded), with
torch on one thread, so it reflects each model's and batch size's real step cost.

Needs Debian's python3-torch and dataset-fashion-mnist (scripts/install-deps.sh).
Usage: nice python3 bench/data/curves/make_curves.py [--out FILE] [--only d015,d016]   (about 4-5 CPU minutes)
       python3 bench/data/curves/make_curves.py --schedules-only [FILE]
         writes only each run's configured learning-rate schedule (run,step,lr; default
         dev_lr_schedules.csv next to this script), from the same run table, without training
"""
import argparse
import gzip
import math
import os
import struct
import sys
import time

FMNIST = "/usr/share/datasets/fashion-mnist"


def import_training_deps():
    """numpy and torch are needed to train, not to write the schedules (--schedules-only)."""
    global np, torch, nn
    import numpy as np
    import torch
    import torch.nn as nn
    torch.set_num_threads(1)


def load_idx(name):
    with gzip.open(os.path.join(FMNIST, name), "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, rows, cols)
    return np.frombuffer(data, np.uint8, offset=8)


def fmnist(train_n=12000, val_n=2000):
    x = load_idx("train-images-idx3-ubyte.gz")[:train_n].astype(np.float32) / 255.0
    y = load_idx("train-labels-idx1-ubyte.gz")[:train_n].astype(np.int64)
    vx = load_idx("t10k-images-idx3-ubyte.gz")[:val_n].astype(np.float32) / 255.0
    vy = load_idx("t10k-labels-idx1-ubyte.gz")[:val_n].astype(np.int64)
    norm = lambda a: (a - 0.286) / 0.353
    return (torch.from_numpy(norm(x)).unsqueeze(1), torch.from_numpy(y),
            torch.from_numpy(norm(vx)).unsqueeze(1), torch.from_numpy(vy))


def lr_factor(schedule, step, total):
    u = step / total
    if schedule == "constant":
        return 1.0
    if schedule == "step":  # x0.1 at 50 % and 75 %
        return 1.0 if u < 0.5 else (0.1 if u < 0.75 else 0.01)
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * u))
    if schedule == "warmup_cosine":
        w = 0.05
        return u / w if u < w else 0.5 * (1 + math.cos(math.pi * (u - w) / (1 - w)))
    if schedule == "wsd":  # warm-up 5 %, stable, linear decay over the last 20 %
        if u < 0.05:
            return u / 0.05
        return 1.0 if u < 0.8 else max(0.0, (1 - u) / 0.2)
    raise ValueError(schedule)


def mlp(width=128, depth=1):
    layers, d = [nn.Flatten()], 784
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.ReLU()]
        d = width
    return nn.Sequential(*layers, nn.Linear(d, 10))


def cnn(ch=8):
    return nn.Sequential(nn.Conv2d(1, ch, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(ch, 2 * ch, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(2 * ch * 49, 10))


def optimiser(kind, params, lr):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if kind == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError(kind)


class Writer:
    def __init__(self, path):
        self.f = open(path, "w")
        self.f.write("run,track,record,step,total_steps,val_loss,train_time_s\n")
        self.n = 0

    def next_id(self):
        return "d%03d" % self.n

    def skip(self, only):
        """True (and the id is used up) when --only excludes the next run."""
        if only and self.next_id() not in only:
            self.n += 1
            return True
        return False

    def run(self, track, record, total, points):
        rid = self.next_id()
        self.n += 1
        for step, loss, t in points:
            self.f.write("%s,%s,%s,%d,%d,%.5f,%.4f\n" % (rid, track, record, step, total, loss, t))
        self.f.flush()
        print("%s %-12s %-40s %3d points, last loss %.4f, %.1f s" % (rid, track, record, len(points),
                                                                   points[-1][1], points[-1][2]), flush=True)


def train_classifier(data, model, opt_kind, lr, schedule, batch, total, every, seed, shift=None):
    """shift: None, ("late_classes", at) or ("domain", at). Returns [(step, val_loss, time)]."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    x, y, vx, vy = data
    opt = optimiser(opt_kind, model.parameters(), lr)
    loss_fn = nn.CrossEntropyLoss()
    pool = np.arange(len(x))
    if shift and shift[0] == "late_classes":  # only classes 0-5 until the shift
        pool = np.flatnonzero(y.numpy() < 6)
    domain = lambda a: torch.flip(a, dims=[2, 3]) * -1.0  # rotated 180 degrees, inverted
    points, elapsed = [], 0.0

    # The validation set stays fixed through the run (the CIL accounting compares losses across
    # the shift): for a domain shift it holds both domains, half each.
    if shift and shift[0] == "domain":
        half = len(vx) // 2
        vx = torch.cat([vx[:half], domain(vx[half:])])

    def evaluate(step):
        model.eval()
        with torch.no_grad():
            points.append((step, float(loss_fn(model(vx), vy)), elapsed))
        model.train()

    evaluate(0)
    for step in range(1, total + 1):
        if shift and step == shift[1] and shift[0] == "late_classes":
            pool = np.arange(len(x))
        idx = torch.from_numpy(rng.choice(pool, batch, replace=False))
        xb, yb = x[idx], y[idx]
        if shift and shift[0] == "domain" and step >= shift[1]:
            xb = domain(xb)
        t0 = time.process_time()
        for g in opt.param_groups:
            g["lr"] = lr * lr_factor(schedule, step, total)
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()
        elapsed += time.process_time() - t0
        if step % every == 0 or step == total:
            evaluate(step)
    return points


def lorenz_stream(n, dt, sigma=10.0, rho=28.0, beta=8.0 / 3.0, seed=0, change=None):
    """RK4 trajectory of Lorenz-63; change=(at, rho2) switches rho mid-stream."""
    s = np.array([1.0, 1.0, 1.0]) + np.random.default_rng(seed).normal(0, 0.1, 3)
    out = np.empty((n + 1, 3))
    out[0] = s
    for i in range(n):
        r = change[1] if change and i >= change[0] else rho
        f = lambda v: np.array([sigma * (v[1] - v[0]), v[0] * (r - v[2]) - v[1], v[0] * v[1] - beta * v[2]])
        k1 = f(s); k2 = f(s + dt / 2 * k1); k3 = f(s + dt / 2 * k2); k4 = f(s + dt * k3)
        s = s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out[i + 1] = s
    return out


def train_lorenz(opt_kind, lr, schedule, batch, total, every, seed, dt=0.01, width=64, change=None):
    """Online surrogate: the simulation advances `batch` steps per training step and the
    network learns (state -> state increment) from a replay buffer of what it has seen."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    traj = lorenz_stream(total * batch + 1, dt, seed=seed, change=None if change is None else (change[0] * batch, change[1]))
    scale = 20.0
    xs = torch.tensor(traj[:-1] / scale, dtype=torch.float32)
    ds = torch.tensor((traj[1:] - traj[:-1]) / (scale * dt * 10), dtype=torch.float32)
    held = lorenz_stream(2000, dt, seed=seed + 1000)  # held-out trajectory
    if change is not None:  # fixed through the run: both regimes, 1,000 steps each
        held = np.concatenate([held[:1001], lorenz_stream(1000, dt, seed=seed + 1000, rho=change[1])])
    hx = lambda h: torch.tensor(h[:-1] / scale, dtype=torch.float32)
    hd = lambda h: torch.tensor((h[1:] - h[:-1]) / (scale * dt * 10), dtype=torch.float32)
    model = nn.Sequential(nn.Linear(3, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 3))
    opt = optimiser(opt_kind, model.parameters(), lr)
    mse = nn.MSELoss()
    points, elapsed = [], 0.0

    def evaluate(step):
        with torch.no_grad():
            points.append((step, float(mse(model(hx(held)), hd(held))), elapsed))

    evaluate(0)
    for step in range(1, total + 1):
        seen = step * batch
        idx = torch.from_numpy(rng.integers(max(0, seen - 4000), seen, size=batch))
        t0 = time.process_time()
        for g in opt.param_groups:
            g["lr"] = lr * lr_factor(schedule, step, total)
        opt.zero_grad()
        mse(model(xs[idx]), ds[idx]).backward()
        opt.step()
        elapsed += time.process_time() - t0
        if step % every == 0 or step == total:
            evaluate(step)
    return points


# Every run, in id order (d000, d001, ...): (track, kind, settings). Both the training (main) and
# --schedules-only read this table, so the schedules written cannot drift from the runs trained.
# classifier settings: (model, optimiser, lr, schedule, batch, total steps, eval every, seed[, shift])
# lorenz settings: (optimiser, lr, schedule, batch, total steps, eval every, seed, change)
MLPS = [
    (lambda: mlp(128), "sgd", 0.1, "constant", 64, 1500, 25, 1),
    (lambda: mlp(128), "momentum", 0.05, "step", 128, 1200, 20, 2),
    (lambda: mlp(256, 2), "adam", 1e-3, "cosine", 64, 1500, 25, 3),
    (lambda: mlp(128), "adam", 2e-3, "warmup_cosine", 256, 800, 16, 4),
    (lambda: mlp(64), "momentum", 0.02, "wsd", 32, 2000, 40, 5),
    (lambda: mlp(256, 2), "sgd", 0.05, "cosine", 32, 2000, 25, 6),
    (lambda: mlp(128, 2), "adam", 5e-4, "constant", 128, 1000, 10, 7),
    (lambda: mlp(64), "sgd", 0.2, "step", 256, 900, 15, 8),
]
CNNS = [
    (lambda: cnn(8), "momentum", 0.02, "cosine", 64, 800, 16, 11),
    (lambda: cnn(8), "adam", 1e-3, "constant", 32, 1000, 20, 12),
    (lambda: cnn(6), "sgd", 0.05, "step", 64, 900, 15, 13),
    (lambda: cnn(8), "adam", 2e-3, "wsd", 128, 600, 12, 14),
    (lambda: cnn(4), "momentum", 0.01, "warmup_cosine", 32, 1200, 24, 15),
    (lambda: cnn(6), "sgd", 0.1, "constant", 128, 600, 10, 16),
]
SHIFTS = [
    (lambda: mlp(128), "adam", 1e-3, "constant", 64, 1500, 25, 21, ("late_classes", 600)),
    (lambda: mlp(128), "momentum", 0.05, "cosine", 64, 1500, 25, 22, ("domain", 900)),
    (lambda: cnn(6), "adam", 1e-3, "constant", 64, 800, 16, 23, ("domain", 400)),
    (lambda: mlp(256), "sgd", 0.1, "wsd", 128, 1200, 20, 24, ("late_classes", 700)),
]
LORENZ = [
    ("adam", 3e-3, "constant", 32, 2000, 25, 31, None),
    ("adam", 3e-3, "cosine", 64, 1500, 25, 32, None),
    ("momentum", 0.05, "step", 32, 2000, 40, 33, None),
    ("adam", 1e-3, "wsd", 16, 2500, 50, 34, None),
    ("adam", 3e-3, "constant", 32, 2000, 25, 35, (1000, 45.0)),
]


def runs():
    """[(track, record, lr, schedule, total steps, train)] in id order; train() returns the points."""
    out = []
    for make, opt, lr, sched, batch, total, every, seed in MLPS:
        out.append(("fmnist_mlp", "mlp_%s_%s_bs%d" % (opt, sched, batch), lr, sched, total,
                    lambda data, a=(make, opt, lr, sched, batch, total, every, seed):
                        train_classifier(data, a[0](), *a[1:])))
    for make, opt, lr, sched, batch, total, every, seed in CNNS:
        out.append(("fmnist_cnn", "cnn_%s_%s_bs%d" % (opt, sched, batch), lr, sched, total,
                    lambda data, a=(make, opt, lr, sched, batch, total, every, seed):
                        train_classifier(data, a[0](), *a[1:])))
    for make, opt, lr, sched, batch, total, every, seed, shift in SHIFTS:
        out.append(("fmnist_shift", "%s_%s_%s_at%d" % (shift[0], opt, sched, shift[1]), lr, sched, total,
                    lambda data, a=(make, opt, lr, sched, batch, total, every, seed, shift):
                        train_classifier(data, a[0](), *a[1:])))
    for opt, lr, sched, batch, total, every, seed, change in LORENZ:
        out.append(("lorenz", "surrogate_%s_%s_bs%d%s" % (opt, sched, batch, "" if change is None else "_rho45_at%d" % change[0]),
                    lr, sched, total,
                    lambda data, a=(opt, lr, sched, batch, total, every, seed, change):
                        train_lorenz(*a[:7], change=a[7])))
    return out


def write_schedules(path, curves):
    """The learning rate each run was configured with, as run,step,lr: the rate the training loop
    sets at each step (lr * lr_factor(schedule, step, total)), with the rows that linear
    interpolation between their neighbours reproduces (to 1e-9 of the peak rate) left out, so a
    piecewise-linear reading gives every step's rate. Cross-checked against the curves file."""
    logged = {}
    if os.path.exists(curves):
        with open(curves) as f:
            next(f)
            for line in f:
                rid, track, record, _, total = line.split(",")[:5]
                logged[rid] = (track, record, int(total))
    with open(path, "w") as f:
        f.write("run,step,lr\n")
        for n, (track, record, lr, sched, total, _) in enumerate(runs()):
            rid = "d%03d" % n
            if logged and logged.get(rid) != (track, record, total):
                sys.exit("%s: %s %s %d does not match %s in %s" % (rid, track, record, total, logged.get(rid), curves))
            rates = [lr * lr_factor(sched, step, total) for step in range(total + 1)]
            tol = 1e-9 * max(rates)
            keep = [0] + [s for s in range(1, total) if abs(rates[s] - 0.5 * (rates[s - 1] + rates[s + 1])) > tol] + [total]
            for s in keep:
                f.write("%s,%d,%.10g\n" % (rid, s, rates[s]))
            print("%s %-12s %-40s %-14s %4d rows" % (rid, track, record, sched, len(keep)))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated run ids to (re)generate; the others are skipped")
    ap.add_argument("--out", default=os.path.join(here, "dev_val_loss.csv"))
    ap.add_argument("--schedules-only", nargs="?", const=os.path.join(here, "dev_lr_schedules.csv"), default=None,
                    metavar="FILE", help="write only each run's configured learning-rate schedule (no training, "
                    "no torch) to FILE (default dev_lr_schedules.csv), checked against --out")
    args = ap.parse_args()
    if args.schedules_only:
        write_schedules(args.schedules_only, args.out)
        return
    import_training_deps()
    data = fmnist()
    w = Writer(args.out)
    only = set(filter(None, args.only.split(",")))
    for track, record, _, _, total, train in runs():
        if w.skip(only):
            continue
        data_for = None if track == "lorenz" else data
        w.run(track, record, total, train(data_for))


if __name__ == "__main__":
    main()
