#!/usr/bin/env python3
"""W11 (issue 40): a nightly update against a full conversion.

A uint16 Zarr v2 source of 6400 x 6400 in 16 x 16 zstd chunks (160,000 chunks) becomes 10^4 shards of
64 x 64 (16 inner chunks each). `--chunk 64` makes the chunks 64 x 64 (8 KiB instead of 512 B; the array
25600 x 25600, the shards 256 x 256, still 10^4 of 16 inner chunks). Then the source changes as a scheduled ETL's does: 0.1 % of its chunks are
written again by zarr-python (160 chunks at seeded random places) and 1 % rows are appended (64 rows: 1,600
new chunks, a new row of 100 shards). The same `zshard convert` runs again: the update. Last, a run with
nothing changed.

  local  source and destination on local disk.
  s3     source and destination in benches/pagings3.py (an S3 server that pages listings as S3 does) with a
         delay before every response (--delay-ms, 20 by default); requests are counted by kind.

For each: wall time, bytes read (the run's report), the update's counts (`update` in the report) and the
ratios update/full for time and bytes read (the target: at most 3 % each). The output after the update is
compared element by element with the changed source by zarr-python (the changed and appended rows and a
sample of the others; --verify full reads everything).

Usage: benches/run.sh --workloads W11 [the options below]   (builds zshard first)
       w11.py --zshard BIN [--parts local,s3] [--delay-ms 20] [--workdir DIR] [--verify sample|full]
              [--chunk 16] [--repeat 1]
"""
import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter

import numcodecs
import numpy as np
import zarr

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

N, CHUNK, SHARD, GROW, CHANGED = 0, 0, 0, 0, 0


