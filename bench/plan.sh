#!/usr/bin/env bash
# Exact-plan cost benchmark: bench/run.sh plan [--json] [options]
# Builds only modelcast-plan-bench (Release, build-bench/, as bench/predictor.sh does) and times
# the exact plan (plan_optimal: modelcast-tune evaluate/replay's optimum) on synthetic per-step
# logs, noisy and smooth, against one linear pass over the same log. Options: --points LIST,
# --smooth-max-points N, --cost-ratio X (repeatable), --runs R. MODELCAST_BENCH_JOBS sets the
# build's parallelism (default 2).
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"
"$here/build_bench.sh" modelcast-plan-bench
exec "$build/bench/predictor/modelcast-plan-bench" "$@"
