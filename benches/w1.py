#!/usr/bin/env python3
"""Workload W1 (issue 2 acceptance, issue 7 baseline).

Generates a 16384x16384 uint16 Zarr v2 array (256x256 chunks, blosc zstd level 5 + shuffle; smooth data
plus noise, deterministic) with zarr-python, converts it with
`zshard convert --shard-shape 4096,4096 --chunk-shape 256,256 --compressor zstd:3` for each index location
under /usr/bin/time -v, and checks that zarr-python and tensorstore read the output back equal to the
source. Prints wall time, CPU time and peak RSS of each conversion.

Usage: w1.py ZSHARD_BIN WORKDIR [--size N] [--threads N]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numcodecs
import numpy as np
import tensorstore as ts
import zarr


# tensorstore converting SRC (driver `zarr` or `zarr3`) into W1's/W5's output layout:
# argv = SRC DST THREADS SIZE DRIVER.
TS_SCRIPT = r"""
import sys, tensorstore as ts
src, dst, threads, size, driver = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
ctx = ts.Context({"data_copy_concurrency": {"limit": threads}, "file_io_concurrency": {"limit": 2 * threads}})
source = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": src}}, context=ctx).result()
spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": dst}, "metadata": {
    "shape": [size, size], "data_type": "uint16",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4096, 4096]}},
    "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [256, 256],
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "end"}}]}, "create": True, "delete_existing": True}
target = ts.open(spec, context=ctx).result()
target.write(source).result()
"""


def make_source(path, size):
    if os.path.exists(os.path.join(path, ".zarray")):
        return
    shutil.rmtree(path, ignore_errors=True)
    arr = zarr.create_array(
        store=path, shape=(size, size), chunks=(256, 256), dtype="uint16", zarr_format=2,
        compressors=numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE), fill_value=0,
    )
    rng = np.random.default_rng(42)
    x = np.linspace(0, 8 * np.pi, size, dtype=np.float32)
    band = 1024
    for start in range(0, size, band):
        y = np.linspace(start / size * 8 * np.pi, (start + band) / size * 8 * np.pi, band, endpoint=False,
                        dtype=np.float32)
        smooth = 20000 + 10000 * np.sin(y)[:, None] * np.cos(x)[None, :]
        noise = rng.integers(0, 64, size=(band, size), dtype=np.uint16)
        arr[start:start + band] = smooth.astype(np.uint16) + noise


def timed(cmd):
    out = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"command failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr}")
    def field(name):
        return re.search(rf"{re.escape(name)}: (.*)", out.stderr).group(1).strip()
    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    parts = [float(p) for p in wall.split(":")]
    seconds = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    rss_mib = int(field("Maximum resident set size (kbytes)")) / 1024
    return seconds, cpu, rss_mib


def verify(source, output):
    src = zarr.open_array(source, mode="r")
    out = zarr.open_array(output, mode="r")
    meta = json.load(open(os.path.join(output, "zarr.json")))
    assert meta["codecs"][0]["name"] == "sharding_indexed"
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": output}}).result()
    band = 2048
    for start in range(0, src.shape[0], band):
        expected = src[start:start + band]
        got_zarr = out[start:start + band]
        got_ts = t[start:start + band].read().result()
        assert expected.dtype == got_zarr.dtype == got_ts.dtype
        if not (np.array_equal(expected, got_zarr) and np.array_equal(expected, got_ts)):
            sys.exit(f"MISMATCH in rows {start}..{start + band} of {output}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("zshard")
    p.add_argument("workdir")
    p.add_argument("--size", type=int, default=16384)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    source = os.path.join(args.workdir, f"w1-{args.size}.zarr")
    t0 = time.time()
    make_source(source, args.size)
    print(f"source ready in {time.time() - t0:.1f} s: {source}", flush=True)
    for location in ["end", "start"]:
        output = os.path.join(args.workdir, f"w1-{args.size}-{location}.zarr")
        shutil.rmtree(output, ignore_errors=True)
        wall, cpu, rss = timed([args.zshard, "convert", source, output, "--shard-shape", "4096,4096",
                                "--chunk-shape", "256,256", "--compressor", "zstd:3",
                                "--index-location", location, "--threads", str(args.threads), "--quiet"])
        verify(source, output)
        print(f"W1 {args.size}^2 index={location}: wall {wall:.2f} s, CPU {cpu:.2f} s, peak RSS {rss:.0f} MiB; "
              f"zarr-python and tensorstore read it back equal to the source", flush=True)
        shutil.rmtree(output)


if __name__ == "__main__":
    main()
