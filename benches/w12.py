#!/usr/bin/env python3
"""W12 (issue 41): a 5-level OME-Zarr pyramid made while sharding, against the peers that make one.

W1's source (16384^2 uint16 Zarr v2, 256^2 chunks, blosc zstd 5 + shuffle; benches/w1.py makes it) with
`_ARRAY_DIMENSIONS` ["y", "x"] becomes an OME-Zarr 0.5 image of 5 levels (16384^2 ... 1024^2), each level
the 2x2 mean of the one above, sharded: level 0 in shards of 4096^2 of 256^2 inner chunks, zstd 3 inner
codec. The tools, alternated within each repetition:

  zshard-plain    `zshard convert` of the same source without a pyramid (level 0 alone): the reference of
                  the second target.
  zshard          `zshard convert --pyramid 5 --downsample mean`; the lower levels' shards follow level
                  0's (2048^2, 1024^2, 512^2, 256^2 of 256^2 inner chunks).
  zarrs_ome       zarrs_tools 0.8.1 (`zarrs_ome --max-levels 4`, mean: no Gaussian sigma), shards 4096^2
                  of 256^2 at every level (cut to the level's extent), zstd 3.
  ngff-zarr       ngff-zarr 0.50 (dask): to_multiscales(scale_factors [2, 4, 8, 16], dask_bin_shrink: the
                  mean), to_ngff_zarr(version 0.5, 256^2 chunks, 16 x 16 chunks per shard, zstd 3).

Every tool gets every thread (--threads, default the CPU count). Each output is checked: level 0 equal to
the source, and level 1 within 1 of the 2x2 mean of level 0, on a band of rows (--check full: every level,
every row). Targets (issue 41): zshard at most 0.8x the best peer's wall time, and at most 1.15x
zshard-plain, in the same run.

Usage: w12.py --zshard BIN [--zarrs-ome BIN] [--runs 3] [--size 16384] [--workdir DIR] [--threads N]
              [--tools zshard-plain,zshard,zarrs_ome,ngff-zarr] [--json OUT]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import zarr

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import w1  # noqa: E402  (W1's source generator)

LEVELS, SHARD, CHUNK = 5, 4096, 256
TOOLS = ["zshard-plain", "zshard", "zarrs_ome", "ngff-zarr"]
ZSTD3 = '[{"name": "zstd", "configuration": {"level": 3, "checksum": false}}]'

# ngff-zarr making the pyramid: argv = SRC DST THREADS LEVELS CHUNK PER_SHARD.
NGFF_SCRIPT = r"""
import sys
import dask
import dask.array as da
import ngff_zarr as nz
import zarr
src, dst, threads, levels, chunk, per_shard = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
dask.config.set(scheduler="threads", num_workers=threads)
image = nz.to_ngff_image(da.from_zarr(zarr.open_array(src, mode="r")), dims=["y", "x"])
multiscales = nz.to_multiscales(image, scale_factors=[2 ** k for k in range(1, levels)],
                                method=nz.Methods.DASK_BIN_SHRINK, chunks=chunk, cache=False)
nz.to_ngff_zarr(dst, multiscales, version="0.5", chunks_per_shard=per_shard,
                compressors=[zarr.codecs.ZstdCodec(level=3)])
