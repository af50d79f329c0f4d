#!/usr/bin/env bash
# Conversion benchmark: bench/run.sh convert [--json] [--mib N] [--reps R]
# Builds only modelcast-convert-bench (Release, build-bench/) and times every conversion a
# consumer offers (ConsumerOptions::conversions) against memcpy of the same bytes in the same
# run. MODELCAST_BENCH_JOBS sets the build's parallelism (default 2).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMODELCAST_BUILD_TESTS=OFF \
  -DMODELCAST_BUILD_EXAMPLES=OFF -DMODELCAST_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j"${MODELCAST_BENCH_JOBS:-2}" --target modelcast-convert-bench >/dev/null
exec "$build/bench/convert/modelcast-convert-bench" "$@"
