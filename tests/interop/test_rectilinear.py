"""Sources on zarr-extensions' `rectilinear` chunk grid, and sharded sources whose inner chunks are stored
out of order (issue 33, step 3).

The producer is zarr-python >= 3.2 (today's stack: 3.4 on Python 3.13), with rectilinear chunks switched on:
it writes the grid's edge lists, run-length pairs (`[edge, count]`) where they are shorter and bare integers
for dimensions of equal chunks. Each source is converted into regular shards of shapes chosen so that shard
and inner chunk boundaries fall inside source chunks, and read back with zarr-python, tensorstore and xarray;
every element is compared with the source as zarr-python reads it and with the numpy array it was made from.
On the Python 3.11 stack (zarr-python 3.1, no rectilinear grids) those tests are skipped.
"""

from __future__ import annotations

import json
import random
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import (
    assert_readback,
    assert_same,
    convert_ok,
    crc32c,
    load_json,
    parse_shard_index,
    run_zshard,
    shape_arg,
)

zarr = pytest.importorskip("zarr")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:2] if p.isdigit())


# Rectilinear grids need zarr-python 3.2+; the unordered shards at the end run on every stack.
needs_rectilinear = pytest.mark.skipif(
    _version(zarr.__version__) < (3, 2),
    reason=f"zarr-python {zarr.__version__} writes no rectilinear chunk grids (3.2+; today's stack on Python 3.13)",
)

from zarr.codecs import BloscCodec, ZstdCodec  # noqa: E402


def _rectilinear(path: Path, data: np.ndarray, chunks, **kwargs):
    """A zarr-python array at `path` on the rectilinear grid `chunks` (per dimension: edges, or a bare step)."""
    with zarr.config.set({"array.rectilinear_chunks": True}):
        z = zarr.create_array(str(path), shape=data.shape, dtype=data.dtype, chunks=chunks, overwrite=True, **kwargs)
        z[...] = data
    return z


def _grid(path: Path) -> dict:
    return load_json(path / "zarr.json")["chunk_grid"]


def _read_source(path: Path) -> np.ndarray:
    with zarr.config.set({"array.rectilinear_chunks": True}):
        return zarr.open_array(str(path), mode="r")[...]


def _convert_and_check(zshard_bin: Path, src: Path, dst: Path, expected: np.ndarray, shard, inner) -> dict:
    """Converts `src` into shards of `shard` with inner chunks of `inner` and checks every element."""
    assert_same(_read_source(src), expected, f"zarr-python read of the source {src}")
    convert_ok(zshard_bin, src, dst, "--quiet", "--shard-shape", shape_arg(shard), "--chunk-shape", shape_arg(inner))
    meta = load_json(dst / "zarr.json")
    assert meta["chunk_grid"] == {"name": "regular", "configuration": {"chunk_shape": list(shard)}}
    assert meta["codecs"][0]["configuration"]["chunk_shape"] == list(inner)
    assert_readback(dst, expected)
    return meta


# (name, shape, chunks as zarr-python takes them, the grid's chunk_shapes zarr-python writes, shard, inner)
CASES = [
    # Months of 28 to 31 days along time, a bare step along the other axis; edge chunk of 5 rows of 2.
    (
        "months_2d",
        (130, 10),
        [[31, 28, 31, 30, 5, 5], 4],
        [[31, 28, 31, 30, [5, 2]], 4],
        (40, 6),
        (20, 3),
    ),
    # Boundary-padded tiles: thin edges around run-length interiors, in three dimensions; shards of 25 x 7 x 9
    # cut every source chunk.
    (
        "padded_3d",
        (52, 23, 17),
        [[1, 25, 25, 1], [3, 6, 6, 6, 2], [2, 5, 5, 5]],
        [[1, [25, 2], 1], [3, [6, 3], 2], [2, [5, 3]]],
        (25, 7, 9),
        (5, 7, 3),
    ),
    # One run-length pair per dimension but unequal last edges: every chunk of the last row and column is
    # an irregular edge chunk; shard and inner chunk larger than any source chunk.
    (
        "edges_2d",
        (29, 31),
        [[4, 4, 4, 4, 4, 4, 4, 1], [7, 7, 7, 7, 3]],
        [[[4, 7], 1], [[7, 4], 3]],
        (16, 31),
        (8, 31),
    ),
]

