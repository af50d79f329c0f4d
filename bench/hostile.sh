#!/usr/bin/env bash
# Hostile-client and hostile-producer probes, long: bench/run.sh hostile [--scale N] [--json] [--build DIR]
#
# Runs the regression tests of the hostile suites (a stranger's bombs, forged and mutated UCX
# addresses, join, subscription and connection floods at an open-file limit of 1,024, rogue and
# rejecting producers, plaintext endpoints others could take over) with their iteration counts
# multiplied by N (default 10; 1 is what CI runs): MODELCAST_HOSTILE_SCALE=N, read by
# tests/support/hostile_scale.h. Builds its tests in build-hostile/ (or DIR; RelWithDebInfo, -j2;
# build output to stderr) and prints one row per test (result, seconds), or with --json:
#   [{"test": "HostileClientTest.BombsRandom...", "result": "OK", "seconds": 12.3}, ...]
# Exit status: 0 every test passed, 1 one failed (the output is in build-hostile/hostile-*.log),
# 2 build or usage error.
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-hostile"

scale=10 json=0
while (($#)); do
  case "$1" in
    --scale) scale=${2:?--scale needs a value}; shift 2 ;;
    --json) json=1; shift ;;
    --build) build=$(realpath -m "${2:?--build needs a directory}"); shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/hostile.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ $scale =~ ^[1-9][0-9]*$ ]] || { echo "bench/hostile.sh: --scale takes a positive integer" >&2; exit 2; }

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >&2 || exit 2
cmake --build "$build" -j2 --target modelcast_exchange_tests modelcast-test-peer modelcast_unit_tests \
  modelcast-address-mutation-peer >&2 || exit 2

export UCX_NET_DEVICES=lo MODELCAST_HOSTILE_SCALE=$scale
rc=0
rows=""
run() {  # binary, gtest filter, log name
  local binary=$1 filter=$2 log="$build/hostile-$3.log"
  "$binary" --gtest_filter="$filter" >"$log" 2>&1 || rc=1
  # gtest: "[       OK ] Suite.Name (1234 ms)" or "[  FAILED  ] Suite.Name (1234 ms)"
  rows+=$(sed -nE 's/^\[ +(OK|FAILED|SKIPPED) +\] ([A-Za-z0-9_./]+) \(([0-9]+) ms\)$/\2 \1 \3/p' "$log")$'\n'
}
bin=$(find "$build" -name modelcast_exchange_tests -type f -perm -u+x | head -1)
unit=$(find "$build" -name modelcast_unit_tests -type f -perm -u+x | head -1)
run "$bin" 'HostileClientTest.*:ConnectionBounds.*:ConsumerAgainstScriptedProducer.*:Secured.*' exchange
run "$unit" 'AddressLayout.*:LocalEndpoint.*' unit
rows=$(sed '/^$/d' <<<"$rows")
if [[ -z $rows ]]; then
  echo "bench/hostile.sh: no test results (see $build/hostile-*.log)" >&2
  exit 2
fi
if ((json)); then
  awk 'BEGIN { printf "[" }
       { printf "%s\n  {\"test\": \"%s\", \"result\": \"%s\", \"seconds\": %.1f}", (NR > 1 ? "," : ""), $1, $2, $3 / 1000 }
       END { print "\n]" }' <<<"$rows"
else
  printf '%-100s %-8s %8s\n' test result seconds
  awk '{ printf "%-100s %-8s %8.1f\n", $1, $2, $3 / 1000 }' <<<"$rows"
  echo "bench/run.sh hostile --scale $scale"
fi
exit "$rc"
