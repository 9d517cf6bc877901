"""Writes the pre-final Zarr v3 layout with zarr-python 2.18 (run by its own venv, target/venv-zarr2).

    python draft_writer.py OUT

OUT/src is a hierarchy in the v3 draft layout (`zarr.json` with `metadata_key_suffix`,
`meta/root/...`, `data/root/...`), arrays with and without the draft sharding storage transformer
(`ShardingStorageTransformer`, `chunks_per_shard`). OUT/expected/<n>.npy hold what zarr-python 2.18
itself reads back from OUT/src for each array, and OUT/expected.json the attributes of every node
and which .npy belongs to which array. test_draft_sharding.py compares zshard's output with them.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

# zarr-python 2.18 reads these when it is imported: the v3 API and the sharding transformer.
os.environ["ZARR_V3_EXPERIMENTAL_API"] = "1"
os.environ["ZARR_V3_SHARDING"] = "1"
warnings.simplefilter("ignore", FutureWarning)

import numcodecs  # noqa: E402
import numpy as np  # noqa: E402
import zarr  # noqa: E402
from zarr._storage.v3 import DirectoryStoreV3  # noqa: E402
from zarr._storage.v3_storage_transformers import ShardingStorageTransformer  # noqa: E402


def values(shape, dtype, seed):
    """Deterministic values of every kind, not all equal to the fill value."""
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape, endpoint=True).astype(dtype)
    if kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# path, dtype, shape, chunks, chunks_per_shard (None: no transformer), compressor, fill, order, region
# written (None: all; the rest stays unwritten: missing chunks, missing shards), attributes.
CASES = [
    ("sharded/i4_blosc", "<i4", (10, 7), (3, 2), (2, 2), numcodecs.Blosc("lz4", 5, 1), 5, "C",
     (slice(3, None), slice(None)), {"units": "m", "scale": [1, 2]}),
    ("sharded/f8_zlib_big_endian", ">f8", (25, 13), (4, 5), (3, 2), numcodecs.Zlib(level=6), float("nan"), "C",
     (slice(0, 20), slice(0, 9)), {}),
    ("sharded/u1_uncompressed", "|u1", (9,), (2,), (3,), None, 7, "C", (slice(0, 5),), {}),
    ("sharded/u2_order_f", "<u2", (11, 6), (3, 4), (2, 1), numcodecs.Blosc("zstd", 3, 2), 0, "F", None, {}),
    ("sharded/bool", "|b1", (13,), (4,), (2,), numcodecs.Zlib(level=1), False, "C", None, {}),
    ("sharded/i8_zstd_3d", "<i8", (5, 6, 7), (2, 3, 2), (2, 1, 2), numcodecs.Zstd(level=3), -1, "C",
     (slice(2, None), slice(None), slice(None)), {}),
    ("sharded/c8_gzip", "<c8", (6, 5), (2, 2), (2, 2), numcodecs.GZip(level=4), 0, "C", None, {}),
    ("sharded/zstd3_passthrough", "<u2", (40, 30), (10, 10), (2, 3), numcodecs.Zstd(level=3), 0, "C",
     (slice(10, None), slice(None)), {}),
    ("plain/i2_blosc", "<i2", (17, 9), (5, 4), None, numcodecs.Blosc("lz4", 5, 1), 0, "C", None, {}),
    ("plain/f4_uncompressed", "<f4", (7, 3), (3, 3), None, None, 1.5, "C", (slice(0, 3), slice(None)), {}),
    ("plain/u4_zlib_dot_separator", "<u4", (8, 8), (3, 5), None, numcodecs.Zlib(level=1), 3, "C", None, {}),
    ("nested/a/b/deep", "<f8", (6,), (4,), (1,), numcodecs.Blosc("zlib", 1, 0), 0.0, "C", None, {"deep": True}),
    ("plain/i4_delta_filter", "<i4", (12, 4), (5, 4), (2, 1), numcodecs.Zlib(level=2), 0, "C", None, {"f": 1}),
]

# Filters (zarr-python 2.18 keeps them in `attributes.filters` of the array document).
FILTERS = {"plain/i4_delta_filter": [numcodecs.Delta(dtype="<i4")]}

GROUPS = {"": {"title": "draft layout"}, "nested": {"level": 1}, "nested/a/b": {"level": 3}}


def write(src):
    store = DirectoryStoreV3(src)
    for path, attrs in GROUPS.items():
        g = zarr.group(store=store, path=path, zarr_version=3) if path else zarr.group(store=store, zarr_version=3)
        g.attrs.update(attrs)
    for n, (path, dtype, shape, chunks, per_shard, compressor, fill, order, region, attrs) in enumerate(CASES):
        transformers = [] if per_shard is None else [ShardingStorageTransformer("indexed", per_shard)]
        a = zarr.create(shape=shape, chunks=chunks, dtype=dtype, store=store, path=path, zarr_version=3,
                        storage_transformers=transformers, compressor=compressor, filters=FILTERS.get(path), fill_value=fill, order=order,
                        dimension_separator="." if "dot_separator" in path else "/",
                        write_empty_chunks=False)
        data = values(shape, dtype, n)
        a[region if region is not None else ...] = data[region if region is not None else ...]
        a.attrs.update(attrs)


def read_back(src, out):
    """What zarr-python 2.18 reads from the hierarchy it wrote."""
    store = DirectoryStoreV3(src)
    root = zarr.open_group(store=store, mode="r", zarr_version=3)
    expected = {"arrays": {}, "groups": {}}
    for n, case in enumerate(CASES):
        a = root[case[0]]
        np.save(os.path.join(out, "expected", f"{n}.npy"), a[...])
        attrs = dict(a.attrs)
        attrs.pop("filters", None)
        expected["arrays"][case[0]] = {"npy": f"{n}.npy", "attributes": attrs, "fill_value": repr(a.fill_value),
                                       "chunks_per_shard": case[4], "chunks": list(a.chunks)}
    for path in list(GROUPS) + ["nested/a", "sharded", "plain"]:
        expected["groups"][path] = dict((root[path] if path else root).attrs)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


def main():
    out = sys.argv[1]
    os.makedirs(os.path.join(out, "expected"), exist_ok=True)
    src = os.path.join(out, "src")
    write(src)
    read_back(src, out)


if __name__ == "__main__":
    main()
