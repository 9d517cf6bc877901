#!/usr/bin/env python3
"""Peer-comparison harness (issue 7): zshard against tensorstore, zarrs_reencode and zarr-python on six
workloads, every tool on the same input in the same run, every output checked element by element.

Workloads (sizes of --scale full; --scale small shrinks each one so the whole set takes minutes):
  W1  16384^2 uint16 Zarr v2, 256^2 chunks, blosc zstd 5 + shuffle -> shards 4096^2 of 256^2, zstd 3
  W2  1024x1024x512 uint8 Zarr v2, 64^3 chunks, blosc lz4 5 + shuffle -> shards 512^3 of 64^3,
      blosc zstd 5 + bitshuffle
  W3  1000x1000x500 uint16 Zarr v3, 100^3 chunks, zstd 3 -> shards 512^3 of 64^3, zstd 3 (the inner
      chunks straddle source chunks: a rechunk)
  W4  8192^2 float32 in HDF5 (256^2 chunks, shuffle + gzip 4) read through kerchunk JSON references
      -> shards 2048^2 of 256^2, zstd 3; peer: zarr-python through fsspec's reference filesystem
  W5  16384^2 uint16 Zarr v3, 256^2 chunks already zstd 3 -> shards 4096^2 of 256^2, zstd 3: zshard
      copies the encoded chunks (passthrough); also timed: zshard --no-passthrough, the peers, cp -r
  W6  2048x2048x1024 uint8 Zarr v2 (256^3 chunks, blosc lz4) -> ONE shard of 128^3 inner chunks, zstd 3,
      with --memory-limit 512MiB, index at the end and at the start: peak RSS must stay below the limit
  --growth 0.25,1,4,16: W1's workload (zshard alone) at those multiples of its size (8192^2 ... 65536^2
      at --scale full): wall, CPU and peak RSS per size, CPU and wall per GB, and two checks: linear time
      (CPU per GB of the largest size within 1.2x of W1's own size, or the smallest size without it) and
      flat memory (the largest size's peak RSS within 1.25x + 16 MiB of that size's)

--scale medium: only W3 at 640x640x512 (100^3 -> 64^3 in 256^3 shards) and W6 at 1024x1024x512 (256^3
chunks, 512MiB), issue 43's rechunks at a size that runs in seconds.

For each workload and tool: median wall, CPU (user+sys) and peak RSS over --runs runs (/usr/bin/time
-v), CPU per raw GB and over the codec CPU, throughput (raw MB / wall), wall relative to the best peer
and to the codec floor. The codec floor
is the single-thread CPU time (time.process_time) of decoding every source chunk and encoding every
output inner chunk with numcodecs, divided by the thread count. Tables go to stdout and, with the
machine and the versions, to WORKDIR/results.md and WORKDIR/results.json.

Sources are generated deterministically (fixed seeds) under WORKDIR/sources and reused when present.
The exit status is 1 when a tool failed, an output did not read back equal to its source or a peer
was missing; missed performance targets only change it with --strict (exit 2).

Usage: harness.py [--scale full|medium|small] [--runs 3] [--workloads W1,W2,...|all] [--threads N]
                  [--workdir target/bench] [--zshard BIN] [--zarrs BIN] [--verify every|first]
                  [--w6-memory-limit SIZE] [--strict] [--regen] [--no-floor] [--timeout S]
                  [--growth FACTORS]
(benches/run.sh prepares the venv, the zshard build and the zarrs_reencode peer, then calls this.)
"""
import argparse
import base64
import datetime
import importlib.metadata
import itertools
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

import h5py
import numcodecs
import numpy as np
import tensorstore as ts
import zarr

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import w1  # noqa: E402  (W1's source generator, shared with benches/w1.py)

MIB = 1024 * 1024
VERIFY_BLOCK_BYTES = 64 * MIB  # per reader and block while comparing outputs with sources
GEN_BLOCK_BYTES = 64 * MIB  # per block while generating sources


# --------------------------------------------------------------------------------------------------
# Output codecs: one description per output chain, spelled for every tool.
# --------------------------------------------------------------------------------------------------

class Zstd3:
    label = "zstd 3"
    zshard = "zstd:3"

    @staticmethod
    def v3(itemsize):
        return [{"name": "zstd", "configuration": {"level": 3, "checksum": False}}]

    @staticmethod
    def numcodec():
        return numcodecs.Zstd(level=3)

    @staticmethod
    def matches(codecs):
        """codecs: the inner chain of an output's zarr.json, minus `bytes`."""
        return len(codecs) == 1 and codecs[0]["name"] == "zstd" and codecs[0]["configuration"]["level"] == 3


class BloscZstd5Bit:
    label = "blosc zstd 5 + bitshuffle"
    zshard = "blosc:zstd:5:bitshuffle"

    @staticmethod
    def v3(itemsize):
        return [{"name": "blosc", "configuration": {"cname": "zstd", "clevel": 5, "shuffle": "bitshuffle",
                                                     "typesize": itemsize, "blocksize": 0}}]

    @staticmethod
    def numcodec():
        return numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.BITSHUFFLE)

    @staticmethod
    def matches(codecs):
        if len(codecs) != 1 or codecs[0]["name"] != "blosc":
            return False
        c = codecs[0]["configuration"]
        return (c["cname"], c["clevel"], c["shuffle"]) == ("zstd", 5, "bitshuffle")


# --------------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------------

class Workload:
    def __init__(self, name, title, *, kind, shape, dtype, src_chunks, shard, inner, codec, peers,
                 targets, floor=True, index_locations=("end",), memory_limit=None, seed=0):
        self.name, self.title, self.kind = name, title, kind
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.src_chunks, self.shard, self.inner = tuple(src_chunks), tuple(shard), tuple(inner)
        self.codec, self.peers, self.targets, self.floor = codec, peers, targets, floor
        self.index_locations, self.memory_limit, self.seed = index_locations, memory_limit, seed
        self.raw_bytes = math.prod(self.shape) * self.dtype.itemsize

    def describe(self):
        dims = "x".join(map(str, self.shape))
        return (f"{dims} {self.dtype.name}, source chunks {'x'.join(map(str, self.src_chunks))} -> shards "
                f"{'x'.join(map(str, self.shard))} of {'x'.join(map(str, self.inner))}, {self.codec.label}")


