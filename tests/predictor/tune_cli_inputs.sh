#!/bin/sh
# modelcast-tune's command line: --publish-steps read one way (spaces around items allowed, an
# empty item, a step past int64, a repeated or decreasing step refused by name), numbers decimal only (0x10 was read as 16),
# an option given "=" and no value is refused (it took the next argument), and a result or plot
# that cannot be written fails the command (both exited 0 on a full disk); usage errors exit 2.
# Usage: tune_cli_inputs.sh MODELCAST_TUNE DATA_DIR
set -eu
tune=$1
log=$2/small.csv
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "$*" >&2; cat "$dir/err" >&2; exit 1; }
evaluate() { "$tune" evaluate --log "$log" --warmup-steps 200 --publish-cost 2 --update-latency 1 "$@"; }

# Each item may carry spaces; the same schedule whichever side they are on.
evaluate --publish-steps "300, 500" --json > "$dir/a" 2>"$dir/err" || fail "'300, 500' refused"
evaluate --publish-steps "300 ,500 " --json > "$dir/b" 2>"$dir/err" || fail "'300 ,500 ' refused"
cmp -s "$dir/a" "$dir/b" || fail "spaces changed the schedule"
grep -q '"publish_steps": \[' "$dir/a" || fail "no schedule in the result"
# An empty list is the schedule that publishes nothing after the warm-up (it was refused as an
# empty value).
evaluate --publish-steps "" --json > "$dir/none" 2>"$dir/err" || fail "an empty --publish-steps refused"
grep -q '"publish_steps": \[\]' "$dir/none" || fail "an empty --publish-steps is not the empty schedule"

refused() {
  words=$1
  shift
  if "$@" > /dev/null 2>"$dir/err"; then fail "accepted: $*"; fi
  grep -q -- "$words" "$dir/err" || fail "'$words' not said for: $*"
}
refused "--publish-steps: an empty item between commas" evaluate --publish-steps "300,,500"
refused "--publish-steps: an empty item after the last comma" evaluate --publish-steps "300,"
refused "--publish-steps: an empty item between commas" evaluate --publish-steps ","
refused "'99999999999999999999' is out of range for a step" evaluate --publish-steps 99999999999999999999
refused "'3x' is not an integer step" evaluate --publish-steps 300,3x
refused "--publish-steps: steps must increase: 300 follows 500" evaluate --publish-steps 500,300
refused "--publish-steps: step 300 is given twice" evaluate --publish-steps "300, 300"
refused "--publish-cost: must be a decimal number, got '0x10'" evaluate --publish-steps 300 --publish-cost 0x10
refused "--warmup-steps: must be a decimal number, got '0xc8'" "$tune" evaluate --log "$log" --warmup-steps 0xc8 \
  --publish-cost 2 --update-latency 1 --publish-steps 300
# "--opt=" with nothing after it took the next argument as its value (CLI11's reading).
refused "--log= gives no value: write --log VALUE" "$tune" evaluate --log= "$log" --warmup-steps 200 \
  --publish-cost 2 --update-latency 1 --publish-steps 300
refused "--run= gives no value" evaluate --run= --publish-steps 300
refused "--log is given an empty value" "$tune" evaluate --log "" --warmup-steps 200 --publish-cost 2 \
  --update-latency 1 --publish-steps 300

# A clock standing still before the warm-up (it starts later): the plan forecast the rest of the
# run to take microseconds and published nothing, exit 0.
printf 'step,loss,time_s\n0,5,0\n100,4,0\n200,3.5,0\n300,3.2,10\n400,3,20\n500,2.9,30\n' > "$dir/flat.csv"
refused "time_s does not advance before the warm-up step (0 s at step 0, 0 s at step 200)" "$tune" plan \
  --log "$dir/flat.csv" --warmup-steps 200 --total-steps 1000 --publish-cost 2 --update-latency 1

