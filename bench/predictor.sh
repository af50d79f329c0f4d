#!/usr/bin/env bash
# Predictor benchmark: bench/run.sh predictor [--json] [harness options]
# Builds only the harness (Release, build-bench/), then evaluates plan and replay over the real
# curves in bench/data/. Harness options: --runs-per-record K (default 3; 0 = every run),
# --threads N (default 2), --no-reference (ablation without the cross-record prior),
# --json-out FILE (also write the JSON).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMODELCAST_BUILD_TESTS=OFF \
  -DMODELCAST_BUILD_EXAMPLES=OFF -DMODELCAST_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j2 --target modelcast-predictor-bench >/dev/null
cd "$root"
exec "$build/bench/predictor/modelcast-predictor-bench" --data "$root/bench/data/nanogpt_val_loss.csv" \
  --runs-per-record 3 "$@"
