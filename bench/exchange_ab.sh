#!/usr/bin/env bash
# A/B of two builds of the exchange benchmark in turn, so that both see the same machine state:
#   bench/exchange_ab.sh BASE_BIN NEW_BIN OUT_DIR [ROUNDS] [-- run options]
# BASE_BIN and NEW_BIN are modelcast-exchange-bench binaries (e.g. build-bench/ of two worktrees).
# Each round runs BASE then NEW over shared memory with the run options (default: the 1 GiB delta
# rows), writing OUT_DIR/{base,new}-ROUND.json; then prints the medians per changed_pct.
set -euo pipefail
base=$1 new=$2 out=$3 rounds=3
shift 3
# ROUNDS is optional: "--" may come right after OUT_DIR (it was read as the rounds count).
if [[ $# -gt 0 && $1 != -- ]]; then
  rounds=$1
  shift
fi
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "exchange_ab.sh: ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
[[ ${1:-} == -- ]] && shift
opts=("$@")
((${#opts[@]})) || opts=(--sizes-mib 1024 --consumers 1 --changed-pct 0,10,100 --reps 5 --no-serve --file-reps 0)
export UCX_NET_DEVICES=lo
mkdir -p "$out"
for ((i = 1; i <= rounds; i++)); do
  for which in base new; do
    bin=$base; [[ $which == new ]] && bin=$new
    env -u UCX_TLS "$bin" run --transport shm --tmpdir "$out" --out "$out/$which-$i.json" "${opts[@]}" >"$out/$which-$i.log" 2>&1
    echo "$which round $i done $(date -u +%T)" >&2
  done
done
python3 - "$out" <<'PY'
import collections, glob, json, statistics as st, sys
rows = collections.defaultdict(list)
for f in glob.glob(sys.argv[1] + "/*-*.json"):
    which = f.rsplit("/", 1)[-1].split("-")[0]
    for r in json.load(open(f)):
        rows[(r["size_bytes"], r["changed_pct"], which)].append(r)
print("size_MiB changed  build  rounds  update_ms  stall_ms  memcpy_ms")
for (size, pct, which), rs in sorted(rows.items()):
    med = lambda k: st.median(r[k] for r in rs)
    print(f"{size >> 20:8} {pct:6}%  {which:5} {len(rs):7} {med('update_ms'):10.1f} {med('stall_ms'):9.1f} {med('memcpy_ms'):10.1f}")
PY
