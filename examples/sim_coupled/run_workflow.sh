#!/usr/bin/env bash
# Runs the simulation-coupled workflow, for every seed and run:
#  live    for each of --policies, an inference server process and a trainer process talking
#          over modelcast (ipc:// endpoint on this host): measured end to end;
#  replay  the live online run also records its parameters at every evaluation with its training
#          clock less its own publish stalls and decisions; every policy is then scored on that
#          one record with the publish costs the live runs measured (replay.cpp): the same
#          training, under the same load, for all, so only the schedules and their costs differ;
# then the report (report.py) over all of them.
#
# usage: run_workflow.sh --bin DIR --out DIR [--policies a,b,..] [--seeds 1,2,..] [--runs K]
#                        [--short] [--json] [--check] [--work-mode MODE]
#   --bin       directory holding modelcast_sim_trainer, modelcast_sim_server, modelcast_sim_replay
#   --policies  the live runs' policies (online is always run: it makes the record; the replay
#               scores all five)
#   --short     fewer steps and a shorter window (the test suite's run)
#   --check     fail unless online's cumulative inference loss <= every_epoch's on every seed
#   --work-mode where the online scheduler refits and plans, live and in the replay: inline,
#               refits_in_background or background (default: background, decisions that cost
#               the training thread microseconds; the replay waits for its workers after each one)
# Environment: UCX_NET_DEVICES=lo is set unless already set.
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
bin="" out="" policies="online,every_epoch,every_n,viper_fixed,viper_greedy" seeds="1" runs=1
short=0 report_args=() work_mode=background
while [[ $# -gt 0 ]]; do
  # An option that takes a value, given last without one, ended in bash's "$2: unbound variable".
  case "$1" in
    --bin | --out | --policies | --seeds | --runs | --work-mode)
      [[ $# -ge 2 ]] || { echo "run_workflow.sh: $1 needs a value" >&2; exit 2; } ;;
  esac
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --policies) policies=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --short) short=1; shift ;;
    --work-mode) work_mode=$2; shift 2 ;;
    --json) report_args+=(--json); shift ;;
    --check) report_args+=(--check); shift ;;
    *) echo "run_workflow.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for program in modelcast_sim_trainer modelcast_sim_server modelcast_sim_replay; do
  [[ -x "$bin/$program" ]] || { echo "run_workflow.sh: --bin '$bin' lacks $program" >&2; exit 2; }
done
[[ -n "$out" ]] || { echo "run_workflow.sh: --out is required" >&2; exit 2; }
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "run_workflow.sh: --runs must be a positive integer, got '$runs'" >&2; exit 2; }
[[ "$seeds" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "run_workflow.sh: --seeds must be numbers separated by commas, got '$seeds'" >&2; exit 2; }
# Named before any run: a misspelt policy failed only after the live online run and the server's
# wait for a trainer that had refused it.
IFS=, read -r -a asked <<<"$policies"
for policy in "${asked[@]}"; do
  case "$policy" in
    online | every_epoch | every_n | viper_fixed | viper_greedy) ;;
    *) echo "run_workflow.sh: unknown policy '$policy' in --policies (online, every_epoch, every_n, viper_fixed, viper_greedy)" >&2; exit 2 ;;
  esac
done
# As the policies: a misspelt mode was refused by the trainer alone, and shown as the server's
# "no version arrived" a minute later.
case "$work_mode" in
  inline | refits_in_background | background) ;;
  *) echo "run_workflow.sh: unknown --work-mode '$work_mode' (inline, refits_in_background, background)" >&2; exit 2 ;;
esac
[[ -z "${WORKFLOW_WINDOW_S:-}" || "$WORKFLOW_WINDOW_S" =~ ^[0-9]+([.][0-9]+)?$ ]] ||
  { echo "run_workflow.sh: WORKFLOW_WINDOW_S must be a number of seconds, got '$WORKFLOW_WINDOW_S'" >&2; exit 2; }
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

# Full run: 6000 steps (37.5 epochs of 160 steps: the trainer's buffer of 10240 streamed samples
# over batches of 64); the window (from the warm-up version on) covers the rest of the training
# on this 2-core machine with some room. Short run: 2400 steps (15 epochs). WORKFLOW_WINDOW_S
# overrides the window on a slower or faster machine.
if [[ $short == 1 ]]; then
  steps=2400 warmup=240 window_s=${WORKFLOW_WINDOW_S:-12}
else
  steps=6000 warmup=600 window_s=${WORKFLOW_WINDOW_S:-36}
fi
rate=200
requests=$(awk -v w="$window_s" -v r="$rate" 'BEGIN { printf "%d", w * r }')
(( requests > 0 )) || { echo "run_workflow.sh: a window of ${window_s} s holds no request at $rate/s" >&2; exit 2; }
common=(--steps "$steps" --warmup-steps "$warmup" --request-rate "$rate" --window-s "$window_s")

