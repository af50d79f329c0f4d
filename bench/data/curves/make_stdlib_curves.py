#!/usr/bin/env python3
"""Learning curves of kinds the Fashion-MNIST and Lorenz runs lack, from Python's standard
library alone (no numpy, no torch) and text Debian ships, fully deterministic.

Three kinds, each as a development family and as a held-out family that differs in data,
model size or environment:
  kind                       development family      held-out family
  character-level LM         charlm                  charlm_code
  fine-tuning after          finetune                finetune_code
    pretraining
  RL returns (noisy, not     rl_cartpole             rl_catch
    monotone)
charlm:        an MLP over the previous k characters (embeddings, tanh hidden layer, softmax),
               trained from scratch on licence texts in /usr/share/common-licenses (package
               base-files); validation loss on a held-back slice of the same texts.
charlm_code:   the same model kind on Python source files Debian ships (/usr/lib/python3.11).
finetune:      the model is first pretrained (not logged) on GPL-3, then fine-tuned on one other,
               small licence text (Apache-2.0, MPL-2.0, ...): the logged curve is the fine-tuning
               phase, validation on that text; small data, so it may rise again (overfitting).
finetune_code: pretrained on licences, fine-tuned on one Python source file.
rl_cartpole:   REINFORCE with a linear softmax policy on the classic cart-pole (Barto, Sutton and
               Anderson 1983 dynamics, 200-step limit); the logged "loss" is
               (201 - mean return) / 200 over the episodes since the last point.
rl_catch:      REINFORCE with a tabular softmax policy on a small "catch" game (a ball falls down
               a 5 x 6 grid, the paddle moves left, stays or moves right; 5 balls per episode,
               +1 caught, -1 missed); "loss" = (6 - mean return) / 11.

The held-out families are named in HELD_OUT below and written to their own file; they were
fixed before any of these curves was scored, and bench/run.sh predictor keeps them out of every
choice it makes (bench/RESULTS.md says which choices were made with which results in view).

train_time_s is not measured: it is a deterministic cost model (floating-point operations of the
training step at 1 GFLOP/s for the language models; environment steps at 20 us each plus the
policy update for RL, so RL step times grow as episodes get longer). Evaluation is excluded, as
in the other curve files. The output is therefore byte-for-byte reproducible with the same Python
version and the same Debian text files (Debian 12: /usr/lib/python3.11).

Usage: nice python3 bench/data/curves/make_stdlib_curves.py [--out-dir DIR] [--only ID,ID]
Writes DIR/stdlib_val_loss.csv (development) and DIR/heldout_val_loss.csv (held-out); DIR
defaults to this script's folder. About 5-10 CPU minutes.
"""
import argparse
import math
import os
import random
import sys

LICENSES = "/usr/share/common-licenses"
PYTHON_LIB = "/usr/lib/python3.11"  # Debian 12's
HELD_OUT = {"charlm_code", "finetune_code", "rl_catch"}
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 .,;:()'\"-_=\n#[]*/<>+%{}!?"
UNKNOWN = len(ALPHABET)  # every other character
VOCAB = len(ALPHABET) + 1
INDEX = {c: i for i, c in enumerate(ALPHABET)}


def encode(text):
    return [INDEX.get(c, UNKNOWN) for c in text.lower()]


def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as e:
        sys.exit(f"make_stdlib_curves.py: cannot read {path}: {e.strerror}")


def licence(name):
    return read_text(os.path.join(LICENSES, name))


def python_source(modules):
    """Source files of Debian's Python standard library (package libpython3.11-stdlib or -minimal),
    not of whatever interpreter runs this script: another Python's copy may differ."""
    return "\n".join(read_text(os.path.join(PYTHON_LIB, m + ".py")) for m in modules)


def lr_factor(schedule, step, total):
    """Learning-rate multiplier: the schedules the Fashion-MNIST runs use."""
    f = step / total
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * f))
    if schedule == "step":
        return 1.0 if f < 0.5 else 0.1 if f < 0.75 else 0.01
    if schedule == "warmup_cosine":
        w = 0.1
        return f / w if f < w else 0.5 * (1 + math.cos(math.pi * (f - w) / (1 - w)))
    if schedule == "wsd":  # warm-up, stable, linear decay over the last fifth
        return min(1.0, f / 0.05) if f < 0.8 else max(0.0, (1 - f) / 0.2)
    raise ValueError(schedule)


