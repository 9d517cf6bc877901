"""Issue 18, points 1 and 4: converting part of a hierarchy, `zshard ls`, and `--compressor source`.

Sources are written by zarr-python (v2 groups with attributes, a v3 sharded array, v2 arrays with blosc
and with a delta filter) and by h5py + kerchunk; outputs are read back with zarr-python (and
tensorstore where it reads the codecs) and compared element by element with what was written.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numcodecs
import numpy as np
import pytest
import zarr
from kerchunk import hdf as kerchunk_hdf

from conftest import assert_readback, parse_shard_index, run_zshard

# path -> (shape, chunks) of the hierarchy; groups a, a/deep and b have attributes.
ARRAYS = {
    "a/x": ((30, 40), (10, 15)),
    "a/y": ((25,), (7,)),
    "a/skip": ((10, 10), (5, 5)),
    "a/deep/z": ((8, 8), (4, 4)),
    "b/w": ((12,), (5,)),
    "top": ((5, 5), (5, 5)),
}
GROUP_ATTRS = {"": {"title": "root"}, "a": {"level": "a"}, "a/deep": {"level": "deep"}, "b": {"level": "b"}}


def ok(zshard_bin: Path, *args) -> str:
    r = run_zshard(zshard_bin, list(args))
    assert r.returncode == 0, r.describe()
    return r.stdout


def make_hierarchy(path: Path) -> dict[str, np.ndarray]:
    """A Zarr v2 hierarchy written by zarr-python; returns each array's values."""
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    groups = {"": root}
    for name in ("a", "a/deep", "b"):
        parent, _, leaf = name.rpartition("/")
        groups[name] = groups[parent].create_group(leaf)
    for name, attrs in GROUP_ATTRS.items():
        groups[name].attrs.update(attrs)
    values = {}
    for i, (name, (shape, chunks)) in enumerate(ARRAYS.items()):
        parent, _, leaf = name.rpartition("/")
        data = (np.arange(int(np.prod(shape)), dtype="int32").reshape(shape) * (i + 2)) - 7
        z = groups[parent].create_array(leaf, shape=shape, chunks=chunks, dtype="int32", fill_value=0)
        z[:] = data
        z.attrs["name"] = name
        values[name] = data
    return values


def test_include_exclude_keeps_a_valid_hierarchy(zshard_bin, tmp_path):
    """`a/*` matches a/x, a/y, a/skip and the group a/deep (so a/deep/z); `*/skip` drops a/skip."""
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    values = make_hierarchy(src)
    ok(zshard_bin, "convert", src, dst, "--quiet", "--include", "a/*", "--exclude", "*/skip")

    kept_arrays = ["a/deep/z", "a/x", "a/y"]
    documents = sorted(str(p.relative_to(dst)) for p in dst.rglob("zarr.json"))
    assert documents == ["a/deep/z/zarr.json", "a/deep/zarr.json", "a/x/zarr.json", "a/y/zarr.json",
                         "a/zarr.json", "zarr.json"]
    assert sorted(p.name for p in dst.iterdir()) == ["a", "zarr.json"]
    assert sorted(p.name for p in (dst / "a").iterdir()) == ["deep", "x", "y", "zarr.json"]

    root = zarr.open_group(str(dst), mode="r", use_consolidated=False)
    for group in ("", "a", "a/deep"):
        node = root[group] if group else root
        assert dict(node.attrs) == GROUP_ATTRS[group], group
    for name in kept_arrays:
        # The source's attributes, and the `_FillValue` xarray masks a v2 array by (docs/formats.md: xarray).
        assert dict(root[name].attrs) == {"name": name, "_FillValue": 0}
        np.testing.assert_array_equal(root[name][...], values[name], err_msg=name)
        assert_readback(dst / name, values[name])

    consolidated = zarr.open_consolidated(str(dst), mode="r")
    listed = sorted(path for path, _ in consolidated.members(max_depth=None))
    assert listed == ["a", "a/deep", "a/deep/z", "a/x", "a/y"]
    # The consolidated documents are the written ones (groups' entries also carry an empty
    # `consolidated_metadata`, as zarr-python writes them).
    entries = json.loads((dst / "zarr.json").read_text())["consolidated_metadata"]["metadata"]
    assert sorted(entries) == listed
    for name, entry in entries.items():
        entry.pop("consolidated_metadata", None)
        assert entry == json.loads((dst / name / "zarr.json").read_text()), name


