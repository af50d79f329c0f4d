#!/usr/bin/env bash
# The exchange benchmark: bench/run.sh exchange [--json] [run options]
# Builds modelcast-exchange-bench (Release, build-bench/, tests off), runs it once per transport
# with that transport's UCX environment (the program's consumer, receiver and reader processes
# inherit it), then prints the table, or the JSON array with --json. Build output and progress go
# to stderr. Extra options go to `modelcast-exchange-bench run` (e.g. --sizes-mib 16 --reps 7).
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"

json=()
pass=()
for arg in "$@"; do
  if [[ "$arg" == "--json" ]]; then json=(--json); else pass+=("$arg"); fi
done

"$here/build_bench.sh" modelcast-exchange-bench
bin="$build/bench/exchange/modelcast-exchange-bench"

out="$build/exchange-results"
tmp="$build/tmp/exchange"
mkdir -p "$out" "$tmp"
rm -f "$out"/*.json

# Loopback only. Shared memory: UCX's default on one host. TCP: forced.
export UCX_NET_DEVICES=lo
echo "exchange: $(date -u +%FT%TZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
env -u UCX_TLS "$bin" run --transport shm --tmpdir "$tmp" --out "$out/shm.json" "${pass[@]}"
UCX_TLS=tcp,self "$bin" run --transport tcp --tmpdir "$tmp" --out "$out/tcp.json" "${pass[@]}"
"$bin" report "${json[@]}" "$out/shm.json" "$out/tcp.json"
