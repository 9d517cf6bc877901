#!/usr/bin/env bash
# The fsync share of W1 and W3 (docs/benchmarks.md): each binary converts the harness's W1 and W3 sources
# twice under strace (--seccomp-bpf, so only the sync calls stop), with the page cache dropped before each
# run (root). Prints the wall, the sync calls' count and total time, and the last syncfs's time (what a run with
# group commit waits for; its earlier syncfs calls run on the background thread).
#
# Usage: benches/fsync_share.sh SOURCES_DIR BIN [BIN...]
#   SOURCES_DIR: the harness's --workdir sources (w1-16384x16384.zarr, w3-1000x1000x500.zarr), made by
#   benches/run.sh --workloads W1,W3 --scale full. The outputs go beside it, on the same disk (never /tmp,
#   which may be a tmpfs, where a sync costs nothing).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,9p' "$0"; exit 2; }
sources=$1
shift
command -v strace >/dev/null || { echo "strace is missing" >&2; exit 1; }
[ "$(id -u)" = 0 ] || echo "fsync_share.sh: not root, so the page cache is not dropped between runs" >&2
work=$(mktemp -d "$(dirname "$(realpath "$sources")")/fsync-share.XXXXXX")
trap 'rm -rf "$work"' EXIT
for bin in "$@"; do
  for wl in w1 w3; do
    if [ "$wl" = w1 ]; then
      src=$sources/w1-16384x16384.zarr; shape=(--shard-shape 4096,4096 --chunk-shape 256,256)
    else
      src=$sources/w3-1000x1000x500.zarr; shape=(--shard-shape 512,512,512 --chunk-shape 64,64,64)
    fi
    for run in 1 2; do
      rm -rf "$work/out.zarr"
      sync
      { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null || true
      start=$(date +%s.%N)
      strace -f --seccomp-bpf -T -e trace=fsync,fdatasync,syncfs -o "$work/trace" \
        "$bin" convert "$src" "$work/out.zarr" "${shape[@]}" --compressor zstd:3 --threads 2 --quiet
      end=$(date +%s.%N)
      python3 - "$work/trace" "$start" "$end" "$(basename "$bin") $wl run $run" <<'PY'
import collections, re, sys

trace, start, end, name = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
total, count, last = collections.Counter(), collections.Counter(), 0.0
for line in open(trace):
    # A call is one line, or an "<unfinished ...>" line and a "<... NAME resumed>" line with the time.
    m = re.search(r"^\d+\s+(?:<\.\.\. )?(fsync|fdatasync|syncfs)(?:\(| resumed>).*<([\d.]+)>\s*$", line)
    if m:
        total[m.group(1)] += float(m.group(2))
        count[m.group(1)] += 1
        if m.group(1) == "syncfs":
            last = float(m.group(2))
wall = end - start
calls = ", ".join(f"{k} {count[k]} calls {total[k]:.3f} s ({100 * total[k] / wall:.1f} %)" for k in total)
print(f"{name}: wall {wall:.2f} s; {calls}; last syncfs {last:.3f} s ({100 * last / wall:.1f} %)")
PY
    done
  done
done
