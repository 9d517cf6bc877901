#!/usr/bin/env bash
# Runs the build stage of pipelines/Dockerfile (pipelines/container-build.sh) outside a container, as CI has no
# container engine, and checks that what it installs works as the runtime image uses it: the stripped binary
# needs only the libraries of debian:bookworm-slim, converts the demo, prints its commit; the man pages and
# completions are valid. With a container engine (docker or podman that can build), set ZSHARD_CONTAINER=1 to
# also build and run the image itself.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "FAILED: container build: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
pipelines/container-build.sh "$prefix"
zshard="$prefix/bin/zshard"

# Only what the runtime image has: the C library, libm, libgcc_s and the loader.
libs=$(ldd "$zshard" | awk '{print $1}' | grep -v -E '^(linux-vdso\.so|libc\.so|libm\.so|libgcc_s\.so|/lib64/ld-linux)' || true)
[ -z "$libs" ] || fail "the binary needs libraries the runtime image lacks: $libs"
file "$zshard" 2>/dev/null | grep -q "not stripped" && fail "the binary is not stripped"

commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
"$zshard" --version | head -1 | grep -qF "(commit $commit)" || fail "--version does not name commit $commit: $("$zshard" --version | head -1)"
"$zshard" demo --dir "$work/demo" --quiet >/dev/null || fail "the demo conversion failed"
[ -f "$work/demo/sharded.zarr/zarr.json" ] || fail "the demo wrote no zarr.json"
"$zshard" verify "$work/demo/source.zarr" "$work/demo/sharded.zarr" --quiet || fail "the demo output does not verify"

for page in "$prefix"/share/man/man1/*.1; do
  head -5 "$page" | grep -q '^\.TH ' || fail "$page has no .TH header"
done
[ "$(ls "$prefix"/share/man/man1 | wc -l)" = 11 ] || fail "expected 11 man pages: $(ls "$prefix"/share/man/man1)"
bash -n "$prefix/share/bash-completion/completions/zshard" || fail "the bash completion does not parse"
head -1 "$prefix/share/zsh/site-functions/_zshard" | grep -q '^#compdef zshard' || fail "the zsh completion has no #compdef"

if [ "${ZSHARD_CONTAINER:-0}" = 1 ]; then
  engine=$(command -v docker || command -v podman) || fail "ZSHARD_CONTAINER=1 but no docker or podman"
  "$engine" build -f pipelines/Dockerfile --build-arg ZSHARD_GIT_COMMIT="$commit" -t zshard:test . || fail "the image does not build"
  "$engine" run --rm zshard:test --version | grep -qF "(commit $commit)" || fail "the image's zshard does not run"
fi
echo "PASSED: container build steps: $(du -h "$zshard" | cut -f1) stripped binary, $(ls "$prefix"/share/man/man1 | wc -l) man pages, completions"
