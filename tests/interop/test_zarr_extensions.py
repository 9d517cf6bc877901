"""zarr-python 3.2+'s zarr-extensions arrays as sources: the `struct` data type and the `scale_offset` and
`cast_value` codecs (issue 33).

Every source is written by zarr-python (3.4 on today's stack); zarr-python's own read of the source is the
truth. zshard converts it; zarr-python reads the output back and must give the same values element by
element (bit for bit: NaN, -0.0 and infinities included), and tensorstore too where it has the type.

- struct: nested and flat records with fill values, big- and little-endian sources, partly written; the
  output keeps the data type document and the fill value exactly as the source wrote them.
- scale_offset + cast_value written by zarr-python from float64 values with every rounding and
  out-of-range mode and a scalar_map for NaN, converted with the default chain (decoded values stored)
  and with `--compressor source` (the codecs kept).
- decoding edge cases: chunks holding values that the decode direction must round, clamp, wrap, map or
  refuse (half-way values, NaN, infinities, out of range), for every mode; where zarr-python refuses to
  read the source, zshard must refuse to convert it, naming the codec.
- scale_offset on integers: exact division or an error, and int64's wrap-around, as zarr-python.

Skipped where zarr-python is older than 3.2 (the Python 3.11 stack has 3.1), which has none of these.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import assert_readback, assert_same, read_with_tensorstore

ZARR_VERSION = tuple(int(p) for p in zarr.__version__.split(".")[:2])
pytestmark = pytest.mark.skipif(
    ZARR_VERSION < (3, 2),
    reason=f"zarr-python {zarr.__version__} has no struct data type, scale_offset or cast_value (3.2+)",
)

if ZARR_VERSION >= (3, 2):
    from zarr.codecs import BytesCodec, CastValue, ScaleOffset, ZstdCodec

ROUNDING = ["nearest-even", "towards-zero", "towards-positive", "towards-negative", "nearest-away"]


def convert(zshard_bin: Path, src: Path, dst: Path, *opts: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(zshard_bin), "convert", str(src), str(dst), "--quiet", *opts],
        capture_output=True, text=True, timeout=120,
    )


def read(path: Path) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_array(str(path), mode="r")[...]


def same_bits(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    """Equal element by element and bit for bit (struct fields compared one by one first, to name one)."""
    assert got.shape == expected.shape, what
    native = expected.dtype.newbyteorder("=")
    got, expected = got.astype(native), expected.astype(native)
    if native.names:
        for name in native.names:
            same_bits(got[name], expected[name], f"{what}, field {name}")
    elif native.kind in "fc":
        assert_same(got, expected, what)
    elif native.kind in "Mm":
        # NaT is not equal to itself: compare the counts.
        assert np.array_equal(got.view("<i8"), expected.view("<i8")), what
    else:
        assert np.array_equal(got, expected), what
    assert got.tobytes() == expected.tobytes(), f"{what}: bits differ"


# --------------------------------------------------------------------------------------------------
# struct
# --------------------------------------------------------------------------------------------------

NESTED = np.dtype([
    ("id", "<i4"), ("flag", "u1"), ("x", "<f4"),
    ("p", [("a", "<u2"), ("b", "<f8"), ("c", "<c8")]),
    ("t", "<M8[s]"), ("s", "S3"),
])
FLAT = np.dtype([("x", "<f4"), ("y", "<i2"), ("z", "u1")])


def struct_values(dtype: np.dtype, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, n * dtype.itemsize, dtype="u1").tobytes()
    out = np.frombuffer(raw, dtype=dtype).copy()
    # Edge values in the float fields: NaN, -0.0, infinity.
    out["x"][:3] = [np.nan, -0.0, np.inf]
    return out


def struct_fill(dtype: np.dtype):
    fill = np.zeros((), dtype=dtype)
    fill["x"] = np.nan
    if "p" in dtype.names:
        fill["id"] = -7
        fill["p"]["a"] = 65535
        fill["p"]["b"] = -np.inf
        fill["p"]["c"] = complex(1.5, np.nan)
        fill["t"] = np.datetime64("NaT", "s")
        fill["s"] = b"ab"
    else:
        fill["y"] = -2
        fill["z"] = 255
    return fill[()]


@pytest.fixture(scope="module")
def struct_sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("struct")
    out = {}
    for ident, dtype, endian in [("nested", NESTED, "little"), ("nested_be", NESTED, "big"), ("flat", FLAT, "little")]:
        path = root / f"{ident}.zarr"
        a = zarr.create_array(
            str(path), shape=(23, 5), chunks=(4, 3), dtype=dtype, fill_value=struct_fill(dtype),
            serializer=BytesCodec(endian=endian), compressors=[ZstdCodec(level=3)],
        )
        # Rows 16.. are never written: their chunks hold the fill value.
        a[:16, :] = struct_values(dtype, 16 * 5, len(ident)).reshape(16, 5)
        out[ident] = (path, read(path))
    return out


@pytest.mark.parametrize("ident", ["nested", "nested_be", "flat"])
@pytest.mark.parametrize("compressor", ["zstd:3", "source", "none"])
def test_struct_reads_back_byte_identical(ident, compressor, struct_sources, tmp_path, zshard_bin):
    src, expected = struct_sources[ident]
    dst = tmp_path / "out.zarr"
    run = convert(zshard_bin, src, dst, "--shard-shape", "8,6", "--chunk-shape", "4,3", "--compressor", compressor)
    assert run.returncode == 0, run.stderr
    source_meta = json.loads((src / "zarr.json").read_text())
    meta = json.loads((dst / "zarr.json").read_text())
    # The data type document and the fill value as zarr-python wrote them.
    assert meta["data_type"] == source_meta["data_type"]
    assert meta["fill_value"] == source_meta["fill_value"]
    assert meta["data_type"]["name"] == "struct"
    got = read(dst)
    same_bits(got, expected, f"zarr-python read of {ident} ({compressor})")
    assert zarr.open_array(str(dst), mode="r").fill_value.tobytes() == zarr.open_array(str(src), mode="r").fill_value.tobytes()
    if ident == "flat":
        # tensorstore reads flat structs one field at a time.
        import tensorstore as ts

        for name in FLAT.names:
            spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(dst)}, "field": name}
            field = ts.open(spec, open=True).result().read().result()
            same_bits(np.asarray(field), expected[name], f"tensorstore read of field {name}")


def test_struct_with_a_bad_fill_value_is_refused_naming_the_array(struct_sources, tmp_path, zshard_bin):
    src, _ = struct_sources["flat"]
    bad = tmp_path / "bad.zarr"
    subprocess.run(["cp", "-r", str(src), str(bad)], check=True)
    meta = json.loads((bad / "zarr.json").read_text())
    meta["fill_value"] = {"x": 1.0, "y": 70000, "z": 0}
    (bad / "zarr.json").write_text(json.dumps(meta))
    run = convert(zshard_bin, bad, tmp_path / "out.zarr")
    assert run.returncode != 0
    assert "zarr.json" in run.stderr and "70000" in run.stderr, run.stderr


# --------------------------------------------------------------------------------------------------
# scale_offset + cast_value written by zarr-python
# --------------------------------------------------------------------------------------------------

# Values around the half-way points of the encoded grid (scale 0.5: steps of 2 in the input), out of
# the encoded type's range on both sides, NaN (mapped to a reserved value), infinities clamped.
WRITTEN = np.array(
    [0.0, 1.0, 3.0, 5.0, -1.0, -3.0, 2.0, 2.5, 1.4999, 251.0, 253.0, 255.0, 257.0, 300.0, 1e6, -1e6,
     -257.0, -259.0, np.nan, -0.0, 17.0, 19.0, 21.0, 99.9, -99.9],
    dtype="<f8",
)
WRITE_CASES = [
    (rounding, oor, target)
    for rounding in ROUNDING
    for oor, target in [("clamp", "int8"), ("clamp", "uint8"), ("wrap", "int8"), ("wrap", "uint16")]
]


@pytest.mark.parametrize("rounding,oor,target", WRITE_CASES, ids=[f"{r}-{o}-{t}" for r, o, t in WRITE_CASES])
def test_scale_offset_cast_value_written_by_zarr_python(rounding, oor, target, tmp_path, zshard_bin):
    src = tmp_path / "src.zarr"
    reserved = 0 if target.startswith("u") else -128
    a = zarr.create_array(
        str(src), shape=WRITTEN.shape, chunks=(7,), dtype="<f8", fill_value=np.nan,
        filters=[
            ScaleOffset(offset=1, scale=0.5),
            CastValue(
                data_type=target, rounding=rounding, out_of_range=oor,
                scalar_map={"encode": [("NaN", reserved)], "decode": [(reserved, "NaN")]},
            ),
        ],
        compressors=[ZstdCodec(level=1)],
    )
    a[:] = WRITTEN
    expected = read(src)
    # The grid is coarse, so decoding differs from what was written: the truth is zarr-python's read.
    assert not np.array_equal(expected, WRITTEN, equal_nan=True)
    # "source" copies the chunks (same chunk shape); with inner chunks of 5, zshard encodes them itself.
    for compressor, inner in [("zstd:3", "7"), ("source", "7"), ("source", "5")]:
        dst = tmp_path / f"out-{compressor}-{inner}.zarr"
        run = convert(zshard_bin, src, dst, "--shard-shape", "10" if inner == "5" else "14", "--chunk-shape", inner,
                      "--compressor", compressor)
        assert run.returncode == 0, run.stderr
        if compressor == "source":
            meta = json.loads((dst / "zarr.json").read_text())
            inner = [c["name"] for c in meta["codecs"][0]["configuration"]["codecs"]]
            assert inner[:2] == ["scale_offset", "cast_value"], inner
            assert_same(read(dst), expected, f"zarr-python read ({compressor})")
        else:
            assert_readback(dst, expected)


# --------------------------------------------------------------------------------------------------
# Decoding edge cases: chunks whose stored values the decode direction must round, clamp, wrap or refuse
# --------------------------------------------------------------------------------------------------

STORED_F8 = np.array(
    [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999999999999996, 126.5, 127.5, 128.0, -128.5, -129.0, 255.5,
     300.0, -300.0, 1e300, -0.0, 0.0, 7.0, np.nan, np.inf, -np.inf],
    dtype="<f8",
)
# Half-way and out-of-range values for float64 -> float32: 1 + 2**-24 lies between two float32s.
STORED_F8_TO_F4 = np.array(
    [1 + 2**-24, 1 + 3 * 2**-24, -(1 + 2**-24), 3.4028235677973366e38, 1e39, -1e39, 1e-46, np.nan, -0.0, np.inf],
    dtype="<f8",
)


def write_raw(path: Path, stored: np.ndarray, meta_update: dict) -> None:
    """A one-chunk array whose chunk holds `stored` as `bytes` writes it, then the metadata of the
    array under test (the same final `bytes` codec), as another writer could have left it."""
    a = zarr.create_array(
        str(path), shape=stored.shape, chunks=stored.shape, dtype=stored.dtype, fill_value=0,
        serializer=BytesCodec(endian="little"), compressors=None,
    )
    a[:] = stored
    meta = json.loads((path / "zarr.json").read_text())
    meta.update(meta_update)
    (path / "zarr.json").write_text(json.dumps(meta))


def zarr_read_or_error(path: Path):
    """zarr-python's read of `path`, or its refusal: `(None, (stage, error))`, stage "open" when it
    refuses the metadata, "read" when it refuses a chunk."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            array = zarr.open_array(str(path), mode="r")
        except Exception as e:  # noqa: BLE001 - zarr-python's refusal is the expected outcome here
            return None, ("open", e)
        try:
            return array[...], None
        except Exception as e:  # noqa: BLE001
            return None, ("read", e)


