"""Runs the example end to end: a server and a trainer as separate processes, then checks that
the server served several versions and that the last one classifies well (chance is 10 %).

    python3 run_example.py [--steps 600] [--min-accuracy 0.7]

This is what CTest runs (python.example_fashion_mnist), with few steps to stay short.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=600, help="training steps (default %(default)s)")
    p.add_argument("--min-accuracy", type=float, default=0.7, help="required test accuracy of the last version")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds each process may take")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="mc-fashion-", dir="/tmp") as directory:  # short ipc path
        return run(args, f"ipc://{directory}/trainer.sock")


def run(args, endpoint):
    """Runs server and trainer on `endpoint`; 0 when the checks pass, 1 otherwise."""
    def start(script, *extra):
        return subprocess.Popen([sys.executable, os.path.join(HERE, script), "--endpoint", endpoint, *extra],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    server = start("server.py", "--max-seconds", str(args.timeout))
    trainer = start("trainer.py", "--steps", str(args.steps), "--wait", str(args.timeout))
    outputs = {}
    for name, proc in (("trainer", trainer), ("server", server)):
        # A trainer that failed (it refused its arguments, say) publishes nothing more: the server
        # would wait out its whole --max-seconds for versions that never come.
        if proc is server and trainer.returncode != 0:
            server.kill()
        try:
            outputs[name], _ = proc.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            outputs[name], _ = proc.communicate()
        print(outputs[name], end="")
    output = outputs["server"]
    served = [(int(v), float(a)) for v, a in re.findall(r"server: version (\d+) .* accuracy ([0-9.]+)", output)]
    failures = []
    if trainer.returncode != 0:
        # Nothing more to judge: the server was stopped, and served what a failed trainer published.
        failures.append(f"trainer exited with {trainer.returncode} (the server was stopped)")
    else:
        if server.returncode != 0:
            failures.append(f"server exited with {server.returncode}")
        if len(served) < 2:
            failures.append(f"server served {len(served)} versions, expected at least 2 (warm-up and last)")
        elif served[-1][1] < args.min_accuracy:
            failures.append(f"last version's accuracy {served[-1][1]:.3f} is below {args.min_accuracy}")
    for failure in failures:
        print(f"run_example: FAILED: {failure}", file=sys.stderr)
    if not failures:
        print(f"run_example: OK: {len(served)} versions served, last accuracy {served[-1][1]:.3f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
