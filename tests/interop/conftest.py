"""Shared helpers for the zshard Python interop suite.

The suite drives the real `zshard` binary (path from $ZSHARD_BIN, default
<repo>/target/release/zshard) on inputs written by zarr-python, then reads the
output back with zarr-python AND tensorstore and checks it element-wise against
the numpy array the input was made from.  It also inspects the output on disk:
metadata JSON, the shard files present, and every shard's index (parsed here
byte by byte, CRC32C included).

If the binary is missing every test fails (it does not skip).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import struct
import subprocess
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO / "target" / "release" / "zshard"
RUN_TIMEOUT_S = 120

EMPTY = 0xFFFFFFFFFFFFFFFF  # sharding index entry of an absent inner chunk


# --------------------------------------------------------------------------
# binary + running it
# --------------------------------------------------------------------------


def _bin_path() -> Path:
    return Path(os.environ.get("ZSHARD_BIN", str(DEFAULT_BIN)))


@pytest.fixture(scope="session")
def zshard_bin() -> Path:
    p = _bin_path()
    if not p.is_file() or not os.access(p, os.X_OK):
        pytest.fail(
            f"zshard binary not found or not executable at {p} "
            "(set ZSHARD_BIN, or build target/release/zshard)",
            pytrace=False,
        )
    return p


class Run:
    """Result of one zshard invocation, with a printable description."""

    def __init__(self, argv: list[str], proc: subprocess.CompletedProcess):
        self.argv = argv
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    def describe(self) -> str:
        return (
            f"command: {shlex.join(self.argv)}\n"
            f"exit: {self.returncode}\n"
            f"stdout: {self.stdout!r}\n"
            f"stderr: {self.stderr!r}"
        )


def run_zshard(bin_path: Path, args: Sequence[Any]) -> Run:
    argv = [str(bin_path)] + [str(a) for a in args]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    return Run(argv, proc)


def convert_ok(bin_path: Path, src: Path, dst: Path, *opts: Any) -> Run:
    r = run_zshard(bin_path, ["convert", src, dst, *opts])
    assert r.returncode == 0, "zshard convert failed\n" + r.describe()
    return r


def shape_arg(shape: Iterable[int]) -> str:
    return ",".join(str(int(s)) for s in shape)


def cached_bytes(path: Path) -> int:
    """Bytes of the file that the page cache holds (util-linux's fincore)."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


def filesystem(path: Path) -> str:
    """The type of the filesystem `path` is on, as `stat -f` names it ("ext2/ext3" for ext4, "tmpfs", "xfs")."""
    return subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True).stdout.strip()