# Negative steps: replay named an option nobody gave ("total_steps must be positive"), a reference
# named no file.
printf 'step,loss,time_s\n-500,5,0\n-400,4,1\n-300,3.5,2\n-200,3.2,3\n-100,3,4\n' > "$dir/negative.csv"
refused "$dir/negative.csv: its steps start at -500; steps count training steps from 0" "$tune" replay \
  --log "$dir/negative.csv" --warmup-steps -300 --publish-cost 2 --update-latency 1
printf 'step,loss\n-100,5\n100,4\n200,3\n' > "$dir/negative_ref.csv"
refused "$dir/negative_ref.csv: its steps start at -100" "$tune" plan --log "$log" --warmup-steps 200 \
  --total-steps 1000 --publish-cost 2 --update-latency 1 --reference "$dir/negative_ref.csv"

# A clock running backwards: the error quoted times the file does not have (those after each drop
# was bridged as a timer restart) without saying so.
printf 'step,loss,time_s\n0,5,1000\n100,4,990\n200,3.5,980\n300,3.2,970\n' > "$dir/backwards.csv"
refused "after 3 drop(s) of time_s were taken for timer restarts and bridged; the first: $dir/backwards.csv:3: time_s decreases" \
  "$tune" replay --log "$dir/backwards.csv" --warmup-steps 100 --publish-cost 2 --update-latency 1

# A clock standing still after the warm-up: the window was empty, every schedule scored CIL 0,
# "no gain achievable", exit 0.
printf 'step,loss,time_s\n0,5,0\n100,4,10\n200,3.5,20\n300,3.2,20\n400,3,20\n' > "$dir/stopped.csv"
refused "$dir/stopped.csv: time_s does not advance after the warm-up step (20 s at step 200, 20 s at step 400)" \
  "$tune" replay --log "$dir/stopped.csv" --warmup-steps 200 --publish-cost 2 --update-latency 1

# The warm-up at the log's last step: evaluate said the clock stood still (from and to that step).
refused "$dir/stopped.csv: nothing logged after the warm-up step (step 400 is the log's last)" \
  "$tune" evaluate --log "$dir/stopped.csv" --warmup-steps 400 --publish-cost 2 --update-latency 1 --publish-steps ""

# A curves file's total_steps beyond its log: replay and evaluate score the logged curve, whose
# end is the run's; evaluate's every-E baseline took the file's total_steps all the same, without a
# word. It is set aside, and said.
printf 'run,step,total_steps,val_loss,train_time_s\n' > "$dir/half.csv"
for s in $(seq 0 25 500); do echo "a,$s,1000,$((1000 - s)),$s" >> "$dir/half.csv"; done
"$tune" evaluate --log "$dir/half.csv" --run a --warmup-steps 200 --publish-cost 2 --update-latency 1 \
  --publish-steps 300 --json > "$dir/out" 2>"$dir/err" || fail "evaluate of a run logged to half its length refused"
grep -q "warning: the log's total_steps 1000 is set aside: the run is scored on the logged curve, which ends at step 500" \
  "$dir/err" || fail "the set-aside total_steps not said"
# Every tenth of the run: every 50 steps of a 500-step run from the warm-up on (100 of 1000 was used).
tr -d ' \n' < "$dir/out" | grep -q '"every_e_steps":{"predicted_cil":[^,]*,"publish_steps":\[250,300,' ||
  fail "every E is not a tenth of the logged run: $(tr -d ' \n' < "$dir/out")"

# A --reference whose clock went back was bridged without a word (--log's says so).
printf 'step,loss,time_s\n0,5,10\n1000,4,5\n2000,3,20\n4000,2,30\n' > "$dir/ref_back.csv"
"$tune" plan --log "$log" --warmup-steps 200 --total-steps 1000 --publish-cost 2 --update-latency 1 \
  --reference "$dir/ref_back.csv" > /dev/null 2>"$dir/err" || fail "plan with a bridged reference refused"
grep -q "warning: --reference $dir/ref_back.csv: $dir/ref_back.csv:3: time_s decreases" "$dir/err" ||
  fail "the reference's bridged time not said"

