#!/usr/bin/env python3
"""Cloud workloads (issue 21): zshard and its peers against an S3 server on loopback behind a proxy that
adds a fixed delay to the first byte of every response and a bandwidth cap (benches/linkproxy, built with
zshard by benches/run.sh; the cloud tests' Python proxy tests/cloud/proxy.py when it is missing), with every
request logged.

  W7  W1's source (Zarr v2, blosc zstd 5, 256^2 chunks) on S3 -> 2048^2 shards of 256^2, zstd 3, on S3.
      Peers: tensorstore (s3 kvstore with the endpoint), zarr-python 3.1 with its ObjectStore (obstore).
  W8  kerchunk JSON references into an HDF5 file (h5py, 64^2 float32 chunks, gzip + shuffle) served over
      HTTP by the proxy (with the delay) -> 1024^2 shards of 64^2, zstd 3, on S3. Peer: zarr-python
      reading the references through fsspec (HTTP) and writing the same shards through its ObjectStore.
  W9  resume: (a) W7's source into 512^2 shards, resumed when 99 % of them are written (the run before
      stopped on a damaged chunk of the last shard, which is then repaired), against the full run;
      (b) plan and resume against an output prefix holding 10^5 shard objects (10^4 at --scale small).

For each tool and delay: wall (median of --runs), requests by kind from the proxy's log, bytes moved,
throughput (raw MB / wall), requests in flight (mean: the requests' time over the wall; max), the ratio
to the best peer and to the link bound. The link bound is the time the logged bytes take at
min(bandwidth, in flight x bytes per request / delay), the in-flight count being the run's own mean.
Every output of every tool is read back and compared with the source element by element.

The S3 server is s3s-fs (benches/run.sh installs it into target/peers with cargo install) or, when it
is missing, moto's server (much slower per request; W9 needs s3s-fs, whose objects are plain files).

Usage: cloud.py --zshard BIN [--scale full|small] [--runs 2] [--workloads W7,W8,W9] [--delay-ms 0,20,100]
                [--bandwidth 1Gbit] [--threads N] [--workdir target/bench] [--s3s-fs BIN] [--linkproxy BIN]
                [--w9b-delays MS,...]
"""
import argparse
import datetime
import json
import math
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request

import numpy as np
import zarr

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "cloud"))
import harness  # noqa: E402  (sources, timing, logging)
from proxy import FaultProxy, Request, free_port, wait_for_port  # noqa: E402  (the tests' proxy: the fallback)

MIB = 1024 * 1024
BIG = "big"  # W9b's bucket
W9B_OBJECTS = {"full": 100_000, "small": 10_000}
KEY, SECRET = "zshardbench", "zshardbench-secret"
S3_ENV = {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1",
          "AWS_DEFAULT_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true", "AWS_EC2_METADATA_DISABLED": "true"}
log = harness.log


# --------------------------------------------------------------------------------------------------
# The S3 server
# --------------------------------------------------------------------------------------------------

