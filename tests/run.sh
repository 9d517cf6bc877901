#!/usr/bin/env bash
# The one command that runs every test of zshard on a fresh machine (and what .ci/run calls):
#   1. cargo fmt --check and clippy with warnings as errors,
#   2. the Rust unit, integration and doc tests (release build, shared with step 3),
#   3. the interop suite: zarr-python writes inputs, zshard converts, zarr-python and tensorstore read back,
#   3b. the Python package: built by pip (maturin) from crates/python, installed into that venv, then pytest,
#   3c. the interop, Python-package and cloud suites again on today's stack (Python 3.13, zarr-python 3.4,
#       icechunk 2.3; the interpreter is built once into ~/.cache/zshard by tests/current-python.sh),
#   4. cloud tests: moto's S3 server, Azurite and fake-gcs-server on 127.0.0.1 (installed into the cache, below), with a fault-injecting
#      proxy: round trips, retries, multipart, a kill during an upload, fast failures (all of them on today's
#      stack, step 3c; the Icechunk 1.x ones on this one),
#   5. the SLURM test: a real single-node cluster (slurm-wlm + munge, installed and started as root) runs a
#      4-task job array, finalize, compare with a single run (prints SKIPPED with the reason where it can't),
#   6. the build stage of pipelines/Dockerfile, run outside a container (tests/container-build.sh),
#   7. the W1 acceptance run (16384x16384 uint16, both index locations), verified the same way.
# Set ZSHARD_SKIP_W1=1 to skip step 7.
#
# Builds and venvs persist OUTSIDE the clone, in ${ZSHARD_CACHE:-~/.cache/zshard}, so a second run (or CI on a
# warm machine, which clones afresh each time) reuses them: a mirror of the checkout and the cargo target dir
# (cargo rebuilds only the workspace crates whose files changed, see "mirror" below), the Python 3.11
# and 3.13 venvs (each reinstalled when its requirements file or interpreter changes: the scripts keep a
# sha256 stamp of both in the venv), zarr 2.18's venv, Azurite's node_modules, and the CPython 3.13 build.
# Nothing is installed by hand: an empty cache is a fresh machine and takes the same path, only longer.
# Override with ZSHARD_CACHE=DIR (e.g. $PWD/target/cache for a cache inside the clone) or CARGO_TARGET_DIR.
# Runs that share one cache take turns (a lock on the cache), since they share binaries and venvs.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
export ZSHARD_CACHE="${ZSHARD_CACHE:-$HOME/.cache/zshard}"
mkdir -p "$ZSHARD_CACHE"
# A run re-executed in the mirror (below) inherits the lock on fd 8.
if [ -z "${ZSHARD_RUN_MIRRORED:-}" ]; then
  exec 8>"$ZSHARD_CACHE/tests-run.lock"
  flock 8
fi

# Every step runs in a mirror of this checkout at a fixed path, $ZSHARD_CACHE/src. A fresh clone has a new
# path and gives every file a new mtime, so cargo would rebuild every workspace crate (5 of CI's minutes on
# two cores). rsync --checksum rewrites only the files whose content differs from the mirror's, leaving the
# others' mtimes, so cargo rebuilds only the crates that changed; and with the path fixed, rustc's
# incremental cache (CARGO_INCREMENTAL=1) reuses the unchanged parts of those. Content decides, never a
# timestamp, so a stale build cannot hide a change. The mirror's .git names this checkout's repository
# (for the commit that --version prints). ZSHARD_MIRROR=0 runs in place.
mirror="$ZSHARD_CACHE/src"
# The commit --version and reports name is handed to the build from this checkout: the build script's
# watch on .git/HEAD names the path of whichever clone last built, and a clone at another path (CI's)
# would keep that clone's commit when the crate itself has not changed.
if [ -z "${ZSHARD_GIT_COMMIT:-}" ] && commit="$(git rev-parse --short=12 HEAD 2>/dev/null)"; then
  export ZSHARD_GIT_COMMIT="$commit"
fi
if [ -z "${ZSHARD_RUN_MIRRORED:-}" ] && [ "${ZSHARD_MIRROR:-1}" != 0 ]; then
  if ! command -v rsync >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing rsync from Debian"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync >/dev/null
  fi
  if command -v rsync >/dev/null; then
    git_dir="$(git rev-parse --absolute-git-dir)"
    mkdir -p "$mirror"
    rsync -rlp --checksum --delete --filter=':- .gitignore' --exclude=/.git --exclude=/target ./ "$mirror/"
    echo "gitdir: $git_dir" >"$mirror/.git"
    echo "tests/run.sh: running in the mirror $mirror of $PWD"
    ZSHARD_RUN_MIRRORED=1 exec "$mirror/tests/run.sh" "$@"
  fi
  echo "tests/run.sh: rsync is missing; running in place (every workspace crate rebuilds)"
