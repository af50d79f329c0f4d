#!/usr/bin/env bash
# Predictor benchmark: bench/run.sh predictor [--json] [harness options]
# Builds only the harness (Release, build-bench/), then evaluates plan and replay at 20 % warm-up
# and publish costs 0.5x/2x/8x over every curve family in bench/data/: the development curves
# (bench/data/curves/dev_val_loss.csv and stdlib_val_loss.csv, families from their track column)
# and the nanoGPT validation curves (one family); the families in
# bench/data/curves/heldout_val_loss.csv are held out of every choice and reported in their own
# rows. Without a reference run, leave-one-family-out, and again with a reference made from
# other records of the same family. The development runs' configured learning-rate schedules
# (bench/data/curves/dev_lr_schedules.csv) are given to the forecaster (plan and replay);
# --no-lr-schedules leaves them out (the behaviour before they existed). Harness options:
# --max-runs-per-family K (default 24; 0 = all), --threads N (default 2), --warmup-pct P,
# --family F, --json-out FILE, --cross-family-prior off|shape|shape-mixture|members (default off:
# plans get a prior learned on the other families' forecasts, strictly leave-one-family-out;
# bench/RESULTS.md as of commit 4f57f34, predictor section, 2026-11-24 later).
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"
"$here/build_bench.sh" modelcast-predictor-bench
cd "$root"
schedules=(--lr-schedules "$root/bench/data/curves/dev_lr_schedules.csv")
args=()
for a in "$@"; do
  if [[ "$a" == --no-lr-schedules ]]; then schedules=(); else args+=("$a"); fi
done
exec "$build/bench/predictor/modelcast-predictor-bench" \
  --data "$root/bench/data/curves/dev_val_loss.csv" \
  --data "$root/bench/data/curves/stdlib_val_loss.csv" \
  --data "$root/bench/data/nanogpt_val_loss.csv=nanogpt" \
  --held-out-data "$root/bench/data/curves/heldout_val_loss.csv" \
  "${schedules[@]}" --reference "${args[@]}"