class S3Server:
    """s3s-fs serving the folder `root` (a bucket is a folder, an object a file), or moto's server."""

    def __init__(self, root, s3s_fs):
        self.root = root
        self.port = free_port()
        os.makedirs(root, exist_ok=True)
        if s3s_fs and os.access(s3s_fs, os.X_OK):
            self.kind = "s3s-fs"
            self.proc = subprocess.Popen([s3s_fs, "--host", "127.0.0.1", "--port", str(self.port),
                                          "--access-key", KEY, "--secret-key", SECRET, "--domain", "localhost",
                                          root], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.moto = None
        else:
            from moto.server import ThreadedMotoServer
            self.kind = "moto"
            self.proc = None
            self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
            self.moto.start()
        wait_for_port(self.port)

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def bucket(self, name):
        if self.kind == "s3s-fs":
            os.makedirs(os.path.join(self.root, name), exist_ok=True)
        else:
            import boto3
            s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                              aws_access_key_id=KEY, aws_secret_access_key=SECRET)
            try:
                s3.create_bucket(Bucket=name)
            except s3.exceptions.BucketAlreadyOwnedByYou:
                pass

    def local(self, bucket, prefix):
        """Where the objects under bucket/prefix are on disk (s3s-fs only)."""
        if self.kind != "s3s-fs":
            raise RuntimeError("this needs s3s-fs (objects as files)")
        return os.path.join(self.root, bucket, prefix)

    def upload(self, local_dir, bucket, prefix):
        if self.kind == "s3s-fs":
            dst = self.local(bucket, prefix)
            if not os.path.exists(dst):
                shutil.copytree(local_dir, dst)
            return
        store = obstore_s3(self.endpoint, bucket)
        import obstore
        for d, _, files in os.walk(local_dir):
            for f in files:
                path = os.path.join(d, f)
                obstore.put(store, f"{prefix}/{os.path.relpath(path, local_dir)}", open(path, "rb").read())

    def remove(self, bucket, prefix):
        if self.kind == "s3s-fs":
            shutil.rmtree(self.local(bucket, prefix), ignore_errors=True)
            return
        import obstore
        store = obstore_s3(self.endpoint, bucket)
        keys = [o["path"] for batch in obstore.list(store, prefix=prefix + "/") for o in batch]
        for i in range(0, len(keys), 1000):
            obstore.delete(store, keys[i:i + 1000])

    def close(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        if self.moto:
            self.moto.stop()


def obstore_s3(endpoint, bucket):
    from obstore.store import S3Store
    return S3Store(bucket, endpoint=endpoint, access_key_id=KEY, secret_access_key=SECRET, region="us-east-1",
                   virtual_hosted_style_request=False, client_options={"allow_http": True})


# --------------------------------------------------------------------------------------------------
# Peers (run as their own processes, as in harness.py)
# --------------------------------------------------------------------------------------------------

TS_S3 = r"""
import json, sys, time
t0 = time.perf_counter()
import tensorstore as ts
cfg = json.loads(sys.argv[1])
t1 = time.perf_counter()
n = cfg["threads"]
ctx = ts.Context({"data_copy_concurrency": {"limit": n}})
def kv(bucket, path):
    return {"driver": "s3", "bucket": bucket, "path": path + "/", "endpoint": cfg["endpoint"],
            "aws_region": "us-east-1"}
source = ts.open({"driver": cfg["src_driver"], "kvstore": kv(cfg["src_bucket"], cfg["src"])}, context=ctx,
                 read=True).result()
target = ts.open({"driver": "zarr3", "kvstore": kv(cfg["dst_bucket"], cfg["dst"]), "metadata": cfg["metadata"],
                  "create": True, "delete_existing": True}, context=ctx).result()
target.write(source).result()
print(json.dumps({"startup_s": t1 - t0, "work_s": time.perf_counter() - t1}))
"""

# zarr-python 3.1: source through its ObjectStore (obstore) or, for kerchunk references, fsspec's
# ReferenceFileSystem over HTTP (asynchronous, handed to FsspecStore); output through its ObjectStore.
ZP_S3 = r"""
import json, sys, time
t0 = time.perf_counter()
import zarr
from obstore.store import S3Store
from zarr.storage import ObjectStore
cfg = json.loads(sys.argv[1])
t1 = time.perf_counter()
zarr.config.set({"threading.max_workers": cfg["threads"]})
def s3(bucket, read_only):
    return ObjectStore(S3Store(bucket, endpoint=cfg["endpoint"], access_key_id=cfg["key"],
                               secret_access_key=cfg["secret"], region="us-east-1",
                               virtual_hosted_style_request=False, client_options={"allow_http": True}),
                       read_only=read_only)
if cfg.get("refs"):
    import fsspec
    fs = fsspec.filesystem("reference", fo=cfg["refs"], remote_protocol="http", asynchronous=True,
                           remote_options={"asynchronous": True})
    src = zarr.open_array(zarr.storage.FsspecStore(fs, read_only=True, path=""), path=cfg["var"], mode="r",
                          zarr_format=2)
else:
    src = zarr.open_array(s3(cfg["src_bucket"], True), path=cfg["src"], mode="r")
out = zarr.create_array(s3(cfg["dst_bucket"], False), name=cfg["dst"], shape=src.shape, dtype=src.dtype,
                        chunks=cfg["inner"], shards=cfg["shard"], compressors=zarr.codecs.ZstdCodec(level=3),
                        fill_value=src.fill_value, overwrite=True)
step = cfg["shard"][0]
for start in range(0, src.shape[0], step):  # one row of shards at a time: whole shards, bounded memory
    out[start:start + step] = src[start:start + step]
print(json.dumps({"startup_s": t1 - t0, "work_s": time.perf_counter() - t1}))
"""


def v3_metadata(shape, dtype, shard, inner):
    return {"shape": list(shape), "data_type": np.dtype(dtype).name, "fill_value": 0,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shard)}},
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": list(inner),
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                           {"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": "end"}}]}


