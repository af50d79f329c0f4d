#!/usr/bin/env bash
# The sharded benchmark: bench/run.sh sharded [--json] [--producers 1,4] [--consumers 4]
#   [--layouts whole,dim0,dim1] [--size-mib 64] [--row-bytes 1048576] [--chunk-bytes 65536]
#   [--link-mb-s 100] [--versions 4]
# A model trained on M producer ranks (each holding its rows, a dim-0 piece, of every tensor) and
# served by N consumers that each want the whole model, or their quarter (part k of N) along dim 0
# or resharded along dim 1. Every producer and consumer runs in a network namespace of its own,
# joined to a bridge by a veth link limited to --link-mb-s MB/s each way (tc tbf), UCX over TCP
# only, as in bench/fanout.sh. The ranks publish each step together (they meet in a directory
# before it, as a training loop keeps ranks together). Per (M, layout) it reports the update time
# (the last rank's publish() until a consumer installed the step, the slowest consumer's median
# over the steps after the first), the bytes a consumer wants and receives per step, and the link ceiling
# measured in the same run: the wanted bytes over one plain TCP connection across two links
# (the median of three transfers).
# Needs root, iproute2 and tc; elsewhere it says so and exits 0. Progress goes to stderr.
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"

json=0
producers="1,4"
consumers=4
layouts="whole,dim0,dim1"
size_mib=64
row_bytes=1048576
chunk_bytes=65536
link=100
versions=4
while [[ $# -gt 0 ]]; do
  case "$1" in
    --json) json=1 ;;
    --producers) producers="$2"; shift ;;
    --consumers) consumers="$2"; shift ;;
    --layouts) layouts="$2"; shift ;;
    --size-mib) size_mib="$2"; shift ;;
    --row-bytes) row_bytes="$2"; shift ;;
    --chunk-bytes) chunk_bytes="$2"; shift ;;
    --link-mb-s) link="$2"; shift ;;
    --versions) versions="$2"; shift ;;
    *) echo "sharded: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "sharded: skipped: needs root, iproute2 (ip netns) and tc to build its network" >&2
  [[ $json -eq 1 ]] && echo "[]"
  exit 0
fi

"$here/build_bench.sh" modelcast-sharded-bench modelcast-fanout-bench
bin="$build/bench/sharded/modelcast-sharded-bench"
link_bin="$build/bench/fanout/modelcast-fanout-bench"

max_m=0
IFS=, read -ra ms <<<"$producers"
for m in "${ms[@]}"; do (( m > max_m )) && max_m=$m; done
nodes_total=$(( max_m + consumers ))
tag=$$
bytes=$(( size_mib * 1024 * 1024 ))
rate="$(( link * 8 ))mbit"
work=$(mktemp -d)
# Node i (0-based) is 10.241.0.(i+1): producers first, then consumers.
source "$here/star_network.sh"
trap 'star_network_cleanup; rm -rf "$work"' EXIT
star_network "mcs-$tag" 10.241.0 "$nodes_total" "$rate"
echo "sharded: $(date -u +%FT%TZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); links $link MB/s, model $size_mib MiB, rows $row_bytes B, blocks $chunk_bytes B" >&2

in_ns() { local i=$1; shift; ip netns exec "mcs-$tag-$i" env UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 "$@"; }

# The link ceiling: the whole model from node 0 to the first consumer's node, over two links;
# a layout's ceiling is its share of it (the links are rate-limited, so time is linear in bytes).
# The median of three transfers, as every other figure is a median.
ceilings=()
for k in 1 2 3; do
  coproc SINK { in_ns "$max_m" "$link_bin" sink --port $(( 7100 + k )) --bytes "$bytes"; }
  sink_pid=$SINK_PID
  read -r -u "${SINK[0]}" listening
  ceilings+=("$(in_ns 0 "$link_bin" source --host "10.241.0.$(( max_m + 1 ))" --port $(( 7100 + k )) --bytes "$bytes")")
  wait "$sink_pid" 2>/dev/null || true
done
ceiling_ms=$(printf '%s\n' "${ceilings[@]}" | sort -g | sed -n 2p)
echo "sharded: link ceiling ${ceiling_ms} ms for $size_mib MiB (median of ${ceilings[*]})" >&2

