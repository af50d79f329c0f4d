#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, in build-fuzz/) and fuzzes each for a budget.
#
#   fuzz/run.sh [--seconds N | --runs N] [--keep] [TARGET...]
#
#   --seconds N  fuzz each target for N seconds (default 10)
#   --runs N     or for N executions each
#   --keep       keep the corpus grown by earlier runs (default: start from the seeds each time)
#   TARGET       fuzz only these (default: all of them)
#
# Each target first replays its seeds one at a time (fuzz/corpus/<target>/ and the seeds
# fuzz_make_corpus writes for the protocol as built), then fuzzes from the ones that pass, with
# fuzz/dict/<target>.dict as libFuzzer dictionary where there is one.
# Prints executions and crashes per target; exits 1 if anything crashed (crash inputs are kept
# under build-fuzz/artifacts/<target>/), 77 if clang or libFuzzer is missing (CTest: skipped).
# Environment: FUZZ_CXX (default clang++-14), FUZZ_BUILD_DIR (default build-fuzz),
# FUZZ_JOBS (build parallelism, default 2).
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
cxx=${FUZZ_CXX:-clang++-14}
jobs=${FUZZ_JOBS:-2}
all_targets=(fuzz_control_message fuzz_manifest fuzz_ipc_descriptor fuzz_curve_csv fuzz_transport_address fuzz_key_file)

seconds=10
runs=
keep=0
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds=${2:?--seconds needs a value}; runs=; shift 2 ;;
    --runs) runs=${2:?--runs needs a value}; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    fuzz_*) targets+=("$1"); shift ;;
    *) echo "fuzz/run.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