def refused_alike(run: subprocess.CompletedProcess, error, codec: str) -> None:
    """zarr-python refused the source: zshard refuses it too, naming the codec, and the chunk when
    zarr-python refused a chunk rather than the metadata."""
    stage, e = error
    assert run.returncode != 0, f"zarr-python refused ({stage}: {e}) but zshard converted"
    assert codec in run.stderr, run.stderr
    if stage == "read":
        assert "c/0" in run.stderr, run.stderr
    else:
        # Refused for what the configuration says, not for an unknown codec.
        assert "unsupported codec" not in run.stderr, run.stderr


# Integers narrowed on decoding (int16 stored, int8 or uint8 decoded): where out_of_range wrap is legal.
STORED_I2 = np.array([-129, 128, 300, -300, 127, -128, 0, 255, 256, -1, 32767, -32768], dtype="<i2")

DECODE_CASES = [
    (array_type, stored, rounding, oor, smap)
    for array_type, stored in [("int8", "f8"), ("uint8", "f8"), ("int16", "f8"), ("float32", "f8->f4"),
                               ("int8", "i2"), ("uint8", "i2")]
    for rounding in ROUNDING
    for oor in [None, "clamp", "wrap"]
    for smap in [False, True]
    if not (oor == "wrap" and array_type.startswith("float"))
]


