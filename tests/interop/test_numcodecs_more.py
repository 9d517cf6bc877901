"""numcodecs codecs beyond the common compressors: pcodec, bitround, jenkins_lookup3, and checksums
(adler32, fletcher32, crc32) standing as a Zarr v2 *compressor*.

Every source is written by zarr-python 3.1 with numcodecs' own codecs (pcodec through the `pcodec`
package, which binds the same `pco` crate zshard uses); zshard converts it, and the output must equal
what zarr-python reads from the source, element by element and bit for bit (bitround is lossy: the
reference is numcodecs' own decode, which is what zarr-python reads). Shapes leave edge chunks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs.numcodecs as znc

from conftest import assert_readback, convert_ok, load_json, read_with_zarr, run_zshard

SHAPE = (37, 23)
CHUNKS = (10, 8)


def _data(dtype: str) -> np.ndarray:
    """Smooth values with noise and a few extremes, as pcodec's modes and deltas see in practice."""
    rng = np.random.default_rng(16)
    dt = np.dtype(dtype)
    n = SHAPE[0] * SHAPE[1]
    if dt.kind == "f":
        base = np.linspace(-50.0, 50.0, n) + rng.normal(0, 0.1, n)
        out = base.astype(dt)
        out[3] = np.nan
        out[5] = -0.0
        out[7] = np.finfo(dt).max
    else:
        info = np.iinfo(dt)
        out = (np.arange(n) * 37 + rng.integers(0, 5, n)).astype(dt)
        out[2], out[9] = info.min, info.max
    return out.reshape(SHAPE)


