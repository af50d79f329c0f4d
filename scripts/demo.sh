#!/usr/bin/env bash
# The main job: install what is missing, build, and run a real producer -> consumer exchange on
# this host (the built-in ~256 MiB model, published 5 times to 2 consumer processes).
# Extra arguments go to modelcast-demo (see: build/tools/demo/modelcast-demo --help).
set -euo pipefail
root=$(CDPATH= cd -- "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j"$(nproc)" --target modelcast-demo
# UCX's TCP transport listens on every interface unless told otherwise; on one host loopback is
# all it needs (shared memory carries the data).
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
exec "$root/build/tools/demo/modelcast-demo" "$@"
