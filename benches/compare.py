#!/usr/bin/env python3
"""Peer comparison for workload W1 (issue 7): zshard vs tensorstore (and zarrs_reencode when it is on
PATH) on the same input in one run, every output checked equal to the source, plus the codec floor.

W1: 16384x16384 uint16 Zarr v2, 256^2 chunks, blosc zstd 5 + shuffle -> shards 4096^2, inner 256^2,
zstd 3, index at the end. The codec floor is the single-thread time of the same decodes and encodes
with the same libraries (numcodecs' blosc and zstd), divided by the thread count.

Usage: compare.py ZSHARD_BIN WORKDIR [--runs 3] [--threads N] [--size 16384]
Prints a table of medians: wall, CPU, peak RSS, throughput (raw MB/s), ratio to the best peer, ratio
to the codec floor.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numcodecs
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from w1 import TS_SCRIPT, make_source, timed, verify  # noqa: E402


def codec_floor(source, threads):
    """Single-thread time of decoding every source chunk and encoding every inner chunk, / threads."""
    names = [n for n in os.listdir(source) if not n.startswith(".")]
    blosc, zstd = numcodecs.Blosc(), numcodecs.Zstd(level=3)
    numcodecs.blosc.set_nthreads(1)
    start = time.process_time()
    for name in names:
        raw = blosc.decode(open(os.path.join(source, name), "rb").read())
        zstd.encode(np.frombuffer(raw, dtype="uint8"))
    return (time.process_time() - start) / threads


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("zshard")
    p.add_argument("workdir")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--size", type=int, default=16384)
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    source = os.path.join(args.workdir, f"w1-{args.size}.zarr")
    make_source(source, args.size)
    raw_mb = args.size * args.size * 2 / 1e6
    out = os.path.join(args.workdir, "out.zarr")
    tools = {
        "zshard": [args.zshard, "convert", source, out, "--shard-shape", "4096,4096", "--chunk-shape", "256,256",
                   "--compressor", "zstd:3", "--threads", str(args.threads), "--quiet"],
        "tensorstore": [sys.executable, "-c", TS_SCRIPT, source, out, str(args.threads), str(args.size), "zarr"],
    }
    if shutil.which("zarrs_reencode"):
        tools["zarrs_reencode"] = ["zarrs_reencode", source, out, "--shard-shape", "4096,4096", "--chunk-shape",
                                   "256,256", "--codec", '{"name":"zstd","configuration":{"level":3,"checksum":false}}']
    results = {}
    for name, cmd in tools.items():
        samples = []
        for _ in range(args.runs):
            shutil.rmtree(out, ignore_errors=True)
            samples.append(timed(cmd))
        verify(source, out)  # every output reads back equal (zarr-python and tensorstore)
        results[name] = tuple(statistics.median(s[i] for s in samples) for i in range(3))
    floor = codec_floor(source, args.threads)
    best_peer = min((v[0] for k, v in results.items() if k != "zshard"), default=float("nan"))
    print(f"W1 {args.size}^2 uint16, {args.threads} threads, medians of {args.runs} runs; codec floor {floor:.2f} s")
    print(f"{'tool':16} {'wall s':>7} {'CPU s':>7} {'RSS MiB':>8} {'MB/s':>7} {'/best peer':>10} {'/floor':>7}")
    for name, (wall, cpu, rss) in results.items():
        print(f"{name:16} {wall:7.2f} {cpu:7.2f} {rss:8.0f} {raw_mb / wall:7.0f} {wall / best_peer:10.2f} {wall / floor:7.2f}")
    print(json.dumps({"floor_s": floor, "results": results}))


if __name__ == "__main__":
    main()