class LinkProxy:
    """The link in Rust (benches/linkproxy): what FaultProxy does for the benches (delay to the first byte,
    bandwidth cap, request log, local files over HTTP) at a fraction of its CPU. On 2 cores the Python proxy
    took 2.5-3 s of CPU in a 4 s W7 run, cores the tools measured beside it needed."""

    def __init__(self, binary, upstream_port, bandwidth=None):
        cmd = [binary, "--upstream-port", str(upstream_port)]
        if bandwidth:
            cmd += ["--bandwidth", str(bandwidth)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        first = self.proc.stdout.readline().split() if ready else []
        if first[:1] != ["listening"]:
            self.proc.kill()
            raise RuntimeError(f"{binary} did not start within 30 s: {first}")
        self.port = int(first[1])
        self._latency = 0.0
        self.files = _ServedFolders(self)

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def control(self, command, body=b""):
        # The log is read with a GET; every other command is a POST (of `body`, empty for reset).
        req = urllib.request.Request(f"{self.endpoint}/__linkproxy/{command}",
                                     data=None if command == "log" else body)
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read().decode()

    @property
    def latency(self):
        return self._latency

    @latency.setter
    def latency(self, seconds):
        self.control("latency", str(seconds).encode())
        self._latency = seconds

    def reset(self):
        self.control("reset")

    @property
    def requests(self):
        out = []
        for line in filter(None, self.control("log").split("\n")):
            start, end, method, kind, b_in, b_out, status, path = line.split("\t", 7)
            out.append(Request(method, path, kind, int(b_in), int(b_out), status, float(start), float(end)))
        return out

    def close(self):
        self.proc.terminate()
        self.proc.wait()


class _ServedFolders(dict):
    """LinkProxy.files: setting PREFIX -> DIR tells the proxy to serve DIR under PREFIX."""

    def __init__(self, proxy):
        super().__init__()
        self.proxy = proxy

    def __setitem__(self, prefix, directory):
        self.proxy.control("files", f"{prefix}\t{directory}".encode())
        super().__setitem__(prefix, directory)


# --------------------------------------------------------------------------------------------------
# Measuring one run
# --------------------------------------------------------------------------------------------------

def summarize_requests(requests, wall):
    kinds = {}
    for r in requests:
        k = kinds.setdefault(r.kind, {"n": 0, "bytes": 0})
        k["n"] += 1
        k["bytes"] += r.bytes_in + r.bytes_out
    events = sorted([(r.start, 1) for r in requests] + [(r.end, -1) for r in requests])
    now = peak = 0
    for _, d in events:
        now += d
        peak = max(peak, now)
    busy = sum(r.end - r.start for r in requests)
    moved = sum(r.bytes_in + r.bytes_out for r in requests)
    return {"requests": len(requests), "by_kind": kinds, "bytes": moved,
            "in_flight_mean": busy / wall if wall else 0.0, "in_flight_max": peak}


def write_request_log(path, requests):
    """The proxy's log of one run: one request a line (times in seconds from the run's start)."""
    with open(path, "w") as fh:
        fh.write("start\tend\tmethod\tkind\tbytes_in\tbytes_out\tstatus\tpath\n")
        for r in sorted(requests, key=lambda r: r.start):
            fh.write(f"{r.start:.4f}\t{r.end:.4f}\t{r.method}\t{r.kind}\t{r.bytes_in}\t{r.bytes_out}\t{r.status}\t"
                     f"{r.path}\n")


def link_bound(summary, delay_s, bandwidth):
    """Seconds the logged bytes take at min(bandwidth, in flight x bytes per request / delay)."""
    n, moved = summary["requests"], summary["bytes"]
    if not n:
        return None
    rates = []
    if bandwidth:
        rates.append(bandwidth)
    if delay_s > 0:
        rates.append(max(summary["in_flight_mean"], 1.0) * (moved / n) / delay_s)
    if not rates:
        return None
    return moved / min(rates)


def timed(cmd, env, logfile, timeout):
    return harness.run_timed(cmd, dict(S3_ENV, **(env or {})), logfile, timeout)


def run_tool(name, cmd, proxy, delay_s, args, logdir, prepare=None, verify=None, env=None):
    """Runs `cmd` --runs times (after `prepare()` each time); returns the medians and the request log of
    the median run."""
    runs = []
    for i in range(args.runs):
        if prepare:
            prepare()
        proxy.latency = delay_s
        proxy.reset()
        base = os.path.join(logdir, f"{re.sub(r'[^a-z0-9]+', '-', name.lower())}-{delay_s * 1000:.0f}ms-{i}")
        r = timed(cmd, env, base, args.timeout)
        proxy.latency = 0.0
        requests = list(proxy.requests)
        write_request_log(base + ".requests.tsv", requests)
        r["requests"] = summarize_requests(requests, r["wall"])
        if r["ok"] and verify and (i == 0 or args.verify == "every"):
            problem = verify()
            if problem:
                r["ok"], r["tail"] = False, problem
        if not r["ok"]:
            log(f"  {name}: FAILED: {r['tail']}")
            runs.append(r)
            break
        log(f"  {name} run {i + 1}: {r['wall']:.2f} s, {r['requests']['requests']} requests")
        runs.append(r)
    ok = all(r["ok"] for r in runs)
    walls = [r["wall"] for r in runs]
    median = statistics.median(walls)
    mid = min(runs, key=lambda r: abs(r["wall"] - median))
    return {"name": name, "ok": ok, "wall": median, "walls": walls, "cpu": statistics.median(r["cpu"] for r in runs),
            "rss_mib": statistics.median(r["rss_mib"] for r in runs), "requests": mid["requests"],
            "problem": None if ok else runs[-1]["tail"], "cmd": " ".join(cmd[:3]) + " ..."}


# --------------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------------

def verify_against(server, bucket, prefix, expected_reader, shape, block_rows):
    """Reads bucket/prefix back with zarr-python (directly from the server) block by block."""
    out = zarr.open_array(zarr.storage.ObjectStore(obstore_s3(server.endpoint, bucket), read_only=True),
                          path=prefix, mode="r")
    if tuple(out.shape) != tuple(shape):
        return f"shape {out.shape}"
    for start in range(0, shape[0], block_rows):
        sl = (slice(start, start + block_rows),)
        want, got = expected_reader(sl), out[sl]
        if want.dtype != got.dtype or not np.array_equal(want, got, equal_nan=want.dtype.kind == "f"):
            return f"rows {start}..{start + block_rows} differ from the source"
    return None


def zshard_s3_flags(proxy):
    return ["--s3-endpoint", proxy.endpoint, "--s3-path-style"]


def w7_source(ctx):
    """W7's source (W1's Zarr v2 array, made once under the workdir) uploaded to `src/w7-<size>.zarr`, with
    buckets `src` and `dst`: (size, the local array, a reader of its slices for verify_against)."""
    args, server = ctx.args, ctx.server
    size = 4096 if args.scale == "small" else 8192
    local = os.path.join(args.workdir, "sources", f"w7-{size}.zarr")
    harness.w1.make_source(local, size)
    server.bucket("src")
    server.bucket("dst")
    server.upload(local, "src", f"w7-{size}.zarr")
    src = zarr.open_array(local, mode="r")
    return size, src, lambda sl: src[sl]


def w7(ctx, delay_s):
    args, server, proxy = ctx.args, ctx.server, ctx.proxy
    size, src, reader = w7_source(ctx)
    shard, inner = (2048, 2048), (256, 256)
    raw = size * size * 2
    tools = []
    dst = f"w7-{size}-zshard.zarr"
    tools.append(run_tool(
        "zshard", [args.zshard, "convert", f"s3://src/w7-{size}.zarr", f"s3://dst/{dst}", *zshard_s3_flags(proxy),
                   "--shard-shape", "2048,2048", "--chunk-shape", "256,256", "--compressor", "zstd:3",
                   "--threads", str(args.threads), "--quiet", "--overwrite"],
        proxy, delay_s, args, ctx.logdir, verify=lambda: verify_against(server, "dst", dst, reader, src.shape, 2048)))
    cfg = {"endpoint": proxy.endpoint, "threads": args.threads, "src_bucket": "src", "src": f"w7-{size}.zarr",
           "src_driver": "zarr", "dst_bucket": "dst", "dst": f"w7-{size}-ts.zarr",
           "metadata": v3_metadata(src.shape, src.dtype, shard, inner)}
    if not args.zshard_only:
        tools.append(run_tool("tensorstore", [sys.executable, "-c", TS_S3, json.dumps(cfg)], proxy, delay_s, args,
                              ctx.logdir, verify=lambda: verify_against(server, "dst", cfg["dst"], reader,
                                                                        src.shape, 2048)))
    zcfg = {"endpoint": proxy.endpoint, "key": KEY, "secret": SECRET, "threads": args.threads,
            "src_bucket": "src", "src": f"w7-{size}.zarr", "dst_bucket": "dst", "dst": f"w7-{size}-zp.zarr",
            "inner": list(inner), "shard": list(shard)}
    if not args.zshard_only and (not args.skip_slow_peers or delay_s <= 0.02):
        tools.append(run_tool("zarr-python + obstore", [sys.executable, "-c", ZP_S3, json.dumps(zcfg)], proxy,
                              delay_s, args, ctx.logdir,
                              verify=lambda: verify_against(server, "dst", zcfg["dst"], reader, src.shape, 2048)))
    return {"name": "W7", "describe": f"{size}^2 uint16 Zarr v2 blosc zstd5 256^2 on S3 -> 2048^2 shards of 256^2 "
                                      f"zstd 3 on S3", "raw_bytes": raw, "tools": tools}


def make_w8_source(args, size):
    import h5py
    import kerchunk.hdf
    base = os.path.join(args.workdir, "sources", f"w8-{size}")
    h5, refs = base + ".h5", base + ".json"
    if not os.path.exists(base + ".done"):
        os.makedirs(os.path.dirname(base), exist_ok=True)
        with h5py.File(h5, "w") as f:
            d = f.create_dataset("data", shape=(size, size), dtype="float32", chunks=(64, 64), compression="gzip",
                                 compression_opts=4, shuffle=True, fillvalue=0)
            for origin, extent in harness.gen_blocks((size, size), (64, 64)):
                d[harness.region(origin, extent)] = harness.synth(origin, extent, (size, size), np.float32, 8)
        with open(h5, "rb") as fh:
            r = kerchunk.hdf.SingleHdf5ToZarr(fh, url="http://HOST/files/" + os.path.basename(h5)).translate()
        json.dump(r, open(refs, "w"))
        open(base + ".done", "w").write("ok\n")
    return h5, refs


def w8(ctx, delay_s):
    import h5py
    args, server, proxy = ctx.args, ctx.server, ctx.proxy
    size = 2048 if args.scale == "small" else 4096
    shard, inner = (1024, 1024), (64, 64)
    h5, refs_template = make_w8_source(args, size)
    proxy.files["/files/"] = os.path.dirname(h5)
    refs = os.path.join(ctx.logdir, f"w8-{size}-{proxy.port}.json")
    text = open(refs_template).read().replace("http://HOST/", proxy.endpoint + "/")
    open(refs, "w").write(text)
    server.bucket("dst")
    with h5py.File(h5, "r") as f:
        data = f["data"][:]
    reader = lambda sl: data[sl]  # noqa: E731
    tools = []
    dst = f"w8-{size}-zshard.zarr"
    tools.append(run_tool(
        "zshard", [args.zshard, "convert", refs, f"s3://dst/{dst}", *zshard_s3_flags(proxy),
                   "--allow-ref-prefix", proxy.endpoint + "/files/", "--shard-shape", "1024,1024",
                   "--chunk-shape", "64,64", "--compressor", "zstd:3", "--threads", str(args.threads), "--quiet",
                   "--overwrite"],
        proxy, delay_s, args, ctx.logdir,
        verify=lambda: verify_against(server, "dst", dst + "/data", reader, data.shape, 1024)))
    zcfg = {"endpoint": proxy.endpoint, "key": KEY, "secret": SECRET, "threads": args.threads, "refs": refs,
            "var": "data", "dst_bucket": "dst", "dst": f"w8-{size}-zp.zarr", "inner": list(inner),
            "shard": list(shard)}
    if not args.zshard_only and (not args.skip_slow_peers or delay_s <= 0.02):
        tools.append(run_tool("zarr-python + fsspec", [sys.executable, "-c", ZP_S3, json.dumps(zcfg)], proxy,
                              delay_s, args, ctx.logdir,
                              verify=lambda: verify_against(server, "dst", zcfg["dst"], reader, data.shape, 1024)))
    return {"name": "W8", "describe": f"{size}^2 float32 HDF5 (64^2 chunks, gzip 4 + shuffle) via kerchunk JSON over "
                                      f"HTTP -> 1024^2 shards of 64^2 zstd 3 on S3", "raw_bytes": size * size * 4,
            "tools": tools}


def damaged_first_run(ctx, cmd, chunk_file, done_copy):
    """Runs `cmd` once with `chunk_file` damaged (the run stops there, after the shards before it),
    repairs it and keeps a copy of what the run left in the destination as `done_copy`."""
    saved = open(chunk_file, "rb").read()
    try:
        open(chunk_file, "wb").write(b"damaged")
        out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **S3_ENV))
        if out.returncode == 0:
            raise RuntimeError("the run with a damaged chunk succeeded")
    finally:
        open(chunk_file, "wb").write(saved)


