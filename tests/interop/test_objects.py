"""Object data: variable-length bytes, object arrays of strings, refused object codecs, old string
fill values, and `--on-unsupported skip`.

Inputs come from their producers: zarr-python 3.1 writes `variable_length_bytes` (v3, and v2 `|O` +
`vlen-bytes`). zarr-python 3.1 cannot write (nor read) `json2`, `msgpack2`, `pickle` or `vlen-array`
object arrays, nor store the fill values zarr-python 2 stored, so those arrays are laid out here as
zarr-python 2.18 laid them out: its `.zarray` (the filter is the codec's own `get_config()`) and
chunks that are numcodecs' own encoding of the full-size chunk (edge chunks padded with the fill
value, as zarr-python 2 pads them). Outputs are read back with zarr-python 3.1 and compared element
by element with what zarr-python 3.1 reads from the source, or, where it cannot read the source,
with what numcodecs decodes from it.
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr

from conftest import load_json, run_zshard

SHAPE = (5, 7)
CHUNKS = (2, 3)


def read(path: Path) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_array(str(path), mode="r")[...]


def same_objects(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    """Element by element, as Python objects (bytes stay bytes, strings stay strings)."""
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    got_list, expected_list = got.ravel().tolist(), expected.ravel().tolist()
    for i, (g, e) in enumerate(zip(got_list, expected_list)):
        assert type(g) is type(e) and g == e, f"{what}: element {i}: got {g!r}, expected {e!r}"


def inner_codecs(dst: Path, array: str = "") -> list[str]:
    meta = load_json(dst / array / "zarr.json")
    assert meta["codecs"][0]["name"] == "sharding_indexed", meta["codecs"]
    return [c["name"] for c in meta["codecs"][0]["configuration"]["codecs"]]


def convert(zshard_bin: Path, src: Path, dst: Path, *opts: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(zshard_bin), "convert", str(src), str(dst), *opts],
        capture_output=True, text=True, timeout=120,
    )


def byte_values(n: int) -> np.ndarray:
    """Bytes of every length from 0, NULs and non-UTF-8 bytes included."""
    return np.array([bytes([(i * 37 + k) % 256 for k in range(i % 6)]) for i in range(n)], dtype=object)


def string_values(n: int) -> np.ndarray:
    words = ["", "a", "héllo", "日本語", "x" * 20, "tab\tnew\nline", "0"]
    return np.array([f"{words[i % len(words)]}{i}" if i % 5 else words[i % len(words)] for i in range(n)],
                    dtype=object)


# --------------------------------------------------------------------------
# hand-made Zarr v2 object arrays, as zarr-python 2.18 writes them
# --------------------------------------------------------------------------


def write_v2_object_array(path: Path, data: np.ndarray | None, object_codec, fill, shape=SHAPE,
                          chunks=CHUNKS, compressor=None, dtype="|O", skip_chunks=()) -> None:
    """`.zarray` and chunks of a v2 object array: each chunk is the full chunk shape (edge chunks
    padded with `fill`), encoded by `object_codec` then `compressor`, as zarr-python 2 does."""
    path.mkdir(parents=True)
    zarray = {
        "zarr_format": 2, "shape": list(shape), "chunks": list(chunks), "dtype": dtype,
        "compressor": compressor.get_config() if compressor else None, "fill_value": fill,
        "order": "C", "filters": [object_codec.get_config()] if object_codec else None,
    }
    (path / ".zarray").write_text(json.dumps(zarray))
    if data is None:
        return
    grid = [-(-s // c) for s, c in zip(shape, chunks)]
    for index in np.ndindex(*grid):
        if index in skip_chunks:
            continue
        chunk = np.full(chunks, fill, dtype=object)
        region = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunks, shape))
        part = data[region]
        chunk[tuple(slice(0, n) for n in part.shape)] = part
        encoded = object_codec.encode(chunk)
        if compressor:
            encoded = compressor.encode(encoded)
        (path / ".".join(map(str, index))).write_bytes(bytes(encoded))


def numcodecs_read(path: Path) -> np.ndarray:
    """The array as numcodecs decodes its chunks (zarr-python 2's reading, without zarr)."""
    zarray = load_json(path / ".zarray")
    shape, chunks = zarray["shape"], zarray["chunks"]
    codec = numcodecs.get_codec(zarray["filters"][0])
    compressor = numcodecs.get_codec(zarray["compressor"]) if zarray["compressor"] else None
    out = np.empty(shape, dtype=object)
    grid = [-(-s // c) for s, c in zip(shape, chunks)]
    for index in np.ndindex(*grid):
        encoded = (path / ".".join(map(str, index))).read_bytes()
        if compressor:
            encoded = compressor.decode(encoded)
        chunk = codec.decode(encoded).reshape(chunks)
        region = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunks, shape))
        out[region] = chunk[tuple(slice(0, r.stop - r.start) for r in region)]
    return out


# --------------------------------------------------------------------------
# variable_length_bytes
# --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [3, 2])
def test_variable_length_bytes(fmt, tmp_path, zshard_bin):
    """zarr-python 3.1's variable_length_bytes (v3 vlen-bytes; v2 |O + vlen-bytes) converts to
    v3 variable_length_bytes + vlen-bytes, with rechunking and chunks that hold only the fill."""
    src, dst = tmp_path / "src.zarr", tmp_path / "out.zarr"
    fill = b"ab\x00" if fmt == 3 else b""
    a = zarr.create_array(str(src), shape=SHAPE, chunks=CHUNKS, dtype=zarr.dtype.VariableLengthBytes(),
                          fill_value=fill, zarr_format=fmt)
    a[:3, :] = byte_values(3 * SHAPE[1]).reshape(3, SHAPE[1])  # rows 4.. stay the fill value
    expected = read(src)
    run = convert(zshard_bin, src, dst, "--shard-shape", "4,4", "--chunk-shape", "2,2")
    assert run.returncode == 0, run.stderr
    meta = load_json(dst / "zarr.json")
    assert meta["data_type"] == "variable_length_bytes"
    assert meta["fill_value"] == ("YWIA" if fmt == 3 else "")
    assert inner_codecs(dst) == ["vlen-bytes", "zstd"]
    same_objects(read(dst), expected, "zarr-python read of the output")
    assert read(dst).dtype == object
    verify = run_zshard(zshard_bin, ["verify", src, dst])
    assert verify.returncode == 0, verify.describe()


# --------------------------------------------------------------------------
# json2 / msgpack2 object arrays of strings
# --------------------------------------------------------------------------


OBJECT_CODECS = {
    "json2": lambda: numcodecs.JSON(),
    "msgpack2": lambda: numcodecs.MsgPack(),
}


@pytest.mark.parametrize("codec_id", sorted(OBJECT_CODECS))
def test_string_object_arrays(codec_id, tmp_path, zshard_bin):
    """json2 / msgpack2 object arrays of strings become v3 `string` arrays zarr-python 3.1 reads,
    equal to what numcodecs decodes from the source (zarr-python 3.1 itself cannot read them)."""
    src, dst = tmp_path / "src.zarr", tmp_path / "out.zarr"
    data = string_values(SHAPE[0] * SHAPE[1]).reshape(SHAPE)
    write_v2_object_array(src, data, OBJECT_CODECS[codec_id](), "", compressor=numcodecs.Zlib(level=1))
    expected = numcodecs_read(src)
    same_objects(expected, data, "numcodecs' read of the source")
    with pytest.raises(Exception):
        read(src)  # zarr-python 3.1 has no data type for these: zshard's output is the way in.
    run = convert(zshard_bin, src, dst, "--chunk-shape", "3,2")
    assert run.returncode == 0, run.stderr
    meta = load_json(dst / "zarr.json")
    assert meta["data_type"] == "string" and meta["fill_value"] == ""
    assert inner_codecs(dst) == ["vlen-utf8", "zstd"]
    got = read(dst)
    same_objects(np.array(got.ravel().tolist(), dtype=object).reshape(SHAPE), expected, "output")
    verify = run_zshard(zshard_bin, ["verify", src, dst])
    assert verify.returncode == 0, verify.describe()


def test_json2_with_a_number_is_refused_naming_the_array_and_chunk(tmp_path, zshard_bin):
    src, dst = tmp_path / "src.zarr", tmp_path / "out.zarr"
    data = np.array([["a", "b", "c"], ["d", 7, "f"]], dtype=object)
    write_v2_object_array(src, data, numcodecs.JSON(), "", shape=(2, 3), chunks=(2, 3))
    run = convert(zshard_bin, src, dst)
    assert run.returncode == 1, run.stderr
    assert "src.zarr/0.0" in run.stderr and "element 4 is a number, not a string" in run.stderr, run.stderr


# --------------------------------------------------------------------------
# refused object codecs
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "codec,reason",
    [
        (numcodecs.Pickle(), "decoding pickle runs code from the data"),
        (numcodecs.VLenArray("<i4"), "Zarr v3 has no data type for it"),
    ],
    ids=["pickle", "vlen-array"],
)
def test_refused_object_codecs_name_the_array_and_the_reason(codec, reason, tmp_path, zshard_bin):
    src, dst = tmp_path / "src.zarr", tmp_path / "out.zarr"
    if codec.codec_id == "pickle":
        data = np.array([["a", "b"], ["c", "d"]], dtype=object)
    else:
        data = np.empty((2, 2), dtype=object)
        for i, (r, c) in enumerate(np.ndindex(2, 2)):
            data[r, c] = np.arange(i, dtype="<i4")
    write_v2_object_array(src, data, codec, None, shape=(2, 2), chunks=(2, 2))
    run = convert(zshard_bin, src, dst)
    assert run.returncode == 1, run.stderr
    assert "src.zarr/.zarray" in run.stderr and codec.codec_id in run.stderr, run.stderr
    assert reason in run.stderr, run.stderr
    assert not dst.exists()


