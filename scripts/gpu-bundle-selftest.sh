#!/usr/bin/env bash
# Tries gpu-bundle/ (scripts/gpu-bundle.sh) on this machine, without a GPU, as a foreign machine
# would see it, on the simulated device:
#   1. copies the bundle and tests/daemon/read_safetensors.py into a scratch "repository" elsewhere;
#   2. as root, in a private mount namespace, hides what the bundle must not need: the build tree
#      (the binaries' compiled-in peer paths), UCX's module directory, /usr/local/cuda, and every
#      system copy of a library the bundle carries except glibc's and the compiler runtime's (bash,
#      coreutils and python3 + numpy run from the system); without root, step 2 is skipped and says so;
#   3. runs the device tests through their wrapper with LD_DEBUG=libs and checks that every
#      library they and their peers loaded came from the bundle;
#   4. runs run-gpu-checks.sh end to end there (MODELCAST_GPU_CHECKS_DEVICE=simulated, tiny bench
#      sizes); results in gpu-selftest-out/ (git-ignored).
# Usage: scripts/gpu-bundle-selftest.sh   (after scripts/gpu-bundle.sh)
set -euo pipefail
root=$(CDPATH= cd -- "$(dirname "$0")/.." && pwd)
bundle="$root/gpu-bundle"
[ -x "$bundle/run-gpu-checks.sh" ] || { echo "selftest: no $bundle (run scripts/gpu-bundle.sh first)" >&2; exit 1; }
scratch=$(mktemp -d /tmp/modelcast-gpu-selftest.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/repo/tests/daemon"
cp -a "$bundle" "$scratch/repo/gpu-bundle"
cp "$root/tests/daemon/read_safetensors.py" "$scratch/repo/tests/daemon/"
results="$root/gpu-selftest-out"
rm -rf "$results"
mkdir -p "$results"

inner() {
  set -euo pipefail
  local repo=$1 results=$2 hide=$3 root=$4
  if [ "$hide" = 1 ]; then
    mount -t tmpfs none "$root/build-gpu-bundle" 2>/dev/null || true
    [ -d /usr/local/cuda/ ] && mount -t tmpfs none "$(readlink -f /usr/local/cuda)"
    local ucs ucx
    ucs=$(readlink -f "$(ldconfig -p | awk '$1 == "libucs.so.0" {print $NF; exit}')")
    ucx="$(dirname "$ucs")/ucx"
    [ -d "$ucx" ] && mount -t tmpfs none "$ucx"
    local hidden=0 lib f
    for lib in "$repo/gpu-bundle/lib/"*.so*; do
      case "$(basename "$lib")" in
        # glibc, and the compiler's runtime that the system's python3 + numpy need (LD_DEBUG
        # below shows that the bundle's processes take their own copies of these as well)
        ld-linux-x86-64.so.2|libc.so.6|libm.so.6|libdl.so.2|libpthread.so.0|librt.so.1|libresolv.so.2|libutil.so.1) continue ;;
        libgcc_s.so.1|libstdc++.so.6) continue ;;
      esac
      for f in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib /usr/local/cuda/lib64; do
        if [ -e "$f/$(basename "$lib")" ]; then mount --bind /dev/null "$f/$(basename "$lib")"; hidden=$((hidden + 1)); fi
      done
    done
    echo "selftest: hidden: the build tree, /usr/local/cuda, $ucx, $hidden system library files"
    if ldd "$root/build-gpu-bundle/tests/device/modelcast_device_tests" >/dev/null 2>&1; then
      echo "selftest: the build tree is still visible" >&2; return 1
    fi
  fi
  cd "$repo"
  # 3. the loader trick, the peer overrides, the module directory: where every library came from
  mkdir -p "$results/ld-debug"
  MODELCAST_DEVICE=simulated UCX_NET_DEVICES=lo LD_DEBUG=libs LD_DEBUG_OUTPUT="$results/ld-debug/ld" \
    gpu-bundle/bin/modelcast_device_tests \
    --gtest_filter='DeviceRuntime.AnotherProcess*:DeviceExchange.ADevice*:DeviceExchange.AHostProducer*' \
    > "$results/wrapper-run.log" 2>&1 || { tail -30 "$results/wrapper-run.log"; return 1; }
  grep -E '^\[  (PASSED|FAILED) ' "$results/wrapper-run.log"
  # One LD_DEBUG file per process id. A wrapper's bash runs on the system's libc and then execs
  # the carried loader in the same process: from that exec on, nothing may come from outside.
  local f carried=0 foreign=
  for f in "$results"/ld-debug/ld.*; do
    grep -q "calling init: $repo/gpu-bundle/lib/ld-linux-x86-64.so.2" "$f" || continue
    carried=$((carried + 1))
    foreign+=$(awk -v loader="calling init: $repo/gpu-bundle/lib/ld-linux-x86-64.so.2" -v bundle="$repo/gpu-bundle/" '
      index($0, loader) { on = 1 }
      on && /calling init: / { sub(/.*calling init: /, ""); if (index($0, bundle) != 1) print }' "$f")
  done
  echo "selftest: $carried processes started through the carried loader; libraries they loaded from" \
    "outside the bundle: ${foreign:-none}"
  grep -qh "calling init: $repo/gpu-bundle/lib/ucx/libuct_cma.so.0" "$results"/ld-debug/ld.* &&
    echo "selftest: UCX loaded its modules from the bundle (UCX_MODULE_DIR)"
  grep -qh "calling init: $repo/gpu-bundle/lib/libcudart.so.13" "$results"/ld-debug/ld.* &&
    echo "selftest: cudart came from the bundle"
  [ "$carried" -ge 2 ] && [ -z "$foreign" ] || return 1
  # 4. the device-side script, end to end, on the simulated device
  OUT="$results/checks" MODELCAST_GPU_CHECKS_DEVICE=simulated MODELCAST_GPU_BENCH_SIZES_MIB=4,8 \
    MODELCAST_GPU_BENCH_REPS=2 bash gpu-bundle/run-gpu-checks.sh
}

if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
  unshare -m --propagation private bash -c "$(declare -f inner); inner \"\$@\"" inner "$scratch/repo" "$results" 1 "$root"
else
  echo "selftest: not root: nothing hidden (the build tree and system libraries stay visible)"
  inner "$scratch/repo" "$results" 0 "$root"
fi
