#!/usr/bin/env bash
# Builds benchmark targets: bench/build_bench.sh TARGET...
# Every benchmark builds in build-bench/ with this one configuration (Release, benchmarks and
# examples on, tests off), so running one benchmark after another never reconfigures the tree
# or rebuilds it under other options. The build's output goes to build-bench/bench-build.log; on a
# failure its last lines go to stderr and the status is 2.
# MODELCAST_BENCH_JOBS: build jobs (default 2; 1 on a shared machine).
set -euo pipefail
[[ $# -gt 0 ]] || { echo "usage: bench/build_bench.sh TARGET..." >&2; exit 2; }
root=$(CDPATH= cd -- "$(dirname "$0")/.." && pwd)
build="$root/build-bench"
mkdir -p "$build"
log="$build/bench-build.log"
if ! { cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMODELCAST_BUILD_TESTS=OFF \
         -DMODELCAST_BUILD_EXAMPLES=ON -DMODELCAST_BUILD_BENCH=ON &&
       cmake --build "$build" -j"${MODELCAST_BENCH_JOBS:-2}" --target "$@"; } >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  echo "bench: building $* failed (the whole log: $log)" >&2
  exit 2
fi
