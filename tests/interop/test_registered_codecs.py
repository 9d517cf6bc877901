"""The codecs of the zarr-extensions registry under their registered names (issue 42): `bitround`,
`reshape`, `conditional`, `n5_default` and `zfp` (read; its types zshard does not read refused naming
the codec and the registry).

Producers, a real one where one writes the codec:
- bitround: zarrs, the registry's sample data (`data/bitround/`, copied from zarr-extensions
  codecs/bitround/sample_data; see its README). Writing is checked against numcodecs' BitRound, which
  the registry says `bitround` matches for floats.
- n5_default: tensorstore 0.1.86's N5 driver writes the blocks; the `zarr.json` beside them is the
  registry's (its "N5 Default Store": the same array described as Zarr v3).
- zfp: zfpy 1.0.1 writes the headerless zfp blocks (`write_header=False`, what zarrs stores through
  libzfp); the `zarr.json` is the registry's.
- reshape and conditional: no producer in the test stack writes them; the sources are built here from
  the registry's text (`reshape_source`, `conditional_source`), with numcodecs' zstd and shuffle for
  the bytes the nested codecs make.

Every source is converted and read back with zarr-python element by element; outputs that keep a
codec zarr-python does not read (`--compressor source`) are converted once more to plain Zarr v3 by
zshard and read back the same way.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import google_crc32c  # crc32c as zarr-python appends it (little-endian)
import numcodecs
import numpy as np
import pytest
import tensorstore as ts
import zarr

from conftest import assert_same

DATA = Path(__file__).resolve().parent / "data"


def run(zshard_bin: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(zshard_bin), *map(str, args)], capture_output=True, text=True, timeout=120)


def convert(zshard_bin: Path, src: Path, dst: Path, *opts) -> subprocess.CompletedProcess:
    done = run(zshard_bin, "convert", src, dst, "--quiet", *opts)
    assert done.returncode == 0, done.stderr
    return done


# Codecs tensorstore 0.1.86 does not have: an output that keeps one is read by zarr-python alone.
NOT_IN_TENSORSTORE = {"bitround", "reshape", "conditional", "n5_default", "zfp", "packbits"}


def read(path: Path) -> np.ndarray:
    """zshard's output as zarr-python reads it, checked equal (bit for bit) to tensorstore's reading wherever
    tensorstore has every codec of the output."""
    values = zarr.open_array(str(path), mode="r")[...]
    meta = json.loads((path / "zarr.json").read_text())
    codecs = [c["name"] for c in meta["codecs"]]
    if meta["codecs"][0]["name"] == "sharding_indexed":
        codecs += [c["name"] for c in inner_codecs(path)]
    if not NOT_IN_TENSORSTORE & set(codecs):
        ts_values = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result().read().result()
        assert np.asarray(ts_values).tobytes() == values.tobytes(), f"tensorstore reads {path} otherwise"
    return values


def inner_codecs(path: Path) -> list[dict]:
    meta = json.loads((path / "zarr.json").read_text())
    return meta["codecs"][0]["configuration"]["codecs"]


def read_via_plain(zshard_bin: Path, path: Path, tmp: Path) -> np.ndarray:
    """An output zarr-python cannot read (it keeps a registered codec) converted to plain Zarr v3."""
    plain = tmp / f"{path.name}-plain.zarr"
    convert(zshard_bin, path, plain, "--compressor", "zstd:3")
    return read(plain)


def v3_array(path: Path, shape, chunks, dtype: str, codecs: list, fill=0) -> None:
    path.mkdir(parents=True)
    meta = {"zarr_format": 3, "node_type": "array", "shape": list(shape), "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill, "codecs": codecs, "attributes": {}}
    (path / "zarr.json").write_text(json.dumps(meta))


def chunks_of(values: np.ndarray, chunks):
    """(key, padded chunk) of every chunk of `values`, edge chunks padded with zeros as zarr pads."""
    grid = [-(-s // c) for s, c in zip(values.shape, chunks)]
    for idx in np.ndindex(*grid):
        block = np.zeros(chunks, dtype=values.dtype)
        sl = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunks, values.shape))
        part = values[sl]
        block[tuple(slice(0, n) for n in part.shape)] = part
        yield "c/" + "/".join(map(str, idx)), block


# --------------------------------------------------------------------------------------------------
# bitround (zarrs)

# The registry's table for the sample data (keepbits 3).
BITROUND_SAMPLES = {
    "bitround_uint8.zarr": np.array([0, 1, 10, 12, 96, 128, 192, 192, 224, 224], dtype="u1"),
    "bitround_float32.zarr": np.array(
        [0.0, 0.1015625, 1.25, 12.0, 120.0, 1280.0, np.nan, np.inf, -np.inf], dtype="f4"),
}


@pytest.mark.parametrize("name", sorted(BITROUND_SAMPLES))
def test_bitround_written_by_zarrs_reads_back(name, tmp_path, zshard_bin):
    src = DATA / "bitround" / name
    expected = BITROUND_SAMPLES[name]
    out = tmp_path / "out.zarr"
    convert(zshard_bin, src, out)
    assert_same(read(out), expected, name)
    # Kept under its registered name with --compressor source, the chunk copied as zarrs wrote it.
    kept = tmp_path / "kept.zarr"
    convert(zshard_bin, src, kept, "--compressor", "source")
    assert inner_codecs(kept)[0] == {"name": "bitround", "configuration": {"keepbits": 3}}
    assert_same(read_via_plain(zshard_bin, kept, tmp_path), expected, f"{name}, kept")


@pytest.mark.parametrize("dtype,keepbits", [("f4", 3), ("f8", 10), ("f2", 4)])
def test_bitround_writes_as_numcodecs_rounds(dtype, keepbits, tmp_path, zshard_bin):
    rng = np.random.default_rng(7)
    values = (rng.standard_normal((12, 10)) * 1000).astype(dtype)
    values[0, :3] = [np.nan, np.inf, -0.0]
    src = tmp_path / "src.zarr"
    a = zarr.create_array(str(src), shape=values.shape, chunks=(5, 4), dtype=dtype, fill_value=0)
    a[...] = values
    chain = [{"name": "bitround", "configuration": {"keepbits": keepbits}},
             {"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]
    out = tmp_path / "out.zarr"
    convert(zshard_bin, src, out, "--compressor", json.dumps(chain))
    assert [c["name"] for c in inner_codecs(out)] == ["bitround", "bytes", "zstd"]
    expected = numcodecs.BitRound(keepbits).encode(values).view(dtype).reshape(values.shape)
    got = read_via_plain(zshard_bin, out, tmp_path)
    assert_same(got, expected, f"{dtype} keepbits {keepbits}")
    assert got.tobytes() == expected.tobytes()


# --------------------------------------------------------------------------------------------------
# reshape (from the registry's text)

RESHAPES = [
    # (name, codecs before bytes, how a chunk's bytes are laid out)
    ("ravel", [{"name": "reshape", "configuration": {"shape": [-1]}}], lambda c: c.reshape(-1)),
    ("input-dims", [{"name": "reshape", "configuration": {"shape": [[0, 1], [2]]}}], lambda c: c.reshape(-1, c.shape[2])),
    ("transpose-then-reshape", [{"name": "transpose", "configuration": {"order": [2, 0, 1]}},
                                {"name": "reshape", "configuration": {"shape": [4, -1]}}],
     lambda c: c.transpose(2, 0, 1).reshape(4, -1)),
]
R_SHAPE, R_CHUNKS = (7, 6, 5), (3, 4, 4)


def reshape_source(root: Path, case: int) -> tuple[Path, np.ndarray]:
    """A reshape array: each chunk's elements as the codecs before `bytes` lay them out (reshape never
    moves an element: the same C order), then zstd; one chunk never written."""
    name, before, layout = RESHAPES[case]
    values = np.arange(np.prod(R_SHAPE), dtype="<i4").reshape(R_SHAPE) * 3 - 50
    path = root / f"reshape-{name}.zarr"
    codecs = [*before, {"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "zstd", "configuration": {"level": 3, "checksum": False}}]
    v3_array(path, R_SHAPE, R_CHUNKS, "int32", codecs, fill=-1)
    zstd = numcodecs.Zstd(level=3)
    expected = values.copy()
    for key, block in chunks_of(values, R_CHUNKS):
        if key == "c/1/1/0":
            expected[3:6, 4:6, 0:4] = -1  # never written: the fill value
            continue
        (path / key).parent.mkdir(parents=True, exist_ok=True)
        (path / key).write_bytes(zstd.encode(np.ascontiguousarray(layout(block)).tobytes()))
    return path, expected


@pytest.mark.parametrize("case", range(len(RESHAPES)), ids=[r[0] for r in RESHAPES])
def test_reshape_sources_read_back(case, tmp_path, zshard_bin):
    src, expected = reshape_source(tmp_path, case)
    out = tmp_path / "out.zarr"
    convert(zshard_bin, src, out, "--shard-shape", "6,8,8")
    assert_same(read(out), expected, RESHAPES[case][0])
    # Kept with --compressor source (the same chunks: copied), read through reshape again.
    kept = tmp_path / "kept.zarr"
    convert(zshard_bin, src, kept, "--compressor", "source", "--shard-shape", "6,8,8")
    assert [c["name"] for c in inner_codecs(kept)][:-2] == [c["name"] for c in RESHAPES[case][1]]
    assert_same(read_via_plain(zshard_bin, kept, tmp_path), expected, f"{RESHAPES[case][0]}, kept")


def test_reshape_that_does_not_fit_other_inner_chunks_falls_back(tmp_path, zshard_bin):
    src, expected = reshape_source(tmp_path, 2)  # [4, -1]: a chunk of 9 elements has no such shape
    out = tmp_path / "out.zarr"
    done = run(zshard_bin, "convert", src, out, "--compressor", "source", "--chunk-shape", "3,3,1",
               "--shard-shape", "6,6,1")
    assert done.returncode == 0, done.stderr
    assert "do not fit inner chunks of shape [3, 3, 1]" in done.stderr, done.stderr
    assert [c["name"] for c in inner_codecs(out)] == ["bytes", "zstd"]
    assert_same(read(out), expected, "fallback")


# --------------------------------------------------------------------------------------------------
# conditional (from the registry's text)

C_SHAPE, C_CHUNKS = (9, 8), (4, 4)
NESTED = [{"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
          {"name": "zstd", "configuration": {"level": 5, "checksum": False}}]


def conditional_source(root: Path, header_bits: int | None = None) -> tuple[Path, np.ndarray]:
    """A conditional array: every chunk a header (one bit per nested codec, bit 0 the first) and its
    bytes through the codecs whose bits are set, in list order. The masks cycle through 0..3."""
    values = (np.arange(np.prod(C_SHAPE), dtype="<f4").reshape(C_SHAPE) - 20.5) / 3
    path = root / "conditional.zarr"
    config = {"codecs": NESTED}
    if header_bits is not None:
        config["header_bits"] = header_bits
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "conditional", "configuration": config}, {"name": "crc32c"}]
    v3_array(path, C_SHAPE, C_CHUNKS, "float32", codecs, fill=0.0)
    shuffle, zstd = numcodecs.Shuffle(elementsize=4), numcodecs.Zstd(level=5)
    header_bytes = (header_bits or 8) // 8
    for n, (key, block) in enumerate(chunks_of(values, C_CHUNKS)):
        mask = n % 4
        data = block.tobytes()
        if mask & 1:
            data = bytes(shuffle.encode(data))
        if mask & 2:
            data = bytes(zstd.encode(data))
        data = mask.to_bytes(header_bytes, "little") + data
        data += google_crc32c.value(data).to_bytes(4, "little")
        (path / key).parent.mkdir(parents=True, exist_ok=True)
        (path / key).write_bytes(data)
    return path, values


@pytest.mark.parametrize("header_bits", [None, 16])
def test_conditional_sources_read_back(header_bits, tmp_path, zshard_bin):
    src, expected = conditional_source(tmp_path, header_bits)
    out = tmp_path / "out.zarr"
    convert(zshard_bin, src, out)
    assert_same(read(out), expected, "conditional")
    # Kept with --compressor source: the chunks (every mask) copied, and read again through the codec.
    kept = tmp_path / "kept.zarr"
    convert(zshard_bin, src, kept, "--compressor", "source")
    assert [c["name"] for c in inner_codecs(kept)] == ["bytes", "conditional", "crc32c"]
    assert_same(read_via_plain(zshard_bin, kept, tmp_path), expected, "conditional, kept")


def test_passthrough_proves_a_conditional_chunk_before_copying_it(tmp_path, zshard_bin):
    """A chunk whose header sets a bit no codec has cannot be decoded: --compressor source, which
    copies chunks as they are, refuses it naming the chunk instead of copying it."""
    src, _ = conditional_source(tmp_path)
    key = src / "c" / "1" / "1"
    data = bytearray(key.read_bytes()[:-4])
    data[0] |= 0x80
    key.write_bytes(bytes(data) + google_crc32c.value(bytes(data)).to_bytes(4, "little"))
    done = run(zshard_bin, "convert", src, tmp_path / "out.zarr", "--compressor", "source", "--quiet")
    assert done.returncode != 0
    assert "bit 7 of the header is set" in done.stderr, done.stderr
    assert "1/1" in done.stderr or "1.1" in done.stderr, done.stderr


# --------------------------------------------------------------------------------------------------
# n5_default (tensorstore's N5 blocks)

@pytest.mark.parametrize("dtype,compression", [("uint16", {"type": "gzip"}), ("float32", {"type": "raw"}),
                                               ("int8", {"type": "gzip"})])
def test_n5_default_over_tensorstore_blocks(dtype, compression, tmp_path, zshard_bin):
    src = tmp_path / "n5.zarr"
    rng = np.random.default_rng(3)
    values = (rng.standard_normal((10, 7)) * 50).astype(dtype)
    t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(src)},
                 "metadata": {"dimensions": [10, 7], "blockSize": [4, 3], "dataType": dtype,
                              "compression": compression}}, create=True).result()
    t[...] = values
    (src / "2" / "1").unlink()  # a block never written reads as 0, N5's convention
    truth = t.read().result()
    bytes_codec = {"name": "bytes"} if dtype == "int8" else {"name": "bytes", "configuration": {"endian": "big"}}
    nested = [{"name": "transpose", "configuration": {"order": [1, 0]}}, bytes_codec]
    if compression["type"] == "gzip":
        nested.append({"name": "gzip", "configuration": {"level": 6}})
    meta = {"zarr_format": 3, "node_type": "array", "shape": [10, 7], "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
            "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": [{"name": "n5_default", "configuration": {"codecs": nested}}]}
    (src / "zarr.json").write_text(json.dumps(meta))
    out = tmp_path / "out.zarr"
    convert(zshard_bin, src, out, "--source-format", "zarr")
    got = read(out)
    assert_same(got, np.asarray(truth), dtype)
    assert np.all(got[8:10, 3:6] == 0)
    # --compressor source cannot keep n5_default (zshard reads it only): the default, said so.
    done = run(zshard_bin, "convert", src, tmp_path / "kept.zarr", "--source-format", "zarr",
               "--compressor", "source")
    assert done.returncode == 0, done.stderr
    assert "n5_default is read but not written by zshard" in done.stderr, done.stderr
    assert_same(read(tmp_path / "kept.zarr"), np.asarray(truth), f"{dtype}, source")


# --------------------------------------------------------------------------------------------------
# zfp (zfpy writes the headerless blocks; read only)

ZFP_MODES = [
    ("fixed_rate", {"mode": "fixed_rate", "rate": 8}, {"rate": 8}),
    ("fixed_precision", {"mode": "fixed_precision", "precision": 14}, {"precision": 14}),
    ("fixed_accuracy", {"mode": "fixed_accuracy", "tolerance": 0.01}, {"tolerance": 0.01}),
    ("reversible", {"mode": "reversible"}, {}),
]
Z_SHAPE, Z_CHUNKS = (10, 9, 7), (4, 4, 4)


# fixed_accuracy is for floats only (zarrs refuses it for integers, and so does zshard).
ZFP_CASES = [(m, t) for m in range(len(ZFP_MODES)) for t in ["float32", "float64", "int32", "int64"]
             if not (ZFP_MODES[m][0] == "fixed_accuracy" and t.startswith("int"))]


@pytest.mark.parametrize("mode,dtype", ZFP_CASES, ids=[f"{ZFP_MODES[m][0]}-{t}" for m, t in ZFP_CASES])
def test_zfp_chunks_written_by_zfpy_without_header(mode, dtype, tmp_path, zshard_bin):
    """The registry's zfp: zfp blocks without zfp's header, the mode in the configuration. zfpy 1.0.1
    writes such streams (`write_header=False`, as zarrs through libzfp; its rate is set for 3
    dimensions as zarrs sets it, so the chunks are 3-D); the truth is zfpy's decoding of the same
    chunk written with its header."""
    import zfpy

    name, config, kwargs = ZFP_MODES[mode]
    rng = np.random.default_rng(mode)
    grid = np.indices(Z_SHAPE).sum(axis=0)
    values = (np.sin(grid / 3.0) * 100 + rng.normal(0, 1, Z_SHAPE))
    values = (values * 1000).astype(dtype) if dtype.startswith("int") else values.astype(dtype)
    src = tmp_path / "zfp.zarr"
    v3_array(src, Z_SHAPE, Z_CHUNKS, dtype, [{"name": "zfp", "configuration": config}])
    truth = np.zeros([-(-s // c) * c for s, c in zip(Z_SHAPE, Z_CHUNKS)], dtype=dtype)
    for key, block in chunks_of(values, Z_CHUNKS):
        (src / key).parent.mkdir(parents=True, exist_ok=True)
        (src / key).write_bytes(zfpy.compress_numpy(block, write_header=False, **kwargs))
        idx = [int(i) for i in key.split("/")[1:]]
        at = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, Z_CHUNKS))
        truth[at] = zfpy.decompress_numpy(zfpy.compress_numpy(block, write_header=True, **kwargs))
    truth = truth[tuple(slice(0, s) for s in Z_SHAPE)]
    out = tmp_path / "out.zarr"
    convert(zshard_bin, src, out)
    got = read(out)
    assert got.tobytes() == truth.tobytes(), f"{name} {dtype}"
    # zshard reads zfp and does not write it: --compressor source writes the default, said so.
    done = run(zshard_bin, "convert", src, tmp_path / "kept.zarr", "--compressor", "source")
    assert done.returncode == 0, done.stderr
    assert "zfp is read but not written by zshard" in done.stderr, done.stderr
    assert read(tmp_path / "kept.zarr").tobytes() == truth.tobytes()


# The registry's promotions to zfp's integers (and zarrs' for uint32/uint64, which it clamps into
# int32/int64), with the demotion that reads them back.
PROMOTIONS = {
    "int8": ("i4", lambda v: v.astype("i4") << 23, lambda z: np.clip(z >> 23, -0x80, 0x7F)),
    "uint8": ("i4", lambda v: (v.astype("i4") - 0x80) << 23, lambda z: np.clip((z >> 23) + 0x80, 0, 0xFF)),
    "int16": ("i4", lambda v: v.astype("i4") << 15, lambda z: np.clip(z >> 15, -0x8000, 0x7FFF)),
    "uint16": ("i4", lambda v: (v.astype("i4") - 0x8000) << 15, lambda z: np.clip((z >> 15) + 0x8000, 0, 0xFFFF)),
    "uint32": ("i4", lambda v: np.minimum(v, 2**31 - 1).astype("i4"), lambda z: np.maximum(z, 0)),
    "uint64": ("i8", lambda v: np.minimum(v, 2**63 - 1).astype("i8"), lambda z: np.maximum(z, 0)),
}
PROMOTED_CASES = [(t, m) for t in PROMOTIONS for m in (0, 1, 3)]


@pytest.mark.parametrize("dtype,mode", PROMOTED_CASES, ids=[f"{t}-{ZFP_MODES[m][0]}" for t, m in PROMOTED_CASES])
def test_zfp_of_promoted_integer_types(dtype, mode, tmp_path, zshard_bin):
    """Types zfp does not have, promoted to its int32/int64 as the registry says (zarrs for uint32 and
    uint64) and compressed by zfpy without header; read back demoted."""
    import zfpy

    name, config, kwargs = ZFP_MODES[mode]
    wide, promote, demote = PROMOTIONS[dtype]
    info = np.iinfo(dtype)
    rng = np.random.default_rng(11)
    grid = np.indices(Z_SHAPE).sum(axis=0)
    span = min(int(info.max), 2**40) - max(int(info.min), -(2**40))
    values = (max(int(info.min), -(2**40)) + (grid * 7919 + rng.integers(0, 50, Z_SHAPE)) % span).astype(dtype)
    values.flat[:3] = [info.min, info.max, 0]
    src = tmp_path / "zfp.zarr"
    v3_array(src, Z_SHAPE, Z_CHUNKS, dtype, [{"name": "zfp", "configuration": config}])
    truth = np.zeros([-(-s // c) * c for s, c in zip(Z_SHAPE, Z_CHUNKS)], dtype=dtype)
    for key, block in chunks_of(values, Z_CHUNKS):
        z = np.ascontiguousarray(promote(block)).astype(wide)
        (src / key).parent.mkdir(parents=True, exist_ok=True)
        (src / key).write_bytes(zfpy.compress_numpy(z, write_header=False, **kwargs))
        idx = [int(i) for i in key.split("/")[1:]]
        at = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, Z_CHUNKS))
        truth[at] = demote(zfpy.decompress_numpy(zfpy.compress_numpy(z, write_header=True, **kwargs))).astype(dtype)
    truth = truth[tuple(slice(0, s) for s in Z_SHAPE)]
    out = tmp_path / "out.zarr"
    convert(zshard_bin, src, out)
    got = read(out)
    assert got.dtype == np.dtype(dtype)
    assert got.tobytes() == truth.tobytes(), f"{name} {dtype}"
    if name == "reversible" and dtype not in ("uint32", "uint64"):
        assert np.array_equal(got, values), "reversible is lossless"


def test_zfp_of_a_type_zshard_does_not_read_is_refused_naming_the_registry(tmp_path, zshard_bin):
    src = tmp_path / "zfp.zarr"
    v3_array(src, (4, 4), (4, 4), "float16", [{"name": "zfp", "configuration": {"mode": "reversible"}}])
    (src / "c" / "0").mkdir(parents=True)
    (src / "c" / "0" / "0").write_bytes(b"\0" * 16)
    done = run(zshard_bin, "convert", src, tmp_path / "out.zarr", "--quiet")
    assert done.returncode != 0
    assert "codec zfp (zarr-extensions registry) is not supported" in done.stderr, done.stderr
    assert "not float16" in done.stderr, done.stderr
    assert not (tmp_path / "out.zarr" / "zarr.json").exists()
