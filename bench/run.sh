#!/usr/bin/env bash
# Benchmarks: bench/run.sh exchange|predictor|soak|fuzz|sidecar [--json] [options]
# Builds what it needs (Release, in build-bench/; fuzz: build-fuzz/) and prints a table, or JSON
# with --json. soak: --minutes N (bench/soak.sh --help); fuzz: --seconds N per target (bench/fuzz.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
what=${1:-}
shift || true
case "$what" in
  exchange) exec "$here/exchange.sh" "$@" ;;
  predictor) exec "$here/predictor.sh" "$@" ;;
  soak) exec "$here/soak.sh" "$@" ;;
  fuzz) exec "$here/fuzz.sh" "$@" ;;
  sidecar) exec "$here/sidecar.sh" "$@" ;;
  *) echo "usage: bench/run.sh exchange|predictor|soak|fuzz|sidecar [--json] [options]" >&2; exit 2 ;;
esac
