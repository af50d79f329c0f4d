#!/usr/bin/env bash
# Benchmarks (bench/exchange_ab.sh compares two builds of the exchange benchmark in turn): bench/run.sh exchange|fanout|predictor|decision|plan|soak|fuzz|hostile|sidecar|workflow|gpu|convert|sharded|pypublish [--json] [options]
# Builds what it needs (Release, in build-bench/; fuzz: build-fuzz/) and prints a table, or JSON
# with --json. soak: --minutes N (bench/soak.sh --help); fuzz: --seconds N per target (bench/fuzz.sh);
# workflow: --seeds LIST --runs K (bench/workflow.sh); decision: the online scheduler's cost per
# decision on the training thread (bench/decision.sh); plan: the exact plan on per-step logs
# (bench/plan.sh); hostile: the hostile-client and
# hostile-producer tests with --scale N times their iterations (bench/hostile.sh); convert: a consumer's
# dtype conversions against memcpy (bench/convert.sh); pypublish: publish()'s stall from Python
# against the number of tensors (bench/pypublish.sh).
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
what=${1:-}
shift || true
case "$what" in
  exchange) exec "$here/exchange.sh" "$@" ;;
  fanout) exec "$here/fanout.sh" "$@" ;;
  predictor) exec "$here/predictor.sh" "$@" ;;
  decision) exec "$here/decision.sh" "$@" ;;
  plan) exec "$here/plan.sh" "$@" ;;
  soak) exec "$here/soak.sh" "$@" ;;
  fuzz) exec "$here/fuzz.sh" "$@" ;;
  hostile) exec "$here/hostile.sh" "$@" ;;
  sidecar) exec "$here/sidecar.sh" "$@" ;;
  workflow) exec "$here/workflow.sh" "$@" ;;
  gpu) exec "$here/gpu.sh" "$@" ;;
  convert) exec "$here/convert.sh" "$@" ;;
  sharded) exec "$here/sharded.sh" "$@" ;;
  pypublish) exec "$here/pypublish.sh" "$@" ;;
  *) echo "usage: bench/run.sh exchange|fanout|predictor|decision|plan|soak|fuzz|hostile|sidecar|workflow|gpu|convert|sharded|pypublish [--json] [options]" >&2; exit 2 ;;
esac