@pytest.mark.parametrize(
    "array_type,stored,rounding,oor,smap", DECODE_CASES,
    ids=[f"{a}-{r}-{o}-{'map' if m else 'nomap'}" for a, _, r, o, m in DECODE_CASES],
)
def test_cast_value_decoding_matches_zarr_python(array_type, stored, rounding, oor, smap, tmp_path, zshard_bin):
    values = {"f8->f4": STORED_F8_TO_F4, "f8": STORED_F8, "i2": STORED_I2}[stored]
    config: dict = {"data_type": "int16" if stored == "i2" else "float64", "rounding": rounding}
    if oor:
        config["out_of_range"] = oor
    if smap:
        if array_type.startswith("float"):
            config["scalar_map"] = {"decode": [["NaN", 0.0], [1e39, -1.0]], "encode": [[0.0, "NaN"]]}
        elif stored == "i2":
            config["scalar_map"] = {"decode": [[300, 7], [-1, 0]], "encode": [[7, 300]]}
        else:
            config["scalar_map"] = {"decode": [["NaN", 0], ["Infinity", 1], ["-Infinity", 2], [300.0, 3]]}
    src = tmp_path / "src.zarr"
    write_raw(src, values, {
        "data_type": array_type, "fill_value": 0,
        "codecs": [{"name": "cast_value", "configuration": config}, {"name": "bytes", "configuration": {"endian": "little"}}],
    })
    expected, error = zarr_read_or_error(src)
    dst = tmp_path / "out.zarr"
    run = convert(zshard_bin, src, dst)
    if error is not None:
        refused_alike(run, error, "cast_value")
        return
    assert run.returncode == 0, run.stderr
    assert expected.dtype == np.dtype(array_type)
    assert_readback(dst, expected)