def w9(ctx, delay_s):
    args, server, proxy = ctx.args, ctx.server, ctx.proxy
    if server.kind != "s3s-fs":
        log("  W9 needs s3s-fs (it prepares the destination as files): skipped")
        return {"name": "W9", "describe": "skipped: needs s3s-fs", "raw_bytes": 1, "tools": []}
    size, src, reader = w7_source(ctx)
    tools = []
    # (a) W7's source into 512^2 shards: the full run, then a resume with 99 % of the shards written.
    dst = f"w9-{size}.zarr"
    full = [args.zshard, "convert", f"s3://src/w7-{size}.zarr", f"s3://dst/{dst}", *zshard_s3_flags(proxy),
            "--shard-shape", "512,512", "--chunk-shape", "256,256", "--compressor", "zstd:3",
            "--threads", str(args.threads), "--quiet"]
    tools.append(run_tool("zshard full run (512^2 shards)", full + ["--overwrite"], proxy, delay_s, args, ctx.logdir,
                          verify=lambda: verify_against(server, "dst", dst, reader, src.shape, 2048)))
    snapshot = os.path.join(args.workdir, "sources", f"w9a-{size}-99pct")
    last = os.path.join(server.local("src", f"w7-{size}.zarr"), f"{size // 256 - 1}.{size // 256 - 1}")
    if not os.path.exists(snapshot + ".done"):
        server.remove("dst", dst)
        direct = [a if a != proxy.endpoint else server.endpoint for a in full]
        damaged_first_run(ctx, direct, last, snapshot)
        shutil.rmtree(snapshot, ignore_errors=True)
        shutil.copytree(server.local("dst", dst), snapshot)
        open(snapshot + ".done", "w").write("ok\n")
    grid = (size // 512) ** 2
    written = sum(1 for _, _, fs in os.walk(os.path.join(snapshot, "c")) for _ in fs)
    log(f"  W9a: {written} of {grid} shards written before the resume ({100 * written / grid:.1f} %)")

    def restore():
        server.remove("dst", dst)
        shutil.copytree(snapshot, server.local("dst", dst))
    tools.append(run_tool(f"zshard resume ({written}/{grid} shards done)", full, proxy, delay_s, args, ctx.logdir,
                          prepare=restore,
                          verify=lambda: verify_against(server, "dst", dst, reader, src.shape, 2048)))
    # (b) 10^5 shards (10^4 small): a local uint8 Zarr v2 source of 8^2 chunks without compression, one
    # chunk per shard, converted once straight to the server; the resume has 99 % of them.
    if args.w9b_delays is None or round(delay_s * 1000) in args.w9b_delays:
        tools += w9b(ctx, delay_s)
    return {"name": "W9", "describe": f"resume of W7's source in 512^2 shards ({grid} shards); plan and resume with "
                                      f"{W9B_OBJECTS[args.scale]} shard objects present", "raw_bytes": size * size * 2,
            "tools": tools}


def w9b(ctx, delay_s):
    """W9's part (b): plan and a resume against a prefix holding 10^5 shard objects (10^4 small)."""
    args, server, proxy = ctx.args, ctx.server, ctx.proxy
    tools = []
    n = W9B_OBJECTS[args.scale]
    rows, cols = n // 100, 100
    big = os.path.join(args.workdir, "sources", f"w9b-{n}.zarr")
    if not os.path.exists(big + ".done"):
        make_many_chunk_source(big, rows, cols)
        open(big + ".done", "w").write("ok\n")
    dstb = f"w9b-{n}.zarr"
    # A bucket of its own: s3s-fs walks the whole bucket for every LIST page, so 10^5 objects beside the
    # other workloads' outputs would slow every listing of theirs (0.4 s a page here).
    server.bucket(BIG)
    server.remove("dst", dstb)  # where earlier versions of this bench left them
    cmd = [args.zshard, "convert", big, f"s3://{BIG}/{dstb}", *zshard_s3_flags(proxy), "--shard-shape", "8,8",
           "--chunk-shape", "8,8", "--compressor", "none", "--threads", str(args.threads), "--quiet"]
    snapshot_b = os.path.join(args.workdir, "sources", f"w9b-{n}-99pct")
    if not os.path.exists(snapshot_b + ".done"):
        server.remove(BIG, dstb)
        direct = [a if a != proxy.endpoint else server.endpoint for a in cmd]
        # The last 1 % of the chunks damaged: the run stops in them.
        damaged = [os.path.join(big, f"{rows - 1 - r}.{c}") for r in range(max(1, rows // 100)) for c in range(cols)]
        saved = {p: open(p, "rb").read() for p in damaged}
        try:
            for p in damaged:
                open(p, "wb").write(b"x")
            out = subprocess.run(direct, capture_output=True, text=True, env=dict(os.environ, **S3_ENV))
            if out.returncode == 0:
                raise RuntimeError("the run with damaged chunks succeeded")
        finally:
            for p, b in saved.items():
                open(p, "wb").write(b)
        shutil.rmtree(snapshot_b, ignore_errors=True)
        shutil.copytree(server.local(BIG, dstb), snapshot_b)
        open(snapshot_b + ".done", "w").write("ok\n")
    written_b = sum(1 for _, _, fs in os.walk(os.path.join(snapshot_b, "c")) for _ in fs)
    log(f"  W9b: {written_b} of {n} shards written before the resume")

    def restore_b():
        server.remove(BIG, dstb)
        shutil.copytree(snapshot_b, server.local(BIG, dstb))
    restore_b()
    plan = [args.zshard, "plan", big, f"s3://{BIG}/{dstb}", *cmd[4:-1]]
    tools.append(run_tool(f"zshard plan ({written_b} shards present)", plan, proxy, delay_s, args, ctx.logdir))
    srcb = zarr.open_array(big, mode="r")
    tools.append(run_tool(f"zshard resume ({written_b}/{n} shards done)", cmd, proxy, delay_s, args, ctx.logdir,
                          prepare=restore_b,
                          verify=lambda: verify_against(server, BIG, dstb, lambda sl: srcb[sl], srcb.shape, 8 * rows)))
    return tools


def make_many_chunk_source(path, rows, cols):
    """A uint8 Zarr v2 array of rows x cols chunks of 8x8, uncompressed, written file by file (fast)."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    meta = {"zarr_format": 2, "shape": [rows * 8, cols * 8], "chunks": [8, 8], "dtype": "|u1", "compressor": None,
            "fill_value": 0, "order": "C", "filters": None}
    json.dump(meta, open(os.path.join(path, ".zarray"), "w"))
    for r in range(rows):
        for c in range(cols):
            with open(os.path.join(path, f"{r}.{c}"), "wb") as fh:
                fh.write(bytes([1 + (r * cols + c) % 255]) * 64)


WORKLOADS = {"W7": w7, "W8": w8, "W9": w9}


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------

def kinds_text(by_kind):
    return ", ".join(f"{k} {v['n']}" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]["n"]))


def table(result, delay_ms, bandwidth):
    ok_peers = [t["wall"] for t in result["tools"] if t["ok"] and not t["name"].startswith("zshard")]
    best = min(ok_peers) if ok_peers else None
    head = ["tool", "wall s", "runs", "CPU s", "RSS MiB", "MB/s", "requests", "by kind", "MB moved",
            "in flight mean/max", "/best peer", "link bound s", "/bound"]
    lines = [f"### {result['name']} at {delay_ms} ms", "", result["describe"], "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in result["tools"]:
        q = t["requests"]
        bound = link_bound(q, delay_ms / 1000, bandwidth)
        cells = [t["name"] + ("" if t["ok"] else f" FAILED: {(t['problem'] or '')[:120]}"),
                 f"{t['wall']:.2f}", "/".join(f"{w:.2f}" for w in t["walls"]), f"{t['cpu']:.2f}",
                 f"{t['rss_mib']:.0f}", f"{result['raw_bytes'] / 1e6 / t['wall']:.0f}", str(q["requests"]),
                 kinds_text(q["by_kind"]), f"{q['bytes'] / 1e6:.1f}",
                 f"{q['in_flight_mean']:.1f}/{q['in_flight_max']}",
                 f"{t['wall'] / best:.2f}" if best and t["ok"] else "—",
                 f"{bound:.2f}" if bound else "—", f"{t['wall'] / bound:.2f}" if bound and t["ok"] else "—"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def parse_bandwidth(text):
    if text in (None, "", "none", "off"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(bit|Kbit|Mbit|Gbit|B|KB|MB|GB)?", text)
    if not m:
        sys.exit(f"cloud.py: cannot read the bandwidth {text!r} (e.g. 1Gbit, 200MB)")
    unit = {"bit": 1 / 8, "Kbit": 1e3 / 8, "Mbit": 1e6 / 8, "Gbit": 1e9 / 8, "B": 1, "KB": 1e3, "MB": 1e6,
            "GB": 1e9, None: 1}[m.group(2)]
    return float(m.group(1)) * unit


class Context:
    def __init__(self, args, server, proxy, logdir):
        self.args, self.server, self.proxy, self.logdir = args, server, proxy, logdir


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zshard", required=True)
    p.add_argument("--scale", choices=["full", "small"], default="full")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--workloads", default="W7,W8,W9")
    p.add_argument("--delay-ms", default="0,20,100", help="delays to the first byte, comma-separated")
    p.add_argument("--bandwidth", default="1Gbit", help="cap per direction (1Gbit, 200MB, none)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--workdir", default=os.path.join(REPO, "target", "bench"))
    p.add_argument("--s3s-fs", default=os.path.join(REPO, "target", "peers", "bin", "s3s-fs"))
    p.add_argument("--linkproxy", default=os.path.join(REPO, "target", "release", "linkproxy"),
                   help="the proxy (benches/linkproxy; the tests' Python proxy when it is missing)")
    p.add_argument("--verify", choices=["every", "first"], default="first")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--skip-slow-peers", action="store_true", help="zarr-python only at delays up to 20 ms")
    p.add_argument("--zshard-only", action="store_true", help="no peers (comparing zshard builds)")
    p.add_argument("--w9b-delays", default=None,
                   help="delays (ms, comma-separated) at which W9b runs (default: every delay). On s3s-fs every "
                        "LIST page walks the whole bucket, so W9b's resume takes minutes a run at any delay")
    p.add_argument("--output", default=None, help="results file (default WORKDIR/results-cloud.md)")
    args = p.parse_args(argv)
    args.zshard = os.path.abspath(args.zshard)
    args.workdir = os.path.abspath(args.workdir)
    bandwidth = parse_bandwidth(args.bandwidth)
    delays = [int(d) for d in args.delay_ms.split(",") if d.strip()]
    if args.w9b_delays is not None:
        args.w9b_delays = {int(d) for d in args.w9b_delays.split(",") if d.strip()}
    names = [n.strip().upper() for n in args.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        sys.exit(f"cloud.py: unknown workload(s) {unknown}; known: {', '.join(WORKLOADS)}")
    started = time.time()
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    logdir = os.path.join(args.workdir, "cloud-logs", stamp)
    os.makedirs(logdir, exist_ok=True)
    server = S3Server(os.path.join(args.workdir, "s3root"), args.s3s_fs)
    if os.access(args.linkproxy, os.X_OK):
        try:
            proxy, proxy_kind = LinkProxy(args.linkproxy, server.port, bandwidth), "benches/linkproxy"
        except Exception:
            server.close()
            raise
    else:
        log(f"{args.linkproxy} is missing: the Python proxy of the tests stands in (it takes CPU the tools need)")
        proxy, proxy_kind = FaultProxy(server.port, bandwidth=bandwidth), "tests/cloud/proxy.py"
    log(f"S3 server: {server.kind} at {server.endpoint}; proxy {proxy.endpoint}, bandwidth "
        f"{args.bandwidth}, delays {delays} ms")
    lines = ["# zshard cloud workloads (benches/cloud.py)", "",
             f"Run {stamp}: `{' '.join(sys.argv[1:] if argv is None else argv)}`", "",
             f"Machine: {harness.machine_info()}. S3 server: {server.kind} on 127.0.0.1, behind the proxy of "
             f"{proxy_kind} (delay to the first byte of every response; bandwidth {args.bandwidth} per "
             f"direction). {args.threads} threads for every tool; medians of {args.runs} run(s).", ""]
    results = []
    try:
        for name in names:
            for delay in delays:
                log(f"{name} at {delay} ms")
                # One folder per workload: the tools' log names repeat across workloads.
                workload_logs = os.path.join(logdir, name.lower())
                os.makedirs(workload_logs, exist_ok=True)
                r = WORKLOADS[name](Context(args, server, proxy, workload_logs), delay / 1000)
                r["delay_ms"] = delay
                results.append(r)
                text = table(r, delay, bandwidth)
                print("\n".join(text) + "\n", flush=True)
                lines += text + [""]
    finally:
        proxy.close()
        server.close()
    out = args.output or os.path.join(args.workdir, "results-cloud.md")
    open(out, "w").write("\n".join(lines) + "\n")
    json.dump(results, open(out[:-3] + ".json", "w"), indent=1, default=str)
    print(f"results: {out} ({time.time() - started:.0f} s)")
    if any(not t["ok"] for r in results for t in r["tools"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
