#!/usr/bin/env bash
# Exact-plan cost benchmark: bench/run.sh plan [--json] [options]
# Builds only modelcast-plan-bench (Release, build-bench/, as bench/predictor.sh does) and times
# the exact plan (plan_optimal: modelcast-tune evaluate/replay's optimum) on synthetic per-step
# logs, noisy and smooth, against one linear pass over the same log. Options: --points LIST,
# --smooth-max-points N, --cost-ratio X (repeatable), --runs R. MODELCAST_BENCH_JOBS sets the
# build's parallelism (default 2).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMODELCAST_BUILD_TESTS=OFF \
  -DMODELCAST_BUILD_EXAMPLES=OFF -DMODELCAST_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j"${MODELCAST_BENCH_JOBS:-2}" --target modelcast-plan-bench >/dev/null
exec "$build/bench/predictor/modelcast-plan-bench" "$@"
