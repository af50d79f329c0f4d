#!/usr/bin/env bash
# Fuzzing campaign: bench/run.sh fuzz [--seconds N] [--json] [fuzz/run.sh options] [TARGET...]
#
# Runs fuzz/run.sh (clang-14 + libFuzzer, ASan + UBSan, build-fuzz/) with a budget of N seconds
# per target (default 600) and prints executions and crashes per target, or with --json:
#   [{"target": "fuzz_manifest", "executions": 123456, "crashes": 0}, ...]
# Other arguments (--runs N, --keep, target names) go to fuzz/run.sh unchanged. fuzz/run.sh's own
# output goes to stderr. Exit status is fuzz/run.sh's: 0 no crashes, 1 crashes (inputs under
# build-fuzz/artifacts/<target>/), 77 clang or libFuzzer missing, 2 build or usage error.
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

seconds=600 json=0 pass=()
while (($#)); do
  case "$1" in
    --seconds) seconds=${2:?--seconds needs a value}; shift 2 ;;
    --json) json=1; shift ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) pass+=("$1"); shift ;;
  esac
done

log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
"$root/fuzz/run.sh" --seconds "$seconds" "${pass[@]}" 2>&1 | tee "$log" >&2 || rc=${PIPESTATUS[0]}
if ((rc != 0 && rc != 1)); then
  echo "bench/fuzz.sh: fuzz/run.sh exited with status $rc" >&2
  exit "$rc"
fi

# fuzz/run.sh: "<target> executions=N crashes=N distinct=N seeds=N (N crashing)" per target.
rows=$(sed -nE 's/^(fuzz_[A-Za-z0-9_]+) +executions=([0-9]+) +crashes=([0-9]+).*/\1 \2 \3/p' "$log")
if [[ -z $rows ]]; then
  echo "bench/fuzz.sh: no per-target lines in fuzz/run.sh's output" >&2
  exit 2
fi
if ((json)); then
  awk 'BEGIN { printf "[" }
       { printf "%s\n  {\"target\": \"%s\", \"executions\": %d, \"crashes\": %d}", (NR > 1 ? "," : ""), $1, $2, $3 }
       END { print "\n]" }' <<<"$rows"
else
  printf '%-24s %12s %8s\n' target executions crashes
  awk '{ printf "%-24s %12d %8d\n", $1, $2, $3; e += $2; c += $3 }
       END { printf "%-24s %12d %8d\n", "total", e, c }' <<<"$rows"
  echo "fuzz/run.sh --seconds $seconds${pass[*]:+ ${pass[*]}}"
fi
exit "$rc"
