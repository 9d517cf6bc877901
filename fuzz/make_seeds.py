"""Adds zarr-python v3 seeds to fuzz/corpus/v3_metadata: zarr.json, 0xFF, the first stored chunk
(or shard). Run with the venv that has zarr 3: target/venv/bin/python fuzz/make_seeds.py (and
target/venv-current/bin/python for the zarr-python 3.2+ seeds)"""

import json
import pathlib
import tempfile

import numpy as np
import zarr
from zarr.codecs import (BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec,
                         TransposeCodec, ZstdCodec)

OUT = pathlib.Path(__file__).resolve().parent / "corpus" / "v3_metadata"


def arrays(root):
    g = zarr.open_group(root, mode="w", zarr_format=3)
    a = np.arange(48, dtype="<i4").reshape(6, 8)
    yield g.create_array("plain", shape=(6, 8), chunks=(3, 4), dtype="i4", compressors=None), a
    yield g.create_array("zstd", shape=(6, 8), chunks=(6, 8), dtype="f8",
                         compressors=ZstdCodec(level=3, checksum=True)), a * 0.5
    yield g.create_array("gzip_big", shape=(6, 8), chunks=(6, 8), dtype="u2",
                         serializer=BytesCodec(endian="big"), compressors=GzipCodec(level=5)), a
    yield g.create_array("blosc", shape=(6, 8), chunks=(6, 8), dtype="i2",
                         compressors=BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle")), a
    yield g.create_array("transpose", shape=(6, 8), chunks=(6, 8), dtype="u1",
                         filters=[TransposeCodec(order=(1, 0))], compressors=None), a
    yield g.create_array("sharded", shape=(8, 8), chunks=(2, 4), shards=(8, 8), dtype="i4",
                         compressors=ZstdCodec(level=1)), np.arange(64).reshape(8, 8)
    yield g.create_array("sharded_start", shape=(8,), dtype="f4", fill_value=float("nan"),
                         serializer=ShardingCodec(chunk_shape=(2,), codecs=[BytesCodec(), Crc32cCodec()],
                                                  index_location="start")), np.array([1, 2, np.nan, np.nan, 5, 6, 7, 8])
    yield g.create_array("complex", shape=(4,), chunks=(2,), dtype="c16", fill_value=1 + 2j,
                         compressors=None, dimension_names=["x"]), np.array([1j, 2, 3, 4j])
    yield g.create_array("bools", shape=(5,), chunks=(5,), dtype="bool", compressors=None), np.array([1, 0, 1, 1, 0], bool)
    yield g.create_array("f16", shape=(3,), chunks=(3,), dtype="f2", fill_value="-Infinity",
                         compressors=None), np.array([1, -2, 0.5])
    if tuple(int(p) for p in zarr.__version__.split(".")[:2]) >= (3, 2):
        # zarr-python 3.2+ (target/venv-current): the struct data type, scale_offset and cast_value.
        from zarr.codecs import CastValue, ScaleOffset

        st = np.dtype([("x", "<f4"), ("p", [("a", "u1"), ("b", ">f8")])])
        yield g.create_array("struct", shape=(3,), chunks=(3,), dtype=st, compressors=None,
                             fill_value=np.array((1.5, (2, np.nan)), dtype=st)[()],
                             serializer=BytesCodec(endian="big")), np.zeros(3, dtype=st)
        yield g.create_array("scale_cast", shape=(6,), chunks=(6,), dtype="f8", fill_value=float("nan"),
                             filters=[ScaleOffset(offset=-10, scale=0.1),
                                      CastValue(data_type="uint8", out_of_range="clamp",
                                                scalar_map={"encode": [("NaN", 0)], "decode": [(0, "NaN")]})],
                             compressors=None), np.array([0, 1.5, 2540, np.nan, -1e9, 5])


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp) / "g.zarr"
        for arr, values in arrays(root):
            arr[...] = values
        for node in sorted(p for p in root.iterdir() if p.is_dir()):
            doc = (node / "zarr.json").read_bytes()
            chunks = sorted(p for p in (node / "c").rglob("*") if p.is_file()) if (node / "c").exists() else []
            seed = doc + b"\xff" + (chunks[0].read_bytes() if chunks else b"")
            (OUT / f"zarr-python-{node.name}").write_bytes(seed)
        (OUT / "zarr-python-group").write_bytes((root / "zarr.json").read_bytes())
        zarr.consolidate_metadata(root)
        (OUT / "zarr-python-consolidated").write_bytes((root / "zarr.json").read_bytes())


main()
