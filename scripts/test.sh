#!/usr/bin/env bash
# Installs what is missing, builds everything (warnings are errors) and runs the whole test
# suite with CTest. Tests send traffic only over loopback and network namespaces they create.
set -euo pipefail
root=$(CDPATH= cd -- "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j"$(nproc)"
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
cd "$root/build"
ctest --output-on-failure --timeout 600 "$@"
