#!/usr/bin/env bash
# Builds every cargo-fuzz target of zshard and fuzzes each one in turn, one job on one core.
#
#   fuzz/run.sh [SECONDS] [TARGET...]     # default: 600 seconds for each of all targets
#
# Environment:
#   ZSHARD_CARGO_LOCK  lock file that serializes cargo builds with other builds on the machine
#                      (default /tmp/zshard-cargo.lock; the fuzz runs themselves do not hold it)
#   FUZZ_TOOLCHAIN     rustup toolchain for the build (default: nightly if installed, otherwise the
#                      default toolchain with RUSTC_BOOTSTRAP=1, which lets stable take -Z flags)
#   FUZZ_ARGS          extra libFuzzer arguments
#
# Prints, for each target, the seconds run, total executions, executions per second, corpus size,
# coverage (cov: edges, ft: features) and the crashes found (files written to fuzz/artifacts/<target>/).
# Exits 1 if any target crashed. Needs cargo-fuzz (`cargo install cargo-fuzz`).
set -euo pipefail

cd "$(dirname "$0")"
SECONDS_PER_TARGET="${1:-600}"
shift || true
ALL_TARGETS=(codec_decode filter_decode shard_index v2_metadata v3_metadata draft_metadata kerchunk_json object_decode zip_directory n5_block)
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL_TARGETS[@]}")

LOCK="${ZSHARD_CARGO_LOCK:-/tmp/zshard-cargo.lock}"
locked() {
    if command -v flock >/dev/null; then flock "$LOCK" "$@"; else "$@"; fi
}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is missing: cargo install cargo-fuzz" >&2
    exit 2
fi
TOOLCHAIN_ARGS=()
if [ -n "${FUZZ_TOOLCHAIN:-}" ]; then
    TOOLCHAIN_ARGS=("+$FUZZ_TOOLCHAIN")
elif rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    TOOLCHAIN_ARGS=("+nightly")
else
    # Stable with RUSTC_BOOTSTRAP=1 accepts the -Z sanitizer flags cargo-fuzz passes.
    export RUSTC_BOOTSTRAP=1
fi

echo "== building ${TARGETS[*]} (${TOOLCHAIN_ARGS[*]:-stable with RUSTC_BOOTSTRAP=1})"
for t in "${TARGETS[@]}"; do
    CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" locked cargo "${TOOLCHAIN_ARGS[@]}" fuzz build -O -a "$t"
done
BIN_DIR="${CARGO_TARGET_DIR:-target}/$(rustc -vV | sed -n 's/^host: //p')/release"

mkdir -p logs
FAILED=0
ROWS=()
for t in "${TARGETS[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    work="scratch/$t"
    mkdir -p "$work"
    before=$(find "artifacts/$t" -type f | wc -l)
    args=(-max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -malloc_limit_mb=128
          -timeout=10 -max_len=16384 -print_final_stats=1
          -artifact_prefix="artifacts/$t/")
    wrap=(nice -n 10)
    if [ "$t" = kerchunk_json ]; then
        # Reference targets may name remote URLs: keep every request on an unplugged loopback.
        if unshare -n true 2>/dev/null; then
            wrap=(nice -n 10 unshare -n)
        else
            echo "== $t: skipped (needs unshare -n to run without network)"
            continue
        fi
        args+=(-detect_leaks=0)
    fi
    echo "== $t: ${SECONDS_PER_TARGET}s"
    start=$(date +%s)
    # New inputs go to scratch/ (not committed): corpus/ stays the minimized one. To fold them in:
    #   target/<host>/release/<target> -merge=1 corpus/<target>.min corpus/<target> scratch/<target>
    set +e
    "${wrap[@]}" "$BIN_DIR/$t" "${args[@]}" ${FUZZ_ARGS:-} "$work" "corpus/$t" > "logs/$t.log" 2>&1
    rc=$?
    set -e
    elapsed=$(( $(date +%s) - start ))
    after=$(find "artifacts/$t" -type f | wc -l)
    crashes=$(( after - before ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "logs/$t.log" | tail -1 || true)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "logs/$t.log" | tail -1 || true)
    last=$(grep -E '^#[0-9]+' "logs/$t.log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$last")
    [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ] && crashes="exit $rc"
    if [ "$rc" -ne 0 ]; then
        FAILED=1
        grep -E 'ERROR|panicked|SUMMARY' "logs/$t.log" | head -5 || true
    fi
    ROWS+=("| $t | $elapsed | ${execs:-?} | ${rate:-?} | ${corp:-?} | ${cov:-?} | ${ft:-?} | $crashes |")
done

echo
echo "| target | seconds | execs | execs/s | corpus (inputs/bytes) | cov | ft | crashes |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
exit $FAILED
