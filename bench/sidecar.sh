#!/usr/bin/env bash
# The sidecar benchmark: bench/run.sh sidecar [--json] [run options]
# Builds modelcastd and modelcast-sidecar-bench (Release, build-bench/, tests off) and runs them
# on loopback; build output and progress go to stderr. Extra options go to the program
# (e.g. --sizes-mib 256,1024 --reps 5 --tmpdir DIR; the repository is written under --tmpdir).
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"
"$here/build_bench.sh" modelcast-sidecar-bench modelcastd
export UCX_NET_DEVICES=lo
echo "sidecar: $(date -u +%FT%TZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
exec "$build/bench/sidecar/modelcast-sidecar-bench" "$@"