((${#targets[@]})) || targets=("${all_targets[@]}")
if [[ -n $runs && ! $runs =~ ^[1-9][0-9]*$ ]] || [[ ! $seconds =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz/run.sh: --seconds and --runs take a positive integer" >&2
  exit 2
fi

# --- prerequisites: clang with libFuzzer (Debian 12: clang-14, libclang-rt-14-dev) ----------
if ! command -v "$cxx" >/dev/null; then
  echo "fuzz/run.sh: SKIP: $cxx not found (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>"$probe/err"; then
  echo "fuzz/run.sh: SKIP: $cxx cannot link libFuzzer (apt-get install libclang-rt-14-dev):" >&2
  cat "$probe/err" >&2
  exit 77
fi

# --- build ------------------------------------------------------------------------------------
mkdir -p "$build"
cmake -S "$here" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 2; }
cmake --build "$build" -j"$jobs" >"$build/build.log" 2>&1 || { tail -50 "$build/build.log" >&2; exit 2; }
rm -rf "$build/seeds"
"$build/fuzz_make_corpus" "$build/seeds" >"$build/seeds.log" 2>&1 || { cat "$build/seeds.log" >&2; exit 2; }

# --- run --------------------------------------------------------------------------------------
# Every sanitizer report is fatal; libFuzzer turns a malloc beyond -malloc_limit_mb (default:
# -rss_limit_mb) into an "out-of-memory (malloc(N))" finding.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:handle_abort=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fuzz_flags=(-timeout=10 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1)
max_restarts=5  # after a crash the target is restarted with what is left of its budget

# What a crash log says went wrong, and where: the first sanitizer or harness line (numbers
# stripped) and the first stack frame in modelcast's code or a harness. Crashes with the same
# signature are counted once in "distinct".
signature() {
  local what where
  what=$(grep -m1 -oE 'ERROR: [A-Za-z]+: [a-z-]+( [a-z-]+)*|runtime error: [a-z -]+|^fuzz_[a-z_]+: .*|uncaught exception|deadly signal' "$1" |
         sed -E 's/[0-9]+/N/g')
  where=$(grep -m1 -E '^ *#[0-9]+ 0x[0-9a-f]+ in .*(/core/|/transports/|/predictor/|/fuzz/fuzz_)' "$1" |
          sed -E 's/^ *#[0-9]+ 0x[0-9a-f]+ in //; s/:[0-9]+$//')
  echo "${what:-exit status $2} @ ${where:-?}"
}

total_crashes=0
for t in "${targets[@]}"; do
  bin=$build/$t
  [[ -x $bin ]] || { echo "fuzz/run.sh: no such target '$t'" >&2; exit 2; }
  work=$build/work/$t
  art=$build/artifacts/$t
  logs=$build/logs/$t
  ((keep)) || rm -rf "$work"
  rm -rf "$art" "$logs"
  mkdir -p "$work" "$art" "$logs"

  # 1. Seeds, one process each: a seed that crashes is a finding and stays out of the fuzzing.
  seeds=0 seed_crashes=0 executions=0 crashes=0
  : >"$logs/signatures"
  : >"$logs/crashes"
  for f in "$here/corpus/$t"/* "$build/seeds/$t"/*; do
    [[ -f $f ]] || continue
    if [[ $f == "$build/seeds/"* ]] && cmp -s "$f" "$here/corpus/$t/$(basename "$f")"; then
      continue  # the checked-in seed is still what the generator writes
    fi
    seeds=$((seeds + 1))
    name=$(basename "$f")
    [[ $f == "$build/seeds/"* ]] && name=generated-$name
    rc=0
    "$bin" "$f" >"$logs/seed-$name.log" 2>&1 || rc=$?
    if ((rc == 0)); then
      cp "$f" "$work/seed-$name"
    else
      seed_crashes=$((seed_crashes + 1))
      cp "$f" "$art/seed-crash-$name"
      signature "$logs/seed-$name.log" "$rc" >>"$logs/signatures"
      echo "seed $name: $(tail -1 "$logs/signatures")" >>"$logs/crashes"
    fi
  done
  executions=$seeds
  crashes=$seed_crashes

  # 2. Fuzzing from the seeds that pass, restarted after a crash while budget remains.
  start=$SECONDS
  for ((attempt = 0; attempt <= max_restarts; attempt++)); do
    if [[ -n $runs ]]; then
      left=$((runs - (executions - seeds)))
      budget=(-runs="$left")
    else
      left=$((seconds - (SECONDS - start)))
      budget=(-max_total_time="$left")
    fi
    ((left > 0)) || break
    log=$logs/fuzz-$attempt.log
    before=$(find "$art" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
    rc=0
    dict=()
    [[ -f $here/dict/$t.dict ]] && dict=(-dict="$here/dict/$t.dict")
    "$bin" "${fuzz_flags[@]}" "${dict[@]}" "${budget[@]}" -artifact_prefix="$art/" "$work" >"$log" 2>&1 || rc=$?
    n=$(grep -E '^stat::number_of_executed_units:' "$log" | tail -1 | awk '{print $2}')
    executions=$((executions + ${n:-0}))
    ((rc == 0)) && break
    after=$(find "$art" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
    new=$((after - before))
    ((new > 0)) || new=1  # a failure that left no artifact still counts (see the log)
    crashes=$((crashes + new))
    for ((i = 0; i < new; i++)); do signature "$log" "$rc" >>"$logs/signatures"; done
    echo "fuzzing (run $attempt): $(tail -1 "$logs/signatures")" >>"$logs/crashes"
  done

  total_crashes=$((total_crashes + crashes))
  distinct=$(sort -u "$logs/signatures" | grep -c . || true)
  printf '%-22s executions=%-9s crashes=%-3s distinct=%-2s seeds=%s (%s crashing)\n' \
    "$t" "$executions" "$crashes" "$distinct" "$seeds" "$seed_crashes"
  sort "$logs/signatures" | uniq -c | sed -E 's/^ *([0-9]+) /    \1x /'
done

echo
if ((total_crashes)); then
  echo "fuzz/run.sh: $total_crashes crash(es); inputs under $build/artifacts/<target>/ (replay: $build/<target> FILE),"
  echo "             logs under $build/logs/<target>/ (crashes: which input said what)"
  find "$build/artifacts" -type f | sort | sed 's/^/    /'
  exit 1
fi
echo "fuzz/run.sh: no crashes"
