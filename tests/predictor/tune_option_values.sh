#!/bin/sh
# modelcast-tune's numeric options refuse an empty value, naming the option (each once read as 0,
# --warmup-steps "" as "is required"), and --request-rate says why inf is refused.
# Usage: tune_option_values.sh MODELCAST_TUNE DATA_DIR
set -eu
tune=$1
log=$2/small.csv
err=$(mktemp)
trap 'rm -f "$err"' EXIT
# evaluate takes every numeric option but the forecast's; the required ones get good values unless under test.
run() {
  opt=$1
  shift
  set -- "$@" --publish-steps 300
  [ "$opt" = --warmup-steps ] || set -- "$@" --warmup-steps 200
  [ "$opt" = --publish-cost ] || set -- "$@" --publish-cost 2
  [ "$opt" = --update-latency ] || set -- "$@" --update-latency 1
  if "$tune" evaluate --log "$log" "$@" 2>"$err" >/dev/null; then
    echo "accepted: $*" >&2
    exit 1
  fi
}
for opt in --publish-cost --update-latency --request-rate --window --max-slowdown --total-steps --epoch-steps --warmup-steps; do
  run "$opt" "$opt" ""
  grep -q -- "$opt: empty value, expected a number" "$err" || { echo "$opt \"\":" >&2; cat "$err" >&2; exit 1; }
done
run --request-rate --request-rate inf
grep -q -- "--request-rate must be a finite number > 0, got inf" "$err" || { cat "$err" >&2; exit 1; }
# The forecast's options are plan's and replay's (evaluate forecasts nothing).
plan() { "$tune" plan --log "$log" --warmup-steps 200 --total-steps 800 --publish-cost 2 --update-latency 1 "$@"; }
if plan --loss-floor "" 2>"$err" >/dev/null; then
  echo "accepted: --loss-floor \"\"" >&2
  exit 1
fi
grep -q -- "--loss-floor: empty value, expected a number" "$err" || { cat "$err" >&2; exit 1; }
# "none" is the floor's own word for -infinity, which CLI11 would read as an option.
plan --loss-floor none >/dev/null
# As Python and YAML write it: "NONE" was refused as not a number.
plan --loss-floor None >/dev/null
echo "every numeric option refuses an empty value by name"