# --------------------------------------------------------------------------
# string fill values as zarr-python 2 stored them
# --------------------------------------------------------------------------


@pytest.mark.parametrize("fill", [0, "", None, "fill"], ids=["zero", "empty", "null", "text"])
def test_vlen_utf8_fill_values_of_zarr_python_2(fill, tmp_path, zshard_bin):
    """zarr-python 2 stored `fill_value: 0` for string (|O + vlen-utf8) arrays by default (its
    `create(fill_value=0)`, and object fill values are not normalised); zarr-python 3.1 reads that
    as the string "0". The output has that fill, and missing chunks read as it."""
    src, dst = tmp_path / "src.zarr", tmp_path / "out.zarr"
    data = string_values(SHAPE[0] * SHAPE[1]).reshape(SHAPE)
    pad = "" if fill is None else str(fill)
    write_v2_object_array(src, data, numcodecs.VLenUTF8(), fill, skip_chunks={(1, 1), (2, 2)})
    for i in range(SHAPE[0]):  # what the padded chunks hold in missing places
        for j in range(SHAPE[1]):
            if (i // CHUNKS[0], j // CHUNKS[1]) in {(1, 1), (2, 2)}:
                data[i, j] = pad
    expected = read(src)
    same_objects(np.array(expected.ravel().tolist(), dtype=object).reshape(SHAPE), data, "source")
    run = convert(zshard_bin, src, dst, "--chunk-shape", "1,7")
    assert run.returncode == 0, run.stderr
    assert load_json(dst / "zarr.json")["fill_value"] == pad
    got = read(dst)
    same_objects(np.array(got.ravel().tolist(), dtype=object).reshape(SHAPE),
                 np.array(expected.ravel().tolist(), dtype=object).reshape(SHAPE), "output")


@pytest.mark.parametrize("fill,expected_fill", [(0, ""), ("", ""), (None, ""), ("ab", "ab")],
                         ids=["zero", "empty", "null", "text"])
def test_unicode_fill_values_of_zarr_python_2(fill, expected_fill, tmp_path, zshard_bin):
    """Fixed-length unicode (<U3): `0` is numpy's zero element, the empty string, as zarr-python 2
    normalised it; zarr-python 3.1 reads the other forms itself."""
    src, dst = tmp_path / "src.zarr", tmp_path / "out.zarr"
    src.mkdir()
    zarray = {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<U3", "compressor": None,
              "fill_value": fill, "order": "C", "filters": None}
    (src / ".zarray").write_text(json.dumps(zarray))
    (src / "0").write_bytes(np.array(["abc", "é"], dtype="<U3").tobytes())  # chunk 1 missing
    run = convert(zshard_bin, src, dst)
    assert run.returncode == 0, run.stderr
    assert load_json(dst / "zarr.json")["fill_value"] == expected_fill
    got = read(dst)
    assert got.dtype == np.dtype("<U3") and got.tolist() == ["abc", "é", expected_fill, expected_fill]
    if fill != 0:
        assert read(src).tolist() == got.tolist()


# --------------------------------------------------------------------------
# --on-unsupported skip
# --------------------------------------------------------------------------


@pytest.fixture()
def hierarchy_with_pickle(tmp_path) -> tuple[Path, dict[str, np.ndarray]]:
    """A v2 group of zarr-python 3.1: two good arrays and a pickle object array (hand-made)."""
    src = tmp_path / "group.zarr"
    root = zarr.open_group(str(src), mode="w", zarr_format=2)
    numbers = root.create_array("numbers", shape=(6, 4), chunks=(4, 4), dtype="<i4", fill_value=-1)
    numbers[:5] = np.arange(20, dtype="<i4").reshape(5, 4)
    words = root.create_group("text").create_array("words", shape=(5,), chunks=(2,), dtype=str)
    words[:] = np.array(["a", "bb", "", "dddd", "é"], dtype=object)
    write_v2_object_array(src / "text" / "pickled", np.array([["x", "y"]], dtype=object),
                          numcodecs.Pickle(), None, shape=(1, 2), chunks=(1, 2))
    return src, {"numbers": read(src / "numbers"), "text/words": read(src / "text" / "words")}


def test_unsupported_array_refused_before_anything_is_written(hierarchy_with_pickle, tmp_path, zshard_bin):
    src, _ = hierarchy_with_pickle
    dst = tmp_path / "out.zarr"
    run = convert(zshard_bin, src, dst)
    assert run.returncode == 1, run.stderr
    assert "text/pickled/.zarray" in run.stderr and "runs code from the data" in run.stderr, run.stderr
    assert not dst.exists()


def test_on_unsupported_skip_converts_the_rest_and_lists_the_skipped(hierarchy_with_pickle, tmp_path,
                                                                     zshard_bin):
    src, expected = hierarchy_with_pickle
    dst, report = tmp_path / "out.zarr", tmp_path / "report.json"
    plan = run_zshard(zshard_bin, ["plan", src, dst, "--on-unsupported", "skip", "--json"])
    assert plan.returncode == 0, plan.describe()
    planned = json.loads(plan.stdout)
    assert [a["path"] for a in planned["arrays"]] == ["numbers", "text/words"]
    assert [s["path"] for s in planned["skipped_arrays"]] == ["text/pickled"]
    assert "runs code from the data" in planned["skipped_arrays"][0]["reason"]

    run = convert(zshard_bin, src, dst, "--on-unsupported", "skip", "--report", str(report))
    assert run.returncode == 0, run.stderr
    assert "zshard: skipped array text/pickled: " in run.stderr, run.stderr
    assert "runs code from the data" in run.stderr
    doc = json.loads(report.read_text())
    assert doc["status"] == "ok"
    assert [a["path"] for a in doc["arrays"]] == ["numbers", "text/words"]
    assert [s["path"] for s in doc["skipped_arrays"]] == ["text/pickled"]
    assert "pickle" in doc["skipped_arrays"][0]["reason"]
    assert "runs code from the data" in doc["skipped_arrays"][0]["reason"]

    assert sorted(p.relative_to(dst).as_posix() for p in dst.rglob("zarr.json")) == [
        "numbers/zarr.json", "text/words/zarr.json", "text/zarr.json", "zarr.json"]
    for path, values in expected.items():
        got = read(dst / path)
        same_objects(np.array(got.ravel().tolist(), dtype=object).reshape(values.shape),
                     np.array(values.ravel().tolist(), dtype=object).reshape(values.shape), path)
    consolidated = load_json(dst / "zarr.json")["consolidated_metadata"]["metadata"]
    assert sorted(consolidated) == ["numbers", "text", "text/words"]

    verify = run_zshard(zshard_bin, ["verify", src, dst])
    assert verify.returncode == 0, verify.describe()
    assert "not verified (not read by zshard): array text/pickled" in verify.stderr, verify.describe()

    listed = run_zshard(zshard_bin, ["ls", src, "--on-unsupported", "skip", "--json"])
    assert listed.returncode == 0, listed.describe()
    doc = json.loads(listed.stdout)
    assert [a["path"] for a in doc["arrays"]] == ["numbers", "text/words"]
    assert [s["path"] for s in doc["skipped_arrays"]] == ["text/pickled"]
    assert "zshard: skipped array text/pickled: " in listed.stderr, listed.describe()


def test_on_unsupported_takes_refuse_or_skip(hierarchy_with_pickle, tmp_path, zshard_bin):
    src, _ = hierarchy_with_pickle
    run = convert(zshard_bin, src, tmp_path / "out.zarr", "--on-unsupported", "ignore")
    assert run.returncode == 1
    assert '--on-unsupported "ignore" is not supported (refuse, skip)' in run.stderr, run.stderr
    run = convert(zshard_bin, src, tmp_path / "out.zarr", "--on-unsupported", "refuse")
    assert run.returncode == 1 and "runs code from the data" in run.stderr, run.stderr