def test_a_group_path_selects_its_arrays_and_verify_follows_the_selection(zshard_bin, tmp_path):
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    values = make_hierarchy(src)
    ok(zshard_bin, "convert", src, dst, "--quiet", "--include", "a/deep", "--include", "b")
    root = zarr.open_consolidated(str(dst), mode="r")
    assert sorted(path for path, _ in root.members(max_depth=None)) == ["a", "a/deep", "a/deep/z", "b", "b/w"]
    assert dict(root["a/deep"].attrs) == GROUP_ATTRS["a/deep"]
    for name in ("a/deep/z", "b/w"):
        np.testing.assert_array_equal(root[name][...], values[name], err_msg=name)
    out = run_zshard(zshard_bin, ["verify", src, dst, "--include", "a/deep", "--include", "b"])
    assert out.returncode == 0, out.describe()
    assert "in 2 array(s)" in out.stderr
    # Without the selection, the arrays left out are missing from the output.
    out = run_zshard(zshard_bin, ["verify", src, dst, "--quiet"])
    assert out.returncode == 1, out.describe()
    assert "zshard: mismatch: array a/x: missing from" in out.stderr


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--include", "c/*"], 'zshard: error: --include "c/*" matches no array of'),
        (["--exclude", "*/skp"], 'zshard: error: --exclude "*/skp" matches no array of'),
        (["--include", "top", "--exclude", "top"], "leave no array of"),
    ],
)
def test_a_pattern_that_selects_nothing_is_refused(zshard_bin, tmp_path, flags, message):
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    make_hierarchy(src)
    r = run_zshard(zshard_bin, ["convert", src, dst, "--quiet", *flags])
    assert r.returncode == 1, r.describe()
    assert message in r.stderr, r.describe()
    assert not dst.exists() or not any(dst.rglob("zarr.json"))


# --------------------------------------------------------------------------
# zshard ls
# --------------------------------------------------------------------------


def test_ls_v2_v3_sharded_and_kerchunk(zshard_bin, tmp_path):
    v2 = tmp_path / "v2.zarr"
    a = zarr.create_array(str(v2), shape=(100, 60), chunks=(10, 20), dtype="float32", fill_value=0, zarr_format=2,
                          compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE))
    a[:] = 1
    sharded = tmp_path / "sharded.zarr"
    root = zarr.open_group(str(sharded), mode="w")
    s = root.create_array("img/level0", shape=(64, 64), chunks=(8, 8), shards=(32, 32), dtype="uint16",
                          fill_value=0, compressors=zarr.codecs.ZstdCodec(level=1))
    s[:] = 2
    h5 = tmp_path / "data.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("temp", data=np.arange(120, dtype="float64").reshape(10, 12), chunks=(5, 6),
                         compression="gzip")
    with open(h5, "rb") as fh:
        refs = kerchunk_hdf.SingleHdf5ToZarr(fh, url=str(h5), inline_threshold=0).translate()
    refs_path = tmp_path / "refs.json"
    refs_path.write_text(json.dumps(refs))

    assert ok(zshard_bin, "ls", v2).splitlines() == [
        "PATH  DTYPE    SHAPE   CHUNKS  SHARDS  CODECS",
        ".     float32  100x60  10x20   -       bytes(endian=little) -> "
        "blosc(cname=lz4, clevel=5, shuffle=shuffle, typesize=4, blocksize=0)",
    ]
    assert ok(zshard_bin, "ls", sharded).splitlines() == [
        "PATH        DTYPE   SHAPE  CHUNKS  SHARDS  CODECS",
        "img/level0  uint16  64x64  8x8     32x32   bytes(endian=little) -> zstd(level=1, checksum=false)",
    ]
    assert ok(zshard_bin, "ls", refs_path).splitlines() == [
        "PATH  DTYPE    SHAPE  CHUNKS  SHARDS  CODECS",
        "temp  float64  10x12  5x6     -       bytes(endian=little) -> numcodecs.zlib(level=4)",
    ]

    listing = json.loads(ok(zshard_bin, "ls", sharded, "--json"))
    assert listing["groups"] == ["", "img"]
    assert listing["arrays"] == [{
        "path": "img/level0", "shape": [64, 64], "data_type": "uint16", "chunk_shape": [8, 8],
        "shard_shape": [32, 32],
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "zstd", "configuration": {"level": 1, "checksum": False}}],
    }]
    listing = json.loads(ok(zshard_bin, "ls", refs_path, "--json"))
    assert [(a["path"], a["shape"], a["data_type"], a["chunk_shape"], a["shard_shape"]) for a in listing["arrays"]] \
        == [("temp", [10, 12], "float64", [5, 6], None)]
    assert [c["name"] for c in listing["arrays"][0]["codecs"]] == ["bytes", "numcodecs.zlib"]


