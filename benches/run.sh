#!/usr/bin/env bash
# Peer comparison (issue 7): zshard against tensorstore, zarrs_reencode and zarr-python on workloads
# W1-W6, each output verified element by element; results in target/bench/results.md and .json.
#
#   benches/run.sh [--scale full|small] [--runs 3] [--workloads W1,W2,...|all] [--threads N] [...]
#
# Every argument goes to benches/harness.py (see `benches/run.sh --help`). Before it runs, this script
#   - creates or updates the Python venv with `tests/interop/run.sh --venv-only` (the test suite's own
#     set-up, so the tests and the benches share one venv),
#   - builds target/release/zshard (cargo build --release -p zshard) and, for the cloud workloads, their
#     proxy target/release/linkproxy (benches/linkproxy, a cargo workspace of its own),
#   - installs the zarrs peer into target/peers (cargo install zarrs_tools 0.8.1) when it is missing,
#   - installs GNU time (/usr/bin/time, which measures CPU time and peak RSS) when it is missing.
#
# W10 (plan and resume of a 99 %-done destination of 10^6 shards, on local disk and on an S3 server that pages
# listings 1,000 keys at a time) runs through benches/w10.py: `benches/run.sh --workloads W10 [--scale full]
# [--delay-ms 0,20] [--parts local,s3] [--runs 2]`; its default scale is small (10^4 shards, about a minute),
# the full one (10^6) takes 15-20 minutes and about 5 GB of disk under --workdir (default target/bench).
#
# W12 (a 5-level OME-Zarr pyramid of W1's source made while sharding, against zarrs_ome and ngff-zarr 0.50)
# runs through benches/w12.py: `benches/run.sh --workloads W12 [--runs 3] [--workdir DIR]`; it installs
# zarrs_tools with its `ome` feature into target/peers.
#
# The cloud workloads W7-W9 (S3 on loopback behind a proxy with a delay per request) run through
# benches/cloud.py instead: `benches/run.sh --workloads w7,w8,w9 --delay-ms 0,20,100 [--scale small]`
# (see `benches/cloud.py --help`); they install the S3 server s3s-fs into target/peers (cargo install).
#
# Environment:
#   ZSHARD_VENV          virtualenv to create/use (default: <repo>/target/venv)
#   ZSHARD_SKIP_BUILD=1  use the existing target/release/zshard (and linkproxy), do not run cargo build
#   PYTHON               interpreter used to create the venv (default: python3)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
VENV="${ZSHARD_VENV:-$REPO/target/venv}"
PEERS="$REPO/target/peers"
ZARRS_TOOLS_VERSION=0.8.1
S3S_FS_VERSION=0.11.1

say() { echo "benches/run.sh: $*" >&2; }

as_root_apt() {  # as_root_apt PACKAGE: apt-get install when that is possible here
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
    else
        return 1
    fi
}

if [ ! -x /usr/bin/time ]; then
    say "installing GNU time"
    as_root_apt time || { say "/usr/bin/time is missing: install the 'time' package"; exit 1; }
fi

# --- the venv: the test suite's own set-up, so both share one venv ---
"$REPO/tests/interop/run.sh" --venv-only

# --- zshard ---
if [ "${ZSHARD_SKIP_BUILD:-0}" != "1" ]; then
    say "cargo build --release -p zshard"
    (cd "$REPO" && cargo build --release -p zshard)
fi

# --- W10 (resume at a million shards): benches/w10.py, local disk and its own paging S3 server ---
w10=0
prev=""
for a in "$@"; do
    case "$prev=$a" in --workloads=*[Ww]10*) w10=1 ;; esac
    case "$a" in --workloads=*[Ww]10*) w10=1 ;; esac
    prev="$a"
done
if [ "$w10" = 1 ]; then
    # sortedcontainers: the paging server's sorted key index (benches/pagings3.py).
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check sortedcontainers==2.4.0
    export PYTHONDONTWRITEBYTECODE=1
    exec "$VENV/bin/python" "$HERE/w10.py" --zshard "$REPO/target/release/zshard" "$@"