rows=()
port=7200
IFS=, read -ra layout_list <<<"$layouts"
common=(--bytes "$bytes" --row-bytes "$row_bytes" --versions "$versions")
for m in "${ms[@]}"; do
  for layout in "${layout_list[@]}"; do
    port=$(( port + 10 ))
    endpoints=()
    for (( r = 0; r < m; r++ )); do endpoints+=("tcp://10.241.0.$(( r + 1 )):$(( port + r ))"); done
    rank_list=$(IFS=,; echo "${endpoints[*]}")
    pids=()
    barrier="$work/barrier-$m-$layout"
    mkdir -p "$barrier"
    # Ranks 1.. first, then rank 0 (told the others), then the consumers.
    for (( r = m - 1; r >= 0; r-- )); do
      rm -f "$work/ready"
      extra=()
      (( r == 0 )) && extra=(--rank-endpoints "$rank_list")
      in_ns "$r" "$bin" producer --endpoint "${endpoints[$r]}" --rank "$r" --ranks "$m" --consumers "$consumers" \
        --chunk-bytes "$chunk_bytes" --ready-file "$work/ready" --barrier-dir "$barrier" "${extra[@]}" "${common[@]}" &
      pids+=($!)
      for (( tries = 0; tries < 600; tries++ )); do [[ -e "$work/ready" ]] && break; sleep 0.05; done
    done
    outs=()
    cpids=()
    for (( k = 0; k < consumers; k++ )); do
      case "$layout" in
        whole) want=whole ;;
        dim0) want="shard:0:$k:$consumers" ;;
        dim1) want="shard:1:$k:$consumers" ;;
        *) echo "sharded: unknown layout $layout" >&2; exit 2 ;;
      esac
      in_ns $(( max_m + k )) "$bin" consumer --endpoint "${endpoints[0]}" --name "c$k" --want "$want" \
        --producers "$m" "${common[@]}" >"$work/c$k.json" &
      cpids+=($!)
    done
    for pid in "${cpids[@]}"; do wait "$pid"; done
    for pid in "${pids[@]}"; do wait "$pid"; done
    for (( k = 0; k < consumers; k++ )); do outs+=("$(cat "$work/c$k.json")"); done
    echo "sharded: $m producer(s), $layout: ${outs[*]}" >&2
    rows+=("$(printf '%s\n' "${outs[@]}" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
slowest = max(rows, key=lambda r: r["update_ms"])
slowest["consumers"] = len(rows)
slowest["layout"] = slowest["layout"].split(":")[0] if slowest["layout"] == "whole" else "dim" + slowest["layout"].split(":")[1] + "_1_of_" + slowest["layout"].split(":")[3]
print(json.dumps(slowest))')")
  done
done

python3 - "$link" "$ceiling_ms" "$bytes" "$json" "${rows[@]}" <<'PY'
import json, sys
link, ceiling, model, as_json = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
out = []
for r in map(json.loads, sys.argv[5:]):
    out.append({"producers": r["producers"], "consumers": r["consumers"], "layout": r["layout"],
                "size_mib": r["size_mib"], "update_ms": round(r["update_ms"], 1), "wanted_bytes": r["wanted_bytes"],
                "bytes_received": int(r["bytes_received"]),
                "link_ceiling_ms": round(ceiling * r["wanted_bytes"] / model, 1), "link_mb_s": link})
if as_json:
    print(json.dumps(out, indent=2))
else:
    print(f"{'M':>2} {'N':>2} {'layout':>12} {'size_MiB':>8} {'update_ms':>10} {'wanted_MiB':>10} {'received_MiB':>12} {'recv/want':>9} {'ceiling_ms':>10} {'update/ceil':>11}")
    for o in out:
        print(f"{o['producers']:>2} {o['consumers']:>2} {o['layout']:>12} {o['size_mib']:>8.0f} {o['update_ms']:>10.1f} "
              f"{o['wanted_bytes'] / 2**20:>10.1f} {o['bytes_received'] / 2**20:>12.1f} "
              f"{o['bytes_received'] / max(o['wanted_bytes'], 1):>9.2f} {o['link_ceiling_ms']:>10.1f} "
              f"{o['update_ms'] / max(o['link_ceiling_ms'], 1e-9):>11.2f}")
PY