def _write(src: Path, dtype: str, fmt: int, **codecs: Any) -> np.ndarray:
    """Writes the source with zarr-python; returns what zarr-python reads back from it."""
    arr = zarr.create_array(
        store=str(src), shape=SHAPE, chunks=CHUNKS, dtype=dtype, zarr_format=fmt, fill_value=0,
        **codecs,
    )
    arr[...] = _data(dtype)
    return read_with_zarr(src)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def _assert_bits(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    diff = np.argwhere(_bits(actual) != _bits(expected))
    assert diff.size == 0, f"{what}: {len(diff)} elements differ, first at {tuple(diff[0])}"


def _convert_and_check(zshard_bin: Path, src: Path, dst: Path, expected: np.ndarray, *opts: str) -> None:
    convert_ok(zshard_bin, src, dst, "--shard-shape", "20,16", "--quiet", *opts)
    _assert_bits(read_with_zarr(dst), expected, f"zarr-python read of {dst}")


PCODEC_DTYPES = ["int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]
PCODEC_CONFIGS = {
    "default": {},
    "classic-try_consecutive": {"level": 3, "mode_spec": "classic", "delta_spec": "try_consecutive",
                                "delta_encoding_order": 2},
    "lookback-small-pages": {"level": 12, "delta_spec": "try_lookback", "equal_pages_up_to": 30},
}


@pytest.mark.parametrize("dtype", PCODEC_DTYPES)
def test_pcodec_v2_compressor(dtype: str, tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    expected = _write(src, dtype, 2, compressors=numcodecs.PCodec(level=8), filters=None)
    assert load_json(src / ".zarray")["compressor"]["id"] == "pcodec"
    _convert_and_check(zshard_bin, src, dst, expected)
    assert_readback(dst, expected)  # zstd output: tensorstore reads it too


def test_pcodec_v2_fortran_order(tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    expected = _write(src, "float64", 2, compressors=numcodecs.PCodec(), filters=None, order="F")
    _convert_and_check(zshard_bin, src, dst, expected)


@pytest.mark.parametrize("config", sorted(PCODEC_CONFIGS))
@pytest.mark.parametrize("dtype", ["int32", "uint64", "float32", "float64"])
def test_pcodec_v3_serializer(dtype: str, config: str, tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    expected = _write(src, dtype, 3, serializer=znc.PCodec(**PCODEC_CONFIGS[config]), compressors=None)
    assert [c["name"] for c in load_json(src / "zarr.json")["codecs"]] == ["numcodecs.pcodec"]
    _convert_and_check(zshard_bin, src, dst, expected)
    assert_readback(dst, expected)


def test_pcodec_kept_as_source_codec_and_reencoded(tmp_path: Path, zshard_bin: Path) -> None:
    """`--compressor source` keeps numcodecs.pcodec; other inner chunks make zshard's own pco encoder
    write them, and zarr-python (pcodec's Python package) decodes what it wrote."""
    src = tmp_path / "src.zarr"
    config = PCODEC_CONFIGS["classic-try_consecutive"]
    expected = _write(src, "float32", 3, serializer=znc.PCodec(**config), compressors=None)
    for name, opts in [("same", []), ("rechunked", ["--chunk-shape", "5,4"])]:
        dst = tmp_path / f"{name}.zarr"
        _convert_and_check(zshard_bin, src, dst, expected, "--compressor", "source", *opts)
        inner = load_json(dst / "zarr.json")["codecs"][0]["configuration"]["codecs"]
        assert [c["name"] for c in inner] == ["numcodecs.pcodec"], inner
        assert {k: inner[0]["configuration"][k] for k in config} == config, inner


def test_pcodec_after_a_filter_is_refused_naming_the_array(tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    _write(src, "int32", 2, compressors=numcodecs.PCodec(), filters=[numcodecs.Delta(dtype="<i4")])
    run = run_zshard(zshard_bin, ["convert", src, dst])
    assert run.returncode == 1, run.describe()
    assert "compressor pcodec after filters is not supported" in run.stderr, run.describe()
    assert str(src) in run.stderr or ".zarray" in run.stderr, run.describe()
    assert not dst.exists(), "nothing may be written when planning refuses"


@pytest.mark.parametrize("keepbits", [0, 5])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("fmt", [2, 3])
def test_bitround(fmt: int, dtype: str, keepbits: int, tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    filters = [numcodecs.BitRound(keepbits=keepbits)] if fmt == 2 else [znc.BitRound(keepbits=keepbits)]
    compressors = numcodecs.Zstd(level=1) if fmt == 2 else znc.Zstd(level=1)
    expected = _write(src, dtype, fmt, filters=filters, compressors=compressors)
    # The source really is rounded: numcodecs' decode differs from the values written.
    assert not np.array_equal(_bits(expected), _bits(_data(dtype)))
    _convert_and_check(zshard_bin, src, dst, expected)
    assert_readback(dst, expected)


CHECKSUMS_V2 = {
    "adler32": lambda: numcodecs.Adler32(),
    "adler32-end": lambda: numcodecs.Adler32(location="end"),
    "fletcher32": lambda: numcodecs.Fletcher32(),
    "crc32": lambda: numcodecs.CRC32(),
    "jenkins_lookup3": lambda: numcodecs.JenkinsLookup3(),
    "jenkins_lookup3-initval": lambda: numcodecs.JenkinsLookup3(initval=12345),
}


@pytest.mark.parametrize("dtype", ["uint8", "int32", "float64"])
@pytest.mark.parametrize("name", sorted(CHECKSUMS_V2))
def test_checksum_as_v2_compressor(name: str, dtype: str, tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    expected = _write(src, dtype, 2, compressors=CHECKSUMS_V2[name](), filters=None)
    assert load_json(src / ".zarray")["compressor"]["id"] == name.split("-")[0]
    _convert_and_check(zshard_bin, src, dst, expected)
    assert_readback(dst, expected)


@pytest.mark.parametrize("fmt", [2, 3])
def test_jenkins_lookup3_as_filter_or_v3_codec(fmt: int, tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    if fmt == 2:
        codecs: dict[str, Any] = dict(filters=[numcodecs.JenkinsLookup3(initval=7)],
                                      compressors=numcodecs.Zlib(level=1))
    else:
        codecs = dict(compressors=[znc.JenkinsLookup3(initval=7), znc.Zlib(level=1)])
    expected = _write(src, "int16", fmt, **codecs)
    _convert_and_check(zshard_bin, src, dst, expected)
    assert_readback(dst, expected)


def test_a_corrupt_checksummed_chunk_is_an_error_naming_the_chunk(tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    _write(src, "int32", 2, compressors=numcodecs.JenkinsLookup3(), filters=None)
    chunk = src / "1.2"
    blob = bytearray(chunk.read_bytes())
    blob[5] ^= 0x40
    chunk.write_bytes(bytes(blob))
    with pytest.raises(RuntimeError, match="lookup3 checksum"):
        read_with_zarr(src)  # numcodecs refuses it too
    run = run_zshard(zshard_bin, ["convert", src, dst, "--quiet"])
    assert run.returncode == 1, run.describe()
    assert "1.2" in run.stderr and "numcodecs.jenkins_lookup3: checksum mismatch" in run.stderr, run.describe()
