"""Every data type x every output compressor.

zarr-python writes one source array per data type (v3, plus v2 for the big-endian types that only v2
keeps), with a fill value other than zero and chunks never written. zshard converts each with every
`--compressor` form (zstd, gzip, none, blosc with each cname and shuffle, and a whole v3 JSON chain);
zarr-python reads the output back and must give the source's values exactly (bit for bit for fixed-size
types: NaN payloads, -0.0 and NaT included; element by element for strings). tensorstore reads it too,
for the data types it has; for the others (datetime64, timedelta64, fixed-length bytes and unicode,
variable-length strings) it must refuse to open the array, so the list of exceptions stays true.
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
import zarr

SHAPE, CHUNKS = (23, 17), (5, 4)
SHARD, INNER = "10,8", "5,4"

# (id, dtype for zarr-python, fill value, zarr formats)
DTYPES = [
    ("bool", "|b1", True, (3,)),
    ("int8", "|i1", -3, (3,)),
    ("int16", "<i2", 7, (3,)),
    ("int16_be", ">i2", -7, (2,)),
    ("int32", "<i4", 100000, (3,)),
    ("int64", "<i8", -(2**40), (3,)),
    ("uint8", "|u1", 255, (3,)),
    ("uint16", "<u2", 65535, (3,)),
    ("uint32", "<u4", 7, (3,)),
    ("uint64_be", ">u8", 2**63, (2,)),
    ("float16", "<f2", 0.5, (3,)),
    ("float32", "<f4", float("nan"), (3,)),
    ("float64_be", ">f8", float("-inf"), (2, 3)),
    ("complex64", "<c8", complex(1, float("nan")), (3,)),
    ("complex128_be", ">c16", complex(float("inf"), -2), (2,)),
    ("datetime64_s", "<M8[s]", np.datetime64("NaT"), (3,)),
    ("datetime64_ns", "<M8[ns]", np.datetime64(12345, "ns"), (2, 3)),
    ("timedelta64_10ms", "<m8[10ms]", np.timedelta64("NaT"), (3,)),
    ("timedelta64_h_be", ">m8[h]", np.timedelta64(-5, "h"), (2,)),
    ("bytes_S5", "|S5", b"ab", (3,)),
    ("unicode_U4", "<U4", "zz", (2, 3)),
    ("unicode_U3_be", ">U3", "\u00e9", (2,)),
    ("string", "str", "fill", (2, 3)),
]

NO_TENSORSTORE = ("M", "m", "S", "U", "O", "T")

COMPRESSORS = (
    ["zstd:3", "gzip:5", "none"]
    + [f"blosc:{c}:5:{s}" for c in ("blosclz", "lz4", "lz4hc", "zlib", "zstd") for s in ("noshuffle", "shuffle", "bitshuffle")]
    + ["json-chain"]
)


def json_chain(is_string: bool) -> str:
    """A chain --compressor takes as v3 JSON: big-endian bytes, gzip and a checksum (strings: vlen-utf8)."""
    first = {"name": "vlen-utf8", "configuration": {}} if is_string else {"name": "bytes", "configuration": {"endian": "big"}}
    return json.dumps([first, {"name": "gzip", "configuration": {"level": 6}}, "crc32c"])


def values(dtype: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(n + len(dtype))
    if dtype == "str":
        words = ["", "a", "fill", "h\u00e9llo", "\u65e5\u672c\u8a9e", "x" * 40, "\U0001f600", "tab\tz"]
        return np.array([words[i] for i in rng.integers(0, len(words), n)], dtype=object)
    dt = np.dtype(dtype)
    if dt.kind == "S":
        return np.array([bytes(rng.integers(1, 256, rng.integers(0, 6), dtype="u1")) for _ in range(n)], dtype=dt)
    if dt.kind == "U":
        pool = list("ab\u00e9\u65e5\U0001f600")
        return np.array(["".join(rng.choice(pool, rng.integers(0, dt.itemsize // 4 + 1))) for _ in range(n)], dtype=dt)
    if dt.kind in "Mm":
        a = rng.integers(-(10**9), 10**9, n).astype("i8")
        a[::7] = np.iinfo("i8").min
        return a.view(dt.newbyteorder("=")).astype(dt)
    if dt.kind == "b":
        return rng.random(n) < 0.3
    if dt.kind == "c":
        a = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
        a[1], a[2] = complex(float("nan"), 0), complex(0, float("inf"))
        return a
    if dt.kind == "f":
        a = (rng.standard_normal(n) * 1000).astype(dt)
        a[1], a[2], a[3] = np.nan, np.inf, -0.0
        return a
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, n, dtype=dt.newbyteorder("="), endpoint=True).astype(dt)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[tuple[str, int], tuple[Path, np.ndarray]]:
    """One zarr-python array per data type and format, with what zarr-python reads from it."""
    root = tmp_path_factory.mktemp("dtype-sources")
    out = {}
    for ident, dtype, fill, formats in DTYPES:
        for fmt in formats:
            path = root / f"{ident}-v{fmt}.zarr"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                a = zarr.create_array(
                    str(path), shape=SHAPE, chunks=CHUNKS, dtype=str if dtype == "str" else dtype,
                    fill_value=fill, zarr_format=fmt,
                )
                # Rows 15.. are never written: their chunks hold the fill value.
                a[:15, :] = values(dtype, 15 * SHAPE[1]).reshape(15, SHAPE[1])
                expected = zarr.open_array(str(path), mode="r")[...]
            out[(ident, fmt)] = (path, expected)
    return out


def same_values(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    if expected.dtype.kind in "OT":
        assert [str(x) for x in got.ravel()] == [str(x) for x in expected.ravel()]
        return
    # The output is little-endian; compare the bits of the same values in native order.
    native = expected.dtype.newbyteorder("=")
    assert got.dtype.newbyteorder("=") == native, (got.dtype, expected.dtype)
    assert got.astype(native).tobytes() == expected.astype(native).tobytes()


CASES = [(ident, fmt, comp) for ident, _, _, formats in DTYPES for fmt in formats for comp in COMPRESSORS]


@pytest.mark.parametrize("ident,fmt,compressor", CASES, ids=[f"{i}-v{f}-{c}" for i, f, c in CASES])
def test_dtype_with_compressor(ident, fmt, compressor, sources, tmp_path, zshard_bin):
    src, expected = sources[(ident, fmt)]
    is_string = expected.dtype.kind in "OT"
    spec = json_chain(is_string) if compressor == "json-chain" else compressor
    dst = tmp_path / "out.zarr"
    run = subprocess.run(
        [str(zshard_bin), "convert", str(src), str(dst), "--shard-shape", SHARD, "--chunk-shape", INNER,
         "--compressor", spec, "--quiet"],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    meta = json.loads((dst / "zarr.json").read_text())
    inner = meta["codecs"][0]["configuration"]["codecs"]
    if compressor == "json-chain":
        assert [c if isinstance(c, str) else c["name"] for c in inner] == [
            "vlen-utf8" if is_string else "bytes", "gzip", "crc32c"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = zarr.open_array(str(dst), mode="r")[...]
    same_values(got, expected)
    spec_ts = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(dst)}}
    if expected.dtype.kind in NO_TENSORSTORE:
        with pytest.raises(ValueError):
            ts.open(spec_ts, open=True).result()
    else:
        same_values(ts.open(spec_ts, open=True).result().read().result(), expected)


def test_string_chain_with_bytes_is_refused_before_writing(sources, tmp_path, zshard_bin):
    """A chain that cannot encode strings fails at planning, naming the array and the codec."""
    src, _ = sources[("string", 3)]
    dst = tmp_path / "out.zarr"
    run = subprocess.run(
        [str(zshard_bin), "convert", str(src), str(dst), "--compressor", json_chain(False)],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode != 0
    assert "bytes" in run.stderr and "vlen-utf8" in run.stderr, run.stderr
    assert not dst.exists() or not any(dst.rglob("c/*"))