"""


def log(msg):
    print(f"[w12 {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def make_source(path, size):
    w1.make_source(path, size)
    with open(os.path.join(path, ".zattrs"), "w") as f:
        json.dump({"_ARRAY_DIMENSIONS": ["y", "x"]}, f)


def command(tool, args, src, dst):
    threads = str(args.threads)
    shapes = ["--shard-shape", f"{SHARD},{SHARD}", "--chunk-shape", f"{CHUNK},{CHUNK}"]
    if tool == "zshard-plain":
        return [args.zshard, "convert", src, dst, *shapes, "--compressor", "zstd:3", "--threads", threads,
                "--quiet"]
    if tool == "zshard":
        return [args.zshard, "convert", src, dst, *shapes, "--compressor", "zstd:3", "--threads", threads,
                "--pyramid", str(LEVELS), "--downsample", "mean", "--quiet"]
    if tool == "zarrs_ome":
        return [args.zarrs_ome, src, dst, "--max-levels", str(LEVELS - 1), *shapes,
                "--bytes-to-bytes-codecs", ZSTD3, "--dimension-names", "y,x", "--chunk-limit", threads]
    if tool == "ngff-zarr":
        return [args.python, "-c", NGFF_SCRIPT, src, dst, threads, str(LEVELS), str(CHUNK), str(SHARD // CHUNK)]
    raise ValueError(tool)


def timed(cmd):
    """Wall, CPU (user + system) and peak RSS of `cmd`, from GNU time."""
    out = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-4000:]}")

    def field(name):
        return re.search(rf"{re.escape(name)}: (.*)", out.stderr).group(1).strip()

    parts = [float(p) for p in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")]
    wall = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    return wall, cpu, int(field("Maximum resident set size (kbytes)")) / 1024


def level_paths(dst):
    """The levels' array paths, from the image's multiscales (0.5: under `ome`)."""
    with open(os.path.join(dst, "zarr.json")) as f:
        attrs = json.load(f)["attributes"]
    multiscale = attrs.get("ome", attrs)["multiscales"][0]
    return [d["path"] for d in multiscale["datasets"]]


def check(src, dst, plain, full):
    """Level 0 equals the source; each checked level is within 1 of the 2x2 mean of the one above."""
    source = zarr.open_array(src, mode="r")
    n = source.shape[0]
    band = slice(0, n) if full else slice(n // 2 - 512, n // 2 + 512)
    if plain:
        out = zarr.open_array(dst, mode="r")
        np.testing.assert_array_equal(out[band], source[band])
        return
    paths = level_paths(dst)
    assert len(paths) == LEVELS, paths
    levels = [zarr.open_array(os.path.join(dst, p), mode="r") for p in paths]
    assert [lv.shape[0] for lv in levels] == [n >> k for k in range(LEVELS)], [lv.shape for lv in levels]
    above = levels[0][band]
    np.testing.assert_array_equal(above, source[band])
    for k in range(1, LEVELS if full else 2):
        rows = slice(band.start >> k, band.stop >> k)
        got = levels[k][rows].astype(np.float64)
        mean = above.astype(np.float64).reshape(got.shape[0], 2, got.shape[1], 2).mean(axis=(1, 3))
        worst = np.abs(got - mean).max()
        assert worst <= 1.0, f"{dst}: level {k} differs from the mean of level {k - 1} by {worst}"
        above = levels[k][rows]


def du(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zshard", required=True)
    p.add_argument("--zarrs-ome", default=shutil.which("zarrs_ome") or "/work/peers/bin/zarrs_ome")
    p.add_argument("--python", default=sys.executable, help="the interpreter with ngff-zarr 0.50")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--size", type=int, default=16384)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--workdir", default=os.path.join(HERE, "..", "target", "bench", "w12"))
    p.add_argument("--tools", default=",".join(TOOLS))
    p.add_argument("--check", choices=["band", "full"], default="band")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--workloads", help="ignored (benches/run.sh passes it on)")
    args = p.parse_args()
    tools = args.tools.split(",")
    os.makedirs(args.workdir, exist_ok=True)
    src = os.path.join(args.workdir, f"w1-{args.size}.zarr")
    log(f"source {src}")
    make_source(src, args.size)
    results = {tool: [] for tool in tools}
    for run in range(args.runs):
        # Alternated: each repetition starts with another tool, so that none always runs first.
        order = tools[run % len(tools):] + tools[:run % len(tools)]
        for tool in order:
            dst = os.path.join(args.workdir, f"out-{tool}.zarr")
            shutil.rmtree(dst, ignore_errors=True)
            wall, cpu, rss = timed(command(tool, args, src, dst))
            size = du(dst)
            check(src, dst, tool == "zshard-plain", args.check == "full")
            results[tool].append({"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "rss_mib": round(rss),
                                  "bytes": size})
            log(f"run {run + 1}: {tool}: wall {wall:.2f} s, CPU {cpu:.2f} s, peak RSS {rss:.0f} MiB, "
                f"{size / 2**20:.0f} MiB written")
            shutil.rmtree(dst)
    best = {tool: min(r["wall_s"] for r in rs) for tool, rs in results.items()}
    summary = {"size": args.size, "threads": args.threads, "runs": results, "best_wall_s": best}
    peers = [best[t] for t in ("zarrs_ome", "ngff-zarr") if t in best]
    if "zshard" in best and peers:
        summary["zshard_over_best_peer"] = round(best["zshard"] / min(peers), 3)
    if "zshard" in best and "zshard-plain" in best:
        summary["zshard_over_plain"] = round(best["zshard"] / best["zshard-plain"], 3)
    print("| tool | wall (best of {}) | walls | CPU | peak RSS | written |".format(args.runs))
    print("|---|---|---|---|---|---|")
    for tool, rs in results.items():
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in rs)
        cpu = min(r["cpu_s"] for r in rs)
        rss = max(r["rss_mib"] for r in rs)
        print(f"| {tool} | {best[tool]:.1f} s | {walls} | {cpu:.1f} s | {rss} MiB | "
              f"{rs[0]['bytes'] / 2**20:.0f} MiB |")
    for key in ("zshard_over_best_peer", "zshard_over_plain"):
        if key in summary:
            print(f"{key}: {summary[key]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
