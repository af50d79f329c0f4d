#!/usr/bin/env bash
# The exchange benchmark against Debian's UCX and the newer one (scripts/build-newer-ucx.sh),
# interleaved in one time window so that both see the same machine load: for each round and
# transport, one run per UCX, the order alternating between rounds. Uses the benchmark binary of
# an existing build (BUILD, default build/): libucp keeps its ABI, so only the library changes.
# Extra options go to `modelcast-exchange-bench run`. Tables go to stdout, one per round and UCX.
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
bin="$build/bench/exchange/modelcast-exchange-bench"
newer="$root/.ucx-newer/install"
rounds=${ROUNDS:-2}
out="$root/.ucx-newer/bench"
mkdir -p "$out/tmp"
export UCX_NET_DEVICES=lo
echo "ucx bench: $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((round = 1; round <= rounds; round++)); do
  order=(debian newer)
  ((round % 2 == 0)) && order=(newer debian)
  for tpt in shm tcp; do
    for which in "${order[@]}"; do
      e=()
      [[ $which == newer ]] && e=(LD_LIBRARY_PATH="$newer/lib" UCX_MODULE_DIR="$newer/lib/ucx")
      [[ $tpt == tcp ]] && e+=(UCX_TLS=tcp,self)
      echo "round $round: $which $tpt ($(date -u +%T), load $(cut -d' ' -f1 /proc/loadavg))" >&2
      env -u UCX_TLS "${e[@]}" "$bin" run --transport "$tpt" --tmpdir "$out/tmp" \
        --out "$out/r$round-$which-$tpt.json" "$@" >&2
    done
  done
  for which in debian newer; do
    echo "== round $round, $which UCX"
    "$bin" report "$out/r$round-$which-shm.json" "$out/r$round-$which-tcp.json"
  done
done