fi

# --- W11 (a nightly update against a full conversion): benches/w11.py, local disk and the paging S3 server ---
w11=0
prev=""
for a in "$@"; do
    case "$prev=$a" in --workloads=*[Ww]11*) w11=1 ;; esac
    case "$a" in --workloads=*[Ww]11*) w11=1 ;; esac
    prev="$a"
done
if [ "$w11" = 1 ]; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check sortedcontainers==2.4.0
    export PYTHONDONTWRITEBYTECODE=1
    exec "$VENV/bin/python" "$HERE/w11.py" --zshard "$REPO/target/release/zshard" "$@"
fi

# --- W12 (a 5-level OME-Zarr pyramid against zarrs_ome and ngff-zarr): benches/w12.py ---
w12=0
prev=""
for a in "$@"; do
    case "$prev=$a" in --workloads=*[Ww]12*) w12=1 ;; esac
    case "$a" in --workloads=*[Ww]12*) w12=1 ;; esac
    prev="$a"
done
if [ "$w12" = 1 ]; then
    if [ ! -x "$PEERS/bin/zarrs_ome" ]; then
        say "installing zarrs_tools $ZARRS_TOOLS_VERSION (zarrs_ome) into $PEERS"
        cargo install zarrs_tools --version "$ZARRS_TOOLS_VERSION" --features ome --locked --root "$PEERS"
    fi
    export PYTHONDONTWRITEBYTECODE=1
    exec "$VENV/bin/python" "$HERE/w12.py" --zshard "$REPO/target/release/zshard" \
        --zarrs-ome "$PEERS/bin/zarrs_ome" "$@"
fi

# --- cloud workloads (W7-W9): benches/cloud.py with the S3 server s3s-fs ---
cloud=0
prev=""
for a in "$@"; do
    case "$prev=$a" in --workloads=*[Ww][789]*) cloud=1 ;; esac
    case "$a" in --workloads=*[Ww][789]*) cloud=1 ;; esac
    prev="$a"
done
if [ "$cloud" = 1 ]; then
    if [ "${ZSHARD_SKIP_BUILD:-0}" != "1" ]; then
        # A workspace of its own, so that its features do not change zshard's build.
        say "cargo build --release (benches/linkproxy, the cloud benches' proxy)"
        cargo build --release --locked --manifest-path "$HERE/linkproxy/Cargo.toml" --target-dir "$REPO/target" ||
            say "linkproxy did not build: the cloud tests' Python proxy stands in (it takes CPU the tools need)"
    fi
    if [ ! -x "$PEERS/bin/s3s-fs" ]; then
        say "installing s3s-fs $S3S_FS_VERSION (the S3 server on loopback) into $PEERS"
        cargo install s3s-fs --version "$S3S_FS_VERSION" --features binary --locked --root "$PEERS" ||
            say "s3s-fs did not install: the cloud workloads fall back to moto's server"
    fi
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REPO/tests/cloud/requirements.txt"
    export PYTHONDONTWRITEBYTECODE=1
    exec "$VENV/bin/python" "$HERE/cloud.py" --zshard "$REPO/target/release/zshard" \
        --s3s-fs "$PEERS/bin/s3s-fs" "$@"
fi

# --- the zarrs peer ---
if ! "$PEERS/bin/zarrs_reencode" --version 2>/dev/null | grep -q "zarrs_tools $ZARRS_TOOLS_VERSION "; then
    say "installing zarrs_tools $ZARRS_TOOLS_VERSION (zarrs_reencode) into $PEERS"
    cargo install zarrs_tools --version "$ZARRS_TOOLS_VERSION" --locked --root "$PEERS"
fi

export PYTHONDONTWRITEBYTECODE=1
exec "$VENV/bin/python" "$HERE/harness.py" --zshard "$REPO/target/release/zshard" \
    --zarrs "$PEERS/bin/zarrs_reencode" "$@"
