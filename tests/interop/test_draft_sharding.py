"""The pre-final Zarr v3 layout with the draft sharding storage transformer, as a source.

zarr-python 2.18 (its own venv, target/venv-zarr2, made by run.sh from requirements-zarr2.txt) writes a
hierarchy in the v3 draft layout (draft_writer.py): arrays with the sharding transformer
(`chunks_per_shard`, index of (offset, nbytes) at the end without checksum) and without it, several data
types and compressors, partial edge shards, missing chunks and shards, order F, a filter, nested and
implicit groups with attributes. zshard converts it; zarr-python 3.1 and tensorstore read the output,
compared element by element with what zarr-python 2.18 reads from the source. Damaged shards and bad
metadata fail with a message naming the array and the key.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import assert_same, parse_shard_index, read_with_tensorstore, run_zshard

HERE = Path(__file__).resolve().parent
EMPTY = 0xFFFFFFFFFFFFFFFF


def zarr2_python() -> str:
    python = os.environ.get("ZSHARD_ZARR2_PYTHON")
    if not python:
        pytest.fail("ZSHARD_ZARR2_PYTHON is not set (tests/interop/run.sh makes target/venv-zarr2)", pytrace=False)
    return python


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """OUT of draft_writer.py: OUT/src (the draft hierarchy), OUT/expected(.json)."""
    out = tmp_path_factory.mktemp("draft")
    run = subprocess.run([zarr2_python(), str(HERE / "draft_writer.py"), str(out)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return out


@pytest.fixture(scope="module")
def expected(written: Path) -> dict:
    return json.loads((written / "expected.json").read_text())


@pytest.fixture(scope="module")
def converted(zshard_bin: Path, written: Path, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("draft-out") / "out.zarr"
    run = run_zshard(zshard_bin, ["convert", written / "src", dst, "--quiet"])
    assert run.returncode == 0, run.describe()
    return dst


def draft_index(blob: bytes, n: int) -> list[tuple[int, int]]:
    """The draft shard index: n (offset, nbytes) little-endian u64 pairs at the end, no checksum."""
    body = blob[len(blob) - 16 * n:]
    return [struct.unpack_from("<QQ", body, 16 * i) for i in range(n)]


def test_every_array_reads_back_equal_in_zarr_python_and_tensorstore(converted: Path, written: Path,
                                                                      expected: dict):
    root = zarr.open_group(str(converted), mode="r")
    for path, info in expected["arrays"].items():
        want = np.load(written / "expected" / info["npy"])
        a = root[path]
        assert_same(a[...], want, f"zarr-python 3 read of {path}")
        assert_same(read_with_tensorstore(converted / path), want, f"tensorstore read of {path}")
        assert dict(a.attrs) == info["attributes"], path
        meta = json.loads((converted / path / "zarr.json").read_text())
        assert meta["codecs"][0]["name"] == "sharding_indexed", path
    assert len(expected["arrays"]) == 13


def test_verify_compares_every_element_with_the_draft_source(zshard_bin: Path, written: Path, converted: Path):
    run = run_zshard(zshard_bin, ["verify", written / "src", converted])
    assert run.returncode == 0, run.describe()
    assert "verified 13 shard(s) in 13 array(s)" in run.stderr + run.stdout, run.describe()


def test_groups_and_attributes_are_kept(converted: Path, expected: dict):
    root = zarr.open_group(str(converted), mode="r")
    for path, attrs in expected["groups"].items():
        group = root[path] if path else root
        assert isinstance(group, zarr.Group), path
        assert dict(group.attrs) == attrs, path
    # Implicit groups (no .group.json: nested/a, sharded, plain) are groups without attributes.
    assert expected["groups"]["nested/a"] == {} and expected["groups"]["sharded"] == {}
    arrays = sorted(p for p, _ in root.arrays()) + sorted(p for p, _ in root["sharded"].arrays())
    assert "i4_blosc" in arrays
    assert sorted(str(p.relative_to(converted)) for p in converted.rglob("zarr.json")) == sorted(
        ["zarr.json", "nested/zarr.json", "nested/a/zarr.json", "nested/a/b/zarr.json", "sharded/zarr.json",
         "plain/zarr.json"] + [f"{p}/zarr.json" for p in expected["arrays"]])


def test_ls_and_plan_show_the_arrays_with_their_source_shards(zshard_bin: Path, written: Path,
                                                              expected: dict, tmp_path: Path):
    run = run_zshard(zshard_bin, ["ls", written / "src", "--json"])
    assert run.returncode == 0, run.describe()
    listed = json.loads(run.stdout)
    rows = listed["arrays"] if isinstance(listed, dict) else listed
    by_path = {r["path"]: r for r in rows}
    assert sorted(by_path) == sorted(expected["arrays"])
    text = run_zshard(zshard_bin, ["ls", written / "src"]).stdout
    line = next(l for l in text.splitlines() if l.startswith("sharded/i4_blosc "))
    assert line.split()[:5] == ["sharded/i4_blosc", "int32", "10x7", "3x2", "6x4"], line
    line = next(l for l in text.splitlines() if l.startswith("plain/i2_blosc "))
    assert line.split()[:5] == ["plain/i2_blosc", "int16", "17x9", "5x4", "-"], line
    plan = run_zshard(zshard_bin, ["plan", written / "src", tmp_path / "out.zarr"])
    assert plan.returncode == 0, plan.describe()
    for path in expected["arrays"]:
        assert path in plan.stdout, path


def test_missing_chunks_and_shards_read_as_the_fill_value(written: Path, converted: Path, expected: dict):
    # The writer left rows 0..2 of sharded/i4_blosc unwritten: empty index entries (2^64-1) in shard c0/0.
    src = written / "src" / "data" / "root" / "sharded" / "i4_blosc"
    index = draft_index((src / "c0" / "0").read_bytes(), 4)
    assert index[0] == (EMPTY, EMPTY) and index[1] == (EMPTY, EMPTY), index
    got = zarr.open_array(str(converted / "sharded" / "i4_blosc"), mode="r")[...]
    assert (got[:3] == 5).all() and not (got[3:] == 5).all()
    # sharded/f8_zlib_big_endian: the last shard row holds nothing, so no file: NaN there.
    assert not (written / "src" / "data" / "root" / "sharded" / "f8_zlib_big_endian" / "c2").exists()
    got = zarr.open_array(str(converted / "sharded" / "f8_zlib_big_endian"), mode="r")[...]
    assert np.isnan(got[20:]).all() and np.isnan(got[:, 10:]).all() and not np.isnan(got[:20, :9]).any()


def test_zstd3_inner_chunks_are_copied_as_they_are(written: Path, converted: Path):
    """Passthrough: the draft's zstd level 3 chunks of the output's inner chunk shape are the output's."""
    src = written / "src" / "data" / "root" / "sharded" / "zstd3_passthrough"
    per = (2, 3)
    source_chunks = {}
    for shard_file in src.glob("c*/*"):
        si, sj = int(shard_file.parent.name[1:]), int(shard_file.name)
        blob = shard_file.read_bytes()
        for n, (offset, nbytes) in enumerate(draft_index(blob, per[0] * per[1])):
            if offset != EMPTY:
                coord = (si * per[0] + n // per[1], sj * per[1] + n % per[1])
                source_chunks[coord] = blob[offset:offset + nbytes]
    assert len(source_chunks) == 9  # rows 1..3 of 10-row chunks, 3 columns
    meta = json.loads((converted / "sharded" / "zstd3_passthrough" / "zarr.json").read_text())
    shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
    inner = meta["codecs"][0]["configuration"]["chunk_shape"]
    out_per = (shard[0] // inner[0], shard[1] // inner[1])
    copied = 0
    for shard_file in (converted / "sharded" / "zstd3_passthrough" / "c").rglob("*"):
        if not shard_file.is_file():
            continue
        si, sj = int(shard_file.parent.name), int(shard_file.name)
        blob = shard_file.read_bytes()
        entries, _ = parse_shard_index(blob, out_per[0] * out_per[1], "end")
        for n, (offset, nbytes) in enumerate(entries):
            if offset == EMPTY:
                continue
            coord = (si * out_per[0] + n // out_per[1], sj * out_per[1] + n % out_per[1])
            assert blob[offset:offset + nbytes] == source_chunks[coord], coord
            copied += 1
    assert copied == 9


def fresh_copy(written: Path, tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(written / "src", src)
    return src


def convert_fails(zshard_bin: Path, src: Path, dst: Path, *extra) -> str:
    run = run_zshard(zshard_bin, ["convert", src, dst, "--quiet", *extra])
    assert run.returncode == 1, run.describe()
    assert "panicked" not in run.stderr, run.stderr
    return run.stderr


def test_a_truncated_shard_index_names_the_array_and_the_shard(zshard_bin: Path, written: Path, tmp_path: Path):
    src = fresh_copy(written, tmp_path)
    shard = src / "data" / "root" / "sharded" / "i4_blosc" / "c1" / "0"
    shard.write_bytes(shard.read_bytes()[:10])
    err = convert_fails(zshard_bin, src, tmp_path / "out.zarr", "--include", "sharded/i4_blosc")
    assert "array sharded/i4_blosc" in err, err
    assert f"{shard} (shard index)" in err, err


def test_an_index_entry_past_the_end_names_the_array_and_the_shard(zshard_bin: Path, written: Path,
                                                                    tmp_path: Path):
    src = fresh_copy(written, tmp_path)
    shard = src / "data" / "root" / "sharded" / "i4_blosc" / "c1" / "1"
    blob = bytearray(shard.read_bytes())
    struct.pack_into("<QQ", blob, len(blob) - 64, 1 << 40, 100)  # inner chunk (0, 0) of the shard
    shard.write_bytes(bytes(blob))
    err = convert_fails(zshard_bin, src, tmp_path / "out.zarr", "--include", "sharded/i4_blosc")
    assert "array sharded/i4_blosc" in err, err
    assert str(shard) in err, err


@pytest.mark.parametrize("edit, reason", [
    (lambda m: m["compressor"].update(codec="https://purl.org/zarr/spec/codec/snappy/1.0"),
     'compressor "https://purl.org/zarr/spec/codec/snappy/1.0" is not supported'),
    (lambda m: m["storage_transformers"][0]["configuration"].update(chunks_per_shard=[2]),
     "chunks_per_shard must be 2 positive integers, one per dimension"),
    (lambda m: m["storage_transformers"][0].update(type="hashed"),
     'storage transformer "https://purl.org/zarr/spec/storage_transformers/sharding/1.0" of type "hashed" is not supported'),
    (lambda m: m.update(data_type=[["x", "<i4"]]),
     'data_type [["x","<i4"]] is not supported (structured or not a type string)'),
    (lambda m: m.pop("shape"), "invalid JSON"),
])
def test_bad_array_metadata_names_the_document(zshard_bin: Path, written: Path, tmp_path: Path, edit, reason):
    src = fresh_copy(written, tmp_path)
    doc = src / "meta" / "root" / "sharded" / "i4_blosc.array.json"
    meta = json.loads(doc.read_text())
    edit(meta)
    doc.write_text(json.dumps(meta))
    err = convert_fails(zshard_bin, src, tmp_path / "out.zarr")
    assert f"{doc}: {reason}" in err, err
    assert not (tmp_path / "out.zarr").exists()