# A publish cost whose slowdown overflows: JSON has no infinity, and "slowdown_s" came out null.
refused "--publish-cost 1e+308 s times a schedule's publishes overflows a double" "$tune" plan --log "$log" \
  --warmup-steps 200 --total-steps 1000 --publish-cost 1e308 --update-latency 1 --json

# One exit status per outcome: 2 for every usage error (CLI11's own codes were 104 to 114, one
# per kind of error), 1 for input the command cannot use, 0 for --help.
status_is() {
  want=$1
  shift
  set +e
  "$@" > /dev/null 2>"$dir/err"
  got=$?
  set -e
  [ "$got" -eq "$want" ] || fail "exit status $got, not $want, for: $*"
}
status_is 2 "$tune" evaluate --log "$log" --warmup-steps 200 --publish-cost 20abc --update-latency 1 --publish-steps 300
status_is 2 "$tune" evaluate --log "$log" --warmup-steps 200 --publish-cost nan --update-latency 1 --publish-steps 300
status_is 2 "$tune" evaluate --log "$log" --publish-cost 2 --update-latency 1 --publish-steps 300
status_is 2 evaluate --publish-steps 300 stray
status_is 2 evaluate --publish-steps 300 --publish-cost 2
status_is 2 "$tune"
status_is 2 "$tune" bogus --log "$log"
grep -q "unknown command 'bogus' (the commands: plan, replay, evaluate" "$dir/err" || fail "bogus command not named"
# A step past int64 was clamped to its limit and named so ("9223372036854775807 is beyond the
# log"), or taken (--epoch-steps).
status_is 2 "$tune" evaluate --log "$log" --warmup-steps 99999999999999999999 --publish-cost 2 --update-latency 1 \
  --publish-steps 300
grep -q -- "--warmup-steps: must be a step within 2^53, got '99999999999999999999'" "$dir/err" || fail "clamped step"
status_is 2 evaluate --publish-steps 300 --epoch-steps 99999999999999999999
status_is 2 evaluate --publish-steps 300 --epoch-steps 9007199254740993
status_is 1 "$tune" evaluate --log "$log" --warmup-steps 999999 --publish-cost 2 --update-latency 1 --publish-steps 300
# A step that is not a number and an option the log does not replace are usage errors too.
status_is 2 evaluate --publish-steps abc
status_is 2 evaluate --publish-steps 3e3
# Without --total-steps a plan from --warmup-steps runs to the log's end (a finished run planned
# as from its warm-up); with neither, the whole log is the warm-up and the end is unknown.
"$tune" plan --log "$log" --warmup-steps 200 --publish-cost 2 --update-latency 1 --json > "$dir/out" 2>"$dir/err" ||
  fail "plan without --total-steps refused"
last=$(tail -n 1 "$log" | cut -d, -f1)
grep -q "\"total_steps\": $last," "$dir/out" || fail "plan to the log's end: total_steps is not the last step $last"
grep -q '"total_steps_from": "the log.s last step"' "$dir/out" || fail "plan to the log's end: where the end came from"
status_is 2 "$tune" plan --log "$log" --publish-cost 2 --update-latency 1
grep -q -- "--total-steps is required (the log does not say, and without --warmup-steps the whole log is the warm-up)" "$dir/err" ||
  fail "missing --total-steps not named"
status_is 0 "$tune" --help
status_is 0 "$tune" plan --help

# A full disk: the result on standard output, and the plot file.
if [ -w /dev/full ]; then
  refused "could not write the result to standard output" sh -c "\"\$0\" \"\$@\" > /dev/full" "$tune" evaluate \
    --log "$log" --warmup-steps 200 --publish-cost 2 --update-latency 1 --publish-steps 300
  ln -s /dev/full "$dir/full.svg"
  refused "failed writing plot file $dir/full.svg" evaluate --publish-steps 300 --plot "$dir/full.svg"
  refused "failed writing plot file $dir/full.svg" "$tune" replay --log "$log" --warmup-steps 200 \
    --publish-cost 2 --update-latency 1 --plot "$dir/full.svg"