def workloads(scale):
    small = scale == "small"
    n1 = 4096 if small else 16384
    s1 = 1024 if small else 4096
    w6_shape = (512, 512, 256) if small else (2048, 2048, 1024)
    if scale == "medium":
        # Issue 43's rechunks between the two: W3 at 640x640x512 (100^3 -> 64^3 in 256^3 shards, the
        # issue's W3-like array) and W6 at an eighth of its volume with its own chunk sizes and limit.
        full = workloads("full")
        w3, w6 = full["W3"], full["W6"]
        return {
            "W3": Workload("W3", w3.title, kind="v3", shape=(640, 640, 512), dtype="uint16", src_chunks=(100,) * 3,
                           shard=(256,) * 3, inner=(64,) * 3, codec=Zstd3, peers=w3.peers, targets="peer",
                           seed=3),
            "W6": Workload("W6", w6.title, kind="v2", shape=(1024, 1024, 512), dtype="uint8",
                           src_chunks=(256,) * 3, shard=(1024, 1024, 512), inner=(128,) * 3, codec=Zstd3, peers=[],
                           targets="memory", index_locations=("end", "start"), memory_limit="512MiB", seed=6),
        }
    return {
        "W1": Workload("W1", "2-D uint16, Zarr v2 blosc zstd 5 + shuffle -> sharded zstd 3", kind="v2",
                       shape=(n1, n1), dtype="uint16", src_chunks=(256, 256), shard=(s1, s1), inner=(256, 256),
                       codec=Zstd3, peers=["tensorstore", "zarrs_reencode"], targets="peer", seed=42),
        "W2": Workload("W2", "3-D uint8, Zarr v2 blosc lz4 -> sharded blosc zstd 5 + bitshuffle", kind="v2",
                       shape=(512, 512, 256) if small else (1024, 1024, 512), dtype="uint8",
                       src_chunks=(64, 64, 64), shard=(256,) * 3 if small else (512,) * 3, inner=(64, 64, 64),
                       codec=BloscZstd5Bit, peers=["tensorstore", "zarrs_reencode"], targets="peer", seed=2),
        "W3": Workload("W3", "rechunk: Zarr v3 100^3 chunks -> 64^3 inner chunks (straddling), zstd 3",
                       kind="v3", shape=(400, 400, 200) if small else (1000, 1000, 500), dtype="uint16",
                       src_chunks=(100, 100, 100), shard=(256,) * 3 if small else (512,) * 3, inner=(64, 64, 64),
                       codec=Zstd3, peers=["tensorstore", "zarrs_reencode"], targets="peer", seed=3),
        "W4": Workload("W4", "kerchunk JSON references into HDF5 (shuffle + gzip 4) -> sharded zstd 3",
                       kind="kerchunk", shape=(4096, 4096) if small else (8192, 8192), dtype="float32",
                       src_chunks=(256, 256), shard=(1024, 1024) if small else (2048, 2048), inner=(256, 256),
                       codec=Zstd3, peers=["zarr-python"], targets=None, seed=4),
        "W5": Workload("W5", "passthrough: Zarr v3 chunks already zstd 3 256^2 -> shards", kind="v3",
                       shape=(n1, n1), dtype="uint16", src_chunks=(256, 256), shard=(s1, s1), inner=(256, 256),
                       codec=Zstd3, peers=["tensorstore", "zarrs_reencode"], targets="passthrough", floor=False,
                       seed=5),
        "W6": Workload("W6", "memory: one shard holding the whole array, --memory-limit", kind="v2",
                       shape=w6_shape, dtype="uint8", src_chunks=(128,) * 3 if small else (256,) * 3,
                       shard=w6_shape, inner=(64,) * 3 if small else (128,) * 3, codec=Zstd3, peers=[],
                       targets="memory", index_locations=("end", "start"),
                       memory_limit="96MiB" if small else "512MiB", seed=6),
    }


def growth_workloads(scale, factors):
    """W1's workload at `factors` times its area (sides rounded to whole shards), zshard alone."""
    base = workloads(scale)["W1"]
    out = {}
    for factor in factors:
        shard = base.shard[0]
        side = max(shard, round(base.shape[0] * math.sqrt(factor) / shard) * shard)
        name = f"W1x{factor:g}"
        out[name] = Workload(name, f"growth: W1 at {factor:g}x its size", kind="v2", shape=(side, side),
                             dtype=base.dtype, src_chunks=base.src_chunks, shard=base.shard, inner=base.inner,
                             codec=base.codec, peers=[], targets="growth", floor=True, seed=base.seed)
    return out


def growth_checks(results):
    """Linear time and flat memory across the growth workloads (ordered by size): (text, status) pairs.

    Time is judged against the codec floor of each size: W1's source is smoother per chunk the larger
    it is (its waves span the whole array), and zstd's cost per byte changes with that (4.2x the data
    cost 6.6x the CPU from W1x1 to W1x4, 65 % of it inside zstd's compressor). What must stay
    constant is zshard's CPU over the codecs' own."""
    ok = [w for w in results if w["tools"]["zshard"]["ok"]]
    if len(ok) < 2:
        return [("linear time and flat memory: fewer than two sizes ran", "n/a")]
    # The reference is W1's own size when it ran: a smaller one may hold fewer shards than the pipeline's
    # window, so its memory is not yet the steady state.
    small = next((w for w in ok if w["name"] == "W1x1"), ok[0])
    large = ok[-1]
    per_gb = lambda w, k: w["tools"]["zshard"][k] / (w["raw_bytes"] / 1e9)  # noqa: E731
    rss_small, rss_large = small["tools"]["zshard"]["rss_mib"], large["tools"]["zshard"]["rss_mib"]
    checks = []
    if small["floor_s"] and large["floor_s"]:
        over = lambda w: w["tools"]["zshard"]["cpu"] / (w["floor_s"] * w["threads"])  # noqa: E731
        ratio = over(large) / over(small)
        checks.append((f"linear time: zshard CPU / codec CPU at {large['name']} {over(large):.2f} vs "
                       f"{small['name']} {over(small):.2f} = {ratio:.2f}x (target <= 1.2x)",
                       "met" if ratio <= 1.2 else "MISSED"))
    else:
        cpu_ratio = per_gb(large, "cpu") / per_gb(small, "cpu")
        checks.append((f"linear time: CPU per GB at {large['name']} {per_gb(large, 'cpu'):.2f} s vs "
                       f"{small['name']} {per_gb(small, 'cpu'):.2f} s = {cpu_ratio:.2f}x (no codec floor measured; "
                       f"the data's compressibility changes with the size)", "n/a"))
    return checks + [
            (f"flat memory: peak RSS at {large['name']} {rss_large:.0f} MiB vs {small['name']} {rss_small:.0f} MiB "
             f"(target <= 1.25x + 16 MiB)", "met" if rss_large <= 1.25 * rss_small + 16 else "MISSED")]


def growth_lines(results):
    """The growth table (markdown rows) with its checks."""
    lines = ["| size | shape | raw GB | wall s | CPU s | peak RSS MiB | wall s/GB | CPU s/GB | codec CPU s | "
             "CPU / codec CPU |", "|---|---|---|---|---|---|---|---|---|---|"]
    for w in results:
        z = w["tools"]["zshard"]
        gb = w["raw_bytes"] / 1e9
        lines.append(f"| {w['name']} | {w['describe'].split(',')[0]} | {gb:.2f} | {fmt(z['wall'], '.2f')} | "
                     f"{fmt(z['cpu'], '.2f')} | {fmt(z['rss_mib'], '.0f')} | {fmt(z['wall'] / gb, '.2f')} | "
                     f"{fmt(z['cpu'] / gb, '.2f')} | {fmt(w['floor_s'] * w['threads'] if w['floor_s'] else None, '.2f')} | "
                     f"{fmt(z['cpu'] / (w['floor_s'] * w['threads']) if w['floor_s'] else None, '.2f')} |")
    return lines + [""] + [f"- **{s}**: {t}" for t, s in growth_checks(results)]


def parse_size(text):
    m = re.fullmatch(r"(\d+)\s*(B|KiB|MiB|GiB)?", text)
    if not m:
        sys.exit(f"harness: cannot read the size {text!r} (e.g. 512MiB)")
    return int(m.group(1)) * {"B": 1, None: 1, "KiB": 1024, "MiB": MIB, "GiB": 1024 * MIB}[m.group(2)]


# --------------------------------------------------------------------------------------------------
# Source generation (deterministic, cached)
# --------------------------------------------------------------------------------------------------

def synth(origin, shape, full_shape, dtype, seed):
    """Smooth waves plus noise for the block at `origin`; independent of how the array is split into
    blocks (the noise generator is seeded by the block origin, blocks are aligned to fixed grids)."""
    smooth = np.zeros(shape, np.float32)
    for k, (o, n, total) in enumerate(zip(origin, shape, full_shape)):
        x = np.arange(o, o + n, dtype=np.float32) / np.float32(total)
        wave = np.sin(2 * np.pi * (2 + 3 * k) * x + k).astype(np.float32)
        smooth += wave.reshape([n if i == k else 1 for i in range(len(shape))])
    smooth /= len(shape)  # within [-1, 1]
    rng = np.random.default_rng([seed, *origin])
    # Integers: noise on a fraction of the elements only, so that byte-oriented compressors (lz4, zstd
    # without shuffle) find something to compress (about 1.5x for uint8 with blosc lz4, 2-3x for
    # uint16 with zstd 3).
    if dtype == np.uint8:
        noise = rng.integers(0, 8, shape, dtype=np.uint8) * (rng.random(shape, dtype=np.float32) < 0.1)
        return (128 + 100 * smooth).astype(np.uint8) + noise.astype(np.uint8)
    if dtype == np.uint16:
        noise = rng.integers(0, 32, shape, dtype=np.uint16) * (rng.random(shape, dtype=np.float32) < 0.25)
        return (30000 + 20000 * smooth).astype(np.uint16) + noise.astype(np.uint16)
    if dtype == np.float32:
        return 100 * smooth + rng.standard_normal(shape, dtype=np.float32)
    raise ValueError(dtype)


