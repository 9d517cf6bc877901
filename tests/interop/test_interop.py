"""zshard interop tests: inputs written by zarr-python, outputs read back by
zarr-python and tensorstore and compared element-wise with the numpy source.

Run through tests/interop/run.sh (it makes the venv and sets ZSHARD_BIN).
"""

from __future__ import annotations

import dataclasses
import json
import os
import zlib
from pathlib import Path
from typing import Any, Optional

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs as zc

from conftest import (
    EMPTY,
    all_files,
    assert_readback,
    check_array_metadata,
    check_layout,
    chunk_key,
    convert_ok,
    data_files,
    load_json,
    run_zshard,
    shape_arg,
)

# --------------------------------------------------------------------------
# input generation
# --------------------------------------------------------------------------

SRC_COMPRESSORS_V2 = {
    "blosc-zstd-shuffle": lambda: numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
    "blosc-lz4-bitshuffle": lambda: numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.BITSHUFFLE),
    "zstd": lambda: numcodecs.Zstd(level=3),
    "gzip": lambda: numcodecs.GZip(level=5),
    "zlib": lambda: numcodecs.Zlib(level=5),
    "none": lambda: None,
}
SRC_COMPRESSORS_V3 = {
    "blosc-zstd-shuffle": lambda: zc.BloscCodec(cname="zstd", clevel=5, shuffle="shuffle"),
    "blosc-lz4-bitshuffle": lambda: zc.BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle"),
    "zstd": lambda: zc.ZstdCodec(level=3),
    "gzip": lambda: zc.GzipCodec(level=5),
    "none": lambda: None,
}

NAN = float("nan")