def evict(path: Path) -> None:
    """Drops a written file's pages from the page cache, as a source nobody has read lately is."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def noise_source(path: Path, shape: tuple[int, ...], chunks: tuple[int, ...], seed: int) -> np.ndarray:
    """A Zarr v2 uint16 array of random values (zstd 1, which cannot shrink them), written by
    zarr-python; returns the values."""
    import numcodecs
    import zarr
    data = np.random.default_rng(seed).integers(0, 2**16, size=shape, dtype="<u2")
    a = zarr.create_array(str(path), shape=shape, chunks=chunks, dtype="<u2",
                          compressors=numcodecs.Zstd(level=1), fill_value=0, zarr_format=2)
    a[:] = data
    return data


# --------------------------------------------------------------------------
# CRC32C (Castagnoli), pure Python: index blobs are tiny
# --------------------------------------------------------------------------


def _make_crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _make_crc_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


# --------------------------------------------------------------------------
# equality
# --------------------------------------------------------------------------


def native(dt: Any) -> np.dtype:
    """The dtype the output must have: same kind/size, native (little) byte order."""
    return np.dtype(dt).newbyteorder("=")


def assert_same(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == native(expected.dtype), (
        f"{what}: dtype {actual.dtype} != {native(expected.dtype)}"
    )
    equal_nan = expected.dtype.kind in "fc"
    if not np.array_equal(actual, expected, equal_nan=equal_nan):
        if equal_nan:
            diff = ~((actual == expected) | (np.isnan(actual) & np.isnan(expected)))
        else:
            diff = actual != expected
        idx = np.argwhere(diff)
        first = tuple(int(i) for i in idx[0])
        raise AssertionError(
            f"{what}: {len(idx)} of {expected.size} elements differ; first at {first}: "
            f"got {actual[first]!r}, expected {expected[first]!r}"
        )


def read_with_zarr(path: Path) -> np.ndarray:
    import zarr

    return zarr.open_array(str(path), mode="r")[...]


def read_with_tensorstore(path: Path) -> np.ndarray:
    import tensorstore as ts

    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
    return ts.open(spec).result().read().result()


def assert_readback(dst: Path, expected: np.ndarray) -> None:
    """Read `dst` with both zarr-python and tensorstore; compare with `expected`."""
    assert_same(read_with_zarr(dst), expected, f"zarr-python read of {dst}")
    assert_same(read_with_tensorstore(dst), expected, f"tensorstore read of {dst}")


# --------------------------------------------------------------------------
# output metadata
# --------------------------------------------------------------------------

V3_DTYPE_NAMES = {
    "b1": "bool",
    "i1": "int8",
    "i2": "int16",
    "i4": "int32",
    "i8": "int64",
    "u1": "uint8",
    "u2": "uint16",
    "u4": "uint32",
    "u8": "uint64",
    "f2": "float16",
    "f4": "float32",
    "f8": "float64",
    "c8": "complex64",
    "c16": "complex128",
}


def v3_dtype_name(dt: Any) -> str:
    d = np.dtype(dt)
    return V3_DTYPE_NAMES[f"{d.kind}{d.itemsize}"]


def load_json(p: Path) -> dict:
    with open(p) as f:
        return json.load(f)


def shard_config(meta: dict) -> dict:
    codecs = meta["codecs"]
    assert isinstance(codecs, list) and len(codecs) >= 1, f"codecs: {codecs!r}"
    assert codecs[0]["name"] == "sharding_indexed", f"codecs[0] is {codecs[0]!r}"
    assert len(codecs) == 1, f"unexpected array->bytes/bytes->bytes codecs after sharding: {codecs!r}"
    return codecs[0]["configuration"]


def _parse_compressor(spec: str | None) -> tuple[str, dict] | None:
    """Expected inner bytes->bytes codec for a --compressor SPEC (None = default)."""
    if spec is None:
        spec = "zstd:3"
    parts = spec.split(":")
    if parts[0] == "none":
        return None
    if parts[0] == "zstd":
        return "zstd", {"level": int(parts[1])}
    if parts[0] == "gzip":
        return "gzip", {"level": int(parts[1])}
    if parts[0] == "blosc":
        return "blosc", {"cname": parts[1], "clevel": int(parts[2]), "shuffle": parts[3]}
    raise ValueError(spec)


def check_array_metadata(
    dst: Path,
    *,
    shape: Sequence[int],
    dtype: Any,
    inner: Sequence[int] | None,
    shard: Sequence[int] | None,
    index_location: str = "end",
    compressor: str | None = None,
    fill_value: Any = "unchecked",
    attributes: dict | None = None,
    dimension_names: Sequence[str] | None = None,
) -> dict:
    """Check dst/zarr.json; return it.  inner/shard None = not pinned (auto)."""
    meta = load_json(dst / "zarr.json")
    assert meta.get("zarr_format") == 3, meta
    assert meta.get("node_type") == "array", meta
    assert list(meta["shape"]) == list(shape), (meta["shape"], shape)
    assert meta["data_type"] == v3_dtype_name(dtype), (meta["data_type"], dtype)
    grid = meta["chunk_grid"]
    assert grid["name"] == "regular", grid
    shard_shape = list(grid["configuration"]["chunk_shape"])
    cfg = shard_config(meta)
    inner_shape = list(cfg["chunk_shape"])
    assert len(shard_shape) == len(shape) and len(inner_shape) == len(shape), (shard_shape, inner_shape)
    if shard is not None:
        assert shard_shape == list(shard), f"shard shape {shard_shape} != requested {list(shard)}"
    if inner is not None:
        assert inner_shape == list(inner), f"inner chunk shape {inner_shape} != expected {list(inner)}"
    for s, c in zip(shard_shape, inner_shape):
        assert c >= 1 and s >= c and s % c == 0, f"shard {shard_shape} not a multiple of inner {inner_shape}"

    assert cfg.get("index_location", "end") == index_location, cfg
    # index_codecs: bytes(little) + crc32c
    ic = cfg["index_codecs"]
    assert [c["name"] for c in ic] == ["bytes", "crc32c"], ic
    assert ic[0].get("configuration", {}).get("endian") == "little", ic

    # inner codecs: bytes (little endian, no transpose => C order) [+ compressor]
    inner_codecs = cfg["codecs"]
    names = [c["name"] for c in inner_codecs]
    assert "transpose" not in names, f"output must be C order, got codecs {inner_codecs!r}"
    assert names[0] == "bytes", inner_codecs
    endian = inner_codecs[0].get("configuration", {}).get("endian")
    if np.dtype(dtype).itemsize > 1:
        assert endian == "little", f"bytes codec endian {endian!r}, expected 'little'"
    else:
        assert endian in (None, "little", "big"), inner_codecs[0]
    want = _parse_compressor(compressor)
    if want is None:
        assert names == ["bytes"], f"--compressor none but codecs {inner_codecs!r}"
    else:
        assert len(names) == 2 and names[1] == want[0], f"expected [bytes, {want[0]}], got {inner_codecs!r}"
        conf = inner_codecs[1].get("configuration", {})
        for k, v in want[1].items():
            assert conf.get(k) == v, f"{want[0]} codec {k}={conf.get(k)!r}, expected {v!r}: {inner_codecs[1]!r}"

    if fill_value != "unchecked":
        fv = meta.get("fill_value")
        assert fv is not None, "fill_value must not be null in v3"
        if fill_value is not None:
            assert _fill_equal(fv, fill_value, dtype), f"fill_value {fv!r}, expected {fill_value!r}"
    if attributes is not None:
        got = meta.get("attributes", {})
        for k, v in attributes.items():
            assert k in got and got[k] == v, f"attribute {k!r}: got {got.get(k)!r}, expected {v!r}"
    if dimension_names is not None:
        assert meta.get("dimension_names") == list(dimension_names), (
            f"dimension_names {meta.get('dimension_names')!r}, expected {list(dimension_names)!r}"
        )
    return meta


def _json_float(v: Any) -> float:
    if isinstance(v, str):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[v]
    return float(v)


def _fill_equal(fv_json: Any, expected: Any, dtype: Any) -> bool:
    d = np.dtype(dtype)
    if d.kind == "b":
        return fv_json is bool(expected)
    if d.kind in "iu":
        return isinstance(fv_json, int) and fv_json == int(expected)
    if d.kind == "f":
        got, exp = _json_float(fv_json), float(expected)
        return (math.isnan(got) and math.isnan(exp)) or got == exp
    if d.kind == "c":
        exp = complex(expected)
        if not (isinstance(fv_json, list) and len(fv_json) == 2):
            return False
        pairs = zip((_json_float(fv_json[0]), _json_float(fv_json[1])), (exp.real, exp.imag))
        return all((math.isnan(g) and math.isnan(e)) or g == e for g, e in pairs)
    raise ValueError(d)


def fill_scalar_from_meta(meta: dict, dtype: Any) -> Any:
    fv = meta["fill_value"]
    d = np.dtype(dtype)
    if d.kind == "c":
        return complex(_json_float(fv[0]), _json_float(fv[1]))
    if d.kind == "f":
        return _json_float(fv)
    return fv


# --------------------------------------------------------------------------
# on-disk layout: shard keys, shard index
# --------------------------------------------------------------------------


def chunk_key(meta: dict, idx: Sequence[int]) -> str:
    enc = meta.get("chunk_key_encoding", {"name": "default"})
    conf = enc.get("configuration", {})
    if enc["name"] == "default":
        sep = conf.get("separator", "/")
        return "c" + "".join(sep + str(i) for i in idx)
    if enc["name"] == "v2":
        sep = conf.get("separator", ".")
        return sep.join(str(i) for i in idx) if idx else "0"
    raise AssertionError(f"unknown chunk_key_encoding {enc!r}")


def data_files(root: Path) -> set[str]:
    """All files under root except metadata documents, as '/'-joined relative paths."""
    out = set()
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
            # zarr.json, and the records a finished conversion keeps in an array's folder for the
            # next run (`.zshard-records`, and an Icechunk source's chunk versions,
            # `.zshard-source-versions`; issue 40), which no reader sees.
            if f in ("zarr.json", ".zshard-records", ".zshard-source-versions"):
                continue
            out.add(rel)
    return out


def all_files(root: Path) -> set[str]:
    out = set()
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            out.add(os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/"))
    return out


def _is_fill(block: np.ndarray, fill: Any) -> bool:
    if block.size == 0:
        return True
    if block.dtype.kind in "fc":
        f = np.asarray(fill, dtype=block.dtype)
        if np.isnan(f):  # complex: either part NaN is NaN for np.isnan
            if block.dtype.kind == "c":
                fr, fi = f.real, f.imag
                re_ok = np.isnan(block.real) if np.isnan(fr) else block.real == fr
                im_ok = np.isnan(block.imag) if np.isnan(fi) else block.imag == fi
                return bool(np.all(re_ok & im_ok))
            return bool(np.all(np.isnan(block)))
        return bool(np.all(block == f))
    return bool(np.all(block == np.asarray(fill, dtype=block.dtype)))


def parse_shard_index(blob: bytes, n_inner: int, location: str) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """Return ([(offset, nbytes)] per inner chunk, (index_start, index_end))."""
    size = 16 * n_inner + 4
    assert len(blob) >= size, f"shard file of {len(blob)} bytes cannot hold a {size}-byte index"
    if location == "start":
        raw, span = blob[:size], (0, size)
    else:
        raw, span = blob[len(blob) - size :], (len(blob) - size, len(blob))
    body, crc = raw[:-4], struct.unpack("<I", raw[-4:])[0]
    assert crc32c(body) == crc, (
        f"shard index CRC32C mismatch (index_location={location}): stored {crc:#010x}, "
        f"computed {crc32c(body):#010x}"
    )
    entries = [struct.unpack_from("<QQ", body, 16 * i) for i in range(n_inner)]
    return entries, span


def check_layout(dst: Path, expected: np.ndarray, meta: dict | None = None) -> None:
    """Check which shard files exist and every shard's index against `expected`.

    - a shard file exists iff at least one of its inner chunks holds a non-fill value
      (only the in-bounds part of an inner chunk counts);
    - nothing else but zarr.json lies in the array directory;
    - each index parses at its declared location, its CRC32C matches, an entry is
      empty iff that inner chunk is all fill, stored ranges lie inside the file,
      outside the index, and do not overlap.
    """
    if meta is None:
        meta = load_json(dst / "zarr.json")
    cfg = shard_config(meta)
    shape = list(meta["shape"])
    shard_shape = list(meta["chunk_grid"]["configuration"]["chunk_shape"])
    inner = list(cfg["chunk_shape"])
    loc = cfg.get("index_location", "end")
    fill = fill_scalar_from_meta(meta, expected.dtype)
    per_shard = [s // c for s, c in zip(shard_shape, inner)]
    n_inner = int(np.prod(per_shard)) if per_shard else 1
    grid = [-(-n // s) for n, s in zip(shape, shard_shape)]

    want_keys: set[str] = set()
    problems: list[str] = []
    for sidx in np.ndindex(*grid):
        key = chunk_key(meta, sidx)
        origin = [i * s for i, s in zip(sidx, shard_shape)]
        nonfill = []
        for iidx in np.ndindex(*per_shard):
            lo = [o + i * c for o, i, c in zip(origin, iidx, inner)]
            sl = tuple(slice(l, min(l + c, n)) for l, c, n in zip(lo, inner, shape))
            nonfill.append(not _is_fill(expected[sl], fill))
        path = dst / key
        if any(nonfill):
            want_keys.add(key)
            if not path.is_file():
                problems.append(f"shard {key} holds non-fill data but {path} does not exist")
                continue
            blob = path.read_bytes()
            try:
                entries, (i0, i1) = parse_shard_index(blob, n_inner, loc)
            except AssertionError as e:
                problems.append(f"shard {key}: {e}")
                continue
            ranges = []
            for k, ((off, nb), nf) in enumerate(zip(entries, nonfill)):
                if (off, nb) == (EMPTY, EMPTY):
                    if nf:
                        problems.append(f"shard {key}: inner chunk #{k} holds data but its index entry is empty")
                    continue
                if not nf:
                    problems.append(f"shard {key}: inner chunk #{k} is all fill value but is stored ({nb} bytes)")
                if off + nb > len(blob) or (off < i1 and off + nb > i0):
                    problems.append(
                        f"shard {key}: inner chunk #{k} range [{off},{off + nb}) outside file "
                        f"({len(blob)} bytes) or overlapping the index [{i0},{i1})"
                    )
                ranges.append((off, off + nb))
            ranges.sort()
            for (a0, a1), (b0, b1) in zip(ranges, ranges[1:]):
                if b0 < a1:
                    problems.append(f"shard {key}: stored ranges [{a0},{a1}) and [{b0},{b1}) overlap")
        elif path.exists():
            problems.append(f"shard {key} covers only fill values but {path} exists")
    extra = data_files(dst) - want_keys
    if extra:
        problems.append(f"unexpected files in {dst}: {sorted(extra)[:10]}")
    assert not problems, "layout problems:\n  " + "\n  ".join(problems[:20])