def test_decoding_cases_include_both_outcomes(tmp_path):
    """The edge values make zarr-python refuse some modes and decode others (so both branches run)."""
    outcomes = set()
    for oor in [None, "clamp"]:
        src = tmp_path / f"{oor}.zarr"
        config = {"data_type": "float64", **({"out_of_range": oor} if oor else {})}
        write_raw(src, STORED_F8[:16], {
            "data_type": "int8", "fill_value": 0,
            "codecs": [{"name": "cast_value", "configuration": config}, {"name": "bytes", "configuration": {"endian": "little"}}],
        })
        outcomes.add(zarr_read_or_error(src)[1] is None)
    assert outcomes == {True, False}


# --------------------------------------------------------------------------------------------------
# scale_offset on integers and floats: exactness, ranges, int64 wrap-around
# --------------------------------------------------------------------------------------------------

SCALE_CASES = [
    ("int16", {"offset": 1000, "scale": 3}, 0, np.array([0, 3, -3, 9, 30000, -30000, 300], dtype="<i2")),
    ("int16", {"offset": 1000, "scale": 3}, 0, np.array([0, 3, 4], dtype="<i2")),  # 4 % 3: refused
    ("int16", {"offset": 30000, "scale": 1}, 0, np.array([0, 2767, 2768], dtype="<i2")),  # out of range
    ("uint8", {"offset": 10, "scale": 2}, 10, np.array([0, 2, 254, 100], dtype="u1")),
    ("uint8", {"offset": 10, "scale": 2}, 0, np.array([0], dtype="u1")),  # the fill value has no encoding
    ("int64", {"offset": 2**62, "scale": -1}, 0, np.array([-(2**62), 2**62, -(2**63), 5], dtype="<i8")),
    ("uint64", {"offset": 2**63, "scale": 1}, 2**63, np.array([0, 2**63 - 1, 2**63], dtype="<u8")),
    ("float32", {"offset": 0.1, "scale": 3}, 0, np.array([1, 0.3, np.nan, -np.inf, 3e38, 1e-45], dtype="<f4")),
    ("float16", {"offset": 1000, "scale": 0.1}, 0, np.array([0, 1.5, 65504, -65504, 0.1, np.nan], dtype="<f2")),
    ("float64", {"offset": "NaN", "scale": 2}, 0, np.array([0, 1.5], dtype="<f8")),
]


