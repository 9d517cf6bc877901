"""N5 containers as zshard input (issue 16, point 4).

Every dataset is written by tensorstore's `n5` driver (each compression it writes, several data
types, 1-D/2-D/3-D, shapes that are not multiples of the block size, blocks never written so they
are missing), inside groups whose `attributes.json` is written by hand as n5-java would (tensorstore
writes no group documents). tensorstore stores edge blocks at the full block size; n5-java stores
them with their actual extents, so the edge blocks of the datasets whose compression Python's
standard library writes are rewritten that way (and tensorstore must still read the same values).
The container is converted with the real `zshard convert`; each output array is read back with
zarr-python and tensorstore's zarr3 driver and compared element by element with what tensorstore's
n5 driver reads from the source.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import zlib
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

from conftest import assert_readback, run_zshard

# path -> (tensorstore n5 compression, dtype, shape, blockSize)
COMPRESSIONS = {
    "comp/raw": ({"type": "raw"}, "uint8", [37, 23], [8, 5]),
    "comp/gzip": ({"type": "gzip", "level": 5}, "int16", [37, 23], [8, 5]),
    "comp/zlib": ({"type": "gzip", "useZlib": True}, "uint32", [37, 23], [8, 5]),
    "comp/bzip2": ({"type": "bzip2", "blockSize": 9}, "float32", [37, 23], [8, 5]),
    "comp/blosc_lz4": ({"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}, "float64", [37, 23], [8, 5]),
    "comp/blosc_zstd": ({"type": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2}, "int64", [37, 23], [8, 5]),
    "comp/xz": ({"type": "xz", "preset": 6}, "uint16", [37, 23], [8, 5]),
    "comp/zstd": ({"type": "zstd", "level": 3}, "int32", [37, 23], [8, 5]),
}
DTYPES = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float32", "float64"]
# 3-D datasets of every data type (gzip), edge blocks along every axis.
VOLUMES = {f"volumes/{dt}": ({"type": "gzip"}, dt, [9, 10, 11], [4, 3, 5]) for dt in DTYPES}
OTHERS = {
    "line": ({"type": "zstd"}, "float32", [100], [16]),
    # Only two regions are written: the other blocks are never stored and read as 0.
    "sparse": ({"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}, "uint16", [30, 40], [7, 9]),
}
DATASETS = {**COMPRESSIONS, **VOLUMES, **OTHERS}

ROOT_ATTRS = {"n5": "4.0.0", "title": "n5 interop", "scales": [1, 2, 4]}
GROUP_ATTRS = {"comp": {"description": "one dataset per compression"}}
DATASET_ATTRS = {"comp/gzip": {"resolution": [4.0, 4.0], "units": ["nm", "nm"]}}


def _values(dtype: str, shape: list[int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return (rng.normal(size=shape) * 1e3).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


def _n5_spec(path: Path) -> dict:
    return {"driver": "n5", "kvstore": {"driver": "file", "path": str(path)}}


def _write_dataset(root: Path, name: str, seed: int) -> None:
    compression, dtype, shape, block = DATASETS[name]
    spec = _n5_spec(root / name)
    spec["metadata"] = {"dimensions": shape, "blockSize": block, "dataType": dtype, "compression": compression}
    arr = ts.open(spec, create=True).result()
    values = _values(dtype, shape, seed)
    if name == "sparse":
        arr[2:9, 0:9] = values[2:9, 0:9]
        arr[21:30, 30:40] = values[21:30, 30:40]
    else:
        arr[...] = values


def _write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


# Compressions whose edge blocks are rewritten with their actual extents: (decompress, compress).
CODECS = {
    "raw": (bytes, bytes),
    "gzip": (gzip.decompress, gzip.compress),
    "zlib": (zlib.decompress, zlib.compress),
    "bzip2": (bz2.decompress, bz2.compress),
    "xz": (lzma.decompress, lzma.compress),
}


def _codec_name(compression: dict) -> str:
    return "zlib" if compression.get("useZlib") else compression["type"]


def _crop_edge_blocks(root: Path, name: str) -> int:
    """Rewrites every edge block of `name` as n5-java writes it: header extents = the part inside
    the dataset, payload = only those elements (first axis fastest). Returns how many."""
    compression, dtype, shape, block = DATASETS[name]
    decompress, compress = CODECS[_codec_name(compression)]
    dt = np.dtype(dtype).newbyteorder(">")
    ndim = len(shape)
    cropped = 0
    for path in sorted((root / name).rglob("*")):
        if not path.is_file() or path.name == "attributes.json":
            continue
        grid = [int(p) for p in path.relative_to(root / name).parts]
        actual = [min(b, s - g * b) for g, b, s in zip(grid, block, shape)]
        if actual == block:
            continue
        data = path.read_bytes()
        header_len = 4 + 4 * ndim
        assert [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)] == block
        full = np.frombuffer(decompress(data[header_len:]), dtype=dt).reshape(block, order="F")
        part = full[tuple(slice(0, a) for a in actual)]
        header = (0).to_bytes(2, "big") + ndim.to_bytes(2, "big")
        header += b"".join(a.to_bytes(4, "big") for a in actual)
        path.write_bytes(header + compress(part.tobytes(order="F")))
        cropped += 1
    return cropped


def _add_attributes(path: Path, extra: dict) -> None:
    doc = json.loads(path.read_text())
    doc.update(extra)
    path.write_text(json.dumps(doc))


@pytest.fixture(scope="module")
def container(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("n5") / "data.n5"
    _write_json(root / "attributes.json", ROOT_ATTRS)
    for group, attrs in GROUP_ATTRS.items():
        _write_json(root / group / "attributes.json", attrs)
    # "volumes" gets no attributes.json: N5 groups need none.
    for seed, name in enumerate(DATASETS):
        _write_dataset(root, name, seed)
    for name, attrs in DATASET_ATTRS.items():
        _add_attributes(root / name / "attributes.json", attrs)
    for name, (compression, *_rest) in DATASETS.items():
        if _codec_name(compression) in CODECS:
            assert _crop_edge_blocks(root, name) > 0, name
    return root


def _source(container: Path, name: str) -> np.ndarray:
    return ts.open(_n5_spec(container / name)).result().read().result()


@pytest.fixture(scope="module")
def converted(container: Path, tmp_path_factory, zshard_bin: Path) -> Path:
    dst = tmp_path_factory.mktemp("n5-out") / "out.zarr"
    r = run_zshard(zshard_bin, ["convert", container, dst, "--quiet", "--threads", "2"])
    assert r.returncode == 0, r.describe()
    return dst


@pytest.mark.parametrize("name", list(DATASETS))
def test_every_dataset_reads_back_as_tensorstore_reads_the_source(container, converted, name):
    expected = _source(container, name)
    assert expected.shape == tuple(DATASETS[name][2])
    if name != "sparse":
        # tensorstore reads the rewritten edge blocks as the values written.
        _compression, dtype, shape, _block = DATASETS[name]
        np.testing.assert_array_equal(expected, _values(dtype, shape, list(DATASETS).index(name)))
    assert_readback(converted / name, expected)
    meta = json.loads((converted / name / "zarr.json").read_text())
    assert meta["data_type"] == DATASETS[name][1]
    assert meta["fill_value"] == 0


def test_edge_blocks_hold_their_actual_extents(container):
    # The input the padding in zshard exists for: the far corner block of comp/raw is smaller.
    block = (container / "comp/raw/4/4").read_bytes()
    # mode 0, 2 axes, extents 37-32=5 and 23-20=3 (first axis first).
    assert block[:12] == bytes.fromhex("0000" "0002" "00000005" "00000003")
    assert len(block) == 12 + 5 * 3
    # A block tensorstore wrote (zstd) keeps the full extents 8x5.
    assert (container / "comp/zstd/4/4").read_bytes()[:12] == bytes.fromhex("0000" "0002" "00000008" "00000005")


def test_missing_blocks_read_as_zero(container, converted):
    stored = sorted(p.relative_to(container / "sparse").as_posix() for p in (container / "sparse").rglob("*") if p.is_file() and p.name != "attributes.json")
    # 2:9 x 0:9 is block (0..1, 0); 21:30 x 30:40 blocks (3..4, 3..4): 6 of 5*5 blocks stored.
    assert stored == ["0/0", "1/0", "3/3", "3/4", "4/3", "4/4"]
    expected = np.zeros((30, 40), dtype="uint16")
    values = _values("uint16", [30, 40], list(DATASETS).index("sparse"))
    expected[2:9, 0:9] = values[2:9, 0:9]
    expected[21:30, 30:40] = values[21:30, 30:40]
    assert_readback(converted / "sparse", expected)


def test_groups_and_attributes_are_carried_over(converted):
    root = json.loads((converted / "zarr.json").read_text())
    assert root["node_type"] == "group"
    assert root["attributes"] == {"title": "n5 interop", "scales": [1, 2, 4]}
    comp = json.loads((converted / "comp" / "zarr.json").read_text())
    assert comp["node_type"] == "group"
    assert comp["attributes"] == GROUP_ATTRS["comp"]
    volumes = json.loads((converted / "volumes" / "zarr.json").read_text())
    assert (volumes["node_type"], volumes.get("attributes", {})) == ("group", {})
    gzip = json.loads((converted / "comp/gzip/zarr.json").read_text())
    assert gzip["attributes"] == DATASET_ATTRS["comp/gzip"]
    listed = sorted(root["consolidated_metadata"]["metadata"])
    assert listed == sorted(["comp", "volumes", *DATASETS])


def test_a_lone_dataset_is_detected_and_n5_can_be_forced(container, tmp_path, zshard_bin):
    # tensorstore writes a dataset's attributes.json without the "n5" version key.
    src = container / "volumes/float64"
    for extra in ([], ["--source-format", "n5"]):
        dst = tmp_path / f"lone{len(extra)}.zarr"
        r = run_zshard(zshard_bin, ["convert", src, dst, "--quiet", *extra])
        assert r.returncode == 0, r.describe()
        assert_readback(dst, _source(container, "volumes/float64"))


def test_ls_lists_the_datasets(container, zshard_bin):
    r = run_zshard(zshard_bin, ["ls", container, "--json"])
    assert r.returncode == 0, r.describe()
    listed = {a["path"]: a for a in json.loads(r.stdout)["arrays"]}
    assert sorted(listed) == sorted(DATASETS)
    assert listed["volumes/int8"]["shape"] == [9, 10, 11]
    assert listed["volumes/int8"]["chunk_shape"] == [4, 3, 5]


def _fails(zshard_bin: Path, src: Path, dst: Path) -> str:
    r = run_zshard(zshard_bin, ["convert", src, dst, "--quiet"])
    assert r.returncode == 1, r.describe()
    assert not dst.exists() or not any(dst.rglob("c/*")), r.describe()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.describe()
    return lines[0]


def test_a_damaged_block_is_an_error_naming_the_array_and_block(container, tmp_path, zshard_bin):
    src = tmp_path / "damaged.n5"
    _write_json(src / "attributes.json", {"n5": "4.0.0"})
    _write_dataset(src, "comp/zstd", 0)
    block = src / "comp/zstd/2/1"
    data = bytearray(block.read_bytes())
    block.write_bytes(bytes(data[: len(data) // 2]))
    line = _fails(zshard_bin, src, tmp_path / "out.zarr")
    assert "array comp/zstd" in line, line
    assert f"{block}" in line, line
    assert line.startswith(f"zshard: error: array comp/zstd: cannot read chunk {block}: codec n5 zstd failed: "), line


def test_an_unsupported_compression_is_refused_before_writing(tmp_path, zshard_bin):
    src = tmp_path / "jpeg.n5"
    _write_json(src / "attributes.json", {"n5": "4.0.0"})
    _write_json(
        src / "img/attributes.json",
        {"dimensions": [4, 4], "blockSize": [2, 2], "dataType": "uint8", "compression": {"type": "jpeg"}},
    )
    line = _fails(zshard_bin, src, tmp_path / "out.zarr")
    assert 'compression "jpeg" is not supported' in line, line
    assert "img/attributes.json" in line, line
