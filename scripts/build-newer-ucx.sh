#!/usr/bin/env bash
# Builds a newer UCX than Debian 12's 1.13 into .ucx-newer/ (git-ignored), to learn which 1.13
# defects it removes. Never used by CI or scripts/test.sh: Debian's UCX stays the dependency.
#
# Run an existing modelcast build against it without rebuilding (libucp keeps soname
# libucp.so.0):
#   LD_LIBRARY_PATH=$PWD/.ucx-newer/install/lib UCX_MODULE_DIR=$PWD/.ucx-newer/install/lib/ucx \
#     build/tests/...
#
# The configuration follows Debian's (ucx_info -b: --enable-mt --disable-logging --enable-cma,
# assertions and parameter checks left on) so that differences are UCX's, not the build's;
# verbs, RDMA CM and the GPU and kernel-module transports are left out (no headers or hardware
# here).
#
# Environment: UCX_GIT (a git directory or URL; default: the local mirror, else GitHub),
# UCX_REF (default: the release tag below), JOBS (default 2), NICE (default 10).
set -euo pipefail
root=$(CDPATH= cd -- "$(dirname "$0")/.." && pwd)
dest="$root/.ucx-newer"
ref=${UCX_REF:-v1.22.0}
jobs=${JOBS:-2}
niceness=${NICE:-10}
if [[ -z ${UCX_GIT:-} ]]; then
    if [[ -d /work/.mirror/openucx+ucx/repo ]]; then
        UCX_GIT=/work/.mirror/openucx+ucx/repo
    else
        UCX_GIT=https://github.com/openucx/ucx.git
    fi
fi
for tool in autoconf automake libtoolize make git; do
    command -v "$tool" >/dev/null || {
        echo "missing $tool (Debian: apt-get install autoconf automake libtool make git)" >&2
        exit 1
    }
done

src="$dest/src"
rm -rf "$src" "$dest/build"
mkdir -p "$dest"
# A clone of its own, not an archive: configure asks git for the revision it reports, and an
# archive inside this repository would report modelcast's.
[[ -d $UCX_GIT ]] && url="file://$UCX_GIT" || url=$UCX_GIT
git clone -q --depth 1 --branch "$ref" "$url" "$src"
commit=$(git -C "$src" rev-parse HEAD)

(cd "$src" && ./autogen.sh)
mkdir -p "$dest/build"
cd "$dest/build"
nice -n "$niceness" "$src/configure" --prefix="$dest/install" \
    --enable-mt --disable-logging --enable-cma \
    --disable-doxygen-doc --disable-examples --without-java --without-go \
    --without-cuda --without-rocm --without-verbs --without-rdmacm --without-knem \
    --without-xpmem --without-ugni --without-fuse3 >"$dest/configure.log"
nice -n "$niceness" make -j"$jobs" >"$dest/make.log"
nice -n "$niceness" make install >"$dest/install.log"
{
    echo "ref $ref"
    echo "commit $commit"
    echo "source $UCX_GIT"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$dest/BUILD-INFO"
"$dest/install/bin/ucx_info" -v
echo "installed in $dest/install"