else
  echo "no writable /dev/full here: the full-disk cases were not run"
fi
# A reference read from a pipe (--reference <(zcat ref.csv.gz)) is the reference read from its
# file: it was opened twice, and the second read began where the first had stopped (8 KiB in).
awk 'BEGIN { print "step,loss,time_s"; for (i = 0; i <= 2000; i++) printf "%d,%.6f,%.3f\n", i, 2 + 3 / (1 + 0.01 * i), 0.01 * i }' \
  > "$dir/ref.csv"
plan() { "$tune" plan --log "$log" --warmup-steps 200 --total-steps 800 --publish-cost 2 --update-latency 1 --json "$@"; }
plan --reference "$dir/ref.csv" > "$dir/from_file" 2>"$dir/err" || fail "a reference file refused"
# (A second open of the pipe finds no writer and waits: bounded, so that it fails instead.)
mkfifo "$dir/ref.fifo"
cat "$dir/ref.csv" > "$dir/ref.fifo" &
timeout 60 "$tune" plan --log "$log" --warmup-steps 200 --total-steps 800 --publish-cost 2 --update-latency 1 --json \
  --reference "$dir/ref.fifo" > "$dir/pipe_out" 2>"$dir/err" || fail "a reference from a pipe refused (or waited)"
wait
sed "s|$dir/ref.fifo|$dir/ref.csv|g" "$dir/pipe_out" > "$dir/from_pipe"
cmp -s "$dir/from_file" "$dir/from_pipe" || fail "a reference read from a pipe planned otherwise than from its file"
# A reference none of whose families fits the log was left out without a word; one that fits is
# used, and not warned about.
grep -q -- "--reference is not used" "$dir/from_file" && fail "a reference that fits was said to be set aside"
printf 'step,loss\n0,-1e100\n6000,1e100\n' > "$dir/unfit_ref.csv"
plan --reference "$dir/unfit_ref.csv" > "$dir/unfit" 2>"$dir/err" || fail "an unfit reference failed the plan"
grep -q -- "--reference is not used: no reference family could be fitted" "$dir/unfit" ||
  fail "an unfit reference was set aside without a word"
# A directory is said to be one (it opened, and was read as an empty file).
mkdir "$dir/d"
refused "$dir/d: is a directory, not a file" plan --reference "$dir/d"
refused "$dir/d: is a directory, not a file" plan --lr-schedule "$dir/d"
# File names go into the result as given, and need not be UTF-8: the JSON result was refused
# (after the plot was written) and the command failed.
odd=$(printf '%s/plot\377.svg' "$dir")
evaluate --publish-steps 300 --plot "$odd" --json > "$dir/odd" 2>"$dir/err" || fail "a plot name that is not UTF-8 failed the result"
python3 -c 'import json, sys; json.load(open(sys.argv[1], encoding="utf-8"))' "$dir/odd" 2>>"$dir/err" ||
  fail "the result with a name that is not UTF-8 is not JSON"
# The chart is no input's replacement: a log named .svg given as --plot too was overwritten.
cp "$log" "$dir/run.svg"
refused "--plot $dir/./run.svg is the --log file: the chart would replace it" "$tune" evaluate --log "$dir/run.svg" \
  --warmup-steps 200 --publish-cost 2 --update-latency 1 --publish-steps 300 --plot "$dir/./run.svg"
cmp -s "$log" "$dir/run.svg" || fail "the log given as --plot was changed"

# A constant in the loss changes no schedule's gain: a loss of 1000 falling by 1e-5 had every
# schedule tied with publishing once, and the "optimum" lost to the given schedule (regret -60 %).
for k in 0 1000; do
  awk -v k=$k 'BEGIN { print "step,loss,time_s"; for (i = 0; i <= 20; i++) printf "%d,%.12f,%d\n", 100 * i, k + 1e-5 / (1 + i), 10 * i }' \
    > "$dir/shift$k.csv"
  "$tune" evaluate --log "$dir/shift$k.csv" --warmup-steps 200 --publish-cost 1 --update-latency 1 \
    --publish-steps 300,400,500,600,700,800 --json > "$dir/shift$k.json" 2>"$dir/err" || fail "the log with $k added refused"
