#!/usr/bin/env bash
# The GPU benchmark: bench/run.sh gpu [--json] [run options]
# Builds modelcast-gpu-bench (Release, build-bench/, tests off) and runs it on loopback; build
# output and progress go to stderr. Extra options go to the program (--sizes-mib 256,1024,4482,16384
# --paths cuda_ipc,staged,d2h,h2d --reps 5 --tmpdir DIR). It uses the device MODELCAST_DEVICE
# selects: the GPU by default; MODELCAST_DEVICE=simulated runs it in host memory (a smoke test of
# the harness, not GPU figures: use small sizes).
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"
"$here/build_bench.sh" modelcast-gpu-bench
export UCX_NET_DEVICES=lo
echo "gpu: $(date -u +%FT%TZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >&2 || true; fi
exec "$build/bench/gpu/modelcast-gpu-bench" "$@"