class CharMlp:
    """logits = W2 tanh(W1 [E c_1 .. E c_k] + b1) + b2, trained by SGD with momentum."""

    def __init__(self, rng, context, dim, hidden):
        self.k, self.d, self.h = context, dim, hidden
        g = lambda n, s: [rng.gauss(0.0, s) for _ in range(n)]
        self.E = g(VOCAB * dim, 0.5)
        self.W1 = g(hidden * context * dim, 1.0 / math.sqrt(context * dim))
        self.b1 = [0.0] * hidden
        self.W2 = g(VOCAB * hidden, 1.0 / math.sqrt(hidden))
        self.b2 = [0.0] * VOCAB
        self.params = [self.E, self.W1, self.b1, self.W2, self.b2]
        self.velocity = [[0.0] * len(p) for p in self.params]

    def flops_per_example(self):
        return 6 * (self.h * self.k * self.d + VOCAB * self.h)

    def forward(self, ctx):
        d, h = self.d, self.h
        x = []
        for c in ctx:
            x.extend(self.E[c * d:(c + 1) * d])
        n_in = len(x)
        W1 = self.W1
        hid = [math.tanh(self.b1[j] + sum(W1[j * n_in + i] * x[i] for i in range(n_in))) for j in range(h)]
        W2 = self.W2
        logits = [self.b2[v] + sum(W2[v * h + j] * hid[j] for j in range(h)) for v in range(VOCAB)]
        m = max(logits)
        exps = [math.exp(z - m) for z in logits]
        s = sum(exps)
        return x, hid, [e / s for e in exps], m + math.log(s), logits

    def loss(self, ctx, target):
        _, _, _, lse, logits = self.forward(ctx)
        return lse - logits[target]

    def step(self, batch, lr, momentum):
        d, h = self.d, self.h
        grads = [[0.0] * len(p) for p in self.params]
        gE, gW1, gb1, gW2, gb2 = grads
        for ctx, target in batch:
            x, hid, prob, _, _ = self.forward(ctx)
            n_in = len(x)
            dlog = prob
            dlog[target] -= 1.0
            dhid = [0.0] * h
            for v in range(VOCAB):
                g = dlog[v]
                if g == 0.0:
                    continue
                gb2[v] += g
                base = v * h
                for j in range(h):
                    gW2[base + j] += g * hid[j]
                    dhid[j] += g * self.W2[base + j]
            dx = [0.0] * n_in
            for j in range(h):
                g = dhid[j] * (1.0 - hid[j] * hid[j])
                gb1[j] += g
                base = j * n_in
                for i in range(n_in):
                    gW1[base + i] += g * x[i]
                    dx[i] += g * self.W1[base + i]
            for p, c in enumerate(ctx):
                for i in range(d):
                    gE[c * d + i] += dx[p * d + i]
        scale = 1.0 / len(batch)
        for p, g, vel in zip(self.params, grads, self.velocity):
            for i in range(len(p)):
                vel[i] = momentum * vel[i] + g[i] * scale
                p[i] -= lr * vel[i]


def windows(codes, k):
    return [(codes[i - k:i], codes[i]) for i in range(k, len(codes))]


def train_lm(cfg, rng, model, train, val, log, time_offset=0.0):
    """SGD on random windows; logs (step, validation loss, modelled train time) every interval."""
    total, every = cfg["steps"], cfg["steps"] // cfg["points"]
    t = time_offset
    per_step = model.flops_per_example() * cfg["batch"] * 1e-9
    for step in range(total + 1):
        if step % every == 0 and log is not None:
            v = sum(model.loss(c, y) for c, y in val) / len(val)
            log.append((step, v, t))
        if step == total:
            break
        batch = [train[rng.randrange(len(train))] for _ in range(cfg["batch"])]
        model.step(batch, cfg["lr"] * lr_factor(cfg["schedule"], step, total), cfg["momentum"])
        t += per_step


