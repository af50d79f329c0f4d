# Sourced by the benchmarks that need hosts behind links of a given rate (bench/fanout.sh,
# bench/sharded.sh). star_network PREFIX SUBNET COUNT RATE builds COUNT network namespaces
# PREFIX-0 .. PREFIX-(COUNT-1), node i at SUBNET.(i+1)/24 on its eth0, each joined to a bridge in
# namespace PREFIX-hub by a veth link limited to RATE (tc tbf) in both directions, and waits until
# every link is up. star_network_cleanup deletes them (set it as the EXIT trap). Needs root.
star_nodes=()
star_hub=""

star_network() {
  local prefix=$1 subnet=$2 count=$3 rate=$4 i ns tries
  star_hub="$prefix-hub"
  ip netns add "$star_hub"
  ip -n "$star_hub" link add br0 type bridge
  ip -n "$star_hub" link set br0 up
  for (( i = 0; i < count; i++ )); do
    ns="$prefix-$i"
    star_nodes+=("$ns")
    ip netns add "$ns"
    ip link add "n$i-$$" netns "$ns" type veth peer name "h$i-$$" netns "$star_hub"
    ip -n "$ns" link set "n$i-$$" name eth0
    ip -n "$ns" addr add "$subnet.$(( i + 1 ))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$star_hub" link set "h$i-$$" master br0
    ip -n "$star_hub" link set "h$i-$$" up
    # Both directions of the link: the node's sends (its eth0) and what it receives (the hub's end).
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 20ms
    ip netns exec "$star_hub" tc qdisc add dev "h$i-$$" root tbf rate "$rate" burst 256kb latency 20ms
  done
  for (( i = 0; i < count; i++ )); do
    for (( tries = 0; tries < 100; tries++ )); do
      ip -n "$prefix-$i" link show eth0 | grep -q 'state UP' && break
      sleep 0.1
    done
  done
}

star_network_cleanup() {
  local ns
  for ns in "${star_nodes[@]}" "$star_hub"; do
    [[ -n "$ns" ]] && ip netns del "$ns" 2>/dev/null || true
  done
}