@pytest.mark.parametrize(
    "array_type,config,fill,stored", SCALE_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(SCALE_CASES)]
)
def test_scale_offset_decoding_matches_zarr_python(array_type, config, fill, stored, tmp_path, zshard_bin):
    src = tmp_path / "src.zarr"
    write_raw(src, stored, {
        "data_type": array_type, "fill_value": fill,
        "codecs": [{"name": "scale_offset", "configuration": config}, {"name": "bytes", "configuration": {"endian": "little"}}],
    })
    expected, error = zarr_read_or_error(src)
    dst = tmp_path / "out.zarr"
    run = convert(zshard_bin, src, dst)
    if error is not None:
        refused_alike(run, error, "scale_offset")
        return
    assert run.returncode == 0, run.stderr
    assert_same(read(dst), expected, "zarr-python read")
    assert_same(read_with_tensorstore(dst), expected, "tensorstore read")


# --------------------------------------------------------------------------------------------------
# --compressor source: a v2 fixedscaleoffset / astype filter kept as scale_offset + cast_value
# --------------------------------------------------------------------------------------------------

# Half-way values (numpy's around: half to even) and values whose encoding overflows the stored type
# (numcodecs wraps them: 25.6 * 10 = 256 is stored as 0), as numcodecs writes them.
V2_VALUES = np.array(
    [0, 0.05, 0.15, 0.25, 0.35, -0.05, -0.15, 25.5, 25.55, 25.6, 30, -1, 12.3456, 3.14159, 7, -25.6],
    dtype="<f8",
)


def v2_source(path: Path, filters, dtype: str, fill) -> np.ndarray:
    import numcodecs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = zarr.create_array(
            str(path), shape=V2_VALUES.shape, chunks=(5,), dtype=dtype, fill_value=fill, zarr_format=2,
            filters=filters, compressors=numcodecs.Zlib(level=1),
        )
        a[:12] = V2_VALUES[:12].astype(dtype)
    return read(path)


