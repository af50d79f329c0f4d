#!/usr/bin/env bash
# Decision-cost benchmark: bench/run.sh decision [--json] [options]
# Builds only modelcast-decision-bench (Release, build-bench/, as bench/predictor.sh does) and
# times OnlineScheduler::should_publish on the calling thread at 100, 1,000 and 10,000 observed
# points, refits inline and in the background: mean, median, p99 and max per decision, and
# the mean over the floor measured first in the same run (the worker's hand-over of an empty job). Options:
# --points LIST, --window K (timed decisions per run), --runs R (seeds), --cost-ratio X (publish
# stall in logging intervals), --mode inline|refits_in_background|background|all, --train-ms T
# (training time between two timed decisions, a sleep outside them), --train-busy (that training
# spins the CPU), --busy-threads N (cores kept busy beside it), --inherited-workers (the workers
# not batch-scheduled), --replan-every-decision (no plan reuse: the cost before it); --help lists
# them all. MODELCAST_BENCH_JOBS sets the build's
# parallelism (default 2).
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"
"$here/build_bench.sh" modelcast-decision-bench
exec "$build/bench/predictor/modelcast-decision-bench" "$@"