def gen_blocks(shape, grid, budget=GEN_BLOCK_BYTES):
    """Blocks that are whole multiples of `grid`, grown along the last dimensions while their float32
    working copy (see synth) stays within `budget` bytes."""
    block = list(grid)
    for k in reversed(range(len(shape))):
        while block[k] < shape[k] and math.prod(block) * 4 * 2 <= budget:
            block[k] = min(block[k] * 2, -(-shape[k] // grid[k]) * grid[k])
    return iter_blocks(shape, block)


def iter_blocks(shape, block):
    for origin in itertools.product(*(range(0, s, b) for s, b in zip(shape, block))):
        yield origin, tuple(min(b, s - o) for o, b, s in zip(origin, block, shape))


def region(origin, extent):
    return tuple(slice(o, o + e) for o, e in zip(origin, extent))


def make_w5_source(path, size):
    """W5's source (the generator of the former benches/w5.py, so figures stay comparable)."""
    arr = zarr.create_array(store=path, shape=(size, size), chunks=(256, 256), dtype="uint16", zarr_format=3,
                            compressors=[zarr.codecs.ZstdCodec(level=3)], fill_value=0)
    rng = np.random.default_rng(5)
    x = np.linspace(0, 8 * np.pi, size, dtype=np.float32)
    band = 1024 if size >= 1024 else size
    for start in range(0, size, band):
        y = np.linspace(start / size * 8 * np.pi, (start + band) / size * 8 * np.pi, band, endpoint=False,
                        dtype=np.float32)
        smooth = 20000 + 10000 * np.sin(y)[:, None] * np.cos(x)[None, :]
        arr[start:start + band] = smooth.astype(np.uint16) + rng.integers(0, 64, (band, size), dtype=np.uint16)


def make_zarr_source(wl, path):
    if wl.name == "W1" or wl.targets == "growth":
        w1.make_source(path, wl.shape[0])
        return
    if wl.name == "W5":
        make_w5_source(path, wl.shape[0])
        return
    if wl.kind == "v2":
        compressor = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
        arr = zarr.create_array(store=path, shape=wl.shape, chunks=wl.src_chunks, dtype=wl.dtype, zarr_format=2,
                                compressors=compressor, fill_value=0)
    else:
        arr = zarr.create_array(store=path, shape=wl.shape, chunks=wl.src_chunks, dtype=wl.dtype, zarr_format=3,
                                compressors=[zarr.codecs.ZstdCodec(level=3)], fill_value=0)
    for origin, extent in gen_blocks(wl.shape, wl.src_chunks):
        arr[region(origin, extent)] = synth(origin, extent, wl.shape, wl.dtype, wl.seed)


def make_kerchunk_source(wl, h5_path, refs_path):
    import kerchunk.hdf
    with h5py.File(h5_path, "w") as f:
        d = f.create_dataset("data", shape=wl.shape, dtype=wl.dtype, chunks=wl.src_chunks, compression="gzip",
                             compression_opts=4, shuffle=True, fillvalue=0)
        for origin, extent in gen_blocks(wl.shape, wl.src_chunks):
            d[region(origin, extent)] = synth(origin, extent, wl.shape, wl.dtype, wl.seed)
    with open(h5_path, "rb") as fh:
        refs = kerchunk.hdf.SingleHdf5ToZarr(fh, url=os.path.abspath(h5_path)).translate()
    with open(refs_path, "w") as fh:
        json.dump(refs, fh)


class Source:
    """A workload's input: the path the tools take, plus readers for verification and the floor."""

    def __init__(self, wl, workdir, regen):
        self.wl = wl
        dims = "x".join(map(str, wl.shape))
        base = os.path.join(workdir, "sources", f"{wl.name.lower()}-{dims}")
        done = base + ".done"
        if wl.kind == "kerchunk":
            self.h5 = base + ".h5"
            self.path = base + ".json"
            self.var = "data"
        else:
            self.path = base + ".zarr"
        if regen or not os.path.exists(done):
            for p in (done, self.path, getattr(self, "h5", None)):
                if p and os.path.isdir(p):
                    shutil.rmtree(p)
                elif p and os.path.exists(p):
                    os.remove(p)
            os.makedirs(os.path.dirname(base), exist_ok=True)
            t0 = time.time()
            log(f"{wl.name}: generating {self.path} ({wl.raw_bytes / 1e6:.0f} MB raw)")
            if wl.kind == "kerchunk":
                make_kerchunk_source(wl, self.h5, self.path)
            else:
                make_zarr_source(wl, self.path)
            open(done, "w").write(f"generated in {time.time() - t0:.1f} s\n")
            log(f"{wl.name}: source ready in {time.time() - t0:.1f} s")
        self.stored_bytes = du(self.h5 if wl.kind == "kerchunk" else self.path)

    def ts_spec(self):
        return {"driver": "zarr" if self.wl.kind == "v2" else "zarr3",
                "kvstore": {"driver": "file", "path": self.path}}

    def reader(self):
        """A function region -> ndarray reading the ground truth (HDF5 directly for kerchunk)."""
        if self.wl.kind == "kerchunk":
            def read_h5(sl):
                with h5py.File(self.h5, "r") as f:
                    return f[self.var][sl]
            return read_h5
        arr = zarr.open_array(self.path, mode="r")
        return lambda sl: arr[sl]

    def chunks(self):
        """The encoded source chunks and their decoder, for the codec floor."""
        if self.wl.kind == "v2":
            return V2Chunks(self.path)
        if self.wl.kind == "v3":
            return V3Chunks(self.path)
        return KerchunkChunks(self.path, self.var)


def du(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


# --------------------------------------------------------------------------------------------------
# Encoded-chunk access for the codec floor (decoders are numcodecs; reading is not timed)
# --------------------------------------------------------------------------------------------------

class V2Chunks:
    def __init__(self, path):
        meta = json.load(open(os.path.join(path, ".zarray")))
        self._init(meta)
        self.root = path

    def _init(self, meta):
        self.shape, self.chunk_shape = tuple(meta["shape"]), tuple(meta["chunks"])
        self.dtype = np.dtype(meta["dtype"])
        self.order = meta.get("order", "C")
        self.sep = meta.get("dimension_separator") or "."
        self.fill = meta.get("fill_value") or 0
        self.compressor = numcodecs.get_codec(meta["compressor"]) if meta.get("compressor") else None
        self.filters = [numcodecs.get_codec(f) for f in meta.get("filters") or []]

    def key(self, idx):
        return self.sep.join(map(str, idx))

    def encoded(self, idx):
        p = os.path.join(self.root, *self.key(idx).split("/"))
        if not os.path.exists(p):
            return None
        with open(p, "rb") as fh:
            return fh.read()

    def decode(self, data):
        if self.compressor is not None:
            data = self.compressor.decode(data)
        for f in reversed(self.filters):
            data = f.decode(data)
        return np.frombuffer(data, dtype=self.dtype).reshape(self.chunk_shape, order=self.order)


class V3Chunks:
    def __init__(self, path):
        meta = json.load(open(os.path.join(path, "zarr.json")))
        self.root = path
        self.shape = tuple(meta["shape"])
        self.chunk_shape = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
        self.dtype = np.dtype(meta["data_type"]).newbyteorder("<")
        self.fill = meta.get("fill_value") or 0
        cke = meta["chunk_key_encoding"]
        self.sep = cke.get("configuration", {}).get("separator", "/" if cke["name"] == "default" else ".")
        self.prefix = "c" + self.sep if cke["name"] == "default" else ""
        names = [c["name"] for c in meta["codecs"]]
        if names[0] != "bytes" or any(n not in ("zstd", "gzip", "blosc") for n in names[1:]):
            raise ValueError(f"codec floor: unsupported v3 chain {names}")
        self.compressors = []
        for c in meta["codecs"][1:]:
            conf = c.get("configuration", {})
            if c["name"] == "zstd":
                self.compressors.append(numcodecs.Zstd(level=conf.get("level", 0)))
            elif c["name"] == "gzip":
                self.compressors.append(numcodecs.GZip(level=conf.get("level", 5)))
            else:
                self.compressors.append(numcodecs.Blosc())

    def encoded(self, idx):
        key = self.prefix + self.sep.join(map(str, idx))
        p = os.path.join(self.root, *key.split("/"))
        if not os.path.exists(p):
            return None
        with open(p, "rb") as fh:
            return fh.read()

    def decode(self, data):
        for c in reversed(self.compressors):
            data = c.decode(data)
        return np.frombuffer(data, dtype=self.dtype).reshape(self.chunk_shape)


class KerchunkChunks(V2Chunks):
    def __init__(self, refs_path, var):
        refs = json.load(open(refs_path))
        self.refs = refs.get("refs", refs)
        self.var = var
        self._init(json.loads(self.refs[f"{var}/.zarray"]))
        self.files = {}

    def encoded(self, idx):
        ref = self.refs.get(f"{self.var}/{self.key(idx)}")
        if ref is None:
            return None
        if isinstance(ref, str):  # inlined by kerchunk
            return base64.b64decode(ref[7:]) if ref.startswith("base64:") else ref.encode()
        url = ref[0][7:] if ref[0].startswith("file://") else ref[0]
        fh = self.files.get(url) or self.files.setdefault(url, open(url, "rb"))
        if len(ref) == 1:
            fh.seek(0)
            return fh.read()
        fh.seek(ref[1])
        return fh.read(ref[2])


def codec_floor(src_chunks, inner, codec, threads, check=None):
    """Single-thread CPU seconds of decoding every source chunk once and encoding every output inner
    chunk once (padded to the full inner shape, as in a shard), divided by `threads`.

    The array is walked in columns (blocks of lcm(source chunk, inner chunk) along every dimension but
    the first) and, within a column, by a band of rows that holds the decoded source rows not yet
    encoded; only the decode and encode calls are timed. `check(origin, block)`, if given, sees every
    inner chunk before it is encoded (for testing the assembly)."""
    numcodecs.blosc.use_threads = False
    numcodecs.blosc.set_nthreads(1)
    enc = codec.numcodec()
    shape, sc, dtype, fill = src_chunks.shape, src_chunks.chunk_shape, src_chunks.dtype, src_chunks.fill
    nd = len(shape)
    col = [math.lcm(sc[k], inner[k]) for k in range(1, nd)]
    spent = 0.0
    for col_origin in itertools.product(*(range(0, shape[k], col[k - 1]) for k in range(1, nd))):
        col_ext = [min(col[k - 1], shape[k] - col_origin[k - 1]) for k in range(1, nd)]
        src_idx = [range(o // sc[k], -(-(o + e) // sc[k])) for k, o, e in zip(range(1, nd), col_origin, col_ext)]
        band, band_lo, decoded_to = None, 0, 0
        for r0 in range(0, shape[0], inner[0]):
            r1 = min(r0 + inner[0], shape[0])
            while decoded_to < r1:
                i = decoded_to // sc[0]
                rows = (i * sc[0], min((i + 1) * sc[0], shape[0]))
                piece = np.full((rows[1] - rows[0], *col_ext), fill, dtype)
                for rest in itertools.product(*src_idx):
                    data = src_chunks.encoded((i, *rest))
                    if data is None:
                        continue
                    t0 = time.process_time()
                    chunk = src_chunks.decode(data)
                    spent += time.process_time() - t0
                    dst = [slice(0, rows[1] - rows[0])]
                    srcs = [slice(0, rows[1] - rows[0])]
                    for k, j in zip(range(1, nd), rest):
                        lo = j * sc[k] - col_origin[k - 1]
                        hi = min(lo + sc[k], col_ext[k - 1])
                        dst.append(slice(lo, hi))
                        srcs.append(slice(0, hi - lo))
                    piece[tuple(dst)] = chunk[tuple(srcs)]
                band = piece if band is None else np.concatenate([band, piece])
                decoded_to = rows[1]
            rows_here = band[r0 - band_lo:r1 - band_lo]
            for inner_origin in itertools.product(*(range(0, e, inner[k]) for k, e in zip(range(1, nd), col_ext))):
                block = np.full(inner, fill, dtype)
                part = rows_here[(slice(None), *(slice(o, o + inner[k]) for k, o in zip(range(1, nd), inner_origin)))]
                block[tuple(slice(0, n) for n in part.shape)] = part
                if check:
                    check((r0, *(c + o for c, o in zip(col_origin, inner_origin))), block)
                t0 = time.process_time()
                enc.encode(block)
                spent += time.process_time() - t0
            band, band_lo = band[r1 - band_lo:], r1
    return spent / threads


# --------------------------------------------------------------------------------------------------
# Peers, run as their own processes (their startup and imports are part of their wall time)
# --------------------------------------------------------------------------------------------------

TS_CONVERT = r"""
import json, sys, time
t0 = time.perf_counter()
import tensorstore as ts
cfg = json.loads(sys.argv[1])
t1 = time.perf_counter()
n = cfg["threads"]
ctx = ts.Context({"data_copy_concurrency": {"limit": n}, "file_io_concurrency": {"limit": max(2, 2 * n)}})
source = ts.open(cfg["source"], context=ctx, read=True).result()
target = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": cfg["dest"]}, "metadata": cfg["metadata"],
                  "create": True, "delete_existing": True}, context=ctx).result()
target.write(source).result()
print(json.dumps({"startup_s": t1 - t0, "work_s": time.perf_counter() - t1}))
"""

# zarr-python 3 reading kerchunk references: fsspec's ReferenceFileSystem is an async filesystem, so it
# is opened with asynchronous=True and handed to zarr's FsspecStore; the references describe Zarr v2.
ZP_CONVERT = r"""
import json, sys, time
t0 = time.perf_counter()
import fsspec, zarr
cfg = json.loads(sys.argv[1])
t1 = time.perf_counter()
zarr.config.set({"threading.max_workers": cfg["threads"]})
fs = fsspec.filesystem("reference", fo=cfg["refs"], remote_protocol="file", asynchronous=True)
src = zarr.open_array(zarr.storage.FsspecStore(fs, read_only=True, path=""), path=cfg["var"], mode="r",
                      zarr_format=2)
root = zarr.open_group(cfg["dest"], mode="w", zarr_format=3)
out = root.create_array(cfg["var"], shape=src.shape, dtype=src.dtype, chunks=cfg["inner"], shards=cfg["shard"],
                        compressors=zarr.codecs.ZstdCodec(level=cfg["zstd_level"]), fill_value=src.fill_value)
step = cfg["shard"][0]
for start in range(0, src.shape[0], step):  # one row of shards at a time: whole shards, bounded memory
    out[start:start + step] = src[start:start + step]
print(json.dumps({"startup_s": t1 - t0, "work_s": time.perf_counter() - t1}))
"""


def v3_metadata(wl, location):
    return {
        "shape": list(wl.shape), "data_type": wl.dtype.name, "fill_value": 0,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(wl.shard)}},
        "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": list(wl.inner),
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}] + wl.codec.v3(wl.dtype.itemsize),
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": location}}],
    }


class Tool:
    """One command to time. kind: zshard (the tool under test and its variants), peer, or copy."""

    def __init__(self, name, kind, cmd, out, *, array=None, env=None, location="end", verify=True,
                 expect_passthrough=None, display=None):
        self.name, self.kind, self.cmd, self.out = name, kind, cmd, out
        self.display = display or shlex.join(cmd)  # for the reports (scripts are shown by name)
        self.array = array or out  # the array inside the output (a group for kerchunk input)
        self.env, self.location, self.verify = env, location, verify
        self.expect_passthrough = expect_passthrough


def tools_for(wl, src, args, outdir):
    shp = lambda t: ",".join(map(str, t))  # noqa: E731
    slug = lambda name: re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")  # noqa: E731
    out = lambda name: os.path.join(outdir, f"{wl.name.lower()}-{slug(name)}.zarr")  # noqa: E731
    sub = (lambda o: os.path.join(o, src.var)) if wl.kind == "kerchunk" else (lambda o: o)
    tools = []
    for location in wl.index_locations:
        name = "zshard" if len(wl.index_locations) == 1 else f"zshard (index {location})"
        o = out(name)
        cmd = [args.zshard, "convert", src.path, o, "--shard-shape", shp(wl.shard), "--chunk-shape", shp(wl.inner),
               "--compressor", wl.codec.zshard, "--index-location", location, "--threads", str(args.threads),
               "--quiet"]
        if wl.memory_limit:
            cmd += ["--memory-limit", wl.memory_limit]
        tools.append(Tool(name, "zshard", cmd, o, array=sub(o), location=location,
                          expect_passthrough=True if wl.targets == "passthrough" else None))
        if wl.targets == "passthrough":
            o = out("zshard --no-passthrough")
            tools.append(Tool("zshard --no-passthrough", "zshard", cmd[:2] + [src.path, o] + cmd[4:] +
                              ["--no-passthrough"], o, expect_passthrough=False))
    if args.zshard_before:
        # The same commands with an earlier build, run alternately with the current one (a refactor's
        # "behaviour and speed unchanged" is judged within one run, in the same conditions).
        tools += [Tool(f"{t.name} (before)", "zshard-before", [args.zshard_before] + t.cmd[1:3] +
                       [t.out + "-before"] + t.cmd[4:], t.out + "-before", array=sub(t.out + "-before"),
                       location=t.location, verify=t.verify)
                  for t in list(tools) if t.kind == "zshard"]
    if args.zshard_only:
        return tools
    for peer in wl.peers:
        o = out(peer)
        if peer == "tensorstore":
            cfg = {"source": src.ts_spec(), "dest": o, "threads": args.threads, "metadata": v3_metadata(wl, "end")}
            tools.append(Tool(peer, "peer", [sys.executable, "-c", TS_CONVERT, json.dumps(cfg)], o,
                              display=f"python -c TS_CONVERT (benches/harness.py) '{json.dumps(cfg)}'"))
        elif peer == "zarrs_reencode":
            cmd = [args.zarrs or "zarrs_reencode", src.path, o, "--chunk-shape", shp(wl.inner), "--shard-shape",
                   shp(wl.shard), "--array-to-bytes-codec", '{"name":"bytes","configuration":{"endian":"little"}}',
                   "--bytes-to-bytes-codecs", json.dumps(wl.codec.v3(wl.dtype.itemsize)),
                   "--concurrent-chunks", str(args.threads)]
            # zarrs_reencode has no thread-count flag: its work runs on rayon's global pool, sized by
            # RAYON_NUM_THREADS. --concurrent-chunks is how many output chunks (shards) it works on at
            # once; left to itself it picked 1 on W2 (one core busy, 1.6x slower than with 2).
            tools.append(Tool(peer, "peer", cmd, o, env={"RAYON_NUM_THREADS": str(args.threads)},
                              display=f"RAYON_NUM_THREADS={args.threads} {shlex.join(cmd)}"))
        elif peer == "zarr-python":
            cfg = {"refs": src.path, "var": src.var, "dest": o, "threads": args.threads, "inner": list(wl.inner),
                   "shard": list(wl.shard), "zstd_level": 3}
            tools.append(Tool(peer, "peer", [sys.executable, "-c", ZP_CONVERT, json.dumps(cfg)], o, array=sub(o),
                              display=f"python -c ZP_CONVERT (benches/harness.py) '{json.dumps(cfg)}'"))
    if wl.targets == "passthrough":
        o = out("cp -r")
        tools.append(Tool("cp -r (copy floor)", "copy", ["cp", "-r", src.path, o], o, verify=False))
    return tools


# --------------------------------------------------------------------------------------------------
# Running and timing
# --------------------------------------------------------------------------------------------------

def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_timed(cmd, env, logfile, timeout):
    """Runs cmd under /usr/bin/time -v. Returns a dict: ok, exit, wall (perf_counter), cpu, rss_mib,
    tail (last stderr/stdout lines), stdout."""
    stats = logfile + ".time"
    full_env = dict(os.environ, **(env or {}))
    t0 = time.perf_counter()
    with open(logfile + ".out", "w") as out, open(logfile + ".err", "w") as err:
        p = subprocess.Popen(["/usr/bin/time", "-v", "-o", stats] + cmd, stdout=out, stderr=err, env=full_env,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = "timeout"
    wall = time.perf_counter() - t0
    text = open(stats).read() if os.path.exists(stats) else ""

    def field(name, conv=float, default=float("nan")):
        m = re.findall(rf"^\s*{re.escape(name)}: (.*)$", text, re.M)
        return conv(m[-1].strip()) if m else default

    cpu = field("User time (seconds)") + field("System time (seconds)")
    rss = field("Maximum resident set size (kbytes)") / 1024
    signal_line = re.search(r"Command terminated by signal (\d+)", text)
    stdout = open(logfile + ".out", errors="replace").read()
    errtext = open(logfile + ".err", errors="replace").read()
    tail = " | ".join((errtext.strip() or stdout.strip()).splitlines()[-4:])[-600:]
    if signal_line:
        rc = f"signal {signal_line.group(1)}"
    if rc == "timeout":
        tail = f"killed after {timeout:g} s (--timeout)"
    return {"ok": rc == 0, "exit": rc, "wall": wall, "cpu": cpu, "rss_mib": rss, "tail": tail, "stdout": stdout}


def zshard_passthrough(args, tool):
    """What `zshard plan --json` says about passthrough for this tool's options."""
    plan = [args.zshard, "plan"] + tool.cmd[2:4] + [a for a in tool.cmd[4:] if a != "--quiet"] + ["--json"]
    r = subprocess.run(plan, capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return all(a.get("passthrough") for a in json.loads(r.stdout)["arrays"])


def check_layout(wl, tool):
    """The output must have exactly the layout asked for, whichever tool wrote it."""
    meta = json.load(open(os.path.join(tool.array, "zarr.json")))
    problems = []
    if meta.get("node_type") != "array" or meta.get("zarr_format") != 3:
        return ["not a Zarr v3 array"]
    if list(meta["shape"]) != list(wl.shape) or np.dtype(meta["data_type"]) != wl.dtype:
        problems.append(f"shape/dtype {meta['shape']} {meta['data_type']}")
    if meta["chunk_grid"]["configuration"]["chunk_shape"] != list(wl.shard):
        problems.append(f"shard shape {meta['chunk_grid']['configuration']['chunk_shape']}")
    codecs = meta["codecs"]
    if len(codecs) != 1 or codecs[0]["name"] != "sharding_indexed":
        return problems + [f"codecs {[c['name'] for c in codecs]} (not sharded)"]
    conf = codecs[0]["configuration"]
    if conf["chunk_shape"] != list(wl.inner):
        problems.append(f"inner chunk shape {conf['chunk_shape']}")
    if conf.get("index_location", "end") != tool.location:
        problems.append(f"index at the {conf.get('index_location', 'end')}")
    inner = conf["codecs"]
    if inner[0]["name"] != "bytes" or not wl.codec.matches(inner[1:]):
        problems.append(f"inner codecs {json.dumps(inner)}")
    return problems


def verify_blocks(wl):
    """Blocks aligned to both the source chunks and the output inner chunks where that fits the budget
    (so no chunk is decoded twice), else to the output inner chunks; then grown up to the budget."""
    budget = VERIFY_BLOCK_BYTES // wl.dtype.itemsize
    block = [min(math.lcm(a, b), s) for a, b, s in zip(wl.src_chunks, wl.inner, wl.shape)]
    while math.prod(block) > budget:
        k = max(range(len(block)), key=lambda i: block[i] // wl.inner[i])
        if block[k] <= wl.inner[k]:
            break
        block[k] = max(wl.inner[k], block[k] // 2 // wl.inner[k] * wl.inner[k])
    for k in range(len(block)):
        while block[k] < wl.shape[k] and math.prod(block) * 2 <= budget:
            block[k] = min(block[k] * 2, wl.shape[k])
    return iter_blocks(wl.shape, block)


def verify_output(wl, src, tool):
    """Compares the output with the source element by element, block by block, with zarr-python and
    tensorstore. Returns None when equal, else a description of the first problem."""
    problems = check_layout(wl, tool)
    if problems:
        return "layout: " + "; ".join(problems)
    read_src = src.reader()
    out_zarr = zarr.open_array(tool.array, mode="r")
    ctx = ts.Context({"cache_pool": {"total_bytes_limit": 0}})
    out_ts = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": tool.array}}, context=ctx,
                     read=True).result()
    floats = wl.dtype.kind == "f"
    for origin, extent in verify_blocks(wl):
        sl = region(origin, extent)
        expected = read_src(sl)
        for reader, got in (("zarr-python", lambda: out_zarr[sl]),
                            ("tensorstore", lambda: out_ts[sl].read().result())):
            g = got()
            if g.dtype != expected.dtype or not np.array_equal(g, expected, equal_nan=floats):
                bad = int(np.count_nonzero(g != expected)) if g.shape == expected.shape else "shape"
                return f"{reader} reads {bad} element(s) different from the source in block at {list(origin)}"
    return None


def rm(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def median(values):
    return statistics.median(values) if values else float("nan")


def run_workload(wl, args):
    log(f"=== {wl.name}: {wl.describe()}")
    src = Source(wl, args.workdir, args.regen)
    outdir = os.path.join(args.workdir, "out")
    logdir = os.path.join(args.workdir, "logs")
    os.makedirs(outdir, exist_ok=True)
    os.makedirs(logdir, exist_ok=True)
    tools = tools_for(wl, src, args, outdir)
    res = {t.name: {"kind": t.kind, "cmd": t.display, "runs": [], "problems": []} for t in tools}
    for t in tools:
        if t.kind == "peer" and t.cmd[0] != sys.executable and not shutil.which(t.cmd[0]):
            res[t.name]["problems"].append(f"not found: {t.cmd[0]} (benches/run.sh installs it)")
        if t.expect_passthrough is not None:
            chosen = zshard_passthrough(args, t)
            res[t.name]["passthrough"] = chosen
            if chosen != t.expect_passthrough:
                res[t.name]["problems"].append(f"zshard plan says passthrough={chosen}, expected "
                                               f"{t.expect_passthrough}")
    for run in range(args.runs):
        for t in tools:
            r = res[t.name]
            if any(p.startswith("not found") for p in r["problems"]):
                continue
            rm(t.out)
            os.sync()
            logfile = os.path.join(logdir, f"{wl.name.lower()}-{os.path.basename(t.out)}-run{run + 1}")
            m = run_timed(t.cmd, t.env, logfile, args.timeout)
            m["run"] = run + 1
            extra = {}
            if t.cmd[0] == sys.executable:
                try:
                    extra = json.loads(m["stdout"].strip().splitlines()[-1])
                except (ValueError, IndexError):
                    pass
            m.update(extra)
            del m["stdout"]
            if not m["ok"]:
                r["problems"].append(f"run {run + 1} failed (exit {m['exit']}): {m['tail']}")
                log(f"{wl.name} {t.name} run {run + 1}: FAILED (exit {m['exit']}): {m['tail']}")
            else:
                msg = f"{wl.name} {t.name} run {run + 1}: wall {m['wall']:.2f} s, CPU {m['cpu']:.2f} s, " \
                      f"RSS {m['rss_mib']:.0f} MiB"
                if t.verify and (args.verify == "every" or run == 0):
                    t0 = time.time()
                    try:
                        bad = verify_output(wl, src, t)
                    except Exception as e:  # an unreadable output is a failed verification
                        bad = f"reading the output failed: {type(e).__name__}: {e}"
                    m["verified"] = bad is None
                    if bad:
                        r["problems"].append(f"run {run + 1}: output differs: {bad}")
                        msg += f"; VERIFICATION FAILED: {bad}"
                    else:
                        msg += f"; verified ({time.time() - t0:.1f} s)"
                log(msg)
            r["runs"].append(m)
            rm(t.out)
    for r in res.values():
        good = [m for m in r["runs"] if m["ok"]]
        r["ok"] = bool(r["runs"]) and not r["problems"]
        for k in ("wall", "cpu", "rss_mib"):
            r[k] = median([m[k] for m in good])
        if good and "work_s" in good[0]:
            r["work_s"] = median([m["work_s"] for m in good])
    floor = None
    if wl.floor and not args.no_floor:
        log(f"{wl.name}: measuring the codec floor")
        floor = codec_floor(src.chunks(), wl.inner, wl.codec, args.threads)
    return {"name": wl.name, "title": wl.title, "describe": wl.describe(), "raw_bytes": wl.raw_bytes,
            "stored_bytes": src.stored_bytes, "floor_s": floor, "threads": args.threads, "memory_limit": wl.memory_limit,
            "targets_kind": wl.targets, "tools": res, "targets": evaluate(wl, res, floor)}


# --------------------------------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------------------------------

def evaluate(wl, res, floor):
    """A list of (text, status) with status 'met', 'MISSED' or 'n/a'."""
    out = []
    z = res.get("zshard") or next(v for k, v in res.items() if v["kind"] == "zshard")
    peers = {k: v for k, v in res.items() if v["kind"] == "peer"}
    ok_peers = {k: v for k, v in peers.items() if v["ok"]}
    missing = sorted(set(peers) - set(ok_peers))
    note = f" (without {', '.join(missing)}: failed or missing)" if missing else ""

    def status(cond):
        return "met" if cond else "MISSED"

    if wl.targets == "peer":
        if not z["ok"] or not ok_peers:
            out.append(("wall ≤ 0.9× best peer, ≤ 1.10× codec floor, peak RSS ≤ lowest peer's", "n/a"))
            return out
        best = min(ok_peers, key=lambda k: ok_peers[k]["wall"])
        ratio = z["wall"] / ok_peers[best]["wall"]
        out.append((f"wall ≤ 0.9× best peer: {z['wall']:.2f} s vs {best} {ok_peers[best]['wall']:.2f} s = "
                    f"{ratio:.2f}×{note}", status(ratio <= 0.9)))
        if floor:
            out.append((f"wall ≤ 1.10× codec floor: {z['wall']:.2f} s vs {floor:.2f} s = {z['wall'] / floor:.2f}×",
                        status(z["wall"] / floor <= 1.10)))
        low = min(ok_peers, key=lambda k: ok_peers[k]["rss_mib"])
        out.append((f"peak RSS ≤ lowest peer's: {z['rss_mib']:.0f} MiB vs {low} {ok_peers[low]['rss_mib']:.0f} MiB"
                    f"{note}", status(z["rss_mib"] <= ok_peers[low]["rss_mib"])))
    elif wl.targets == "passthrough":
        if not z["ok"]:
            out.append(("≥ 5× every peer, ≥ 0.5× cp -r speed", "n/a"))
            return out
        for k, v in peers.items():
            if not v["ok"]:
                out.append((f"≥ 5× {k}: {k} failed or missing", "n/a"))
                continue
            x = v["wall"] / z["wall"]
            out.append((f"≥ 5× the speed of {k}: {v['wall']:.2f} s / {z['wall']:.2f} s = {x:.2f}×", status(x >= 5)))
        cp = res.get("cp -r (copy floor)")
        if cp and cp["ok"]:
            x = cp["wall"] / z["wall"]
            out.append((f"≥ 0.5× the speed of cp -r: {cp['wall']:.2f} s / {z['wall']:.2f} s = {x:.2f}×",
                        status(x >= 0.5)))
    elif wl.targets == "memory":
        limit = parse_size(wl.memory_limit) / MIB
        for k, v in res.items():
            if v["kind"] != "zshard":
                continue
            if not v["ok"]:
                out.append((f"{k}: peak RSS < {limit:.0f} MiB (--memory-limit {wl.memory_limit}): the run "
                            f"failed (see the problems)", "MISSED"))
            else:
                out.append((f"{k}: peak RSS < {limit:.0f} MiB (--memory-limit {wl.memory_limit}): "
                            f"{v['rss_mib']:.0f} MiB", status(v["rss_mib"] < limit)))
    return out


# --------------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------------

def fmt(x, spec):
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def table_rows(w):
    """Rows of the per-workload table (tool, status, wall, CPU, CPU per raw GB, CPU over the codec CPU, RSS,
    MB/s, /best peer, /floor, note)."""
    res = w["tools"]
    ok_peers = [v["wall"] for v in res.values() if v["kind"] == "peer" and v["ok"]]
    best = min(ok_peers) if ok_peers else None
    cp = res.get("cp -r (copy floor)")
    rows = []
    for name, v in res.items():
        status = "ok" if v["ok"] else ("FAILED" if v["runs"] else "skipped")
        wall = v["wall"]
        note = []
        if "work_s" in v:
            note.append(f"in-process {v['work_s']:.2f} s")
        if "passthrough" in v:
            note.append(f"passthrough={v['passthrough']}")
        if cp and cp["ok"] and v["ok"] and name != "cp -r (copy floor)":
            note.append(f"{cp['wall'] / wall:.2f}× cp speed")
        if v["problems"]:
            note.append(v["problems"][0][:160])
        codec_cpu = w["floor_s"] * w["threads"] if w["floor_s"] else None
        rows.append([name, status, fmt(wall, ".2f"), fmt(v["cpu"], ".2f"),
                     fmt(v["cpu"] / (w["raw_bytes"] / 1e9) if v["ok"] else None, ".2f"),
                     fmt(v["cpu"] / codec_cpu if codec_cpu and v["ok"] else None, ".2f"),
                     fmt(v["rss_mib"], ".0f"),
                     fmt(w["raw_bytes"] / 1e6 / wall if v["ok"] else None, ".0f"),
                     fmt(wall / best if best and v["ok"] else None, ".2f"),
                     fmt(wall / w["floor_s"] if w["floor_s"] and v["ok"] else None, ".2f"), "; ".join(note)])
    return rows


# CPU s/GB: CPU seconds per raw GB; CPU/codec: CPU over the codec floor's single-thread CPU (floor x threads).
HEAD = ["tool", "status", "wall s", "CPU s", "CPU s/GB", "CPU/codec", "RSS MiB", "MB/s", "/best peer", "/floor",
        "notes"]


def print_table(w, runs, threads):
    print(f"\n{w['name']}: {w['title']}\n  {w['describe']}; {w['raw_bytes'] / 1e6:.0f} MB raw, "
          f"{w['stored_bytes'] / 1e6:.0f} MB stored; {threads} threads; medians of {runs} run(s); codec floor "
          f"{fmt(w['floor_s'], '.2f')} s")
    rows = [HEAD] + table_rows(w)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD) - 1)]
    for r in rows:
        print("  " + " ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r[:-1]))
              + ("  " + r[-1] if r[-1] else ""))
    for text, status in w["targets"]:
        print(f"  target {status:6}  {text}")


def machine_info():
    cpu = "unknown"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = next((int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    return {"cpu": cpu, "cores": os.cpu_count(), "ram_gib": round(mem / 1024 ** 3, 1),
            "kernel": platform.release(), "load_average_at_start": os.getloadavg()}


def versions(args):
    def cmd(c):
        try:
            return subprocess.run(c, capture_output=True, text=True, cwd=REPO).stdout.strip()
        except OSError:
            return None
    rev = cmd(["git", "rev-parse", "--short=12", "HEAD"])
    if cmd(["git", "status", "--porcelain", "--", "crates", "pipelines", "Cargo.toml", "Cargo.lock"]):
        rev = f"{rev} + uncommitted changes in crates/ or pipelines/"
    built = datetime.datetime.fromtimestamp(os.path.getmtime(args.zshard)).isoformat(timespec="seconds") \
        if os.path.exists(args.zshard) else None
    def version(binary):
        text = cmd([binary, "--version"]) if binary and os.access(binary, os.X_OK) else None
        return text.split(" ", 1)[-1] if text else "not found"
    v = {"zshard": f"{version(args.zshard)} (git {rev}; binary {args.zshard} built {built})",
         "zarrs_tools": version(args.zarrs),
         "python": platform.python_version()}
    for pkg in ("tensorstore", "zarr", "numcodecs", "numpy", "h5py", "kerchunk", "fsspec"):
        v[pkg] = importlib.metadata.version(pkg)
    return v


def write_markdown(path, report):
    lines = ["# zshard peer comparison (benches/harness.py)", "",
             f"Run {report['started']}, {report['duration_s']:.0f} s: `{report['command']}`", "",
             f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, "
             f"{report['machine']['ram_gib']} GiB RAM, Linux {report['machine']['kernel']}, load average at start "
             f"{', '.join(f'{x:.2f}' for x in report['machine']['load_average_at_start'])}.", "",
             "Versions: " + "; ".join(f"{k} {v}" for k, v in report["versions"].items()) + ".", "",
             f"Scale {report['scale']}, {report['threads']} threads for every tool, medians of {report['runs']} "
             f"run(s). Wall is the process's (startup included); CPU is user + system; RSS is the peak resident "
             f"set (`/usr/bin/time -v`). MB/s is raw (decoded) MB over wall; CPU s/GB is CPU per raw GB. The "
             f"codec floor is the single-thread CPU time of numcodecs decoding every source chunk and encoding every inner chunk, divided by "
             f"the thread count; CPU/codec is a tool's CPU over that single-thread codec CPU.", "",
             "## Summary", "",
             "| workload | zshard wall | zshard CPU s/GB | best peer | zshard / best peer | codec floor | "
             "zshard / floor | zshard CPU / codec CPU | zshard RSS | lowest peer RSS | targets |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in report["workloads"]:
        res = w["tools"]
        z = res.get("zshard") or next(v for v in res.values() if v["kind"] == "zshard")
        peers = {k: v for k, v in res.items() if v["kind"] == "peer" and v["ok"]}
        best = min(peers, key=lambda k: peers[k]["wall"]) if peers else None
        low = min(peers, key=lambda k: peers[k]["rss_mib"]) if peers else None
        met = sum(s == "met" for _, s in w["targets"])
        missed = sum(s == "MISSED" for _, s in w["targets"])
        zwall = fmt(z["wall"], ".2f") + " s" if z["ok"] else "FAILED"
        best_text = f"{best} {peers[best]['wall']:.2f} s" if best else "—"
        low_text = f"{peers[low]['rss_mib']:.0f} MiB ({low})" if low else "—"
        vs_best = fmt(z["wall"] / peers[best]["wall"] if best and z["ok"] else None, ".2f")
        floor_text = f"{w['floor_s']:.2f} s" if w["floor_s"] else "—"
        vs_floor = fmt(z["wall"] / w["floor_s"] if w["floor_s"] and z["ok"] else None, ".2f")
        per_gb = fmt(z["cpu"] / (w["raw_bytes"] / 1e9) if z["ok"] else None, ".2f")
        vs_codec = fmt(z["cpu"] / (w["floor_s"] * w["threads"]) if w["floor_s"] and z["ok"] else None, ".2f")
        lines.append(f"| {w['name']} | {zwall} | {per_gb} | {best_text} | {vs_best} | {floor_text} | {vs_floor} | "
                     f"{vs_codec} | "
                     f"{fmt(z['rss_mib'], '.0f')}{' MiB' if z['ok'] else ''} | {low_text} | "
                     f"{f'{met} met, {missed} missed' if w['targets'] else 'none set'} |")
    growth = [w for w in report["workloads"] if w.get("targets_kind") == "growth"]
    if growth:
        lines += ["", "## Growth: W1 at several sizes (zshard alone)", ""] + growth_lines(growth)
    for w in report["workloads"]:
        lines += ["", f"## {w['name']}: {w['title']}", "",
                  f"{w['describe']}; {w['raw_bytes'] / 1e6:.0f} MB raw, {w['stored_bytes'] / 1e6:.0f} MB stored; "
                  f"codec floor {fmt(w['floor_s'], '.2f')} s.", "",
                  "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        for r in table_rows(w):
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
        if w["targets"]:
            lines += ["", "Targets:", ""] + [f"- **{s}**: {t}" for t, s in w["targets"]]
        problems = [f"{k}: {p}" for k, v in w["tools"].items() for p in v["problems"]]
        if problems:
            lines += ["", "Problems:", ""] + [f"- {p}" for p in problems]
        lines += ["", "Commands:", ""] + [f"- {k}: `{v['cmd']}`" for k, v in w["tools"].items()]
    open(path, "w").write("\n".join(lines) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", choices=["full", "medium", "small"], default="full",
                   help="medium: only W3 (640x640x512) and W6 (1024x1024x512, 512MiB), issue 43's rechunks")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workloads", default=None,
                   help="comma-separated, or `all` (default: W1-W5, plus W6 at --scale full)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--workdir", default=os.path.join(REPO, "target", "bench"))
    p.add_argument("--zshard", default=os.path.join(REPO, "target", "release", "zshard"))
    p.add_argument("--zshard-before", default=None, metavar="BIN",
                   help="an earlier zshard build, run beside --zshard on the same workloads (before/after)")
    p.add_argument("--zshard-only", action="store_true", help="run no peers and no copy floor")
    p.add_argument("--zarrs", default=None, help="zarrs_reencode binary (default: target/peers/bin, then PATH)")
    p.add_argument("--verify", choices=["every", "first"], default="every",
                   help="verify the output of every run, or only of each tool's first run")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per tool run")
    p.add_argument("--regen", action="store_true", help="regenerate the sources even when cached")
    p.add_argument("--no-floor", action="store_true", help="skip the codec floor measurement")
    p.add_argument("--strict", action="store_true", help="exit 2 when a performance target is missed")
    p.add_argument("--growth", default=None, metavar="FACTORS",
                   help="instead of the workloads: W1 at these multiples of its size, e.g. 0.25,1,4,16 "
                        "(zshard alone; linear time and flat memory)")
    p.add_argument("--w6-memory-limit", default=None,
                   help="W6's --memory-limit and RSS bound (default: 512MiB at --scale full, 96MiB at small)")
    args = p.parse_args()
    args.zshard = os.path.abspath(args.zshard)
    args.workdir = os.path.abspath(args.workdir)
    if args.zarrs is None:
        local = os.path.join(REPO, "target", "peers", "bin", "zarrs_reencode")
        args.zarrs = local if os.access(local, os.X_OK) else shutil.which("zarrs_reencode")
    if not os.access("/usr/bin/time", os.X_OK):
        sys.exit("harness: /usr/bin/time is missing (Debian package `time`)")
    if not os.access(args.zshard, os.X_OK):
        sys.exit(f"harness: no zshard binary at {args.zshard}")
    all_wl = workloads(args.scale)
    if args.growth:
        try:
            factors = sorted(float(f) for f in args.growth.split(",") if f.strip())
        except ValueError:
            sys.exit(f"harness: --growth takes numbers like 0.25,1,4,16, not {args.growth!r}")
        all_wl.update(growth_workloads(args.scale, factors))
        args.workloads = ",".join(growth_workloads(args.scale, factors))
    if args.w6_memory_limit:
        parse_size(args.w6_memory_limit)
        all_wl["W6"].memory_limit = args.w6_memory_limit
    if args.workloads in (None, ""):
        names = ["W1", "W2", "W3", "W4", "W5"] + (["W6"] if args.scale == "full" else [])
    elif args.workloads.lower() == "all":
        names = list(all_wl)
    else:
        names = [n.strip().upper().replace("W1X", "W1x") for n in args.workloads.split(",") if n.strip()]
        unknown = [n for n in names if n not in all_wl]
        if unknown:
            sys.exit(f"harness: unknown workload(s) {unknown}; known: {', '.join(all_wl)}")
    os.makedirs(args.workdir, exist_ok=True)
    started = time.time()
    report = {"started": datetime.datetime.now().isoformat(timespec="seconds"),
              "command": shlex.join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
              "scale": args.scale, "runs": args.runs, "threads": args.threads,
              "machine": machine_info(), "versions": versions(args), "workloads": []}
    log(f"machine: {report['machine']}")
    log(f"versions: {report['versions']}")
    for name in names:
        try:
            w = run_workload(all_wl[name], args)
        except Exception as e:  # a broken workload is reported; the others still run
            import traceback
            traceback.print_exc()
            w = {"name": name, "title": all_wl[name].title, "describe": all_wl[name].describe(),
                 "raw_bytes": all_wl[name].raw_bytes, "stored_bytes": 0, "floor_s": None,
                 "memory_limit": all_wl[name].memory_limit, "targets_kind": all_wl[name].targets,
                 "tools": {"zshard": {"kind": "zshard", "cmd": "", "runs": [], "ok": False, "wall": float("nan"),
                                      "cpu": float("nan"), "rss_mib": float("nan"),
                                      "problems": [f"harness error: {type(e).__name__}: {e}"]}},
                 "targets": []}
        report["workloads"].append(w)
        print_table(w, args.runs, args.threads)
        sys.stdout.flush()
    growth = [w for w in report["workloads"] if w.get("targets_kind") == "growth"]
    if growth:
        report["growth"] = growth_checks(growth)
        print("\ngrowth (W1 at several sizes, zshard alone):\n" + "\n".join(growth_lines(growth)))
    report["duration_s"] = time.time() - started
    write_markdown(os.path.join(args.workdir, "results.md"), report)
    with open(os.path.join(args.workdir, "results.json"), "w") as fh:
        json.dump(report, fh, indent=1, default=str)
    problems = [(w["name"], k, p) for w in report["workloads"] for k, v in w["tools"].items() for p in v["problems"]]
    missed = [(w["name"], t) for w in report["workloads"] for t, s in w["targets"] if s == "MISSED"]
    missed += [("growth", t) for t, s in report.get("growth", []) if s == "MISSED"]
    print(f"\nresults: {os.path.join(args.workdir, 'results.md')} and results.json "
          f"({report['duration_s']:.0f} s)")
    for wname, tool, prob in problems:
        print(f"PROBLEM {wname} {tool}: {prob}")
    for wname, t in missed:
        print(f"MISSED  {wname}: {t}")
    if problems:
        sys.exit(1)
    if missed and args.strict:
        sys.exit(2)


if __name__ == "__main__":
    main()
