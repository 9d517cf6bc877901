#!/usr/bin/env python3
"""Python stand-in for zshard, built on zarr-python.  NOT the product.

It exists only to check the interop suite itself (that its generators and
checks agree with an implementation of the CLI contract) while the Rust binary
is unavailable, and that the checks catch defects.  Usage (needs the venv):

    PATH="$PWD/target/venv/bin:$PATH" ZSHARD_BIN="$PWD/tests/interop/fake_zshard.py" \
        tests/interop/run.sh

MUT=empty|data|stray|dims injects a defect (stored fill chunks, a wrong
element, a stray file, dropped dimension_names): the suite must then fail.
"""
import sys, argparse, json, os, itertools, math
import numpy as np, zarr
from zarr.codecs import ShardingCodec, BytesCodec, ZstdCodec, GzipCodec, BloscCodec

def die(msg):
    print("error: " + msg, file=sys.stderr); sys.exit(2)

def shp(s, what):
    try: v = tuple(int(x) for x in s.split(","))
    except ValueError: die(f"bad {what}: {s}")
    if any(x <= 0 for x in v): die(f"{what} dims must be > 0: {s}")
    return v

def comp(spec):
    p = spec.split(":")
    try:
        if p[0] == "none" and len(p) == 1: return []
        if p[0] == "zstd" and len(p) == 2: return [ZstdCodec(level=int(p[1]))]
        if p[0] == "gzip" and len(p) == 2: return [GzipCodec(level=int(p[1]))]
        if p[0] == "blosc" and len(p) == 4:
            if p[3] not in ("noshuffle", "shuffle", "bitshuffle"): die(f"bad blosc shuffle {p[3]} in compressor")
            return [BloscCodec(cname=p[1], clevel=int(p[2]), shuffle=p[3])]
    except ValueError: pass
    die(f"bad compressor spec {spec}")

def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("src"); c.add_argument("dst")
    c.add_argument("--shard-shape"); c.add_argument("--chunk-shape")
    c.add_argument("--compressor", default="zstd:3")
    c.add_argument("--index-location", default="end")
    c.add_argument("--threads", type=int); c.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    if a.index_location not in ("start", "end"): die(f"bad index location {a.index_location}")
    codecs = comp(a.compressor)
    shard = shp(a.shard_shape, "shard shape") if a.shard_shape else None
    inner = shp(a.chunk_shape, "chunk shape") if a.chunk_shape else None
    if not os.path.exists(a.src): die(f"no such source {a.src}")
    node = zarr.open(a.src, mode="r")
    if isinstance(node, zarr.Array):
        conv(node, a.dst, "", shard, inner, codecs, a)
    else:
        groups, arrays = [], []
        def walk(path, g):
            groups.append((path, g))
            for name, m in g.members():
                p = f"{path}/{name}" if path else name
                if isinstance(m, zarr.Array): arrays.append((p, m))
                else: walk(p, m)
        walk("", node)
        for p, g in groups:
            zarr.open_group(os.path.join(a.dst, p), mode="w", zarr_format=3, attributes=dict(g.attrs))
        for p, x in arrays:
            conv(x, os.path.join(a.dst, p), p, shard, inner, codecs, a)

def conv(src, dst, name, shard, inner, codecs, a):
    nd = src.ndim
    inner = inner or src.chunks
    if len(inner) != nd: die(f"{name}: --chunk-shape has {len(inner)} dims, array has {nd}")
    if shard is None:
        shard = tuple(min(c * 2, max(c, -(-n // c) * c)) for c, n in zip(inner, src.shape))
    if len(shard) != nd: die(f"{name}: --shard-shape has {len(shard)} dims, array has {nd}")
    if any(s % c for s, c in zip(shard, inner)): die(f"{name}: chunk shape {inner} does not divide shard shape {shard}")
    attrs = dict(src.attrs)
    dims = None if os.environ.get("MUT")=="dims" else src.metadata.dimension_names if src.metadata.zarr_format == 3 else attrs.pop("_ARRAY_DIMENSIONS", None)
    dt = src.dtype.newbyteorder("=")
    fill = src.fill_value if src.fill_value is not None else 0
    sc = ShardingCodec(chunk_shape=inner, codecs=[BytesCodec()] + codecs, index_location=a.index_location)
    out = zarr.create_array(store=dst, shape=src.shape, chunks=shard, serializer=sc, compressors=None, filters=None,
                            dtype=dt, fill_value=fill, attributes=attrs, dimension_names=dims, zarr_format=3, overwrite=True, config={"write_empty_chunks": os.environ.get("MUT")=="empty"})
    grid = [-(-n // s) for n, s in zip(src.shape, shard)]
    for idx in np.ndindex(*grid):
        sl = tuple(slice(i * s, min((i + 1) * s, n)) for i, s, n in zip(idx, shard, src.shape))
        try:
            block = src[sl]
        except Exception as e:
            cs = src.metadata.chunks if src.metadata.zarr_format == 2 else src.metadata.chunk_grid.chunk_shape
            rng = [range(x.start // c, -(-x.stop // c)) for x, c in zip(sl, cs)]
            for cidx in itertools.product(*rng):
                csl = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(cidx, cs, src.shape))
                try: src[csl]
                except Exception:
                    die(f"array {name or src.store_path}: chunk {src.metadata.encode_chunk_key(cidx)}: {e}")
            die(f"array {name}: {e}")
        b = block.astype(dt)
        if os.environ.get("MUT") == "data" and b.size > 3: b.reshape(-1)[3] = b.reshape(-1)[2]
        out[sl] = b
    if os.environ.get("MUT") == "stray": open(os.path.join(dst, "tmp.part"), "w").write("x")

main()