def v2_cases():
    import numcodecs

    fso = numcodecs.FixedScaleOffset
    return {
        "fso-f8-u1": (lambda: [fso(offset=0, scale=10, dtype="<f8", astype="u1")], "<f8", 0.0, True),
        "fso-f8-i1-offset": (lambda: [fso(offset=-3, scale=4, dtype="<f8", astype="i1")], "<f8", -3.0, True),
        "fso-f8-i2-big": (lambda: [fso(offset=1.5, scale=100, dtype="<f8", astype=">i2")], "<f8", 1.5, True),
        "fso-f8-u2-offset": (lambda: [fso(offset=1000, scale=0.25, dtype="<f8", astype="<u2")], "<f8", 1000.0, True),
        "astype-f8-u1": (lambda: [numcodecs.AsType(encode_dtype="u1", decode_dtype="<f8")], "<f8", 0.0, True),
        "astype-i4-i2": (lambda: [numcodecs.AsType(encode_dtype="<i2", decode_dtype="<i4")], "<i4", 0, True),
        # Not exact: numcodecs decodes in float64 and rounds to float32 once, scale_offset rounds twice.
        "fso-f4-u2": (lambda: [fso(offset=0.1, scale=3.7, dtype="<f4", astype="<u2")], "<f4", 0.0, False),
        # Not exact: NaN, the fill value, has no uint8 value for cast_value.
        "fso-f8-u1-nan-fill": (lambda: [fso(offset=0, scale=10, dtype="<f8", astype="u1")], "<f8", float("nan"), False),
        # Not converted: a 32-bit stored type cannot be checked value by value.
        "fso-f8-i4": (lambda: [fso(offset=0, scale=1000, dtype="<f8", astype="<i4")], "<f8", 0.0, False),
    }


@pytest.mark.parametrize("case", list(v2_cases()))
def test_v2_scale_filters_are_kept_where_exact(case, tmp_path, zshard_bin):
    filters, dtype, fill, exact = v2_cases()[case]
    src = tmp_path / "src.zarr"
    expected = v2_source(src, filters(), dtype, fill)
    dst = tmp_path / "out.zarr"
    run = convert(zshard_bin, src, dst, "--shard-shape", "10", "--chunk-shape", "5", "--compressor", "source")
    assert run.returncode == 0, run.stderr
    meta = json.loads((dst / "zarr.json").read_text())
    inner = [c["name"] for c in meta["codecs"][0]["configuration"]["codecs"]]
    if exact:
        kind = "fso" if case.startswith("fso") else "astype"
        assert inner == ([] if kind == "astype" else ["scale_offset"]) + ["cast_value", "bytes", "numcodecs.zlib"], inner
        assert "no exact Zarr v3 form" not in run.stderr, run.stderr
    else:
        assert inner == ["bytes", "zstd"], inner
        assert "has no exact Zarr v3 form" in run.stderr, run.stderr
    assert_same(read(dst), expected, f"zarr-python read of {case}")


# --------------------------------------------------------------------------------------------------
# v2 structured dtypes (numpy records in `.zarray`), written by zarr-python 2.18 and 3.4
# --------------------------------------------------------------------------------------------------

# zarr-python 2.18 (its own venv, tests/interop/run.sh) writes a v2 structured array: argv[1] the path,
# argv[2] the dtype descr as JSON, argv[3] the byte order to force ("<" or ">"). Rows 16.. stay unwritten.
ZARR2_STRUCTURED = r"""
import json, sys
import numpy as np, zarr, numcodecs
path, descr, order = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
def tuples(d):
    return [(n, tuples(t) if isinstance(t, list) else t) for n, t in d]
dtype = np.dtype(tuples(descr)).newbyteorder(order)
fill = np.zeros((), dtype=dtype)
fill["x"] = np.nan
a = zarr.open_array(path, mode="w", shape=(23, 5), chunks=(4, 3), dtype=dtype, fill_value=fill,
                    compressor=numcodecs.Zstd(level=3))
rng = np.random.default_rng(7)
raw = rng.integers(0, 256, 16 * 5 * dtype.itemsize, dtype="u1").tobytes()
values = np.frombuffer(raw, dtype=dtype).copy().reshape(16, 5)
values["x"][0, :3] = [np.nan, -0.0, np.inf]
a[:16, :] = values
"""

