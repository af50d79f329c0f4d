#!/usr/bin/env bash
# Installs modelcast's build and test dependencies from Debian 12's archive.
# Idempotent: packages already present are left alone, so repeated runs are cheap.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libucx-dev ucx-utils            # data plane (UCP) and ucx_perftest for the benchmark ceiling
  libzmq3-dev cppzmq-dev          # control plane
  libmsgpack-cxx-dev libboost-dev # wire codec (msgpack's CMake config needs Boost headers)
  libspdlog-dev libfmt-dev        # logging
  libxxhash-dev                   # block digests (XXH3; xxhash.h is also built for AVX2)
  libsodium-dev                   # key pairs and signed versions (Ed25519); CurveZMQ keys
  libtomlplusplus-dev             # key files
  libutfcpp-dev                   # names checked as UTF-8
  libcli11-dev nlohmann-json3-dev # command lines, JSON output
  libeigen3-dev                   # predictor: Levenberg-Marquardt curve fitting; layout: f16 and bf16 conversions
  libcsv-dev                      # predictor: loss logs as RFC 4180 CSV (quoted fields)
  gfortran                        # the Fortran module (fortran/) and its test
  # python3-torch and dataset-fashion-mnist (below) also make bench/data/curves/ (make_curves.py)
  libgtest-dev libgmock-dev libbenchmark-dev
  libsystemd-dev                  # modelcastd: sd_notify (systemd Type=notify)
  libcpp-httplib-dev              # modelcastd: ops HTTP endpoint and hooks
  prometheus-cpp-dev              # modelcastd: /metrics
  iproute2                        # network-namespace tests across two "hosts"; tbf for rate and delay
  nftables                        # the lossy two-host test: random packet loss (numgen), no sch_netem needed
  # fuzz/ (libFuzzer targets, fuzz/run.sh): clang's -fsanitize=fuzzer,address,undefined. The
  # fuzzer and sanitizer runtimes (libclang_rt.fuzzer*.a, asan, ubsan) are in libclang-rt-14-dev,
  # which clang-14 only recommends, so it is listed; libfuzzer-14-dev is not needed.
  clang-14 libclang-rt-14-dev
  valgrind                        # memcheck of a use-after-free the Release tests cannot see (tests/daemon)
  # Python binding (python/): built with pybind11 for Debian's python3; DLPack hands torch the
  # received tensors without a copy; the tests and the example use NumPy, torch and pytest.
  # (NumPy is also the modelcastd tests' independent safetensors reader.)
  python3-dev pybind11-dev libdlpack-dev python3-numpy python3-torch python3-pytest
  dataset-fashion-mnist           # data of the PyTorch example (examples/python/)
  libtorch-dev                    # LibTorch (C++) for the simulation-coupled example (examples/sim_coupled/)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
