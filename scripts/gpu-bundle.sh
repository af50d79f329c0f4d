#!/usr/bin/env bash
# Builds everything the GPU checks need and packs it into gpu-bundle/ (git-ignored), to be carried
# to a machine with a GPU that has none of our packages and an unknown distribution and glibc:
#
#   here:   scripts/gpu-bundle.sh            (builds in build-gpu-bundle/, Release, CUDA on)
#   there:  bash gpu-bundle/run-gpu-checks.sh   (from the repository root; results under $OUT)
#
# The bundle holds:
#   libexec/   the stripped binaries: the device tests and their two peers, the gpu-labelled
#              tests, the GPU benchmark, and the host exchange benchmark (the device machine has
#              cores to spare: there its notification and serving rows are not a busy core's);
#   lib/       their ldd closure and that of UCX's transport modules, glibc's loader and libc
#              included (the device's glibc may be older than ours), the NVIDIA driver's libcuda
#              excluded (it must be the device machine's own; cudart is carried);
#   lib/ucx/   UCX's module directory (UCX_MODULE_DIR points there);
#   bin/       one wrapper per binary: lib/ld-linux-x86-64.so.2 --library-path <bundle>/lib[:the
#              directory of the device's libcuda.so.1] libexec/<binary> "$@", the bundle located
#              from the wrapper's own path (the bundle may live anywhere);
#   env.sh     what the wrappers and run-gpu-checks.sh source: the bundle's location, the
#              device's libcuda directory, UCX_MODULE_DIR, and the overrides that make the
#              binaries start their peers (and themselves) through the wrappers;
#   run-gpu-checks.sh (from scripts/gpu-checks.sh), MANIFEST.
#
# Options: --no-build (pack what build-gpu-bundle/ holds). Environment: JOBS (build jobs, default
# 2), MODELCAST_GPU_BUNDLE_MAX_MIB (fail above this size; default 48, the carry limit is 64).
set -euo pipefail
root=$(CDPATH= cd -- "$(dirname "$0")/.." && pwd)
build="$root/build-gpu-bundle"
bundle="$root/gpu-bundle"
jobs=${JOBS:-2}
max_mib=${MODELCAST_GPU_BUNDLE_MAX_MIB:-48}
do_build=1
for arg in "$@"; do
  case "$arg" in
    --no-build) do_build=0 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu-bundle: unknown option $arg" >&2; exit 2 ;;
  esac
done

# name in libexec/ = name in bin/ : path in the build tree
targets=(modelcast_device_tests modelcast-device-peer modelcast-test-peer modelcast_gpu_device_tests
         modelcast-gpu-bench modelcast-exchange-bench)
declare -A built=(
  [modelcast_device_tests]=tests/device/modelcast_device_tests
  [modelcast-device-peer]=tests/device/modelcast-device-peer
  [modelcast-test-peer]=tests/support/modelcast-test-peer
  [modelcast_gpu_device_tests]=tests/gpu/modelcast_gpu_device_tests
  [modelcast-gpu-bench]=bench/gpu/modelcast-gpu-bench
  [modelcast-exchange-bench]=bench/exchange/modelcast-exchange-bench
)

if [ "$do_build" = 1 ]; then
  # One Release build for all (the benchmark is Release in bench/gpu.sh; the tests do not depend
  # on the optimisation level). MODELCAST_WITH_CUDA=ON: a bundle without CUDA is of no use.
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMODELCAST_WITH_CUDA=ON \
    -DMODELCAST_BUILD_TESTS=ON -DMODELCAST_BUILD_BENCH=ON >&2
  cmake --build "$build" -j "$jobs" --target "${targets[@]}" >&2
