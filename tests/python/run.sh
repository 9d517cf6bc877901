#!/usr/bin/env bash
# The Python package's tests: builds the package from this checkout as a user would (`pip install
# ./crates/python`: a PEP 517 build with maturin, in pip's own fresh build environment), installs it
# into a venv, then runs pytest on it.
#
#   tests/python/run.sh [extra pytest args...]
#
# Environment:
#   ZSHARD_VENV        the venv (default: <repo>/target/venv, the interop suite's; created and kept
#                      up to date by `tests/interop/run.sh --venv-only`, then Dask, tqdm and maturin
#                      are added)
#   CARGO_TARGET_DIR   where maturin's cargo builds (default: <repo>/target, shared with the release
#                      build so that only the extension crate is compiled)
#   PYTHON             interpreter used to create the venv (default: python3)
#
# tests/python/requirements.txt pins the test dependencies and, through PIP_CONSTRAINT, the maturin
# of the package's isolated build.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="${ZSHARD_VENV:-$REPO/target/venv}"
PY="${PYTHON:-python3}"
REQ="$HERE/requirements.txt"

# The venv is made as the interop suite makes it (its requirements too: same pins of numpy,
# zarr-python and xarray), so there is one place that creates venvs; the Python package's own test
# requirements are added below.
ZSHARD_VENV="$VENV" PYTHON="$PY" "$REPO/tests/interop/run.sh" --venv-only

# On another stack (ZSHARD_REQUIREMENTS, e.g. today's on Python 3.13) the interop file's pins of numpy,
# zarr-python, numcodecs and xarray stand: installing this file's pins over them would downgrade that venv
# (and the interop suite's stamp would then keep the wrong versions). Only the other packages are added.
if [ -n "${ZSHARD_REQUIREMENTS:-}" ]; then
    interop_req="$ZSHARD_REQUIREMENTS"
    case "$interop_req" in */*) ;; *) interop_req="$REPO/tests/interop/$interop_req" ;; esac
    pinned="$(sed -n 's/^\([A-Za-z0-9_.-]*\)[=<>~!].*/\1/p' "$interop_req" | tr 'A-Z_' 'a-z-')"
    filtered="$(mktemp)"
    trap 'rm -f "$filtered"' EXIT
    while IFS= read -r line; do
        name="$(printf '%s' "$line" | sed -n 's/^\([A-Za-z0-9_.-]*\)[=<>~!].*/\1/p' | tr 'A-Z_' 'a-z-')"
        if [ -z "$name" ] || ! printf '%s\n' "$pinned" | grep -qxF "$name"; then
            printf '%s\n' "$line"
        fi
    done <"$REQ" >"$filtered"
    REQ="$filtered"
fi

# Skip pip when this exact requirements set is already installed.
want="$( { cat "$REQ"; "$VENV/bin/python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"
stamp="$VENV/.zshard-python-requirements"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "tests/python: installing requirements into $VENV" >&2
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ"
    echo "$want" >"$stamp"
fi

# The wheel, built from the repository as `pip install ./crates/python` builds it, then installed.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
wheels="$CARGO_TARGET_DIR/python-wheels"
rm -rf "$wheels"
started=$(date +%s)
PIP_CONSTRAINT="$REQ" "$VENV/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$wheels" "$REPO/crates/python"
wheel="$(ls "$wheels"/zshard-*.whl)"
echo "tests/python: built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) in $(($(date +%s) - started)) s" >&2
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel"

export PYTHONDONTWRITEBYTECODE=1
cd "$HERE"
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" .