done
python3 - "$dir/shift0.json" "$dir/shift1000.json" 2>>"$dir/err" <<'PY' || fail "a constant added to the loss moved the optimum"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["optimal"]["publish_steps"] == b["optimal"]["publish_steps"], (a["optimal"], b["optimal"])
assert b["regret_pct"] >= 0 and abs(a["regret_pct"] - b["regret_pct"]) < 1e-3, (a["regret_pct"], b["regret_pct"])
PY
# evaluate forecasts nothing: it took the forecast's options and ignored them, invalid ones too.
refused "were not expected: .*--anneal-drop" evaluate --publish-steps 300 --anneal-drop -5
refused "were not expected: .*--reference" evaluate --publish-steps 300 --reference /nonexistent.csv
# A loss the fits cannot square drew a chart at NaN; a clock continued past a timer restart
# into infinity was refused without a file or line.
printf 'step,loss,time_s\n0,1.7e308,0\n100,2,1\n200,1,2\n300,0.5,3\n' > "$dir/huge.csv"
refused "huge.csv:2: column 'loss' is beyond +-1e100 ('1.7e308')" "$tune" evaluate --log "$dir/huge.csv" \
  --warmup-steps 100 --publish-cost 1 --update-latency 1 --publish-steps 300
printf 'step,loss,time_s\n0,5,0\n100,4,9e99\n200,3,0\n300,2,1\n' > "$dir/restart.csv"
refused "restart.csv:4: time_s decreases (timer restart?), and continuing the clock" "$tune" evaluate \
  --log "$dir/restart.csv" --warmup-steps 100 --publish-cost 1 --update-latency 1 --publish-steps 300
# A window lost in rounding scored nothing ("no gain achievable"), as --window 0, which is refused.
refused "window_s 1e-300 s is lost in rounding" "$tune" replay --log "$log" --warmup-steps 200 --publish-cost 2 \
  --update-latency 1 --window 1e-300
# A schedule at rate 0 throughout is named with its file (the forecaster said "lr_schedule: ...").
printf 'step,lr\n0,0\n1000,0\n' > "$dir/zero_lr.csv"
refused "zero_lr.csv:3: the rate is 0 on every row" plan --lr-schedule "$dir/zero_lr.csv"
# A headerless log whose numbers carry a '+' (printf's "%+d") is numbers: its first row was taken
# for a header, said to lack a 'step' column.
printf '+0,+5,0\n+100,4,1\n200,3,2\n300,2.5,3\n400,2.2,4\n' > "$dir/plus.csv"
"$tune" evaluate --log "$dir/plus.csv" --warmup-steps 100 --publish-cost 0.1 --update-latency 0.1 \
  --publish-steps 300 > /dev/null 2>"$dir/err" || fail "a log of numbers with '+' signs refused"
printf '+0,+0.001\n+1000,+0.0001\n' > "$dir/plus_lr.csv"
plan --lr-schedule "$dir/plus_lr.csv" > /dev/null 2>"$dir/err" || fail "a schedule of numbers with '+' signs refused"
printf 'step,loss,time_s\n0,+1e400,0\n100,4,1\n' > "$dir/plus_huge.csv"
refused "plus_huge.csv:2: column 'loss' is out of a double's range: '+1e400'" "$tune" evaluate --log "$dir/plus_huge.csv" \
  --warmup-steps 0 --publish-cost 0.1 --update-latency 0.1 --publish-steps ""
printf 'step,loss,time_s\n0,+-5,0\n100,4,1\n' > "$dir/two_signs.csv"
refused "two_signs.csv:2: column 'loss' is not a number: '+-5'" "$tune" evaluate --log "$dir/two_signs.csv" \
  --warmup-steps 0 --publish-cost 0.1 --update-latency 0.1 --publish-steps ""
echo "publish steps, decimal numbers and failed writes are handled as documented"