@dataclasses.dataclass
class Case:
    id: str
    fmt: int = 2
    dtype: str = "float32"
    shape: tuple = (23, 17)
    chunks: tuple = (5, 4)
    src_comp: str = "zstd"
    fill: Any = 0
    order: str = "C"  # v2 only
    sep: Optional[str] = None  # v2: dimension_separator; v3: use chunk_key_encoding v2 with this separator
    src_shards: Optional[tuple] = None  # v3 only: already-sharded input
    v3_endian: str = "little"  # v3 only: bytes codec endian of the input
    pattern: str = "holes"  # holes | full | partial
    attrs: Optional[dict] = None
    dims: Optional[list] = None
    # CLI
    shard: Optional[tuple] = None  # --shard-shape (None: auto)
    inner: Optional[tuple] = None  # --chunk-shape (None: default = source chunk shape)
    comp: Optional[str] = None  # --compressor (None: default zstd:3)
    loc: Optional[str] = None  # --index-location (None: default end)
    threads: Optional[int] = None
    quiet: bool = True

    def cli_opts(self) -> list[str]:
        o: list[str] = []
        if self.shard is not None:
            o += ["--shard-shape", shape_arg(self.shard)]
        if self.inner is not None:
            o += ["--chunk-shape", shape_arg(self.inner)]
        if self.comp is not None:
            o += ["--compressor", self.comp]
        if self.loc is not None:
            o += ["--index-location", self.loc]
        if self.threads is not None:
            o += ["--threads", str(self.threads)]
        if self.quiet:
            o += ["--quiet"]
        return o

    def expected_inner(self) -> Optional[tuple]:
        if self.inner is not None:
            return self.inner
        if self.src_shards is not None:
            return None  # "source chunk shape" of a sharded input is ambiguous: not pinned
        return self.chunks


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def random_data(dtype: str, shape: tuple, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    nat = dt.newbyteorder("=")
    if dt.kind == "b":
        a = rng.random(shape) < 0.5
    elif dt.kind in "iu":
        info = np.iinfo(nat)
        a = rng.integers(info.min, info.max, size=shape, dtype=nat, endpoint=True)
    elif dt.kind == "f":
        a = (rng.standard_normal(shape) * 1000).astype(nat)
        flat = a.reshape(-1)
        n = flat.size
        flat[rng.random(n) < 0.05] = np.nan
        if n > 4:
            flat[rng.integers(0, n, 2)] = np.inf
            flat[rng.integers(0, n, 1)] = -np.inf
    elif dt.kind == "c":
        a = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(nat)
        flat = a.reshape(-1)
        m = rng.random(flat.size) < 0.05
        flat[m] = complex(np.nan, 1.0)
    else:
        raise ValueError(dtype)
    return np.ascontiguousarray(a).astype(dt)


def make_expected(case: Case) -> np.ndarray:
    data = random_data(case.dtype, case.shape, _seed(case.id))
    if case.pattern == "full" or case.fill is None:
        return data
    fill = np.asarray(case.fill, dtype=data.dtype)
    exp = data.copy()
    n0 = case.shape[0]
    if case.pattern == "holes":
        # trailing ~40% along axis 0, plus a stripe along the last axis
        exp[(n0 * 3) // 5 :] = fill
        nl = case.shape[-1]
        if len(case.shape) > 1 and nl >= 3:
            exp[..., nl // 3 : (2 * nl) // 3] = fill
        return exp
    if case.pattern == "partial":
        exp[...] = fill
        k = min(case.chunks[0], n0)  # only the first row of source chunks is written
        exp[:k] = data[:k]
        return exp
    raise ValueError(case.pattern)


def create_source(case: Case, src: Path) -> np.ndarray:
    """Write the input with zarr-python; return the numpy array it must read as."""
    kw: dict[str, Any] = dict(
        store=str(src),
        shape=case.shape,
        chunks=case.chunks,
        dtype=case.dtype,
        zarr_format=case.fmt,
        fill_value=case.fill,
        filters=None,
    )
    attrs = dict(case.attrs or {})
    if case.fmt == 2:
        assert case.src_shards is None
        kw["compressors"] = SRC_COMPRESSORS_V2[case.src_comp]()
        kw["order"] = case.order
        if case.sep is not None:
            kw["chunk_key_encoding"] = {"name": "v2", "separator": case.sep}
        if case.dims is not None:
            attrs["_ARRAY_DIMENSIONS"] = list(case.dims)
    else:
        kw["compressors"] = SRC_COMPRESSORS_V3[case.src_comp]()
        if case.sep is not None:
            kw["chunk_key_encoding"] = {"name": "v2", "separator": case.sep}
        if case.src_shards is not None:
            kw["shards"] = case.src_shards
        if case.v3_endian != "little":
            kw["serializer"] = zc.BytesCodec(endian=case.v3_endian)
        if case.dims is not None:
            kw["dimension_names"] = list(case.dims)
    if attrs:
        kw["attributes"] = attrs
    arr = zarr.create_array(**kw)
    expected = make_expected(case)
    if case.pattern == "partial":
        k = min(case.chunks[0], case.shape[0])
        arr[:k] = expected[:k]
    else:
        arr[...] = expected
    # precondition: zarr-python reads the input back as `expected`
    back = zarr.open_array(str(src), mode="r")[...]
    assert np.array_equal(back, expected, equal_nan=expected.dtype.kind in "fc"), "input generation is broken"
    if case.fmt == 2:
        zarray = load_json(src / ".zarray")
        assert zarray["order"] == case.order and np.dtype(zarray["dtype"]) == np.dtype(case.dtype), zarray
    return expected


# --------------------------------------------------------------------------
# the matrix
# --------------------------------------------------------------------------

DTYPES = ["uint8", "int16", "uint16", "int32", "uint64", "float32", "float64", "bool", "complex64"]


def _cases() -> list[Case]:
    cs: list[Case] = []

    # A. input format x source compressor x index location (18)
    geoms = [
        dict(shape=(23, 17), chunks=(5, 4), shard=(10, 8)),
        dict(shape=(101,), chunks=(10,), shard=(40,)),
        dict(shape=(9, 11, 7), chunks=(4, 5, 3), shard=(8, 10, 6)),
        dict(shape=(30, 21), chunks=(8, 8), inner=(4, 4), shard=None),
    ]
    i = 0
    for fmt, comps in ((2, SRC_COMPRESSORS_V2), (3, SRC_COMPRESSORS_V3)):
        for comp in comps:
            if comp == "none":
                continue
            for loc in ("start", "end"):
                dt = DTYPES[i % len(DTYPES)]
                g = geoms[i % len(geoms)]
                cs.append(Case(id=f"A-v{fmt}-{comp}-{loc}-{dt}", fmt=fmt, dtype=dt, src_comp=comp, loc=loc, **g))
                i += 1

    # B. dtype sweep x format, fill values 0 / 7 / NaN / None / non-zero (18)
    def fill_for(fmt: int, dt: str) -> Any:
        k = np.dtype(dt).kind
        if k == "f":
            return NAN
        if k == "b":
            return fmt == 3  # False for v2, True for v3
        if k == "c":
            return complex(1, 2) if fmt == 2 else complex(NAN, 0)
        return 7 if fmt == 2 else 0

    for fmt in (2, 3):
        for j, dt in enumerate(DTYPES):
            cs.append(
                Case(
                    id=f"B-v{fmt}-{dt}",
                    fmt=fmt,
                    dtype=dt,
                    shape=(37, 29),
                    chunks=(8, 8),
                    shard=(16, 16),
                    fill=fill_for(fmt, dt),
                    src_comp=["zstd", "blosc-zstd-shuffle", "gzip"][j % 3],
                    loc=["end", "start", None][j % 3],
                    threads=[1, 2, None][(j + fmt) % 3],
                )
            )

    # C. geometry: 1-D / 2-D / 3-D, non-divisible shapes, inner == / < / unaligned, explicit / auto shard
    geo = [
        # id, fmt, dtype, shape, chunks, inner, shard
        ("1d-inner=src-shard-explicit", 2, "int32", (1000,), (64,), None, (256,)),
        ("1d-inner<src", 3, "float64", (1000,), (100,), (50,), (200,)),
        ("1d-unaligned-10-4-8", 2, "uint16", (97,), (10,), (4,), (8,)),
        ("1d-unaligned-auto-shard", 3, "int16", (97,), (10,), (4,), None),
        ("1d-all-default", 2, "float32", (97,), (10,), None, None),
        ("1d-single-element", 3, "uint8", (1,), (1,), None, None),
        ("2d-unaligned", 2, "float32", (50, 33), (10, 10), (4, 5), (8, 10)),
        ("2d-inner<src-auto-shard", 3, "int32", (50, 33), (10, 10), (5, 5), None),
        ("2d-odd-chunks", 2, "uint64", (50, 33), (7, 9), None, (14, 27)),
        ("2d-shard>array", 3, "complex64", (13, 7), (5, 4), None, (20, 8)),
        ("2d-one-src-chunk", 2, "int16", (24, 18), (24, 18), (6, 6), (12, 18)),
        ("3d-inner=src", 2, "float64", (17, 13, 11), (5, 4, 3), None, (10, 8, 6)),
        ("3d-unaligned", 2, "int32", (17, 13, 11), (6, 6, 6), (3, 2, 4), (6, 4, 8)),
        ("3d-auto-shard", 3, "uint16", (17, 13, 11), (5, 4, 3), None, None),
        ("3d-unaligned-v3", 3, "float32", (20, 9, 14), (7, 5, 5), (2, 3, 4), (4, 9, 8)),
    ]
    for k, (name, fmt, dt, shape, chunks, inner, shard) in enumerate(geo):
        cs.append(
            Case(
                id=f"C-v{fmt}-{name}",
                fmt=fmt,
                dtype=dt,
                shape=shape,
                chunks=chunks,
                inner=inner,
                shard=shard,
                src_comp=["blosc-lz4-bitshuffle", "zstd", "gzip", "blosc-zstd-shuffle"][k % 4],
                loc=["start", "end", None][k % 3],
                quiet=k % 2 == 0,
            )
        )

    # D. v2 specifics: dimension_separator, order F, big-endian, fill 0 / 7 / NaN / None
    v2 = [
        dict(id="D-sep-slash-2d", dtype="int16", sep="/", shape=(23, 17), chunks=(5, 4), shard=(10, 8)),
        dict(id="D-sep-slash-3d", dtype="float32", sep="/", shape=(9, 11, 7), chunks=(4, 5, 3), inner=(2, 5, 3), shard=(4, 10, 6), fill=NAN),
        dict(id="D-sep-dot-explicit", dtype="uint8", sep=".", shape=(23, 17), chunks=(5, 4), shard=(5, 8)),
        dict(id="D-order-F-2d", dtype="float64", order="F", shape=(23, 17), chunks=(5, 4), shard=(10, 8), fill=NAN),
        dict(id="D-order-F-3d-unaligned", dtype="int32", order="F", shape=(9, 11, 7), chunks=(4, 5, 3), inner=(3, 2, 2), shard=(6, 4, 4)),
        dict(id="D-order-F-slash-be", dtype=">u2", order="F", sep="/", shape=(23, 17), chunks=(5, 4), shard=(10, 8), fill=7),
        dict(id="D-be-u2-fill7", dtype=">u2", shape=(101,), chunks=(10,), shard=(40,), fill=7),
        dict(id="D-be-f8-fillnan", dtype=">f8", shape=(23, 17), chunks=(5, 4), shard=(10, 8), fill=NAN, src_comp="blosc-zstd-shuffle"),
        dict(id="D-be-i8", dtype=">i8", shape=(23, 17), chunks=(5, 4), inner=(5, 2), shard=(10, 8), src_comp="blosc-lz4-bitshuffle"),
        dict(id="D-be-c8", dtype=">c8", shape=(40,), chunks=(8,), shard=(16,), fill=0),
        dict(id="D-fill-none-int16", dtype="int16", shape=(23, 17), chunks=(5, 4), shard=(10, 8), fill=None, pattern="full"),
        dict(id="D-fill-none-f8-orderF", dtype="float64", order="F", shape=(23, 17), chunks=(5, 4), shard=(10, 8), fill=None, pattern="full"),
        dict(id="D-fill-0-f4", dtype="float32", shape=(23, 17), chunks=(5, 4), shard=(10, 8), fill=0, src_comp="zlib"),
        dict(id="D-no-compressor", dtype="int32", shape=(23, 17), chunks=(5, 4), shard=(10, 8), src_comp="none"),
    ]
    for d in v2:
        cs.append(Case(fmt=2, **d))

    # E. output --compressor variants (inner codec chain is checked in metadata)
    outs = [
        None,
        "zstd:1",
        "zstd:19",
        "gzip:1",
        "gzip:9",
        "blosc:lz4:5:shuffle",
        "blosc:zstd:3:bitshuffle",
        "blosc:blosclz:9:noshuffle",
        "blosc:zlib:1:shuffle",
        "blosc:lz4hc:4:noshuffle",
        "none",
    ]
    for k, comp in enumerate(outs):
        fmt = 2 if k % 2 == 0 else 3
        dt = ["float32", "int16", "uint64", "float64", "uint8", "complex64", "bool", "int32"][k % 8]
        cs.append(
            Case(
                id=f"E-v{fmt}-out-{comp or 'default'}-{dt}",
                fmt=fmt,
                dtype=dt,
                shape=(41, 19),
                chunks=(10, 10),
                inner=(5, 10),
                shard=(20, 20),
                comp=comp,
                loc="start" if k % 3 == 0 else None,
                src_comp="zstd",
            )
        )

    # F. missing chunks (only the first row of source chunks written) -> fill value
    miss = [
        dict(id="F-v2-missing-fill0", fmt=2, dtype="int32", fill=0),
        dict(id="F-v2-missing-fill7", fmt=2, dtype="uint16", fill=7, sep="/"),
        dict(id="F-v2-missing-fillnan", fmt=2, dtype="float64", fill=NAN, inner=(5, 2), shard=(10, 8)),
        dict(id="F-v3-missing-fill0", fmt=3, dtype="float32", fill=0, shard=(10, 8)),
        dict(id="F-v3-missing-fillnan", fmt=3, dtype="float32", fill=NAN, inner=(5, 4), shard=(20, 16), threads=2),
        dict(id="F-v3-missing-fill7-3d", fmt=3, dtype="int16", fill=7, shape=(9, 11, 7), chunks=(4, 5, 3), shard=(8, 10, 6)),
    ]
    for d in miss:
        cs.append(Case(pattern="partial", **d))

    # G. v3 specifics: already sharded input (re-shard), chunk_key_encoding v2, big-endian bytes codec
    cs += [
        Case(id="G-v3-resharded-1d", fmt=3, dtype="int32", shape=(203,), chunks=(5,), src_shards=(20,), inner=(10,), shard=(40,)),
        Case(id="G-v3-resharded-2d-smaller", fmt=3, dtype="float32", shape=(45, 38), chunks=(4, 4), src_shards=(16, 16), inner=(4, 4), shard=(8, 8), fill=NAN, loc="start"),
        Case(id="G-v3-resharded-default-inner", fmt=3, dtype="uint16", shape=(203,), chunks=(5,), src_shards=(20,), shard=(40,), src_comp="blosc-lz4-bitshuffle"),
        Case(id="G-v3-resharded-unaligned", fmt=3, dtype="float64", shape=(50, 30), chunks=(5, 6), src_shards=(10, 12), inner=(4, 4), shard=(8, 16), src_comp="gzip"),
        Case(id="G-v3-keyenc-v2-dot", fmt=3, dtype="int16", sep=".", shape=(23, 17), chunks=(5, 4), shard=(10, 8)),
        Case(id="G-v3-keyenc-v2-slash", fmt=3, dtype="float64", sep="/", shape=(9, 11, 7), chunks=(4, 5, 3), shard=(8, 5, 6), fill=NAN),
        Case(id="G-v3-bytes-big-endian", fmt=3, dtype="uint16", v3_endian="big", shape=(23, 17), chunks=(5, 4), shard=(10, 8), fill=7),
        Case(id="G-v3-bytes-big-endian-f8", fmt=3, dtype="float64", v3_endian="big", shape=(101,), chunks=(10,), shard=(20,), fill=NAN, src_comp="none"),
    ]

    # attributes / dimension names on a few array cases
    for c in cs:
        if _seed(c.id) % 4 == 0:
            c.attrs = {"note": c.id, "nested": {"a": [1, 2, 3], "b": None}}
            c.dims = [f"d{k}" for k in range(len(c.shape))]
    return cs


CASES = _cases()
assert len({c.id for c in CASES}) == len(CASES), "duplicate case ids"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_convert_array(case: Case, tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    expected = create_source(case, src)
    run = convert_ok(zshard_bin, src, dst, *case.cli_opts())

    problems: list[str] = []
    meta = None
    try:
        assert_readback(dst, expected)
    except Exception as e:  # noqa: BLE001 - collect all three kinds of failure
        problems.append(f"readback: {type(e).__name__}: {e}")
    try:
        meta = check_array_metadata(
            dst,
            shape=case.shape,
            dtype=case.dtype,
            inner=case.expected_inner(),
            shard=case.shard,
            index_location=case.loc or "end",
            compressor=case.comp,
            fill_value=case.fill,
            attributes=case.attrs,
            dimension_names=case.dims,
        )
    except Exception as e:  # noqa: BLE001
        problems.append(f"metadata: {type(e).__name__}: {e}")
    try:
        check_layout(dst, expected, meta)
    except Exception as e:  # noqa: BLE001
        problems.append(f"layout: {type(e).__name__}: {e}")
    if case.quiet and not problems:
        if run.stdout.strip() or run.stderr.strip():
            problems.append("--quiet run printed output:\n" + run.describe())
    assert not problems, f"{run.describe()}\n" + "\n".join(problems)


# --------------------------------------------------------------------------
# all-fill regions produce no shard object
# --------------------------------------------------------------------------


def test_unwritten_shard_not_created_1d(tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    arr = zarr.create_array(store=str(src), shape=(20,), chunks=(5,), dtype="int32", zarr_format=2,
                            compressors=numcodecs.Zstd(level=1), fill_value=0)
    arr[0:5] = np.arange(1, 6, dtype="int32")
    assert sorted(f for f in os.listdir(src) if not f.startswith(".")) == ["0"]
    expected = np.zeros(20, dtype="int32")
    expected[:5] = np.arange(1, 6)
    convert_ok(zshard_bin, src, dst, "--shard-shape", "10", "--quiet")
    meta = load_json(dst / "zarr.json")
    k0, k1 = chunk_key(meta, (0,)), chunk_key(meta, (1,))
    assert (dst / k0).is_file(), f"first shard {k0} missing; files: {sorted(all_files(dst))}"
    assert not (dst / k1).exists(), f"all-fill shard {k1} was written; files: {sorted(all_files(dst))}"
    if meta["chunk_key_encoding"]["name"] == "default":
        assert not (dst / "c" / "1").exists()
    assert data_files(dst) == {k0}, sorted(all_files(dst))
    check_layout(dst, expected, meta)
    assert_readback(dst, expected)


def test_unwritten_shard_not_created_2d(tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    arr = zarr.create_array(store=str(src), shape=(8, 8), chunks=(4, 4), dtype="float32", zarr_format=3,
                            compressors=zc.ZstdCodec(level=1), fill_value=np.nan)
    arr[0:4, 0:4] = 1.5
    expected = np.full((8, 8), np.nan, dtype="float32")
    expected[:4, :4] = 1.5
    convert_ok(zshard_bin, src, dst, "--shard-shape", "4,8", "--quiet")
    meta = load_json(dst / "zarr.json")
    k0, k1 = chunk_key(meta, (0, 0)), chunk_key(meta, (1, 0))
    assert (dst / k0).is_file(), sorted(all_files(dst))
    assert not (dst / k1).exists(), f"all-fill shard {k1} was written; files: {sorted(all_files(dst))}"
    # the second inner chunk of shard (0,0) is all fill: its index entry must be empty
    blob = (dst / k0).read_bytes()
    idx = blob[-(2 * 16 + 4):]
    off1, nb1 = np.frombuffer(idx[16:32], dtype="<u8")
    assert (int(off1), int(nb1)) == (EMPTY, EMPTY), f"all-fill inner chunk stored at {int(off1)}+{int(nb1)}"
    check_layout(dst, expected, meta)
    assert_readback(dst, expected)


def test_v2_zarray_without_dimension_separator(tmp_path: Path, zshard_bin: Path) -> None:
    """Older (zarr 2.x) .zarray files have no dimension_separator key: '.' is implied."""
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    arr = zarr.create_array(store=str(src), shape=(23, 17), chunks=(5, 4), dtype="<i4", zarr_format=2,
                            compressors=numcodecs.Zlib(level=1), fill_value=0)
    expected = random_data("<i4", (23, 17), 21)
    arr[...] = expected
    zarray = load_json(src / ".zarray")
    zarray.pop("dimension_separator", None)
    (src / ".zarray").write_text(json.dumps(zarray))
    assert (src / "1.2").is_file()
    convert_ok(zshard_bin, src, dst, "--shard-shape", "10,8", "--quiet")
    meta = check_array_metadata(dst, shape=(23, 17), dtype="<i4", inner=(5, 4), shard=(10, 8), fill_value=0)
    check_layout(dst, expected, meta)
    assert_readback(dst, expected)


# --------------------------------------------------------------------------
# groups
# --------------------------------------------------------------------------


def test_v2_group_consolidated(tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=2, attributes={"title": "interop", "version": 3})
    t = g.create_array("temperature", shape=(30, 20), chunks=(8, 8), dtype="float32",
                       compressors=numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
                       fill_value=np.nan, chunk_key_encoding={"name": "v2", "separator": "/"},
                       attributes={"_ARRAY_DIMENSIONS": ["y", "x"], "units": "K", "scale": 0.5})
    temp = random_data("float32", (30, 20), 1)
    temp[20:] = np.nan
    t[...] = temp
    sub = g.create_group("sub", attributes={"kind": "nested", "list": [1, 2]})
    c = sub.create_array("counts", shape=(45,), chunks=(10,), dtype=">i4",
                         compressors=numcodecs.Zlib(level=4), fill_value=7,
                         attributes={"_ARRAY_DIMENSIONS": ["time"]})
    counts = random_data(">i4", (45,), 2)
    c[...] = counts
    zarr.consolidate_metadata(str(src))
    assert (src / ".zmetadata").is_file()

    convert_ok(zshard_bin, src, dst, "--quiet")

    files = all_files(dst)
    v2meta = sorted(f for f in files if f.rsplit("/", 1)[-1] in (".zarray", ".zgroup", ".zattrs", ".zmetadata"))
    assert not v2meta, f"v2 metadata files in output: {v2meta}"
    for p in ("zarr.json", "sub/zarr.json", "temperature/zarr.json", "sub/counts/zarr.json"):
        assert (dst / p).is_file(), f"missing {p}; files: {sorted(files)}"
    root = load_json(dst / "zarr.json")
    assert root["zarr_format"] == 3 and root["node_type"] == "group", root
    assert load_json(dst / "sub/zarr.json")["node_type"] == "group"

    out = zarr.open_group(str(dst), mode="r")
    assert out.metadata.zarr_format == 3
    assert out.attrs["title"] == "interop" and out.attrs["version"] == 3, dict(out.attrs)
    assert dict(out["sub"].attrs) == {"kind": "nested", "list": [1, 2]} or (
        out["sub"].attrs["kind"] == "nested" and out["sub"].attrs["list"] == [1, 2]
    ), dict(out["sub"].attrs)
    assert sorted(out.group_keys()) == ["sub"], sorted(out.group_keys())
    assert sorted(out.array_keys()) == ["temperature"], sorted(out.array_keys())
    assert sorted(out["sub"].array_keys()) == ["counts"]

    tm = check_array_metadata(dst / "temperature", shape=(30, 20), dtype="float32", inner=(8, 8), shard=None,
                              fill_value=NAN, attributes={"units": "K", "scale": 0.5}, dimension_names=["y", "x"])
    cm = check_array_metadata(dst / "sub/counts", shape=(45,), dtype=">i4", inner=(10,), shard=None,
                              fill_value=7, dimension_names=["time"])
    check_layout(dst / "temperature", temp, tm)
    check_layout(dst / "sub/counts", counts, cm)
    assert_readback(dst / "temperature", temp)
    assert_readback(dst / "sub/counts", counts)
    np.testing.assert_array_equal(out["sub/counts"][...], counts)
    assert out["temperature"].metadata.dimension_names == ("y", "x")


def test_v3_group_nested(tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=3, attributes={"root": True})
    a = g.create_array("a", shape=(25, 12), chunks=(10, 5), dtype="int32",
                       compressors=zc.ZstdCodec(level=2), fill_value=0, dimension_names=["row", "col"],
                       attributes={"desc": "top-level"})
    av = random_data("int32", (25, 12), 3)
    av[10:] = 0
    a[...] = av
    g1 = g.create_group("g1", attributes={"level": 1})
    g2 = g1.create_group("g2", attributes={"level": 2})
    b = g2.create_array("b", shape=(33,), chunks=(8,), dtype="float64",
                        compressors=zc.BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle"),
                        fill_value=np.nan, dimension_names=["t"])
    bv = random_data("float64", (33,), 4)
    b[...] = bv
    c = g1.create_array("c", shape=(6, 5, 4), chunks=(3, 5, 2), dtype="complex64",
                        compressors=zc.GzipCodec(level=1), fill_value=0)
    cv = random_data("complex64", (6, 5, 4), 5)
    c[...] = cv

    convert_ok(zshard_bin, src, dst, "--index-location", "start", "--compressor", "gzip:2", "--quiet")

    out = zarr.open_group(str(dst), mode="r")
    assert out.attrs["root"] is True
    assert out["g1"].attrs["level"] == 1 and out["g1/g2"].attrs["level"] == 2
    for p in ("zarr.json", "g1/zarr.json", "g1/g2/zarr.json"):
        m = load_json(dst / p)
        assert m["zarr_format"] == 3 and m["node_type"] == "group", (p, m)
    for path, vals, inner, dims, fill, attrs in (
        ("a", av, (10, 5), ["row", "col"], 0, {"desc": "top-level"}),
        ("g1/g2/b", bv, (8,), ["t"], NAN, None),
        ("g1/c", cv, (3, 5, 2), None, 0, None),
    ):
        m = check_array_metadata(dst / path, shape=vals.shape, dtype=vals.dtype, inner=inner, shard=None,
                                 index_location="start", compressor="gzip:2", fill_value=fill,
                                 attributes=attrs, dimension_names=dims)
        check_layout(dst / path, vals, m)
        assert_readback(dst / path, vals)


# --------------------------------------------------------------------------
# CLI errors
# --------------------------------------------------------------------------


def _small_v2(src: Path, shape=(16, 16), chunks=(4, 4)) -> None:
    arr = zarr.create_array(store=str(src), shape=shape, chunks=chunks, dtype="int16", zarr_format=2,
                            compressors=numcodecs.Zstd(level=1), fill_value=0)
    arr[...] = random_data("int16", shape, 9)


def assert_clean_failure(r) -> None:
    """Non-zero exit by a handled error: not a Rust panic (exit 101 / 'panicked at')."""
    assert r.returncode != 0, "expected failure\n" + r.describe()
    assert r.returncode != 101 and "panicked at" not in r.stderr, "zshard panicked instead of reporting an error\n" + r.describe()
    assert r.stderr.strip(), "no error message on stderr\n" + r.describe()


def _assert_no_shards(dst: Path) -> None:
    if dst.exists():
        leftovers = sorted(data_files(dst))
        assert not leftovers, f"failed conversion left data files in DST: {leftovers}"


@pytest.mark.parametrize(
    "opts, words",
    [
        (["--shard-shape", "8,8,8"], ["shard"]),
        (["--shard-shape", "8"], ["shard"]),
        (["--chunk-shape", "4", "--shard-shape", "8,8"], ["chunk"]),
        (["--chunk-shape", "3,4", "--shard-shape", "8,8"], ["divid", "divis", "multiple"]),
        (["--chunk-shape", "4,4", "--shard-shape", "8,6"], ["divid", "divis", "multiple"]),
        (["--compressor", "lz5:3"], ["compressor", "lz5"]),
        (["--compressor", "blosc:zstd:3:weird"], ["shuffle", "weird", "compressor"]),
        (["--index-location", "middle"], ["index", "middle"]),
        (["--shard-shape", "0,8"], ["shard", "0"]),
    ],
    ids=[
        "shard-ndim-too-many",
        "shard-ndim-too-few",
        "chunk-ndim",
        "inner-not-dividing-shard",
        "inner-not-dividing-shard-2",
        "compressor-unknown",
        "blosc-bad-shuffle",
        "bad-index-location",
        "zero-shard-dim",
    ],
)
def test_cli_error(opts: list[str], words: list[str], tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    _small_v2(src)
    r = run_zshard(zshard_bin, ["convert", src, dst, *opts])
    assert_clean_failure(r)
    err = r.stderr.lower()
    assert any(w in err for w in words), f"stderr should mention one of {words}\n" + r.describe()
    _assert_no_shards(dst)


def test_cli_error_missing_src(tmp_path: Path, zshard_bin: Path) -> None:
    r = run_zshard(zshard_bin, ["convert", tmp_path / "nope.zarr", tmp_path / "dst.zarr"])
    assert_clean_failure(r)
    _assert_no_shards(tmp_path / "dst.zarr")


def test_quiet_prints_nothing(tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    _small_v2(src)
    r = convert_ok(zshard_bin, src, dst, "--quiet", "--threads", "2")
    assert r.stdout == "" and r.stderr == "", "--quiet printed output\n" + r.describe()


# --------------------------------------------------------------------------
# corruption
# --------------------------------------------------------------------------


def _garbage(n: int) -> bytes:
    return bytes(((i * 37 + 11) ^ (i >> 3)) & 0xFF for i in range(n))


def test_corrupt_chunk_v2_blosc(tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    codec = numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    arr = zarr.create_array(store=str(src), shape=(16, 16), chunks=(4, 4), dtype="float32", zarr_format=2,
                            compressors=codec, fill_value=0)
    arr[...] = random_data("float32", (16, 16), 11) + 1  # NaN/inf kept; no all-fill chunk
    victim = src / "1.2"  # rows 4..8, cols 8..12 -> shard (0, 1) of shard shape (8, 8)
    n = victim.stat().st_size
    bad = _garbage(n)
    with pytest.raises(Exception):
        codec.decode(bad)  # precondition: garbage really is undecodable
    victim.write_bytes(bad)

    r = run_zshard(zshard_bin, ["convert", src, dst, "--shard-shape", "8,8", "--quiet"])
    assert r.returncode != 0, "corrupt chunk was not detected\n" + r.describe()
    assert_clean_failure(r)
    assert "1.2" in r.stderr, "stderr does not name chunk key 1.2\n" + r.describe()
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, "error should be one line on stderr\n" + r.describe()
    for k in ("c/0/1", "c.0.1", "0.1", "0/1"):
        assert not (dst / k).is_file(), f"shard covering the corrupt chunk exists at {k}\n" + r.describe()


def test_corrupt_chunk_in_group_names_array(tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=2)
    sub = g.create_group("sub")
    codec = numcodecs.Zstd(level=3)
    a = sub.create_array("temperature", shape=(12, 12), chunks=(3, 3), dtype="int32",
                         compressors=codec, fill_value=0)
    a[...] = random_data("int32", (12, 12), 12)
    victim = src / "sub" / "temperature" / "2.1"  # rows 6..9, cols 3..6 -> shard (1, 0) of (6, 6)
    bad = _garbage(victim.stat().st_size)
    with pytest.raises(Exception):
        codec.decode(bad)
    victim.write_bytes(bad)

    r = run_zshard(zshard_bin, ["convert", src, dst, "--shard-shape", "6,6", "--quiet"])
    assert r.returncode != 0, "corrupt chunk was not detected\n" + r.describe()
    assert_clean_failure(r)
    assert "temperature" in r.stderr, "stderr does not name the array\n" + r.describe()
    assert "2.1" in r.stderr, "stderr does not name chunk key 2.1\n" + r.describe()
    out = dst / "sub" / "temperature"
    for k in ("c/1/0", "c.1.0", "1.0", "1/0"):
        assert not (out / k).is_file(), f"shard covering the corrupt chunk exists at {k}\n" + r.describe()


def test_corrupt_chunk_v3_zstd(tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    arr = zarr.create_array(store=str(src), shape=(40,), chunks=(5,), dtype="uint16", zarr_format=3,
                            compressors=zc.ZstdCodec(level=3), fill_value=0)
    arr[...] = random_data("uint16", (40,), 13) | 1
    victim = src / "c" / "5"  # elements 25..30 -> shard 2 of shard shape 10
    victim.write_bytes(_garbage(victim.stat().st_size))

    r = run_zshard(zshard_bin, ["convert", src, dst, "--shard-shape", "10", "--threads", "2", "--quiet"])
    assert r.returncode != 0, "corrupt chunk was not detected\n" + r.describe()
    assert_clean_failure(r)
    assert "c/5" in r.stderr or "c" + os.sep + "5" in r.stderr, "stderr does not name chunk key c/5\n" + r.describe()
    assert not (dst / "c" / "2").is_file(), "shard covering the corrupt chunk exists\n" + r.describe()


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_fixed_length_bytes(zshard_bin, tmp_path, zarr_format):
    """numpy `S5` arrays (v2 `|S5`, v3 `null_terminated_bytes`) convert and read back equal in
    zarr-python (tensorstore has no such data type, so it is not asked)."""
    import subprocess

    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    data = np.array([b"alpha", b"be", b"", b"gamma", b"d", b"epsil"] * 7, dtype="S5").reshape(6, 7)
    a = zarr.create_array(store=str(src), shape=data.shape, chunks=(4, 3), dtype="S5", zarr_format=zarr_format)
    a[:] = data
    out = subprocess.run([str(zshard_bin), "convert", str(src), str(dst), "--shard-shape", "8,6",
                          "--chunk-shape", "4,3", "--quiet"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    got = zarr.open_array(str(dst), mode="r")[:]
    assert got.dtype == data.dtype
    np.testing.assert_array_equal(got, data)
