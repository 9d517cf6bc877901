#!/usr/bin/env bash
# Python interop tests for zshard.
#
#   tests/interop/run.sh [extra pytest args...]
#
# Environment:
#   ZSHARD_BIN    zshard binary under test (default: <repo>/target/release/zshard)
#   ZSHARD_VENV   virtualenv to create/use (default: <repo>/target/venv)
#   ZSHARD_VENV_ZARR2  the zarr-python 2.18 virtualenv (default: <repo>/target/venv-zarr2)
#   PYTHON_ZARR2  interpreter used to create ZSHARD_VENV_ZARR2 (default: PYTHON)
#   PYTHON        interpreter used to create the venv (default: python3)
#   ZSHARD_PYTEST_WORKERS  pytest-xdist workers (default 2; 0 runs the tests in one process)
#   ZSHARD_REQUIREMENTS  requirements file installed into ZSHARD_VENV (default: requirements.txt beside this
#                 script; a bare file name is taken from this folder). Today's stack on Python 3.13:
#                   ZSHARD_REQUIREMENTS=requirements-current.txt PYTHON=$(tests/current-python.sh) \
#                   ZSHARD_VENV=target/venv-current tests/interop/run.sh
#
# Needs only python3 (with its venv module) and access to PyPI. The pip install
# is skipped when the venv already holds exactly this requirements file (stamp
# file keyed on the requirements' hash and the interpreter version).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="${ZSHARD_VENV:-$REPO/target/venv}"
PY="${PYTHON:-python3}"
REQ="${ZSHARD_REQUIREMENTS:-requirements.txt}"
case "$REQ" in */*) ;; *) REQ="$HERE/$REQ" ;; esac
if [ ! -f "$REQ" ]; then
    echo "run.sh: requirements file $REQ not found" >&2
    exit 1
fi

if ! command -v "$PY" >/dev/null 2>&1; then
    echo "run.sh: $PY not found; install python3" >&2
    exit 1
fi

make_venv() {
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PY" -m venv "$VENV"
}

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    echo "run.sh: creating venv at $VENV" >&2
    if ! make_venv; then
        # Debian/Ubuntu ship ensurepip separately (python3-venv).
        if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
            echo "run.sh: python3 -m venv failed; installing python3-venv" >&2
            apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
            make_venv
        else
            echo "run.sh: '$PY -m venv' failed (install python3-venv)" >&2
            exit 1
        fi
    fi
fi

# Fast path: skip pip when this exact requirements set is already installed.
want="$( { cat "$REQ"; "$VENV/bin/python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"
stamp="$VENV/.zshard-interop-requirements"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "run.sh: installing requirements into $VENV" >&2
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ"
    echo "$want" >"$stamp"
fi

# A second venv with zarr-python 2.18 (requirements-zarr2.txt): it writes the pre-final Zarr v3 layout
# with the draft sharding storage transformer for test_draft_sharding.py, run as a subprocess.
VENV2="${ZSHARD_VENV_ZARR2:-$REPO/target/venv-zarr2}"
REQ2="$HERE/requirements-zarr2.txt"
if [ ! -x "$VENV2/bin/python" ] || ! "$VENV2/bin/python" -c 'import sys' >/dev/null 2>&1; then
    echo "run.sh: creating venv at $VENV2" >&2
    rm -rf "$VENV2"
    "${PYTHON_ZARR2:-$PY}" -m venv "$VENV2"
fi
want2="$( { cat "$REQ2"; "$VENV2/bin/python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"
stamp2="$VENV2/.zshard-interop-requirements"
if [ ! -f "$stamp2" ] || [ "$(cat "$stamp2")" != "$want2" ]; then
    echo "run.sh: installing requirements-zarr2.txt into $VENV2" >&2
    "$VENV2/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ2"
    echo "$want2" >"$stamp2"
fi
export ZSHARD_ZARR2_PYTHON="$VENV2/bin/python"

# `run.sh --venv-only`: set up the venv and stop (benches/run.sh uses the same venv).
if [ "${1:-}" = "--venv-only" ]; then
    exit 0
fi

export PYTHONDONTWRITEBYTECODE=1
export ZSHARD_BIN="${ZSHARD_BIN:-$REPO/target/release/zshard}"
echo "run.sh: ZSHARD_BIN=$ZSHARD_BIN" >&2
cd "$REPO"
# Two pytest workers (pytest-xdist): a test spends most of its time waiting (zshard subprocesses, their
# fsyncs, tensorstore), so two workers on two cores halve the suite's time. ZSHARD_PYTEST_WORKERS=0 runs
# in one process (e.g. for pdb).
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider -n "${ZSHARD_PYTEST_WORKERS:-2}" tests/interop "$@"
