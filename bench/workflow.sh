#!/usr/bin/env bash
# Simulation-coupled workflow benchmark: bench/run.sh workflow [--json] [--seeds 1,2,3] [--runs K] [--work-mode M]
# Builds the example's programs (Release, build-bench/), then runs examples/sim_coupled/run_workflow.sh
# at full length (6000 steps, a 36 s serving window) for every policy live and in the replay, and
# prints the report (medians over runs per mode, seed and policy). Outputs stay in
# build-bench/workflow/ (per-request logs, workflow.svg). Needs LibTorch (libtorch-dev).
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"
seeds=1,2,3 runs=2 pass=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seeds) seeds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --json) pass+=(--json); shift ;;
    --work-mode) pass+=(--work-mode "$2"); shift 2 ;;
    *) echo "bench/run.sh workflow: unknown argument '$1' (--json, --seeds LIST, --runs K, --work-mode MODE)" >&2; exit 2 ;;
  esac
done
if ! "$here/build_bench.sh" modelcast_sim_trainer modelcast_sim_server modelcast_sim_replay; then
  echo "bench/run.sh workflow: build failed (is libtorch-dev installed? scripts/install-deps.sh)" >&2; exit 1
fi
exec "$root/examples/sim_coupled/run_workflow.sh" \
  --bin "$build/examples/sim_coupled" --out "$build/workflow" --seeds "$seeds" --runs "$runs" "${pass[@]}"
