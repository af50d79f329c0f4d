#!/usr/bin/env bash
# The GPU checks, run on a machine with a GPU from the repository root:
#   bash gpu-bundle/run-gpu-checks.sh
# gpu-bundle/ is made by scripts/gpu-bundle.sh (which copies this file there) and carried along;
# nothing is built here. Results go under $OUT (./gpu-out when OUT is unset):
#   summary.txt            one line per step: its name, exit status, seconds taken, limit
#   nvidia-smi.txt         nvidia-smi's report, when there is one
#   device-tests.{xml,log} the device tests (tests/device/) with MODELCAST_DEVICE=cuda
#   gpu-tests.{xml,log}    the gpu-labelled tests (tests/gpu/)
#   sanitizer-*.{xml,log}  both again under compute-sanitizer --tool memcheck
#                          --target-processes all, when compute-sanitizer is found (PATH, then
#                          /usr/local/cuda/bin)
#   gpu-bench.json         the benchmark's JSON (bench/run.sh gpu --json), every size; one run per
#                          size (gpu-bench-<MiB>.json/.log), so a size that runs out of time costs
#                          only itself
#   MANIFEST               what the bundle was built from
# One failing step does not stop the others; every step is bounded with `timeout` (the whole
# group of processes it started is signalled), and the whole run stays within
# MODELCAST_GPU_CHECKS_BUDGET_S seconds (default 540: the device's per-command limit is 600).
#
# Environment:
#   MODELCAST_GPU_CHECKS_DEVICE     cuda (default) or simulated (host memory: tries the script
#                                   on a machine without a GPU; the gpu tests then skip)
#   MODELCAST_GPU_CHECKS_STEPS      which groups run, default tests,sanitizer,bench (so that two
#                                   device commands can share the work when one is not enough);
#                                   `exchange` (not a default) adds the host exchange benchmark
#                                   (exchange-{shm,tcp}.json, MODELCAST_GPU_EXCHANGE_ARGS its
#                                   options) on the device machine's cores
#   MODELCAST_GPU_EXCHANGE_ARGS     default --sizes-mib 256,1024 --consumers 1,4 --changed-pct
#                                   0,10,100 --reps 9 --file-reps 0
#   MODELCAST_GPU_CHECKS_SANITIZER  0 skips the compute-sanitizer steps
#   MODELCAST_GPU_CHECKS_BENCH_RESERVE_S  seconds of the budget the steps before the benchmark
#                                   leave to it, default 300 (0 when the bench is not run)
#   MODELCAST_GPU_CHECKS_FILTER     a --gtest_filter for the device tests (default: all)
#   MODELCAST_GPU_CHECKS_SANITIZER_LIMIT_S  the limit of the sanitizer's device tests, default 240
#                                   (the whole suite needs more: see below)
#   MODELCAST_GPU_BENCH_SIZES_MIB   default 256,1024,4482,16384 (issue #8's sizes)
#   MODELCAST_GPU_BENCH_PATHS       default cuda_ipc,staged,d2h,h2d
#   MODELCAST_GPU_BENCH_REPS        default 5
#   MODELCAST_GPU_BENCH_REPS_LARGE  reps for sizes of 8 GiB and more, default 3 (16 GiB at 5 reps,
#                                   its file baseline above all, would not fit the budget)
# Step limits (seconds): nvidia-smi 20, device tests 120, gpu tests 60, sanitizer device tests 240,
# sanitizer gpu tests 120,
# none of them reaching into the benchmark's reserve (300 s). The benchmark gets what is left,
# each size at most what remains minus 20 s for each size after it. Measured on an H200
# (2026-12-04): device tests 19 s, gpu tests 1 s; the benchmark at 256, 1024 and 4482 MiB, 5 reps,
# 6 + 23 + 86 s, and at 16384 MiB, 3 reps, 207 s (a file baseline of 16 GiB written, fsynced and
# read back per rep, and 16 GiB over loopback per update of the staged, d2h and h2d paths),
# hence 3 reps there. The sanitizer's device tests no longer fit their 240 s: 31 of 60 ran in
# 240 s, and the test of eight device consumers joining in turn alone takes more than 165 s (each
# consumer process starts slower under the sanitizer than the one before it); about 550 s in all.
# Give them a device command of their own (MODELCAST_GPU_CHECKS_STEPS=sanitizer,
# MODELCAST_GPU_CHECKS_SANITIZER_LIMIT_S=560, MODELCAST_GPU_CHECKS_BUDGET_S=580), or split the
# suite with MODELCAST_GPU_CHECKS_FILTER.
set -uo pipefail
bundle=$(CDPATH= cd -- "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$bundle/.." && pwd)
# A copy may have lost its modes on the way: the wrappers and the loader must be executable.
chmod u+x "$bundle"/bin/* "$bundle/lib/ld-linux-x86-64.so.2" 2>/dev/null || true
if [ "$(uname -m)" != x86_64 ]; then
  echo "gpu checks: this is $(uname -m); the bundle is x86_64 (built by scripts/gpu-bundle.sh on x86_64)" >&2
fi
. "$bundle/env.sh"
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary="$out/summary.txt"
: > "$summary"
cp "$bundle/MANIFEST" "$out/MANIFEST" 2>/dev/null || true

started=$(date +%s)
budget=${MODELCAST_GPU_CHECKS_BUDGET_S:-540}
device=${MODELCAST_GPU_CHECKS_DEVICE:-cuda}
sizes=${MODELCAST_GPU_BENCH_SIZES_MIB:-256,1024,4482,16384}
paths=${MODELCAST_GPU_BENCH_PATHS:-cuda_ipc,staged,d2h,h2d}
reps=${MODELCAST_GPU_BENCH_REPS:-5}
reps_large=${MODELCAST_GPU_BENCH_REPS_LARGE:-3}
steps=${MODELCAST_GPU_CHECKS_STEPS:-tests,sanitizer,bench}
wants() { [[ ",$steps," == *",$1,"* ]]; }
reserve=${MODELCAST_GPU_CHECKS_BENCH_RESERVE_S:-300}
wants bench || reserve=0
sanitizer_limit=${MODELCAST_GPU_CHECKS_SANITIZER_LIMIT_S:-240}
# Seconds are used in shell arithmetic, which reads a word as a variable's name (0 when there is
# none: a step that would time out at once), "1.5" as a syntax error and "0900" as octal: refuse
# anything but a plain whole number, by name.
for var in budget reserve sanitizer_limit; do
  if ! [[ "${!var}" =~ ^(0|[1-9][0-9]*)$ ]]; then
    echo "gpu checks: $var must be a whole number of seconds, got '${!var}'" >&2
    exit 2
  fi
done
bench_tmp="${TMPDIR:-/tmp}/modelcast-gpu-bench.$$"
trap 'rm -rf "$bench_tmp"' EXIT

export MODELCAST_DEVICE="$device"
export UCX_NET_DEVICES=lo
# The device tests' persistence check reads the files back with python3 + numpy: the first
# python3 that imports numpy (PATH first, then /usr/bin), unless MODELCAST_PYTHON names one.
if [ -z "${MODELCAST_PYTHON:-}" ]; then
  for py in $(type -ap python3) /usr/bin/python3; do
    if "$py" -c 'import numpy' >/dev/null 2>&1; then export MODELCAST_PYTHON="$py"; break; fi
  done
fi
export READ_SAFETENSORS_PY="$root/tests/daemon/read_safetensors.py"

remaining() { echo $(( budget - ($(date +%s) - started) )); }
# before_bench LIMIT: LIMIT, or less so as to leave the benchmark its reserve
before_bench() {
  local room=$(( $(remaining) - reserve - 5 ))
  echo $(( $1 < room ? $1 : room ))
}

# step NAME LIMIT CMD...: runs CMD (output to $out/NAME.log), bounded by LIMIT and by what is
# left of the budget; records the exit status (124: out of time) in summary.txt.
step() {
  local name=$1 limit=$2 left rc t0
  shift 2
  left=$(( $(remaining) - 5 ))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -lt 5 ]; then
    echo "$name rc=skipped (no time left of ${budget}s)" | tee -a "$summary"
    return 0
  fi
  t0=$(date +%s)
  echo "== $name (limit ${limit}s): $*"
  timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1 < /dev/null
  rc=$?
  echo "$name rc=$rc seconds=$(( $(date +%s) - t0 )) limit=$limit" | tee -a "$summary"
  if [ "$rc" != 0 ]; then
    echo "-- last lines of $name.log:"
    tail -n 15 "$out/$name.log"
  fi
  return 0
}

echo "gpu checks: $(date -u +%FT%TZ), device '$device', bundle $bundle, results $out"
echo "gpu checks: libcuda.so.1 from '${MODELCAST_BUNDLE_CUDA_LIBDIR:-nowhere (no driver found)}'," \
  "python3 with numpy: '${MODELCAST_PYTHON:-none (the persistence test will fail)}'"
if command -v nvidia-smi >/dev/null; then
  step nvidia-smi 20 nvidia-smi
  cp "$out/nvidia-smi.log" "$out/nvidia-smi.txt"
  cat "$out/nvidia-smi.txt"
else
  echo "nvidia-smi rc=absent" | tee -a "$summary"
fi

device_filter=()
[ -n "${MODELCAST_GPU_CHECKS_FILTER:-}" ] && device_filter=("--gtest_filter=$MODELCAST_GPU_CHECKS_FILTER")
if wants tests; then
  step device-tests "$(before_bench 120)" "$bundle/bin/modelcast_device_tests" "${device_filter[@]}" \
    "--gtest_output=xml:$out/device-tests.xml"
  step gpu-tests "$(before_bench 60)" "$bundle/bin/modelcast_gpu_device_tests" "--gtest_output=xml:$out/gpu-tests.xml"
fi

sanitizer=$(command -v compute-sanitizer || true)
[ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && sanitizer=/usr/local/cuda/bin/compute-sanitizer
if ! wants sanitizer || [ "${MODELCAST_GPU_CHECKS_SANITIZER:-1}" = 0 ]; then
  echo "sanitizer rc=skipped (MODELCAST_GPU_CHECKS_STEPS or MODELCAST_GPU_CHECKS_SANITIZER)" | tee -a "$summary"
elif [ -z "$sanitizer" ]; then
  echo "sanitizer rc=absent (no compute-sanitizer on PATH or in /usr/local/cuda/bin)" | tee -a "$summary"
else
  # API errors are not reported: the tests provoke two on purpose (an allocation that cannot fit,
  # a process opening its own IPC handle) and check that they are refused; memory errors are.
  memcheck=("$sanitizer" --tool memcheck --report-api-errors no --target-processes all --error-exitcode 99)
  # Without the death tests: they check the simulated runtime only, and compute-sanitizer dies
  # (SIGSEGV) on the child gtest re-executes for them.
  sanitizer_filter=${MODELCAST_GPU_CHECKS_FILTER:-*}
  if [[ "$sanitizer_filter" == *-* ]]; then sanitizer_filter+=":*DeathTest*"; else sanitizer_filter+="-*DeathTest*"; fi
  step sanitizer-device-tests "$(before_bench "$sanitizer_limit")" "${memcheck[@]}" "$bundle/bin/modelcast_device_tests" \
    "--gtest_filter=$sanitizer_filter" "--gtest_output=xml:$out/sanitizer-device-tests.xml"
  step sanitizer-gpu-tests "$(before_bench 120)" "${memcheck[@]}" "$bundle/bin/modelcast_gpu_device_tests" \
    "--gtest_output=xml:$out/sanitizer-gpu-tests.xml"
fi

if wants bench; then
  # The benchmark, one size at a time; what bench/gpu.sh prints first, then the runs.
  echo "gpu: $(date -u +%FT%TZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" \
    > "$out/gpu-bench-host.txt"
  IFS=, read -r -a size_list <<< "$sizes"
  bench_jsons=()
  for i in "${!size_list[@]}"; do
    mib=${size_list[$i]}
    later=$(( ${#size_list[@]} - i - 1 ))
    limit=$(( $(remaining) - 5 - 20 * later ))
    r=$reps
    [ "$mib" -ge 8192 ] && r=$reps_large
    step "gpu-bench-$mib" "$limit" bash -c '"$@" > "$0"' "$out/gpu-bench-$mib.json" \
      "$bundle/bin/modelcast-gpu-bench" --json --sizes-mib "$mib" --paths "$paths" --reps "$r" --tmpdir "$bench_tmp"
    bench_jsons+=("$out/gpu-bench-$mib.json")
  done
  rm -rf "$bench_tmp"

  # gpu-bench.json: the per-size arrays as one (each is nlohmann's dump(2): "[" ... "]" on lines
  # of their own; a size that failed or ran out of time leaves an empty or partial file, skipped).
  {
    echo "["
    first=1
    for f in "${bench_jsons[@]}"; do
      [ -s "$f" ] && [ "$(head -n1 "$f")" = "[" ] && [ "$(tail -n1 "$f")" = "]" ] || continue
      body=$(sed '1d;$d' "$f")
      [ -n "$body" ] || continue
      [ "$first" = 1 ] || echo ","
      printf '%s' "$body"
      first=0
    done
    echo
    echo "]"
  } > "$out/gpu-bench.json"
  if command -v python3 >/dev/null; then
    python3 - "$out/gpu-bench.json" <<'EOF' || echo "gpu-bench.json: not valid JSON"
import json, sys
rows = json.load(open(sys.argv[1]))
print(f"gpu-bench.json: {len(rows)} rows")
for r in rows:
    if "error" in r:
        print(f"  {r['size_bytes'] >> 20:6d} MiB {r['path']:9s} failed: {r['error']}")
        continue
    print(f"  {r['size_bytes'] >> 20:6d} MiB {r['path']:9s} update {r['update_ms']:9.2f} ms  stall {r['stall_ms']:8.2f}"
          f"  d2d {r['d2d_copy_ms']:8.2f}  d2h {r['d2h_ms']:8.2f}  h2d {r['h2d_ms']:8.2f}"
          f"  host {r['host_ceiling_ms']:8.2f}  digests {r.get('device_digest_ms', float('nan')):8.2f}"
          f" {r.get('host_digest_ms', float('nan')):8.2f}  file {r['file_baseline_ms']:9.1f}  ({r['device']})")
EOF
  fi
else
  echo "gpu-bench rc=skipped (MODELCAST_GPU_CHECKS_STEPS)" | tee -a "$summary"
fi

# The host exchange benchmark on this machine's cores (opt in: MODELCAST_GPU_CHECKS_STEPS
# with exchange). Its notification and serving rows on 2 shared cores cannot tell the design's
# share from a busy core's; here cores are to spare. One run over shared memory and one over
# TCP, each row as bench/run.sh exchange runs it.
if wants exchange; then
  exchange_args=${MODELCAST_GPU_EXCHANGE_ARGS:---sizes-mib 256,1024 --consumers 1,4 --changed-pct 0,10,100 --reps 9 --file-reps 0}
  for tpt in shm tcp; do
    tls=(env -u UCX_TLS)
    [ "$tpt" = tcp ] && tls=(env UCX_TLS=tcp,self)
    # shellcheck disable=SC2086  # the arguments are words on purpose
    step "exchange-$tpt" "$(( $(remaining) / 2 ))" "${tls[@]}" UCX_NET_DEVICES=lo \
      MODELCAST_BENCH_SELF="$bundle/bin/modelcast-exchange-bench" "$bundle/bin/modelcast-exchange-bench" run \
      --transport "$tpt" $exchange_args --out "$out/exchange-$tpt.json"
  done
else
  echo "exchange rc=skipped (not in MODELCAST_GPU_CHECKS_STEPS)" | tee -a "$summary"
fi

echo "== summary ($(( $(date +%s) - started ))s of ${budget}s; $out/summary.txt)"
cat "$summary"