V2_STRUCTURED = {
    "flat": [["x", "<f4"], ["y", "<i2"], ["z", "|u1"]],
    # (no datetime field: numcodecs cannot take a buffer of records holding one)
    "nested": [["x", "<f8"], ["p", [["a", "<u2"], ["s", "|S3"]]], ["t", "<i8"]],
}


@pytest.mark.parametrize("producer", ["zarr-2.18", "zarr-python"])
@pytest.mark.parametrize("ident,order", [("flat", "<"), ("nested", "<"), ("nested", ">")])
def test_v2_structured_dtypes_convert_to_struct(producer, ident, order, tmp_path, zshard_bin):
    """Issue 33: a v2 array of numpy records becomes a v3 struct array that zarr-python reads back bit
    for bit, fill value (base64 in `.zarray`) and unwritten chunks included."""
    src = tmp_path / "src.zarr"
    descr = V2_STRUCTURED[ident]
    if producer == "zarr-2.18":
        python = os.environ.get("ZSHARD_ZARR2_PYTHON")
        if not python:
            pytest.fail("ZSHARD_ZARR2_PYTHON is not set (tests/interop/run.sh makes the zarr 2.18 venv)")
        run = subprocess.run([python, "-c", ZARR2_STRUCTURED, str(src), json.dumps(descr), order],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
    else:
        dtype = np.dtype([(n, [tuple(f) for f in t] if isinstance(t, list) else t) for n, t in descr])
        dtype = dtype.newbyteorder(order)
        fill = np.zeros((), dtype=dtype)
        fill["x"] = np.nan
        from numcodecs import Zstd

        a = zarr.create_array(str(src), shape=(23, 5), chunks=(4, 3), dtype=dtype, fill_value=fill[()],
                              zarr_format=2, compressors=Zstd(level=3))
        a[:16, :] = struct_values(dtype, 16 * 5, 3).reshape(16, 5)
    zarray = json.loads((src / ".zarray").read_text())
    assert isinstance(zarray["dtype"], list), zarray["dtype"]
    expected = read(src)
    dst = tmp_path / "out.zarr"
    run = convert(zshard_bin, src, dst, "--shard-shape", "8,6", "--chunk-shape", "4,3")
    assert run.returncode == 0, run.stderr
    meta = json.loads((dst / "zarr.json").read_text())
    assert meta["data_type"]["name"] == "struct"
    same_bits(read(dst), expected, f"{producer} {ident} {order}")
    fill_of = lambda p: zarr.open_array(str(p), mode="r").fill_value  # noqa: E731
    assert fill_of(dst).astype(expected.dtype.newbyteorder("=")).tobytes() == \
        fill_of(src).astype(expected.dtype.newbyteorder("=")).tobytes()


def test_v2_structured_dtypes_zshard_cannot_keep_are_refused_naming_the_array(tmp_path, zshard_bin):
    for name, descr in [("mixed", [["a", "<i4"], ["b", ">f8"]]), ("subarray", [["a", "<i4", [2]]])]:
        src = tmp_path / f"{name}.zarr"
        src.mkdir()
        (src / ".zarray").write_text(json.dumps({
            "zarr_format": 2, "shape": [4], "chunks": [2], "dtype": descr, "compressor": None,
            "fill_value": None, "order": "C", "filters": None}))
        run = convert(zshard_bin, src, tmp_path / f"{name}-out.zarr")
        assert run.returncode != 0
        assert str(src) in run.stderr and ".zarray" in run.stderr, run.stderr
        assert ("byte order" if name == "mixed" else "subarray") in run.stderr, run.stderr
