#!/usr/bin/env bash
# A server set to another --horizon than its trainer's scored every answer against the wrong
# target without a word; the trainer publishes its horizon and the server refuses the mismatch.
# usage: horizon_mismatch.sh DIR_OF_THE_SIM_PROGRAMS; prints the server's error, exits 0 when it
# refused (CTest also matches the message).
set -uo pipefail
bin=$1
work=$(mktemp -d /tmp/modelcast-horizon.XXXXXX)
trap 'rm -rf "$work"' EXIT
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
"$bin/modelcast_sim_server" --endpoint "ipc://$work/s.sock" --horizon 20 --timeout-s 60 --log "$work/s.csv" \
  >/dev/null 2>"$work/server.err" &
server=$!
timeout 120 "$bin/modelcast_sim_trainer" --endpoint "ipc://$work/s.sock" --steps 200 --eval-every 20 \
  --warmup-steps 40 --timeout-s 5 >/dev/null 2>&1
server_rc=0
wait "$server" || server_rc=$?
grep -v '^\[' "$work/server.err"
[[ $server_rc != 0 ]]
