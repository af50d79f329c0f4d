#!/usr/bin/env bash
# Conversion benchmark: bench/run.sh convert [--json] [--mib N] [--reps R]
# Builds only modelcast-convert-bench (Release, build-bench/) and times every conversion a
# consumer offers (ConsumerOptions::conversions) against memcpy of the same bytes in the same
# run. MODELCAST_BENCH_JOBS sets the build's parallelism (default 2).
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"
"$here/build_bench.sh" modelcast-convert-bench
exec "$build/bench/convert/modelcast-convert-bench" "$@"
