#!/bin/bash
# The demo's consumer processes going wrong, as a user would see it:
#   demo_faults.sh DEMO consumer-killed  a consumer killed mid-run fails the demo at once, naming it
#   demo_faults.sh DEMO demo-stopped     consumers end with the demo when it is stopped (SIGTERM)
set -u
demo=$1
case=$2
d=$(mktemp -d)
pid=
trap 'if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null; fi; rm -rf "$d"' EXIT

"$demo" --size-mib 1 --versions 1000 --consumers 2 --train-ms 100 >"$d/out" 2>"$d/err" &
pid=$!
# Polls for what the demo prints, with a deadline: version 2's row means both consumers run.
for _ in $(seq 600); do
  grep -q '^2 ' "$d/out" && break
  sleep 0.1
done
grep -q '^2 ' "$d/out" || { echo "the demo printed no row for version 2"; cat "$d/out" "$d/err"; exit 1; }
children=$(cat /proc/"$pid"/task/*/children)
[ "$(echo $children | wc -w)" -eq 2 ] || { echo "expected 2 consumer processes, found: $children"; exit 1; }

case $case in
consumer-killed)
  kill -9 $(echo $children | cut -d' ' -f1)
  wait "$pid"
  rc=$?
  pid=
  [ $rc -eq 1 ] || { echo "the demo exited with $rc, not 1"; exit 1; }
  grep -q 'consumer-[12] exited (signal 9) while waiting for version' "$d/err" || { cat "$d/err"; exit 1; }
  ;;
demo-stopped)
  kill -TERM "$pid"
  wait "$pid"
  pid=
  for c in $children; do
    for _ in $(seq 300); do
      kill -0 "$c" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$c" 2>/dev/null; then
      echo "consumer process $c still runs 30 s after the demo was stopped"
      kill -9 $children 2>/dev/null
      exit 1
    fi
  done
  ;;
*)
  echo "unknown case $case"
  exit 2
  ;;
esac
