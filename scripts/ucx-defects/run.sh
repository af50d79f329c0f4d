#!/usr/bin/env bash
# Runs the UCX defect reproducers (ucx_defects.cpp) once against Debian's UCX and once against the
# newer UCX from scripts/build-newer-ucx.sh, printing what each showed. Not part of CI.
# The program is built against Debian's headers: libucp keeps its ABI, so the newer library is
# only swapped in at run time (LD_LIBRARY_PATH, UCX_MODULE_DIR).
set -uo pipefail
here=$(CDPATH= cd -- "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
newer="$root/.ucx-newer/install"
bin="$root/.ucx-newer/ucx_defects"
mkdir -p "$root/.ucx-newer"
g++ -std=c++20 -O1 -g -Wall -o "$bin" "$here/ucx_defects.cpp" -lucp -lucs || exit 1
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

run() {  # label, env..., -- args...
  local label=$1; shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local out rc
  out=$(env "${envs[@]}" timeout 120 "$bin" "$@" 2>&1); rc=$?
  echo "$out" | grep -E '^[a-z-]+(\(|:)' | sed "s/^/[$label] /"
  if ((rc != 0)); then
    echo "[$label] $* exited $rc$( ((rc > 128)) && echo " (signal $((rc - 128)))")"
    echo "$out" | grep -m2 -iE 'assert|fatal' | sed "s/^/[$label]   /"
  fi
}

for which in debian newer; do
  if [[ $which == newer ]]; then
    [[ -d $newer ]] || { echo "no $newer: run scripts/build-newer-ucx.sh" >&2; exit 1; }
    e=(LD_LIBRARY_PATH="$newer/lib" UCX_MODULE_DIR="$newer/lib/ucx")
  else
    e=(UCX_DEBIAN=1)
  fi
  run "$which" "${e[@]}" -- version
  run "$which" "${e[@]}" -- peer-lanes
  run "$which tcp" "${e[@]}" UCX_TLS=tcp,self -- cancel-matched
  run "$which shm" "${e[@]}" -- cancel-matched
  run "$which tcp" "${e[@]}" UCX_TLS=tcp,self -- destroy-matched
  run "$which shm" "${e[@]}" -- destroy-matched
  for ids in direct indirect; do
    run "$which" "${e[@]}" -- dead-sender "$ids"
  done
  for mode in none peer; do
    for ids in direct indirect; do
      run "$which" "${e[@]}" -- dead-peer "$mode" "$ids"
    done
  done
done

# Python exit: the interpreter ends with a producer and a consumer still open. Debian's
# interpreter: the one the binding is built for.
pybuild=${MODELCAST_BUILD:-$root/build}/python
if [[ -d $pybuild/modelcast ]]; then
  for which in debian newer; do
    e=(PYTHONPATH="$pybuild")
    [[ $which == newer ]] && e+=(LD_LIBRARY_PATH="$newer/lib" UCX_MODULE_DIR="$newer/lib/ucx")
    for tls in shm tcp; do
      t=(); [[ $tls == tcp ]] && t=(UCX_TLS=tcp,self)
      dir=$(mktemp -d /tmp/mcexit-XXXXXX)
      out=$(env "${e[@]}" "${t[@]}" timeout 120 /usr/bin/python3 "$here/python_exit.py" "ipc://$dir/p.sock" 2>&1); rc=$?
      rm -rf "$dir"
      echo "[$which $tls] python-exit: exit $rc, $(grep -c 'not returned to mpool' <<<"$out") \"not returned to mpool\" warnings, $(grep -c 'installed' <<<"$out") installed"
    done
  done
else
  echo "python-exit: skipped (no $pybuild/modelcast; build the modelcast_python target)"
fi
