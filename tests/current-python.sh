#!/usr/bin/env bash
# A current CPython (3.13) for the tests on today's stack (zarr-python 3.4, icechunk 2.x, ...), which need
# Python >= 3.12 while this machine's Debian (bookworm) ships 3.11 only.
#
#   PY=$(tests/current-python.sh)      # builds it if needed; prints the interpreter's path (the only stdout line)
#   tests/current-python.sh --check    # exit 0 if the cached interpreter is complete, 1 otherwise; never builds
#
# The interpreter lives in a cache outside the clone, so a warm machine (CI included) builds it once:
#   ${ZSHARD_CACHE:-$HOME/.cache/zshard}/python3.13/bin/python3.13
# It is rebuilt when absent or broken (it does not start, is not 3.13, or lacks ssl, sqlite3, zlib, bz2, lzma,
# ctypes, readline, venv/ensurepip).
#
# The build: the CPython 3.13 upstream tarball (python3.13_*.orig.tar.xz) from Debian trixie's source package,
# fetched with `apt-get source --download-only` through a PRIVATE apt configuration under the cache (a sources
# file with a trixie deb-src entry, its own lists and package caches; nothing of the system's apt configuration
# is read for sources or changed), checked by apt against the signed Sources index. Missing -dev packages of the
# modules above are installed with the system's apt-get (root only). Then `./configure --prefix=<cache>/python3.13
# && make -j$(nproc) && make install DESTDIR=<temporary>`, and the finished tree is moved into place with one
# rename at the end, so an interrupted build never leaves a half-installed cache. About 4 minutes on 2 cores.
# Concurrent callers are serialized with flock. Progress goes to stderr.
set -euo pipefail

CACHE="${ZSHARD_CACHE:-$HOME/.cache/zshard}"
PREFIX="$CACHE/python3.13"
PY="$PREFIX/bin/python3.13"
# Debian trixie's source index, for the upstream tarball only.
DEBIAN_MIRROR="${ZSHARD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

log() { echo "current-python.sh: $*" >&2; }

healthy() {
    [ -x "$PY" ] && "$PY" - >/dev/null 2>&1 <<'EOF'
import sys
assert sys.version_info[:2] == (3, 13), sys.version
import ssl, sqlite3, zlib, bz2, lzma, ctypes, readline, venv, ensurepip, hashlib, uuid, decimal
hashlib.sha256(b"x"); ssl.create_default_context()
EOF
}

if [ "${1:-}" = "--check" ]; then
    healthy
    exit
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/python3.13.lock"
flock 9

if healthy; then
    echo "$PY"
    exit 0
fi

log "building CPython 3.13 into $PREFIX"
start=$(date +%s)

# Build dependencies: the -dev packages of the extension modules checked above.
deps=(build-essential pkg-config libssl-dev libsqlite3-dev zlib1g-dev libbz2-dev liblzma-dev libffi-dev
      libreadline-dev libncurses-dev uuid-dev xz-utils)
missing=()
for p in "${deps[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        log "missing build dependencies: ${missing[*]} (run as root, or install them)"
        exit 1
    fi
    log "installing ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The private apt configuration (sources, lists and package caches of its own).
APTDIR="$CACHE/apt-trixie-src"
mkdir -p "$APTDIR/sources.list.d" "$APTDIR/lists/partial" "$APTDIR/cache/archives/partial"
echo "deb-src [signed-by=$KEYRING] $DEBIAN_MIRROR trixie main" >"$APTDIR/sources.list"
apt_private=(-o "Dir::Etc::SourceList=$APTDIR/sources.list" -o "Dir::Etc::SourceParts=$APTDIR/sources.list.d"
             -o "Dir::State::Lists=$APTDIR/lists" -o "Dir::Cache=$APTDIR/cache"
             -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1")

WORK="$(mktemp -d "$CACHE/python3.13.build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

log "fetching trixie's python3.13 source package"
apt-get "${apt_private[@]}" update -qq >/dev/null
(cd "$WORK" && apt-get "${apt_private[@]}" source --download-only -qq python3.13 >/dev/null)
tarball="$(ls "$WORK"/python3.13_*.orig.tar.xz | head -1)"
log "using $(basename "$tarball")"

mkdir "$WORK/src"
tar -xJf "$tarball" -C "$WORK/src" --strip-components=1
cd "$WORK/src"
log "configure"
./configure --prefix="$PREFIX" --disable-test-modules --with-ensurepip=install >"$WORK/configure.log" 2>&1 \
    || { tail -30 "$WORK/configure.log" >&2; exit 1; }
log "make -j$(nproc)"
make -j"$(nproc)" >"$WORK/make.log" 2>&1 || { tail -40 "$WORK/make.log" >&2; exit 1; }
log "make install (into a temporary root)"
make install DESTDIR="$WORK/root" >"$WORK/install.log" 2>&1 || { tail -40 "$WORK/install.log" >&2; exit 1; }

# Move the finished tree into place with one rename (same file system), replacing a broken one.
rm -rf "$PREFIX.old"
[ -e "$PREFIX" ] && mv "$PREFIX" "$PREFIX.old"
mv "$WORK/root$PREFIX" "$PREFIX"
rm -rf "$PREFIX.old"

if ! healthy; then
    log "the built interpreter at $PY is incomplete (see the module list in this script)"
    "$PY" -c 'import ssl, sqlite3, zlib, bz2, lzma, ctypes, readline, venv, ensurepip' >&2 || true
    exit 1
fi
log "built $("$PY" -c 'import sys; print(sys.version.split()[0])') in $(( $(date +%s) - start )) s"
echo "$PY"