fi
for t in "${targets[@]}"; do
  if [ ! -x "$build/${built[$t]}" ]; then
    # the test peer's place in the build tree is not fixed here: look it up
    found=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
    [ -n "$found" ] || { echo "gpu-bundle: $t not built in $build" >&2; exit 1; }
    built[$t]=${found#"$build"/}
  fi
done

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/libexec" "$bundle/lib/ucx"

for t in "${targets[@]}"; do
  strip -o "$bundle/libexec/$t" "$build/${built[$t]}"
done

# UCX's module directory: next to the libucs.so.0 the binaries resolve.
ucs=$(ldd "$build/${built[modelcast_device_tests]}" | awk '$1 == "libucs.so.0" {print $3}')
[ -n "$ucs" ] || { echo "gpu-bundle: the device tests do not link UCX (libucs.so.0)" >&2; exit 1; }
ucx_modules="$(dirname "$(readlink -f "$ucs")")/ucx"
[ -d "$ucx_modules" ] || { echo "gpu-bundle: no UCX module directory at $ucx_modules" >&2; exit 1; }
for m in "$ucx_modules"/*.so.0; do
  cp -L "$m" "$bundle/lib/ucx/"
  strip --strip-unneeded "$bundle/lib/ucx/$(basename "$m")"
done

# The closure: every library ldd resolves for the binaries and the modules, under the name it
# is asked for. Never the driver's own libraries (libcuda, libnvidia-*): those come from the
# device machine. The loader goes in as lib/ld-linux-x86-64.so.2.
is_driver_lib() { case "$1" in libcuda.so*|libnvidia-*|libcudadebugger.so*) return 0 ;; esac; return 1; }
declare -A closure=()
libc_dir=
for f in "$bundle/libexec/"* "$bundle/lib/ucx/"*; do
  while read -r name arrow path _; do
    if [ "$arrow" = "=>" ]; then
      [ "$path" = "not" ] && { echo "gpu-bundle: $(basename "$f"): $name not found" >&2; exit 1; }
      is_driver_lib "$name" && continue
      closure[$name]=$path
      [ "$name" = libc.so.6 ] && libc_dir=$(dirname "$path")
    elif [ "${name#/}" != "$name" ] && [ "$(basename "$name")" = ld-linux-x86-64.so.2 ]; then
      closure[ld-linux-x86-64.so.2]=$name
    fi
  done < <(ldd "$f")
done
[ -n "${closure[ld-linux-x86-64.so.2]:-}" ] && [ -n "$libc_dir" ] || { echo "gpu-bundle: no loader/libc in the closure" >&2; exit 1; }
# The rest of glibc beside libc, so that the device's libcuda.so.1 (loaded by cudart, linked to
# libm, libdl, libpthread, librt) never pairs our libc with the device's older pieces.
for g in libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2 libutil.so.1; do
  [ -e "$libc_dir/$g" ] && closure[$g]=$libc_dir/$g
done
for name in "${!closure[@]}"; do
  cp -L "${closure[$name]}" "$bundle/lib/$name"
  chmod u+w "$bundle/lib/$name"
  # symbols the loader needs are kept by --strip-unneeded; the loader itself is left untouched
  [ "$name" = ld-linux-x86-64.so.2 ] || strip --strip-unneeded "$bundle/lib/$name" 2>/dev/null || true
done
chmod +x "$bundle/lib/ld-linux-x86-64.so.2"

# env.sh: sourced by every wrapper and by run-gpu-checks.sh. Exports what a child needs too
# (the wrappers find it set and skip the search).
cat > "$bundle/env.sh" <<'EOF'
# Sourced by the bundle's wrappers and run-gpu-checks.sh (generated by scripts/gpu-bundle.sh).
MODELCAST_BUNDLE=$(CDPATH= cd -- "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export MODELCAST_BUNDLE
if [ -z "${MODELCAST_BUNDLE_CUDA_LIBDIR+set}" ]; then
  # The directory of the device's libcuda.so.1, searched as the system's loader would: the
  # LD_LIBRARY_PATH directories, ldconfig's cache, the usual places. Empty when none (no driver:
  # cudart then reports no device, which the simulated device does not mind).
  MODELCAST_BUNDLE_CUDA_LIBDIR=
  IFS=: read -r -a _mc_dirs <<< "${LD_LIBRARY_PATH:-}"
  for _mc_d in "${_mc_dirs[@]}"; do
    if [ -n "$_mc_d" ] && [ -e "$_mc_d/libcuda.so.1" ]; then MODELCAST_BUNDLE_CUDA_LIBDIR=$_mc_d; break; fi
  done
  if [ -z "$MODELCAST_BUNDLE_CUDA_LIBDIR" ]; then
    for _mc_l in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
      _mc_p=$("$_mc_l" -p 2>/dev/null | awk '$1 == "libcuda.so.1" && /x86-64/ {print $NF; exit}') || true
      if [ -n "$_mc_p" ]; then MODELCAST_BUNDLE_CUDA_LIBDIR=$(dirname "$_mc_p"); break; fi
    done
  fi
  if [ -z "$MODELCAST_BUNDLE_CUDA_LIBDIR" ]; then
    for _mc_d in /usr/lib/x86_64-linux-gnu /usr/lib64 /lib64 /usr/local/nvidia/lib64 /usr/lib/wsl/lib \
                 /usr/local/cuda/compat; do
      if [ -e "$_mc_d/libcuda.so.1" ]; then MODELCAST_BUNDLE_CUDA_LIBDIR=$_mc_d; break; fi
    done
  fi
  unset _mc_dirs _mc_d _mc_l _mc_p
fi
export MODELCAST_BUNDLE_CUDA_LIBDIR
export UCX_MODULE_DIR="$MODELCAST_BUNDLE/lib/ucx"
# The binaries start their peers, and themselves again, through the wrappers (see
# tests/device/peer_paths.h, tests/gpu/device_test.cpp, bench/exchange/common.cpp).
export MODELCAST_DEVICE_PEER="$MODELCAST_BUNDLE/bin/modelcast-device-peer"
export MODELCAST_TEST_PEER="$MODELCAST_BUNDLE/bin/modelcast-test-peer"
export MODELCAST_GPU_TEST_SELF="$MODELCAST_BUNDLE/bin/modelcast_gpu_device_tests"
# The benchmarks' own way back in: the GPU benchmark's unless a caller named another (the
# exchange benchmark's step in run-gpu-checks.sh names its own).
export MODELCAST_BENCH_SELF="${MODELCAST_BENCH_SELF:-$MODELCAST_BUNDLE/bin/modelcast-gpu-bench}"
EOF

for t in "${targets[@]}"; do
  cat > "$bundle/bin/$t" <<EOF
#!/usr/bin/env bash
# Starts libexec/$t through the bundle's own loader and libraries (scripts/gpu-bundle.sh).
. "\$(cd "\$(dirname "\${BASH_SOURCE[0]}")/.." && pwd)/env.sh"
exec "\$MODELCAST_BUNDLE/lib/ld-linux-x86-64.so.2" \\
  --library-path "\$MODELCAST_BUNDLE/lib\${MODELCAST_BUNDLE_CUDA_LIBDIR:+:\$MODELCAST_BUNDLE_CUDA_LIBDIR}" \\
  --argv0 "\$0" "\$MODELCAST_BUNDLE/libexec/$t" "\$@"
EOF
  chmod +x "$bundle/bin/$t"
done

cp "$root/scripts/gpu-checks.sh" "$bundle/run-gpu-checks.sh"
chmod +x "$bundle/run-gpu-checks.sh"

{
  echo "modelcast GPU bundle"
  echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%FT%TZ) on $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), $(ldd --version | head -1)"
  echo "cuda: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1)"
  echo "files:"
  (cd "$bundle" && find . -type f | sort | xargs du -b | awk '{printf "  %10d %s\n", $1, $2}')
} > "$bundle/MANIFEST"

bytes=$(du -sb "$bundle" | cut -f1)
mib=$(( (bytes + 1048575) / 1048576 ))
echo "gpu-bundle: $bundle: $bytes bytes (${mib} MiB; limit for carrying: 64 MiB with everything else carried)"
if [ "$mib" -gt "$max_mib" ]; then
  echo "gpu-bundle: larger than $max_mib MiB (MODELCAST_GPU_BUNDLE_MAX_MIB)" >&2
  exit 1
fi
