#!/bin/sh
# The committed stdlib curves are what bench/data/curves/make_stdlib_curves.py writes: three RL
# runs (one development, one of each held-out batch; under a second each) are made again and must
# match the committed rows byte for byte. The language-model runs are deterministic the same way but take
# minutes. Usage: stdlib_curves_reproduce.sh SOURCE_DIR
set -eu
src=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
python3 "$src/bench/data/curves/make_stdlib_curves.py" --out-dir "$out" --only s018,s023,s035 2>/dev/null
for f in stdlib_val_loss.csv heldout_val_loss.csv; do
  grep -E '^s0(18|23|35),' "$src/bench/data/curves/$f" > "$out/want_$f" || true
  grep -E '^s0(18|23|35),' "$out/$f" > "$out/got_$f" || true
  if [ ! -s "$out/want_$f" ]; then echo "no committed rows of s018/s023/s035 in $f" >&2; exit 1; fi
  cmp "$out/want_$f" "$out/got_$f" || { echo "$f: regenerated rows differ from the committed ones" >&2; exit 1; }
done
echo "s018, s023 and s035 regenerate identically"