sockdir=$(mktemp -d /tmp/modelcast-workflow.XXXXXX)
server_pid="" trainer_pid=""
cleanup() {
  [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null || true
  [[ -n "$trainer_pid" ]] && kill "$trainer_pid" 2>/dev/null || true
  rm -rf "$sockdir"
}
trap cleanup EXIT
mkdir -p "$out"
# One invocation per --out at a time: two mixed each other's records and server logs.
exec 9>"$out/.lock"
flock -n 9 || { echo "run_workflow.sh: another run_workflow.sh is writing to $out" >&2; exit 2; }
policy_list=(online)
for policy in "${asked[@]}"; do [[ $policy == online ]] || policy_list+=("$policy"); done
IFS=, read -r -a seed_list <<<"$seeds"
for seed in "${seed_list[@]}"; do
  rm -rf "$out/seed$seed"  # results of an earlier invocation would mix into the report
  for ((run = 1; run <= runs; run++)); do
    for policy in "${policy_list[@]}"; do
      [[ -n $policy ]] || continue
      dir="$out/seed$seed/run$run/live/$policy"
      mkdir -p "$dir"
      endpoint="ipc://$sockdir/$seed-$run-$policy.sock"
      echo "workflow: seed $seed run $run policy $policy" >&2
      # The server waits (bounded) for the trainer's warm-up version, so the order of start-up
      # does not matter; the trainer waits (bounded) for the server to join.
      timeout 300 "$bin/modelcast_sim_server" --endpoint "$endpoint" --seed "$seed" --rate "$rate" \
        --requests "$requests" --log "$dir/server.csv" >"$dir/server.json" 2>"$dir/server.err" &
      server_pid=$!
      # The trainer keeps its producer up until the server's window is over: it holds on until
      # its stdin (a FIFO this script writes) reaches end of file, which happens once the server
      # has exited.
      hold="$sockdir/$seed-$run-$policy.hold"
      mkfifo "$hold"
      record=()  # an array: an --out with spaces stays one argument
      [[ $policy == online ]] && record=(--record "$out/seed$seed/run$run/record.bin")
      timeout 300 "$bin/modelcast_sim_trainer" --endpoint "$endpoint" --seed "$seed" --policy "$policy" \
        --work-mode "$work_mode" "${common[@]}" --eval-log "$dir/eval.csv" --summary "$dir/trainer.json" --hold-until-eof \
        "${record[@]}" <"$hold" >/dev/null 2>"$dir/trainer.err" &
      trainer_pid=$!
      exec 4>"$hold"
      server_rc=0 trainer_rc=0
      wait "$server_pid" || server_rc=$?
      server_pid=""
      exec 4>&-
      wait "$trainer_pid" || trainer_rc=$?
      trainer_pid=""
      # The server first: a server that refused its arguments leaves the trainer waiting for it,
      # whose "no inference server joined" then hid the cause.
      if [[ $server_rc != 0 ]]; then
        echo "workflow: server failed ($dir/server.err):" >&2; cat "$dir/server.err" >&2
        # A trainer that failed first leaves the server waiting for a version: its error is the cause.
        if [[ $trainer_rc != 0 ]]; then
          echo "workflow: trainer failed too ($dir/trainer.err):" >&2; cat "$dir/trainer.err" >&2
        fi
        exit 1
      fi
      if [[ $trainer_rc != 0 ]]; then
        echo "workflow: trainer failed ($dir/trainer.err):" >&2; cat "$dir/trainer.err" >&2; exit 1
      fi
    done
    # The replay: one record, every policy, the publish costs measured by the live runs above.
    base="$out/seed$seed/run$run"
    echo "workflow: seed $seed run $run replay" >&2
    # The online policy is charged its live run's decision time (replay.cpp says why).
    costs=$(python3 "$here/report.py" --replay-costs "$base/live")
    read -r stall delivery online_decide <<<"$costs"
    timeout 300 "$bin/modelcast_sim_replay" --record "$base/record.bin" --out "$base/replay" --seed "$seed" \
      --warmup-steps "$warmup" --rate "$rate" --window-s "$window_s" --stall-s "$stall" --delivery-s "$delivery" \
      --online-decide-s "$online_decide" --work-mode "$work_mode" \
      2>"$base/replay.err" || { echo "workflow: replay failed:" >&2; cat "$base/replay.err" >&2; exit 1; }
    rm "$base/record.bin"  # tens of MB; the replay's outputs are what the report reads
  done
done
# Not exec: the EXIT trap removes the socket directory. Only this invocation's seeds are
# reported (others left in --out by an earlier one would mix in).
python3 "$here/report.py" --dir "$out" --seeds "$seeds" --svg "$out/workflow.svg" "${report_args[@]}"