COMPRESSORS = {
    "uncompressed": dict(compressors=None),
    "zstd": dict(compressors=[ZstdCodec(level=3)]),
    "blosc": dict(compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")]),
}


@needs_rectilinear
@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rectilinear_source_reassembles_into_any_regular_shards(tmp_path: Path, zshard_bin: Path, case, compressor) -> None:
    name, shape, chunks, chunk_shapes, shard, inner = case
    rng = np.random.default_rng(33)
    data = rng.integers(-(2**30), 2**30, size=shape, dtype="int32")
    src = tmp_path / f"{name}.zarr"
    _rectilinear(src, data, chunks, **COMPRESSORS[compressor])
    # The grid as zarr-python wrote it: run-length pairs and bare steps included.
    assert _grid(src) == {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": chunk_shapes}}
    _convert_and_check(zshard_bin, src, tmp_path / "out.zarr", data, shard, inner)
    # The shapes zshard chooses itself: the largest source chunk as the inner chunk.
    auto = tmp_path / "auto.zarr"
    convert_ok(zshard_bin, src, auto, "--quiet")
    assert_readback(auto, data)


@needs_rectilinear
def test_missing_chunks_overhang_and_fill_value(tmp_path: Path, zshard_bin: Path) -> None:
    """Chunks never written read as the fill value (NaN), and a grid shrunk by `resize` keeps edges that
    overhang the array by whole chunks, which zshard must not read past."""
    shape = (45, 40)
    data = np.full(shape, np.nan, dtype="float64")
    src = tmp_path / "sparse.zarr"
    with zarr.config.set({"array.rectilinear_chunks": True}):
        z = zarr.create_array(
            str(src), shape=(60, 40), dtype="float64", chunks=[[10, 20, 20, 10], [15, 15, 10]], fill_value=np.nan
        )
        z[12:33, 14:31] = np.arange(21 * 17, dtype="float64").reshape(21, 17)
        z.resize(shape)
    data[12:33, 14:31] = np.arange(21 * 17, dtype="float64").reshape(21, 17)
    grid = _grid(src)["configuration"]["chunk_shapes"]
    assert sum(e if isinstance(e, int) else e[0] * e[1] for e in grid[0]) > shape[0], grid
    assert not (src / "c" / "0" / "0").exists(), "a chunk that holds only the fill value was written"
    _convert_and_check(zshard_bin, src, tmp_path / "out.zarr", data, (24, 16), (8, 8))


def _plan_json(zshard_bin: Path, src: Path, dst: Path, *opts) -> dict:
    r = run_zshard(zshard_bin, ["plan", src, dst, "--json", *opts])
    assert r.returncode == 0, r.describe()
    return json.loads(r.stdout)


def _worst_footprint(edges: list[int], shard: int, part: int, extent: int) -> int:
    """Rows of the decoded source chunks (edges `edges`) that the worst part of `part` rows meets, parts
    cut from shards of `shard` rows."""
    bounds = np.cumsum([0, *edges])
    worst = 0
    for start in range(0, extent, shard):
        for p in range(start, min(start + shard, extent), part):
            end = min(p + part, extent)
            met = [i for i in range(len(edges)) if bounds[i] < end and bounds[i + 1] > p]
            worst = max(worst, sum(edges[i] for i in met))
    return worst


@needs_rectilinear
def test_plan_shows_the_rectilinear_grid_and_sizes_memory_by_its_worst_part(tmp_path: Path, zshard_bin: Path) -> None:
    """`plan` names a rectilinear grid by its chunks and the range of its edges, not by one chunk shape
    as if it were regular, and its memory estimate covers the decoded source chunks the worst part meets.
    Edges of 280 to 310 rows do not line up with shards of 620 rows: the first shard's part meets 900 rows
    of source chunks, where the regular grid of the largest chunk (310 rows) meets 620."""
    edges, shape = [310, 280, 310, 300], (1200, 100)
    src, twin, dst = tmp_path / "months.zarr", tmp_path / "regular.zarr", tmp_path / "out.zarr"
    with zarr.config.set({"array.rectilinear_chunks": True}):
        zarr.create_array(str(src), shape=shape, dtype="float64", chunks=[edges, 100])
    zarr.create_array(str(twin), shape=shape, dtype="float64", chunks=(310, 100))
    assert _grid(src)["configuration"]["chunk_shapes"] == [edges, 100]
    opts = ["--shard-shape", "620,100", "--chunk-shape", "310,100", "--threads", "1"]

    r = run_zshard(zshard_bin, ["plan", src, dst, *opts])
    assert r.returncode == 0, r.describe()
    assert "  source chunks  rectilinear grid of 4 x 1 = 4 chunk(s), edges 280..310 x 100 (largest chunk 310 x 100):" in r.stdout, r.stdout

    planned = _plan_json(zshard_bin, src, dst, *opts)["arrays"][0]
    regular = _plan_json(zshard_bin, twin, dst, *opts)["arrays"][0]
    assert planned["source_chunk_grid"] == {
        "name": "rectilinear", "chunks": [4, 1], "smallest_chunk": [280, 100], "largest_chunk": [310, 100],
    }, planned
    assert regular["source_chunk_grid"] is None, regular
    assert planned["source_chunks"] == 4 and planned["parts_per_shard"] == regular["parts_per_shard"] == 1
    # One shard is one part: the worst part meets 900 rows here, 620 on the regular grid.
    worst = _worst_footprint(edges, 620, 620, shape[0])
    assert (worst, _worst_footprint([310] * 4, 620, 620, shape[0])) == (900, 620)
    extra = (worst - 620) * shape[1] * 8
    assert planned["estimated_peak_memory_per_worker"] >= regular["estimated_peak_memory_per_worker"] + extra, (
        planned["estimated_peak_memory_per_worker"], regular["estimated_peak_memory_per_worker"], extra)


@needs_rectilinear
def test_rectilinear_shards_are_read_by_inner_chunk(tmp_path: Path, zshard_bin: Path) -> None:
    """zarr-python's shards on a rectilinear grid (edges multiples of the regular inner chunk), both into
    other shapes and into the same inner chunks."""
    shape = (130, 22)
    data = np.arange(np.prod(shape), dtype="uint16").reshape(shape)
    src = tmp_path / "sharded.zarr"
    _rectilinear(src, data, (10, 2), shards=[[30, 40, 60], [6, 4, 4, 8]], compressors=[ZstdCodec(level=1)])
    assert _grid(src)["configuration"]["chunk_shapes"] == [[30, 40, 60], [6, [4, 2], 8]]
    _convert_and_check(zshard_bin, src, tmp_path / "out.zarr", data, (45, 11), (15, 11))
    # Inner chunks kept as they are: the source's own inner chunks become the output's.
    same = tmp_path / "same.zarr"
    r = convert_ok(zshard_bin, src, same, "--quiet", "--shard-shape", "20,10", "--chunk-shape", "10,2", "--compressor", "source")
    assert_readback(same, data)
    assert r.returncode == 0


@needs_rectilinear
def test_xarray_reads_the_converted_dataset(tmp_path: Path, zshard_bin: Path) -> None:
    """A group of named arrays on rectilinear grids, converted as a whole: xarray reads every variable
    of the output with the source's values (as zarr-python reads them)."""
    xr = pytest.importorskip("xarray")
    src = tmp_path / "ds.zarr"
    days = 31 + 28 + 31 + 30 + 31 + 30
    rng = np.random.default_rng(5)
    t2m = rng.normal(280, 5, size=(days, 12, 9)).astype("float32")
    time = np.arange(days, dtype="int64")
    with zarr.config.set({"array.rectilinear_chunks": True}):
        group = zarr.open_group(str(src), mode="w")
        a = group.create_array(
            "t2m", shape=t2m.shape, dtype=t2m.dtype, chunks=[[31, 28, 31, 30, 31, 30], [5, 5, 2], 9],
            dimension_names=("time", "lat", "lon"), fill_value=np.nan,
        )
        a[...] = t2m
        t = group.create_array("time", shape=time.shape, dtype=time.dtype, chunks=[[31, 28, 31, 30, 31, 30]], dimension_names=("time",))
        t[...] = time
    dst = tmp_path / "out.zarr"
    convert_ok(zshard_bin, src, dst, "--quiet", "--shard-shape", "time=45", "--chunk-shape", "time=15")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_zarr(str(dst), consolidated=False, zarr_format=3).load()
    assert_same(ds["t2m"].values, t2m, "xarray read of t2m")
    assert_same(ds["time"].values, time, "xarray read of time")
    assert ds["t2m"].dims == ("time", "lat", "lon")
    with zarr.config.set({"array.rectilinear_chunks": True}):
        source = zarr.open_group(str(src), mode="r")
        assert_same(ds["t2m"].values, source["t2m"][...], "xarray read against zarr-python's of the source")


@needs_rectilinear
def test_bad_rectilinear_metadata_is_refused_with_the_array_path(tmp_path: Path, zshard_bin: Path) -> None:
    src = tmp_path / "bad.zarr"
    data = np.arange(20, dtype="int8").reshape(4, 5)
    _rectilinear(src, data, [[1, 3], [2, 3]])
    meta = load_json(src / "zarr.json")
    for chunk_shapes, reason in [
        ([[1, 2], [2, 3]], "rectilinear chunk_shapes[0]: the edges sum to 3, less than the array's extent 4 in dimension 0"),
        ([[1, 0, 3], [2, 3]], "rectilinear chunk_shapes[0][1] is 0, expected a positive integer"),
        ([[[2, -2]], [2, 3]], "rectilinear chunk_shapes[0][0][1] (a count) is -2, expected a positive integer"),
        ([[1, 3]], "rectilinear chunk_shapes has 1 entries, the array has 2 dimensions"),
    ]:
        meta["chunk_grid"]["configuration"]["chunk_shapes"] = chunk_shapes
        (src / "zarr.json").write_text(json.dumps(meta))
        r = run_zshard(zshard_bin, ["convert", src, tmp_path / "never.zarr", "--quiet"])
        assert r.returncode != 0, r.describe()
        assert "bad.zarr/zarr.json" in r.stderr and reason in r.stderr, r.describe()
        assert "panicked" not in r.stderr, r.describe()
        assert not (tmp_path / "never.zarr").exists()


# --------------------------------------------------------------------------
# sharded sources with inner chunks out of order
# --------------------------------------------------------------------------


def _shuffle_shard(path: Path, n_inner: int, rng: random.Random) -> list[int]:
    """Rewrites the shard at `path` (index at the end, CRC32C) with its inner chunks in a random order,
    separated by gaps of junk bytes, and returns the new offsets in index order."""
    blob = path.read_bytes()
    entries, (start, _) = parse_shard_index(blob, n_inner, "end")
    stored = [i for i, (off, n) in enumerate(entries) if off != 2**64 - 1]
    order = stored[:]
    while len(order) > 1 and order == sorted(order):
        rng.shuffle(order)
    body = bytearray(rng.randbytes(7))
    new = list(entries)
    for i in order:
        off, n = entries[i]
        new[i] = (len(body), n)
        body += blob[off : off + n] + rng.randbytes(rng.randint(1, 13))
    index = b"".join(struct.pack("<QQ", *e) for e in new)
    path.write_bytes(bytes(body) + index + struct.pack("<I", crc32c(index)))
    return [new[i][0] for i in stored]


def test_sharded_source_with_unordered_inner_chunks(tmp_path: Path, zshard_bin: Path) -> None:
    shape = (37, 26)
    data = np.arange(np.prod(shape), dtype="float32").reshape(shape) * 0.5
    data[:8, :] = 0  # inner chunks of fill value only are absent from the index
    src = tmp_path / "unordered.zarr"
    z = zarr.create_array(str(src), shape=shape, dtype=data.dtype, shards=(16, 12), chunks=(4, 3), compressors=[ZstdCodec(level=1)])
    z[...] = data
    rng = random.Random(33)
    shards = sorted((src / "c").rglob("*"))
    shards = [s for s in shards if s.is_file()]
    assert len(shards) == 9
    for shard in shards:
        offsets = _shuffle_shard(shard, 16, rng)
        assert offsets != sorted(offsets), f"{shard}: inner chunks still in order"
    # zarr-python reads the rewritten shards as before: they are valid.
    assert_same(zarr.open_array(str(src), mode="r")[...], data, "zarr-python read of the unordered shards")
    for i, (shard, inner) in enumerate([((20, 13), (5, 13)), ((16, 12), (4, 3))]):
        dst = tmp_path / f"out{i}.zarr"
        convert_ok(zshard_bin, src, dst, "--quiet", "--shard-shape", shape_arg(shard), "--chunk-shape", shape_arg(inner))
        assert_readback(dst, data)


@needs_rectilinear
def test_rectilinear_array_of_an_icechunk_repository(tmp_path: Path, zshard_bin: Path) -> None:
    """Icechunk 2 stores zarr-python's rectilinear arrays as they are: zshard reads them from the repository."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    data = (np.arange(50 * 7, dtype="int16").reshape(50, 7) * 3) - 400
    with zarr.config.set({"array.rectilinear_chunks": True}):
        group = zarr.open_group(session.store, mode="w")
        a = group.create_array("x", shape=data.shape, dtype=data.dtype, chunks=[[10, 25, 15], [3, 4]])
        a[...] = data
        assert a.metadata.to_dict()["chunk_grid"]["name"] == "rectilinear"
    session.commit("rectilinear")
    dst = tmp_path / "out.zarr"
    convert_ok(zshard_bin, tmp_path / "repo", dst, "--quiet", "--shard-shape", "20,7", "--chunk-shape", "10,7")
    assert_readback(dst / "x", data)