def lm_run(cfg):
    rng = random.Random(cfg["seed"])
    model = CharMlp(rng, cfg["context"], cfg["dim"], cfg["hidden"])
    k = cfg["context"]
    log = []
    if "pretrain" in cfg:
        pre = encode(cfg["pretrain"])
        pcfg = dict(cfg, steps=cfg["pretrain_steps"], lr=cfg["pretrain_lr"], schedule="cosine", points=1)
        train_lm(pcfg, rng, model, windows(pre, k), [], None)
        model.velocity = [[0.0] * len(p) for p in model.params]
    codes = encode(cfg["text"])
    cut = int(len(codes) * 0.85)
    train = windows(codes[:cut], k)
    val_all = windows(codes[cut:], k)
    # A fixed, evenly spread validation sample: every point of a run is scored on the same text.
    n_val = min(cfg["val"], len(val_all))
    val = [val_all[i * len(val_all) // n_val] for i in range(n_val)]
    train_lm(cfg, rng, model, train, val, log)
    return log


class CartPole:
    """Barto, Sutton and Anderson (1983) cart-pole, Euler steps of 0.02 s, as in Gym's CartPole-v1."""

    def __init__(self, rng):
        self.s = [rng.uniform(-0.05, 0.05) for _ in range(4)]

    def step(self, action):
        x, xd, th, thd = self.s
        force = 10.0 if action == 1 else -10.0
        ct, st = math.cos(th), math.sin(th)
        temp = (force + 0.05 * thd * thd * st) / 1.1
        thacc = (9.8 * st - ct * temp) / (0.5 * (4.0 / 3.0 - 0.1 * ct * ct / 1.1))
        xacc = temp - 0.05 * thacc * ct / 1.1
        self.s = [x + 0.02 * xd, xd + 0.02 * xacc, th + 0.02 * thd, thd + 0.02 * thacc]
        return abs(self.s[0]) > 2.4 or abs(self.s[2]) > 12 * 2 * math.pi / 360


def softmax(z):
    m = max(z)
    e = [math.exp(v - m) for v in z]
    s = sum(e)
    return [v / s for v in e]


def sample(rng, prob):
    u, acc = rng.random(), 0.0
    for i, p in enumerate(prob):
        acc += p
        if u < acc:
            return i
    return len(prob) - 1


def cartpole_episode(rng, w, limit=200):
    env = CartPole(rng)
    traj = []
    for _ in range(limit):
        feat = env.s + [1.0]
        z = [sum(w[a * 5 + i] * feat[i] for i in range(5)) for a in range(2)]
        prob = softmax(z)
        a = sample(rng, prob)
        traj.append((feat, a, prob))
        if env.step(a):
            break
    return traj, float(len(traj))


def catch_episode(rng, theta, balls=5, width=5, height=6):
    paddle, traj, ret = width // 2, [], 0.0
    for _ in range(balls):
        bx = rng.randrange(width)
        for by in range(height - 1):
            s = (bx * height + by) * width + paddle
            prob = softmax(theta[s * 3:s * 3 + 3])
            a = sample(rng, prob)
            traj.append((s, a, prob))
            paddle = min(width - 1, max(0, paddle + a - 1))
        r = 1.0 if paddle == bx else -1.0
        ret += r
        traj.append(("reward", r, None))
    return traj, ret


def rl_run(cfg):
    """REINFORCE with a running-mean baseline: one gradient step per batch of episodes."""
    rng = random.Random(cfg["seed"])
    game = cfg["env"]
    if game == "cartpole":
        w = [0.0] * 10
        to_loss = lambda r: (201.0 - r) / 200.0
    else:
        w = [0.0] * (5 * 6 * 5 * 3)
        to_loss = lambda r: (6.0 - r) / 11.0
    baseline, log, t, since = None, [], 0.0, []
    total, every = cfg["updates"], cfg["updates"] // cfg["points"]
    for update in range(total + 1):
        if update % every == 0:
            if update == 0:  # the untrained policy's return, from episodes not used for learning
                since = [cartpole_episode(rng, w)[1] if game == "cartpole" else catch_episode(rng, w)[1] for _ in range(cfg["batch"])]
            log.append((update, to_loss(sum(since) / len(since)), t))
            since = []
        if update == total:
            break
        grad = [0.0] * len(w)
        episodes = []
        for _ in range(cfg["batch"]):
            traj, ret = cartpole_episode(rng, w) if game == "cartpole" else catch_episode(rng, w)
            episodes.append((traj, ret))
            since.append(ret)
        mean_ret = sum(r for _, r in episodes) / len(episodes)
        baseline = mean_ret if baseline is None else 0.9 * baseline + 0.1 * mean_ret
        env_steps = 0
        for traj, ret in episodes:
            if game == "cartpole":
                # Reward-to-go: each step's reward is 1, so the return after step i is len - i.
                n = len(traj)
                env_steps += n
                for i, (feat, a, prob) in enumerate(traj):
                    adv = (n - i) - baseline * (n - i) / n
                    for b in range(2):
                        g = ((1.0 if b == a else 0.0) - prob[b]) * adv
                        for j in range(5):
                            grad[b * 5 + j] += g * feat[j]
            else:
                steps = [x for x in traj if x[0] != "reward"]
                env_steps += len(steps)
                adv = ret - baseline
                for s, a, prob in steps:
                    for b in range(3):
                        grad[s * 3 + b] += ((1.0 if b == a else 0.0) - prob[b]) * adv
        lr = cfg["lr"] * lr_factor(cfg["schedule"], update, total) / len(episodes)
        for i in range(len(w)):
            w[i] += lr * grad[i]
        t += env_steps * 20e-6 + len(w) * cfg["batch"] * 1e-8
    return log


def runs():
    """The run table: id, family, record (configuration), and how each run is made."""
    gpl = licence("GPL-3")
    licences = "\n".join(licence(n) for n in ("GPL-2", "LGPL-2.1", "GFDL-1.3", "MPL-2.0"))
    code = python_source(["textwrap", "shlex", "fractions", "heapq", "bisect", "glob", "fnmatch", "colorsys"])
    table = []

    def lm(family, record, **cfg):
        base = dict(context=3, dim=6, hidden=16, batch=16, momentum=0.9, points=60, val=240)
        base.update(cfg)
        table.append((family, record, "lm", base))

    # charlm: from scratch on licence texts.
    lm("charlm", "ctx3_h16_sgd_constant", text=licences, steps=900, lr=0.05, momentum=0.0, schedule="constant", seed=11)
    lm("charlm", "ctx3_h16_momentum_cosine", text=licences, steps=1200, lr=0.03, schedule="cosine", seed=12)
    lm("charlm", "ctx4_h24_momentum_step", text=licences, steps=1200, lr=0.03, schedule="step", context=4, hidden=24, seed=13)
    lm("charlm", "ctx2_h12_momentum_wsd_bs8", text=licences, steps=1500, lr=0.02, schedule="wsd", context=2, hidden=12, batch=8, seed=14)
    lm("charlm", "ctx3_h16_momentum_warmup_cosine_bs32", text=gpl, steps=600, lr=0.05, schedule="warmup_cosine", batch=32, seed=15)
    # finetune: pretrained on GPL-3, fine-tuned on one small licence.
    for i, (name, lr, sched, steps) in enumerate([("Apache-2.0", 0.01, "constant", 900), ("MPL-2.0", 0.02, "cosine", 1200),
                                                   ("Artistic", 0.01, "constant", 1200), ("LGPL-2.1", 0.005, "wsd", 900),
                                                   ("GFDL-1.3", 0.02, "step", 900)]):
        lm("finetune", f"gpl3_to_{name}_{sched}", text=licence(name), steps=steps, lr=lr, schedule=sched, seed=21 + i,
           pretrain=gpl, pretrain_steps=1500, pretrain_lr=0.03)
    # charlm_code (held out): Python source, other sizes.
    lm("charlm_code", "ctx3_h16_momentum_cosine", text=code, steps=1200, lr=0.03, schedule="cosine", seed=31)
    lm("charlm_code", "ctx4_h20_sgd_constant", text=code, steps=900, lr=0.08, momentum=0.0, schedule="constant", context=4, hidden=20, seed=32)
    lm("charlm_code", "ctx2_h24_momentum_wsd", text=code, steps=1200, lr=0.02, schedule="wsd", context=2, hidden=24, seed=33)
    lm("charlm_code", "ctx3_h12_momentum_step_bs32", text=code, steps=800, lr=0.04, schedule="step", hidden=12, batch=32, seed=34)
    # finetune_code (held out): pretrained on licences, fine-tuned on one Python source file.
    for i, (mod, lr, sched) in enumerate([("textwrap", 0.02, "constant"), ("fractions", 0.01, "cosine"),
                                           ("shlex", 0.03, "wsd"), ("heapq", 0.01, "constant")]):
        lm("finetune_code", f"licences_to_{mod}_{sched}", text=python_source([mod]), steps=900, lr=lr, schedule=sched,
           seed=41 + i, pretrain=licences, pretrain_steps=1500, pretrain_lr=0.03)

    def rl(family, record, **cfg):
        base = dict(batch=4, points=80)
        base.update(cfg)
        table.append((family, record, "rl", base))

    rl("rl_cartpole", "linear_lr0.01_constant", env="cartpole", updates=240, lr=0.01, schedule="constant", seed=51)
    rl("rl_cartpole", "linear_lr0.003_constant", env="cartpole", updates=320, lr=0.003, schedule="constant", seed=52)
    rl("rl_cartpole", "linear_lr0.02_cosine", env="cartpole", updates=240, lr=0.02, schedule="cosine", seed=53)
    rl("rl_cartpole", "linear_lr0.01_cosine_bs8", env="cartpole", updates=160, lr=0.01, schedule="cosine", batch=8, seed=54)
    rl("rl_cartpole", "linear_lr0.005_wsd", env="cartpole", updates=320, lr=0.005, schedule="wsd", seed=55)
    rl("rl_catch", "tabular_lr0.1_constant", env="catch", updates=400, lr=0.1, schedule="constant", seed=61)
    rl("rl_catch", "tabular_lr0.3_cosine", env="catch", updates=320, lr=0.3, schedule="cosine", seed=62)
    rl("rl_catch", "tabular_lr0.05_constant_bs8", env="catch", updates=400, lr=0.05, schedule="constant", batch=8, seed=63)
    rl("rl_catch", "tabular_lr0.2_wsd", env="catch", updates=480, lr=0.2, schedule="wsd", seed=64)
    # A second batch of the held-out families (s027-s038), added on 2026-11-28 with settings and
    # seeds fixed before any of them ran: with four runs a family, one run moved a held-out p90
    # by several points. Appended, so the ids above keep their runs.
    lm("charlm_code", "ctx3_h20_momentum_warmup_cosine", text=code, steps=1000, lr=0.04, schedule="warmup_cosine", hidden=20, seed=35)
    lm("charlm_code", "ctx2_h16_sgd_step", text=code, steps=1200, lr=0.1, momentum=0.0, schedule="step", context=2, seed=36)
    lm("charlm_code", "ctx4_h16_momentum_constant_bs8", text=code, steps=1400, lr=0.015, schedule="constant", context=4, batch=8, seed=37)
    lm("charlm_code", "ctx3_h24_momentum_wsd_bs32", text=code, steps=700, lr=0.03, schedule="wsd", hidden=24, batch=32, seed=38)
    for i, (mod, lr, sched) in enumerate([("glob", 0.02, "cosine"), ("bisect", 0.015, "step"),
                                           ("fnmatch", 0.01, "wsd"), ("colorsys", 0.03, "constant")]):
        lm("finetune_code", f"licences_to_{mod}_{sched}", text=python_source([mod]), steps=900, lr=lr, schedule=sched,
           seed=45 + i, pretrain=licences, pretrain_steps=1500, pretrain_lr=0.03)
    rl("rl_catch", "tabular_lr0.15_cosine_bs8", env="catch", updates=400, lr=0.15, schedule="cosine", batch=8, seed=65)
    rl("rl_catch", "tabular_lr0.08_step", env="catch", updates=480, lr=0.08, schedule="step", seed=66)
    rl("rl_catch", "tabular_lr0.4_constant", env="catch", updates=320, lr=0.4, schedule="constant", seed=67)
    rl("rl_catch", "tabular_lr0.1_warmup_cosine", env="catch", updates=400, lr=0.1, schedule="warmup_cosine", seed=68)
    return [(f"s{i:03d}", fam, rec, kind, cfg) for i, (fam, rec, kind, cfg) in enumerate(table)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--only", default="", help="comma-separated run ids (for a quick check; writes only those)")
    args = ap.parse_args()
    only = {x for x in args.only.split(",") if x}
    table = runs()
    unknown = only - {r[0] for r in table}
    if unknown:
        sys.exit(f"make_stdlib_curves.py: no run {', '.join(sorted(unknown))}")
    rows = {False: [], True: []}
    for run_id, fam, rec, kind, cfg in table:
        if only and run_id not in only:
            continue
        log = lm_run(cfg) if kind == "lm" else rl_run(cfg)
        total = cfg["steps"] if kind == "lm" else cfg["updates"]
        for step, loss, t in log:
            rows[fam in HELD_OUT].append(f"{run_id},{fam},{rec},{step},{total},{loss:.5f},{t:.4f}")
        print(f"{run_id} {fam} {rec}: {log[0][1]:.3f} -> {log[-1][1]:.3f} (min {min(v for _, v, _ in log):.3f})",
              file=sys.stderr, flush=True)
    header = "run,track,record,step,total_steps,val_loss,train_time_s"
    for held, name in ((False, "stdlib_val_loss.csv"), (True, "heldout_val_loss.csv")):
        with open(os.path.join(args.out_dir, name), "w") as f:
            f.write("\n".join([header] + rows[held]) + "\n")


if __name__ == "__main__":
    main()