def test_ls_applies_the_selection(zshard_bin, tmp_path):
    src = tmp_path / "src.zarr"
    make_hierarchy(src)
    paths = [line.split()[0] for line in ok(zshard_bin, "ls", src, "--include", "a/**", "--exclude", "*/skip")
             .splitlines()[1:]]
    assert sorted(paths) == ["a/deep/z", "a/x", "a/y"]


# --------------------------------------------------------------------------
# --compressor source
# --------------------------------------------------------------------------

SHAPE, CHUNKS, SHARD = (230, 170), (20, 30), (60, 90)


def test_compressor_source_keeps_blosc_and_copies_chunks(zshard_bin, tmp_path):
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    data = (np.arange(SHAPE[0] * SHAPE[1]) % 977).astype("float32").reshape(SHAPE)
    a = zarr.create_array(str(src), shape=SHAPE, chunks=CHUNKS, dtype="float32", fill_value=0, zarr_format=2,
                          compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE))
    a[:] = data
    shapes = ["--shard-shape", f"{SHARD[0]},{SHARD[1]}"]
    plan = json.loads(ok(zshard_bin, "plan", src, dst, "--compressor", "source", "--json", *shapes))
    (array,) = plan["arrays"]
    assert array["passthrough"] is True
    assert array["compressor_fallback"] is None
    assert array["output_codecs"] == array["source_codecs"]
    text = ok(zshard_bin, "plan", src, dst, "--compressor", "source", *shapes)
    assert "  passthrough    source chunks are copied into the shards without decoding" in text.splitlines()

    ok(zshard_bin, "convert", src, dst, "--quiet", "--compressor", "source", *shapes)
    meta = json.loads((dst / "zarr.json").read_text())
    inner = meta["codecs"][0]["configuration"]["codecs"]
    assert inner == [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4,
                                             "blocksize": 0}},
    ]
    assert_readback(dst, data)
    # Passthrough: the first shard's first inner chunk is the source's chunk 0.0, byte for byte.
    blob = (dst / "c" / "0" / "0").read_bytes()
    entries, _ = parse_shard_index(blob, (SHARD[0] // CHUNKS[0]) * (SHARD[1] // CHUNKS[1]), "end")
    offset, length = entries[0]
    assert blob[offset:offset + length] == (src / "0.0").read_bytes()


def test_compressor_source_falls_back_where_there_is_no_v3_form(zshard_bin, tmp_path):
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    data = np.arange(50, dtype="int32") * 3 - 20
    a = zarr.create_array(str(src), shape=(50,), chunks=(10,), dtype="int32", fill_value=0, zarr_format=2,
                          filters=[numcodecs.Delta(dtype="<i4")], compressors=numcodecs.Zstd(level=1))
    a[:] = data
    why = ("the source's codecs are not a valid Zarr v3 chain (numcodecs.delta follows bytes (a Zarr v2 filter): "
           "Zarr v3 readers take it only before bytes); written with the default zstd:3 instead")
    plan = json.loads(ok(zshard_bin, "plan", src, dst, "--compressor", "source", "--json"))
    assert plan["arrays"][0]["compressor_fallback"] == why
    assert plan["arrays"][0]["passthrough"] is False
    text = ok(zshard_bin, "plan", src, dst, "--compressor", "source")
    assert f"  compressor     {why}" in text.splitlines()

    r = run_zshard(zshard_bin, ["convert", src, dst, "--quiet", "--compressor", "source"])
    assert r.returncode == 0, r.describe()
    assert f"zshard: warning: array {src}: {why}" in r.stderr, r.describe()
    inner = json.loads((dst / "zarr.json").read_text())["codecs"][0]["configuration"]["codecs"]
    assert inner == [{"name": "bytes", "configuration": {"endian": "little"}},
                     {"name": "zstd", "configuration": {"level": 3, "checksum": False}}]
    assert_readback(dst, data)
