#!/usr/bin/env bash
# The Python publish benchmark: bench/run.sh pypublish [--json] [options]
# Builds the Python binding (Release, build-bench/, tests off) and runs bench/python_publish.py
# with it: publish()'s stall from Python against the number of tensors, beside a memcpy of the
# model. Options go to the script (--model-mib, --counts, --kinds, --reps; --help).
set -euo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-bench"
"$here/build_bench.sh" modelcast_python
export UCX_NET_DEVICES=lo
echo "pypublish: $(date -u +%FT%TZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" exec /usr/bin/python3 "$here/python_publish.py" "$@"