def configure(chunk):
    """The array for chunks of `chunk` x `chunk`: always 10^4 shards (100 x 100) of 4 x 4 inner chunks
    (160,000 chunks); 1 % rows appended, 0.1 % of the chunks written again."""
    global N, CHUNK, SHARD, GROW, CHANGED
    CHUNK, SHARD = chunk, 4 * chunk
    N = 100 * SHARD
    GROW = N // 100
    CHANGED = (N // CHUNK) ** 2 // 1000
S3_ENV = {"AWS_ACCESS_KEY_ID": "w11", "AWS_SECRET_ACCESS_KEY": "w11-secret", "AWS_REGION": "us-east-1",
          "AWS_ALLOW_HTTP": "true", "AWS_EC2_METADATA_DISABLED": "true"}


def log(msg):
    print(f"[w11 {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def values(rows, cols, seed):
    rng = np.random.default_rng(seed)
    base = (np.arange(rows * cols, dtype=np.int64).reshape(rows, cols) % 4093).astype("uint16")
    return base + rng.integers(0, 16, size=(rows, cols), dtype="uint16")


def make_source(path):
    """The source as zarr-python writes it (kept under WORKDIR/sources and copied for each part)."""
    if os.path.exists(os.path.join(path, ".zarray")):
        return
    log(f"writing the source ({(N // CHUNK) ** 2} chunks) with zarr-python")
    a = zarr.create_array(path, shape=(N, N), chunks=(CHUNK, CHUNK), dtype="uint16", zarr_format=2,
                          compressors=numcodecs.Zstd(level=1), fill_value=0)
    rows = 10 * SHARD
    for r in range(0, N, rows):
        a[r:r + rows, :] = values(rows, N, r)


def change_source(path):
    """What a night does to the source: CHANGED chunks written again, GROW rows appended. Returns the
    changed chunks' grid positions."""
    a = zarr.open_array(path, mode="r+")
    rng = np.random.default_rng(11)
    grid = N // CHUNK
    picked = rng.choice(grid * grid, size=CHANGED, replace=False)
    positions = [(int(p) // grid, int(p) % grid) for p in picked]
    for i, j in positions:
        a[i * CHUNK:(i + 1) * CHUNK, j * CHUNK:(j + 1) * CHUNK] = 7
    a.resize((N + GROW, N))
    a[N:N + GROW, :] = values(GROW, N, 99)
    return positions


def run(cmd, env=None):
    t = time.perf_counter()
    out = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return wall


def convert(args, src, dst, report, extra=(), env=None):
    wall = run([args.zshard, "convert", src, dst, "--shard-shape", f"{SHARD},{SHARD}", "--quiet",
                "--report", report, *extra], env)
    with open(report) as f:
        doc = json.load(f)
    return {"wall_s": round(wall, 3), "bytes_read": doc["totals"]["bytes_read"],
            "chunks_read": doc["totals"]["chunks_read"], "shards_written": doc["totals"]["shards_written"],
            "status": doc["status"], "update": doc.get("update")}


def check(src_array, dst_array, positions, full):
    """The output equals the changed source: the changed chunks, the appended rows, and a sample."""
    assert dst_array.shape == src_array.shape, (dst_array.shape, src_array.shape)
    if full:
        np.testing.assert_array_equal(dst_array[...], src_array[...])
        return
    for i, j in positions[:40]:
        sl = (slice(i * CHUNK, (i + 1) * CHUNK), slice(j * CHUNK, (j + 1) * CHUNK))
        np.testing.assert_array_equal(dst_array[sl], src_array[sl])
    np.testing.assert_array_equal(dst_array[N - SHARD:], src_array[N - SHARD:])
    np.testing.assert_array_equal(dst_array[:SHARD * 4], src_array[:SHARD * 4])


def ratios(full, update):
    return {"time": round(update["wall_s"] / full["wall_s"], 4),
            "bytes_read": round(update["bytes_read"] / max(full["bytes_read"], 1), 4)}


def repeated(args, part, restore, convert_one):
    """The update then the nothing-changed run, `--repeat` times from the same state (`restore` puts
    it back): the runs of median wall time, with every wall time beside them."""
    updates, sames = [], []
    for rep in range(args.repeat):
        if rep:
            restore()
        log(f"{part}: update ({rep + 1} of {args.repeat})")
        updates.append(convert_one("update.json"))
        log(f"{part}: nothing changed")
        sames.append(convert_one("same.json"))

    def median(runs):
        ordered = sorted(runs, key=lambda r: r["wall_s"])
        return {**ordered[(len(ordered) - 1) // 2], "walls_s": [r["wall_s"] for r in runs]}

    return median(updates), median(sames)


def local_part(args, pristine):
    work = os.path.join(args.workdir, "local")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    src, dst = os.path.join(work, "src.zarr"), os.path.join(work, "dst.zarr")
    shutil.copytree(pristine, src)
    log("local: full conversion")
    full = convert(args, src, dst, os.path.join(work, "full.json"))
    positions = change_source(src)
    # The destination as the full conversion left it, hard-linked (zshard replaces files, never
    # writes into one, so the links keep the old bytes, inodes and mtimes) for each repetition.
    before = dst + ".before"
    subprocess.run(["cp", "-al", dst, before], check=True)

    def restore():
        shutil.rmtree(dst)
        subprocess.run(["cp", "-al", before, dst], check=True)

    update, same = repeated(args, "local", restore, lambda name: convert(args, src, dst, os.path.join(work, name)))
    check(zarr.open_array(src, mode="r"), zarr.open_array(dst, mode="r"), positions, args.verify == "full")
    return {"part": "local", "full": full, "update": update, "no_change": same, "ratios": ratios(full, update)}


def load_dir(server, bucket, folder, prefix):
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            key = prefix + "/" + os.path.relpath(path, folder).replace(os.sep, "/")
            with open(path, "rb") as f:
                server.put(bucket, key, f.read())


def s3_part(args, pristine):
    from pagings3 import PagingS3
    from sortedcontainers import SortedDict

    work = os.path.join(args.workdir, "s3")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    local_src = os.path.join(work, "src.zarr")
    shutil.copytree(pristine, local_src)
    server = PagingS3(args.delay_ms / 1000)
    try:
        server.bucket("w11")
        load_dir(server, "w11", local_src, "src.zarr")
        # The source's 160,000 stored objects are kept out of Python's collector, whose full passes
        # would walk them all while the server answers (no S3 endpoint pauses for that).
        gc.freeze()
        s3 = ["--s3-endpoint", server.endpoint, "--s3-path-style", *args.s3_args.split()]
        src, dst = "s3://w11/src.zarr", "s3://w11/dst.zarr"

        def requests():
            kinds = Counter(r.kind for r in server.requests)
            server.reset()
            return dict(kinds)

        server.reset()
        log(f"s3 ({args.delay_ms} ms): full conversion")
        full = convert(args, src, dst, os.path.join(work, "full.json"), s3, S3_ENV)
        full["requests"] = requests()
        # The night's changes, made by zarr-python on a local copy, then stored as the producer would:
        # the chunks it wrote (and the metadata) are PUT again, the others keep their ETags.
        before = {p: os.path.getmtime(os.path.join(local_src, p)) for p in os.listdir(local_src)}
        positions = change_source(local_src)
        for name in os.listdir(local_src):
            path = os.path.join(local_src, name)
            if before.get(name) != os.path.getmtime(path):
                with open(path, "rb") as f:
                    server.put("w11", f"src.zarr/{name}", f.read())
        # The bucket after the night's changes, before the update: restored (a copy of the table of
        # objects, whose contents are never changed in place) for each repetition.
        snapshot = SortedDict(server.buckets["w11"])
        # Again: the destination's objects came after the first freeze.
        gc.freeze()

        def restore():
            with server.lock:
                server.buckets["w11"] = SortedDict(snapshot)

        def timed(name):
            server.reset()
            result = convert(args, src, dst, os.path.join(work, name), s3, S3_ENV)
            # Each request's start and end (seconds from the run's start), for a timeline of the run.
            with open(os.path.join(work, name.replace(".json", ".requests.json")), "w") as f:
                json.dump([[r.method, r.path, r.kind, round(r.start, 4), round(r.end, 4)]
                           for r in server.requests], f)
            result["requests"] = requests()
            return result

        update, same = repeated(args, f"s3 ({args.delay_ms} ms)", restore, timed)
        out = os.path.join(work, "dst.zarr")
        for key in server.keys("w11", "dst.zarr/"):
            path = os.path.join(out, key[len("dst.zarr/"):])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(server.get("w11", key))
        check(zarr.open_array(local_src, mode="r"), zarr.open_array(out, mode="r"), positions,
              args.verify == "full")
    finally:
        server.close()
    return {"part": f"s3 {args.delay_ms} ms", "full": full, "update": update, "no_change": same,
            "ratios": ratios(full, update)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zshard", required=True)
    p.add_argument("--parts", default="local,s3")
    p.add_argument("--delay-ms", type=int, default=20)
    p.add_argument("--s3-args", default="--io-threads 16",
                   help="more flags for the S3 runs (the Python server resets connections beyond about 16)")
    p.add_argument("--workdir", default=os.path.join(HERE, "..", "target", "bench-w11"))
    p.add_argument("--verify", choices=["sample", "full"], default="sample")
    p.add_argument("--chunk", type=int, default=16,
                   help="the source's chunks are CHUNK x CHUNK (16: 512 B each; 64: 8 KiB, 1.3 GB in all; 128: 32 KiB, 4.5 GB)")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs of the update and of the nothing-changed rerun, each from the same changed state; "
                        "the median (the lower one for an even count) is reported, every wall time beside it")
    p.add_argument("--workloads", help="ignored (benches/run.sh passes it on)")
    args = p.parse_args()
    if args.repeat < 1:
        p.error(f"--repeat must be at least 1, got {args.repeat}")
    configure(args.chunk)
    name = "src.zarr" if args.chunk == 16 else f"src-{args.chunk}.zarr"
    pristine = os.path.join(args.workdir, "sources", name)
    os.makedirs(os.path.dirname(pristine), exist_ok=True)
    make_source(pristine)
    results = []
    for part in args.parts.split(","):
        results.append(local_part(args, pristine) if part == "local" else s3_part(args, pristine))
        print(json.dumps(results[-1]), flush=True)
    for r in results:
        u = r["update"]
        print(f"W11 {r['part']}: full {r['full']['wall_s']} s, update {u['wall_s']} s "
              f"({100 * r['ratios']['time']:.1f} %), bytes read {100 * r['ratios']['bytes_read']:.1f} %, "
              f"update {u['update']}; nothing changed: {r['no_change']['wall_s']} s, "
              f"walls of the update {u['walls_s']} and of nothing changed {r['no_change']['walls_s']}, "
              f"status {r['no_change']['status']}", flush=True)


if __name__ == "__main__":
    main()
