#!/usr/bin/env python3
"""W5 (issue 7): passthrough. The source is a Zarr v3 array whose chunks are already encoded exactly as
the output's inner chunks (bytes little + zstd 3, 256^2 uint16), so zshard copies the encoded bytes into
shards without decoding. Compared in one run with: zshard --no-passthrough (decode + re-encode),
tensorstore (which always decodes and re-encodes), and `cp -r` of the source directory (the copy floor).
Every output is checked equal to the source with zarr-python and tensorstore.

Usage: w5.py ZSHARD_BIN WORKDIR [--runs 3] [--threads N] [--size 16384]
"""
import argparse
import json
import os
import shutil
import statistics
import sys

import numpy as np
import zarr

sys.path.insert(0, os.path.dirname(__file__))
from w1 import TS_SCRIPT, timed, verify  # noqa: E402


def make_source(path, size):
    if os.path.exists(os.path.join(path, "zarr.json")):
        return
    shutil.rmtree(path, ignore_errors=True)
    arr = zarr.create_array(store=path, shape=(size, size), chunks=(256, 256), dtype="uint16", zarr_format=3,
                            compressors=[zarr.codecs.ZstdCodec(level=3)], fill_value=0)
    rng = np.random.default_rng(5)
    x = np.linspace(0, 8 * np.pi, size, dtype=np.float32)
    band = 1024
    for start in range(0, size, band):
        y = np.linspace(start / size * 8 * np.pi, (start + band) / size * 8 * np.pi, band, endpoint=False,
                        dtype=np.float32)
        smooth = 20000 + 10000 * np.sin(y)[:, None] * np.cos(x)[None, :]
        arr[start:start + band] = smooth.astype(np.uint16) + rng.integers(0, 64, (band, size), dtype=np.uint16)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("zshard")
    p.add_argument("workdir")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--size", type=int, default=16384)
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    source = os.path.join(args.workdir, f"w5-{args.size}.zarr")
    make_source(source, args.size)
    stored_mb = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(source) for f in fs) / 1e6
    out = os.path.join(args.workdir, "w5-out.zarr")
    convert = [args.zshard, "convert", source, out, "--shard-shape", "4096,4096", "--chunk-shape", "256,256",
               "--compressor", "zstd:3", "--threads", str(args.threads), "--quiet"]
    tools = {
        "zshard": convert,
        "zshard --no-passthrough": convert + ["--no-passthrough"],
        "tensorstore": [sys.executable, "-c", TS_SCRIPT, source, out, str(args.threads), str(args.size), "zarr3"],
        "cp -r (floor)": ["cp", "-r", source, out],
    }
    results = {}
    for name, cmd in tools.items():
        samples = []
        for _ in range(args.runs):
            shutil.rmtree(out, ignore_errors=True)
            os.sync()
            samples.append(timed(cmd))
        if not name.startswith("cp"):
            verify(source, out)
        results[name] = tuple(statistics.median(s[i] for s in samples) for i in range(3))
    shutil.rmtree(out, ignore_errors=True)
    best_peer = min(v[0] for k, v in results.items() if not k.startswith(("zshard", "cp")))
    copy = max(results["cp -r (floor)"][0], 0.01)
    print(f"W5 {args.size}^2 uint16 v3 zstd 3 -> shards, {args.threads} threads, medians of {args.runs} runs, "
          f"{stored_mb:.0f} MB stored")
    print(f"{'tool':24} {'wall s':>7} {'CPU s':>7} {'RSS MiB':>8} {'MB/s':>7} {'best peer/x':>11} {'x/cp':>6}")
    for name, (wall, cpu, rss) in results.items():
        wall = max(wall, 0.01)  # /usr/bin/time has 10 ms resolution
        print(f"{name:24} {wall:7.2f} {cpu:7.2f} {rss:8.0f} {stored_mb / wall:7.0f} {best_peer / wall:11.2f} "
              f"{wall / copy:6.2f}")
    print(json.dumps({"stored_mb": stored_mb, "results": results}))


if __name__ == "__main__":
    main()
