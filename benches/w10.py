#!/usr/bin/env python3
"""W10 (issue 34 step 4): plan and resume at a million shards.

A uint8 Zarr v2 source of 1000 x 1000 (100 uncompressed chunks of 10 x 1000) converted into 10^6 shards of one
element (1 x 1 shards and inner chunks, 21-byte objects). The 99 %-done destination comes from a first run
that stops at a damaged last chunk (its row of shards is the last 1 %), kept once under WORKDIR/sources.

  local  `zshard plan` and the resume on local disk; each resume starts from the snapshot restored with hard
         links (the resume replaces files by renaming, so the snapshot is never changed).
  s3     `zshard plan` and the resume against benches/pagings3.py, an S3 server that pages listings 1,000 keys
         at a time from a sorted index as S3 does, with a delay before every response (--delay-ms). The bench
         servers cannot serve this: s3s-fs walks the bucket folder for every page (W9b, 10^5 keys: 139 s) and
         moto filters every key per page. The destination is loaded into the server from the local snapshot,
         its `done` records given the ETags the server names the objects by (the MD5 of the bytes, which is
         what a run against it records from each PUT's response): 10^6 PUTs through a Python server would take
         longer than the bench.

For each: wall, CPU, peak RSS, and on S3 the requests by kind and the listing pages in series. The rows the
resume wrote (and their neighbours) are read back with zarr-python and compared with the source element by
element; --verify full reads every shard (minutes at 10^6).

Usage: w10.py --zshard BIN [--scale small|full] [--runs 2] [--delay-ms 0,20] [--parts local,s3] [--workdir DIR]
              [--s3-args '--io-threads 32']
       benches/run.sh --workloads W10 [the same options]   (builds zshard first)
The default scale is small (10^4 shards: about a minute); full (10^6) takes 15-20 minutes, most of it making the
99 %-done snapshot once (kept under WORKDIR/sources, about 5 GB) and loading it into the server for each run.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import zarr

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import harness  # noqa: E402
from pagings3 import PagingS3  # noqa: E402

ROWS = {"full": 1000, "small": 100}  # a square of ROWS^2 shards: 10^6, 10^4
S3_ENV = {"AWS_ACCESS_KEY_ID": "w10", "AWS_SECRET_ACCESS_KEY": "w10-secret", "AWS_REGION": "us-east-1",
          "AWS_ALLOW_HTTP": "true", "AWS_EC2_METADATA_DISABLED": "true"}
log = harness.log


def values(n):
    return ((np.arange(n * n, dtype=np.int64) % 251) + 1).astype("uint8").reshape(n, n)


def make_source(path, n):
    """n x n uint8, chunks of (n/100) x n, uncompressed: 100 chunk files."""
    rows = max(n // 100, 1)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    json.dump({"zarr_format": 2, "shape": [n, n], "chunks": [rows, n], "dtype": "|u1", "compressor": None,
               "fill_value": 0, "order": "C", "filters": None}, open(os.path.join(path, ".zarray"), "w"))
    v = values(n)
    for r in range(n // rows):
        open(os.path.join(path, f"{r}.0"), "wb").write(v[r * rows:(r + 1) * rows].tobytes())
    return os.path.join(path, f"{n // rows - 1}.0")


def options(quiet=True):
    return ["--shard-shape", "1,1", "--chunk-shape", "1,1", "--compressor", "none"] + (["--quiet"] if quiet else [])


def snapshot(args, n):
    """The source and the 99 %-done local destination (made once)."""
    sources = os.path.join(args.workdir, "sources")
    src = os.path.join(sources, f"w10-src-{n}.zarr")
    snap = os.path.join(sources, f"w10-{n}-99pct.zarr")
    last = os.path.join(src, f"{n // max(n // 100, 1) - 1}.0")
    if not os.path.exists(src + ".done"):
        make_source(src, n)
        open(src + ".done", "w").write("ok\n")
    if not os.path.exists(snap + ".done"):
        shutil.rmtree(snap, ignore_errors=True)
        rows = max(n // 100, 1)
        good = values(n)[n - rows:].tobytes()  # not the file: a killed bench may have left it damaged
        try:
            open(last, "wb").write(b"damaged")
            t = time.perf_counter()
            out = subprocess.run([args.zshard, "convert", src, snap, *options()], capture_output=True, text=True)
            log(f"  first run (stops at the damaged last chunk): {time.perf_counter() - t:.1f} s")
            if out.returncode == 0:
                raise RuntimeError("the run with a damaged chunk succeeded")
        finally:
            open(last, "wb").write(good)
        open(snap + ".done", "w").write("ok\n")
    done = sum(len(fs) for _, _, fs in os.walk(os.path.join(snap, "c")))
    return src, snap, done


def restore(snap, dst):
    shutil.rmtree(dst, ignore_errors=True)
    subprocess.run(["cp", "-al", snap, dst], check=True)
    subprocess.run(["sync"], check=True)


def check_rows(array, n, first_row):
    want = values(n)[first_row:]
    got = array[first_row:]
    return got.dtype == want.dtype and np.array_equal(got, want)


def timed(name, cmd, args, logdir, prepare=None, env=None, server=None, verify=None):
    walls, results, requests = [], [], None
    for run in range(args.runs):
        if prepare:
            prepare()
        if server:
            server.reset()
        r = harness.run_timed(cmd, env, os.path.join(logdir, "".join(c if c.isalnum() else "_" for c in name) + f"-{run}"), args.timeout)
        if not r["ok"]:
            return {"name": name, "ok": False, "problem": r["tail"]}
        walls.append(r["wall"])
        results.append(r)
        if server:
            requests = server.requests
    ok = verify() if verify else True
    best = results[walls.index(statistics.median_low(walls))]
    out = {"name": name, "ok": bool(ok), "wall": statistics.median(walls), "walls": walls, "cpu": best["cpu"],
           "rss_mib": best["rss_mib"], "problem": None if ok else "read back differs from the source"}
    if requests is not None:
        out["requests"] = len(requests)
        out["by_kind"] = dict(Counter(r.kind for r in requests))
        lists = [r for r in requests if r.kind == "LIST"]
        out["list_pages"] = len(lists)
        out["list_in_series"] = serial(lists)
    log(f"  {name}: {out['wall']:.2f} s (runs {', '.join(f'{w:.2f}' for w in walls)}), CPU {out['cpu']:.2f} s, "
        f"RSS {out['rss_mib']:.0f} MiB" + (f", requests {out['by_kind']}" if requests is not None else "")
        + ("" if ok else " READ BACK DIFFERS"))
    return out


def serial(requests):
    """The longest chain of requests each sent after the previous one ended (round trips in series)."""
    chain, last_end = 0, float("-inf")
    for r in sorted(requests, key=lambda r: r.end):
        if r.start >= last_end:
            chain, last_end = chain + 1, r.end
    return chain


def local_part(args, n, src, snap, done, logdir):
    dst = os.path.join(args.workdir, f"w10-{n}-local.zarr")
    out = []
    restore(snap, dst)
    out.append(timed(f"plan, {done}/{n * n} shards present", [args.zshard, "plan", src, dst, *options(False)], args,
                     logdir))

    def verify():
        a = zarr.open_array(dst, mode="r")
        return check_rows(a, n, 0 if args.verify == "full" else n - 2 * max(n // 100, 1))
    out.append(timed(f"resume, {done}/{n * n} shards done", [args.zshard, "convert", src, dst, *options()], args,
                     logdir, prepare=lambda: restore(snap, dst), verify=verify))
    return out


def load_into(server, snap, bucket, prefix):
    """The local snapshot as objects of the server, the versions in its records the server's ETags."""
    server.bucket(bucket)
    server.remove(bucket, prefix + "/")
    etags = {}
    for folder, _, files in os.walk(snap):
        for f in files:
            path = os.path.join(folder, f)
            key = os.path.relpath(path, snap).replace(os.sep, "/")
            if key.startswith(".zshard/done/"):
                continue
            etags[key] = server.put(bucket, f"{prefix}/{key}", open(path, "rb").read())
    for f in os.listdir(os.path.join(snap, ".zshard", "done")):
        lines = []
        for line in open(os.path.join(snap, ".zshard", "done", f)).read().splitlines():
            fields = line.split("\t")
            if len(fields) >= 4:
                key = (fields[0] + "/" if fields[0] else "") + "c/" + fields[1].replace(",", "/")
                fields = fields[:4] + [etags.get(key, "")]
            lines.append("\t".join(fields))
        server.put(bucket, f"{prefix}/.zshard/done/{f}", ("\n".join(lines) + "\n").encode())


