#!/usr/bin/env bash
# Benchmarks: bench/run.sh exchange|predictor [--json] [options]
# Builds what it needs (Release, in build-bench/) and prints a table, or JSON with --json.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
what=${1:-}
shift || true
case "$what" in
  exchange) exec "$here/exchange.sh" "$@" ;;
  predictor) exec "$here/predictor.sh" "$@" ;;
  *) echo "usage: bench/run.sh exchange|predictor [--json]" >&2; exit 2 ;;
esac