fi
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-1}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ZSHARD_CACHE/target}"
export ZSHARD_VENV="${ZSHARD_VENV:-$ZSHARD_CACHE/venv-3.11}"
export ZSHARD_VENV_ZARR2="${ZSHARD_VENV_ZARR2:-$ZSHARD_CACHE/venv-zarr2}"
export ZSHARD_NODE_DIR="${ZSHARD_NODE_DIR:-$ZSHARD_CACHE/node}"
echo "tests/run.sh: cache $ZSHARD_CACHE (cargo target $CARGO_TARGET_DIR)"

# Each step's heading also says how long the previous step took (where CI's minutes go).
step_started=$SECONDS
step() {
  printf '\n==> [previous step %ss] %s\n' "$((SECONDS - step_started))" "$*"
  step_started=$SECONDS
}

step "links of README.md and docs/ (tests/docs/check_links.py)"
python3 tests/docs/check_links.py

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, -D warnings)"
cargo clippy --workspace --all-targets --release -- -D warnings

step "cargo test (release)"
# The kill tests (pipelines/zshard/tests/faults.rs) inject SIGKILL at each rename with strace.
if ! command -v strace >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing strace from Debian"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
fi
cargo test --workspace --release

step "cargo build --release (the zshard binary)"
cargo build --release -p zshard
export ZSHARD_BIN="$CARGO_TARGET_DIR/release/zshard"

step "container build steps (pipelines/Dockerfile's build stage, outside a container)"
tests/container-build.sh

step "interop tests (zarr-python, tensorstore)"
# Shards written with direct I/O on XFS (4 KiB sectors) and btrfs loop devices
# (tests/interop/test_direct_filesystems.py): their mkfs.
if ! command -v mkfs.xfs >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing xfsprogs and btrfs-progs from Debian"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xfsprogs btrfs-progs >/dev/null
fi
tests/interop/run.sh

step "Python package (tests/python: pip install ./crates/python, then the zshard module and command)"
tests/python/run.sh

# On this stack only what exists only here: Icechunk 1.x repositories on S3, GCS and Azure. Everything else of the
# cloud suite reads back with zarr-python, whose current version runs in today's stack below.
step "cloud storage, Icechunk 1.x (tests/cloud: moto S3, fake-gcs-server, Azurite)"
tests/cloud/run.sh test_icechunk_objects.py test_icechunk_azure.py

# Today's stack (issue 33): the same interop, Python-package and cloud suites under Python 3.13 with
# zarr-python 3.4, icechunk 2.3, VirtualiZarr, numcodecs 0.17 (tests/interop/requirements-current.txt). The
# interpreter is built once into a cache outside the clone (tests/current-python.sh, about 4 minutes on a
# fresh machine); the Python 3.11 runs above keep what exists only there (zarr 2.18's draft layout, icechunk 1.x).
step "today's stack: CPython 3.13 (tests/current-python.sh, cached outside the clone)"
current_python="$(tests/current-python.sh)"
current=(env ZSHARD_VENV="$ZSHARD_CACHE/venv-3.13" PYTHON="$current_python" PYTHON_ZARR2=python3
  ZSHARD_REQUIREMENTS=requirements-current.txt)

step "today's stack: interop tests (zarr-python 3.4, icechunk 2.3, tensorstore)"
"${current[@]}" tests/interop/run.sh

step "today's stack: Python package"
"${current[@]}" tests/python/run.sh

step "today's stack: cloud storage"
"${current[@]}" tests/cloud/run.sh

step "SLURM job array (tests/cluster/slurm.sh)"
tests/cluster/slurm.sh "$ZSHARD_BIN" "$ZSHARD_VENV/bin/python"

if [ "${ZSHARD_SKIP_W1:-0}" != "1" ]; then
  step "W1 acceptance: 16384^2 uint16, blosc zstd 5 -> shards 4096^2 of 256^2, zstd 3"
  work="$PWD/target/w1"
  "$ZSHARD_VENV/bin/python" benches/w1.py "$ZSHARD_BIN" "$work"
  rm -rf "$work"
fi

step "all tests passed"
