#!/usr/bin/env bash
# The fan-out benchmark: bench/run.sh fanout [--json] [--consumers 1,2,4,8] [--size-mib 64]
#   [--link-mb-s 100] [--versions 4] [--relay-fanout 0,1]
# The producer and each consumer run in a network namespace of their own, each joined to a
# bridge by a veth link limited to --link-mb-s MB/s each way (tc tbf), UCX over TCP only: the
# producer's one link carries what it sends to every consumer, as a host's NIC would on a fleet,
# so the one-sender bottleneck shows on a 2-core machine too. Per consumer count it reports the
# update time (publish until the last consumer's ack, median of the versions after the first),
# the bytes the producer and the relays sent per version, and the link ceiling measured in the
# same run (the model over one plain TCP connection across two links, the median of three). Each consumer count runs
# once per --relay-fanout value (ProducerOptions::relay_fanout; 0: the producer sends to every
# consumer, 1: consumers relay to each other in chains). Needs root, iproute2 and
# tc; elsewhere it says so and exits 0. Build output and progress go to stderr.
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"

json=0
consumers="1,2,4,8"
size_mib=64
link=100
versions=4
fanouts="0,1"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --json) json=1 ;;
    --consumers) consumers="$2"; shift ;;
    --size-mib) size_mib="$2"; shift ;;
    --link-mb-s) link="$2"; shift ;;
    --versions) versions="$2"; shift ;;
    --relay-fanout) fanouts="$2"; shift ;;
    *) echo "fanout: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
# Checked before any network is built: a bad number was "unbound variable" from bash
# arithmetic, or a negative rate ran unlimited and was reported as that rate.
positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "fanout: $1 must be a positive integer, got '$2'" >&2; exit 2; }; }
positive --size-mib "$size_mib"
positive --link-mb-s "$link"
positive --versions "$versions"
IFS=, read -ra _counts <<<"$consumers"
for n in "${_counts[@]}"; do positive "--consumers (each)" "$n"; done
IFS=, read -ra _fanouts <<<"$fanouts"
for f in "${_fanouts[@]}"; do [[ $f =~ ^[0-9]+$ ]] || { echo "fanout: --relay-fanout takes counts >= 0, got '$f'" >&2; exit 2; }; done

if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "fanout: skipped: needs root, iproute2 (ip netns) and tc to build its network" >&2
  [[ $json -eq 1 ]] && echo "[]"
  exit 0
fi

"$here/build_bench.sh" modelcast-fanout-bench
bin="$build/bench/fanout/modelcast-fanout-bench"

max=0
IFS=, read -ra counts <<<"$consumers"
for n in "${counts[@]}"; do (( n > max )) && max=$n; done
tag=$$
bytes=$(( size_mib * 1024 * 1024 ))
rate="$(( link * 8 ))mbit"
# Node 0 is the producer (10.240.0.1), node i the consumer i (10.240.0.(i+1)).
source "$here/star_network.sh"
trap star_network_cleanup EXIT
star_network "mcf-$tag" 10.240.0 $(( max + 1 )) "$rate"
echo "fanout: $(date -u +%FT%TZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); links $link MB/s, model $size_mib MiB" >&2

in_ns() { local i=$1; shift; ip netns exec "mcf-$tag-$i" env UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 "$@"; }

# The link ceiling: the model from the producer's namespace to consumer 1's, over two links;
# the median of three transfers, as every other figure is a median.
ceilings=()
for k in 1 2 3; do
  coproc SINK { in_ns 1 "$bin" sink --port $(( 7100 + k )) --bytes "$bytes"; }
  # Bash unsets SINK_PID once the coprocess ends, which may be before the wait below.
  sink_pid=$SINK_PID
  read -r -u "${SINK[0]}" listening
  ceilings+=("$(in_ns 0 "$bin" source --host 10.240.0.2 --port $(( 7100 + k )) --bytes "$bytes")")
  wait "$sink_pid" 2>/dev/null || true
done
ceiling_ms=$(printf '%s\n' "${ceilings[@]}" | sort -g | sed -n 2p)
echo "fanout: link ceiling ${ceiling_ms} ms for $size_mib MiB (median of ${ceilings[*]})" >&2

rows=()
port=7200
IFS=, read -ra relay_fanouts <<<"$fanouts"
for fanout in "${relay_fanouts[@]}"; do
  for n in "${counts[@]}"; do
    port=$(( port + 1 ))
    endpoint="tcp://10.240.0.1:$port"
    pids=()
    for (( i = 1; i <= n; i++ )); do
      in_ns "$i" "$bin" consumer --endpoint "$endpoint" --name "c$i" --until "$versions" &
      pids+=($!)
    done
    # A producer that fails leaves its consumers waiting for versions: ended, not orphaned.
    if ! row=$(in_ns 0 "$bin" producer --endpoint "$endpoint" --bytes "$bytes" --versions "$versions" \
                 --consumers "$n" --relay-fanout "$fanout"); then
      kill "${pids[@]}" 2>/dev/null || true
      wait "${pids[@]}" 2>/dev/null || true
      echo "fanout: the producer failed ($n consumer(s), relay fan-out $fanout)" >&2
      exit 1
    fi
    for pid in "${pids[@]}"; do wait "$pid"; done
    echo "fanout: $n consumer(s), relay fan-out $fanout: $row" >&2
    rows+=("$row")
  done
done

python3 - "$link" "$ceiling_ms" "$json" "${rows[@]}" <<'EOF'
import json, sys
link, ceiling, as_json = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "1"
rows = [json.loads(r) for r in sys.argv[4:]]
# One consumer's update with the same relay fan-out (one consumer has nobody to relay to).
ones = {r["relay_fanout"]: r["update_ms"] for r in rows if r["consumers"] == 1}
out = []
for r in rows:
    one = ones.get(r["relay_fanout"])
    out.append({"consumers": r["consumers"], "relay_fanout": r["relay_fanout"], "link_mb_s": link,
                "size_mib": r["size_mib"], "update_ms": round(r["update_ms"], 1),
                "one_consumer_update_ms": one and round(one, 1),
                "producer_bytes": r["producer_bytes"], "relay_bytes": r["relay_bytes"],
                "link_ceiling_ms": round(ceiling, 1)})
if as_json:
    print(json.dumps(out, indent=2))
else:
    print(f"{'cons':>4} {'relay':>5} {'link_MB/s':>9} {'size_MiB':>8} {'update_ms':>10} {'x one':>6} {'producer_MiB':>12} {'relay_MiB':>9} {'ceiling_ms':>10} {'update/ceil':>11}")
    for o in out:
        one = o["one_consumer_update_ms"]
        ratio = o["update_ms"] / one if one else float("nan")
        print(f"{o['consumers']:>4} {o['relay_fanout']:>5} {o['link_mb_s']:>9.0f} {o['size_mib']:>8.0f} {o['update_ms']:>10.1f} {ratio:>6.2f} "
              f"{o['producer_bytes'] / 2**20:>12.1f} {o['relay_bytes'] / 2**20:>9.1f} {o['link_ceiling_ms']:>10.1f} "
              f"{o['update_ms'] / o['link_ceiling_ms']:>11.2f}")
    print("targets (issue): update_ms <= 1.3 x one consumer's, producer sends <= 2 models a version")
EOF