def s3_part(args, n, src, snap, done, delay_s, logdir):
    server = PagingS3(delay_s)
    out = []
    try:
        t = time.perf_counter()
        load_into(server, snap, "w10", "dst.zarr")
        log(f"  loaded the snapshot into the paging server in {time.perf_counter() - t:.1f} s")
        s3 = ["--s3-endpoint", server.endpoint, "--s3-path-style"]
        dst = "s3://w10/dst.zarr"
        out.append(timed(f"plan, {done}/{n * n} shards present", [args.zshard, "plan", src, dst, *s3, *options(False)],
                         args, logdir, env=S3_ENV, server=server))
        state = {}

        def prepare():
            # The resume changes the destination: each run starts from the snapshot again.
            if state.get("ran"):
                load_into(server, snap, "w10", "dst.zarr")
            state["ran"] = True

        def verify():
            from obstore.store import S3Store
            store = S3Store("w10", prefix="dst.zarr", endpoint=server.endpoint, region="us-east-1",
                            access_key_id="w10", secret_access_key="w10-secret", client_options={"allow_http": True},
                            virtual_hosted_style_request=False)
            a = zarr.open_array(zarr.storage.ObjectStore(store, read_only=True), mode="r")
            return check_rows(a, n, 0 if args.verify == "full" else n - 2 * max(n // 100, 1))
        extra = args.s3_args.split()
        what = f"resume, {done}/{n * n} shards done" + (f" ({args.s3_args})" if extra else "")
        out.append(timed(what, [args.zshard, "convert", src, dst, *s3, *options(), *extra],
                         args, logdir, env=S3_ENV, server=server, prepare=prepare, verify=verify))
    finally:
        server.close()
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zshard", required=True)
    p.add_argument("--scale", choices=["full", "small"], default="small")
    p.add_argument("--workloads", default="W10", help="for benches/run.sh: W10 is the only one here")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--delay-ms", default="0,20")
    p.add_argument("--parts", default="local,s3")
    p.add_argument("--verify", choices=["rows", "full"], default="rows")
    p.add_argument("--s3-args", default="", help="more zshard options for the S3 resumes, e.g. '--io-threads 32'")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--workdir", default=os.path.join(REPO, "target", "bench"))
    p.add_argument("--output", default=None)
    args = p.parse_args(argv)
    if {w.strip().upper() for w in args.workloads.split(",") if w.strip()} - {"W10"}:
        p.error("w10.py runs W10 only (W1-W6: harness.py, W7-W9: cloud.py)")
    args.zshard = os.path.abspath(args.zshard)
    args.workdir = os.path.abspath(args.workdir)
    n = ROWS[args.scale]
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    logdir = os.path.join(args.workdir, "w10-logs", stamp)
    os.makedirs(logdir, exist_ok=True)
    src, snap, done = snapshot(args, n)
    log(f"W10: {done} of {n * n} shards done in the snapshot ({100 * done / (n * n):.1f} %)")
    parts = {x.strip() for x in args.parts.split(",")}
    rows = []
    if "local" in parts:
        log("W10 local")
        rows += [("local", "—", r) for r in local_part(args, n, src, snap, done, logdir)]
    if "s3" in parts:
        for delay in [int(d) for d in args.delay_ms.split(",") if d.strip()]:
            log(f"W10 on S3 (benches/pagings3.py) at {delay} ms")
            rows += [("S3", f"{delay} ms", r) for r in s3_part(args, n, src, snap, done, delay / 1000, logdir)]
    lines = ["# W10: plan and resume at a million shards (benches/w10.py)", "",
             f"Run {stamp}: `{' '.join(sys.argv[1:] if argv is None else argv)}`; {harness.machine_info()}; "
             f"medians of {args.runs} run(s).", "",
             "| where | delay | what | wall s | runs | CPU s | RSS MiB | requests | by kind | LIST pages (in series) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for where, delay, r in rows:
        if not r["ok"]:
            lines.append(f"| {where} | {delay} | {r['name']} FAILED: {(r['problem'] or '')[:200]} |||||||")
            continue
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r.get("by_kind", {}).items(), key=lambda kv: -kv[1]))
        lines.append(f"| {where} | {delay} | {r['name']} | {r['wall']:.2f} | "
                     f"{'/'.join(f'{w:.2f}' for w in r['walls'])} | {r['cpu']:.2f} | {r['rss_mib']:.0f} | "
                     f"{r.get('requests', '—')} | {kinds or '—'} | "
                     f"{r['list_pages']} ({r['list_in_series']})" if "list_pages" in r else
                     f"| {where} | {delay} | {r['name']} | {r['wall']:.2f} | "
                     f"{'/'.join(f'{w:.2f}' for w in r['walls'])} | {r['cpu']:.2f} | {r['rss_mib']:.0f} | — | — | — |")
        if "list_pages" in r:
            lines[-1] += " |"
    text = "\n".join(lines) + "\n"
    print(text)
    out = args.output or os.path.join(args.workdir, "results-w10.md")
    open(out, "w").write(text)
    print(f"results: {out}")
    if any(not r["ok"] for _, _, r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
