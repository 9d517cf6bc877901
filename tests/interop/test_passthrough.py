"""Passthrough: source chunks already encoded as the output's inner chunks are copied verbatim.

zarr-python writes v2 and v3 arrays whose chunks are zstd level 3 (the default output), in the inner chunk
shape asked for. zshard must copy every stored chunk byte for byte into its shard (checked through the
shard index), leave missing chunks empty, and the result must read back equal in zarr-python and
tensorstore. With --no-passthrough, or when anything differs (codec level, chunk shape, byte order), the
chunks are decoded and re-encoded instead, and the values are the same.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr

from conftest import assert_readback, parse_shard_index

SHAPE, CHUNKS, SHARD = (230, 170), (20, 30), (60, 90)


def make_source(path: Path, fmt: int, dtype: str, level: int) -> np.ndarray:
    data = (np.arange(SHAPE[0] * SHAPE[1]) % 977).astype(dtype).reshape(SHAPE)
    data[:40, :60] = 0  # whole chunks of the fill value: not stored by zarr-python
    if fmt == 3:
        comp = [zarr.codecs.ZstdCodec(level=level)]
    else:
        comp = numcodecs.Zstd(level=level)
    a = zarr.create_array(str(path), shape=SHAPE, chunks=CHUNKS, dtype=dtype, compressors=comp,
                          fill_value=0, zarr_format=fmt)
    a[:] = data
    return data


def source_chunk(src: Path, fmt: int, coord: tuple[int, int]) -> bytes | None:
    key = ".".join(map(str, coord)) if fmt == 2 else "c/" + "/".join(map(str, coord))
    p = src / key
    return p.read_bytes() if p.is_file() else None


def convert(zshard_bin: Path, src: Path, dst: Path, *extra: str) -> None:
    run = subprocess.run([str(zshard_bin), "convert", str(src), str(dst), "--quiet", "--shard-shape",
                          f"{SHARD[0]},{SHARD[1]}", "--chunk-shape", f"{CHUNKS[0]},{CHUNKS[1]}", *extra],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def inner_chunks(dst: Path):
    """Every inner chunk of every shard: (source chunk coordinate, bytes or None)."""
    per = (SHARD[0] // CHUNKS[0], SHARD[1] // CHUNKS[1])
    grid = (-(-SHAPE[0] // SHARD[0]), -(-SHAPE[1] // SHARD[1]))
    for si in range(grid[0]):
        for sj in range(grid[1]):
            p = dst / "c" / str(si) / str(sj)
            blob = p.read_bytes() if p.is_file() else None
            entries = parse_shard_index(blob, per[0] * per[1], "end")[0] if blob else None
            for k in range(per[0] * per[1]):
                ci, cj = si * per[0] + k // per[1], sj * per[1] + k % per[1]
                if ci * CHUNKS[0] >= SHAPE[0] or cj * CHUNKS[1] >= SHAPE[1]:
                    continue
                off, n = entries[k] if entries else (2**64 - 1, 2**64 - 1)
                yield (ci, cj), (None if off == 2**64 - 1 else blob[off:off + n])


@pytest.mark.parametrize("fmt", [2, 3])
def test_chunks_are_copied_verbatim(fmt, tmp_path, zshard_bin):
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    data = make_source(src, fmt, "<u2", 3)
    plan = subprocess.run([str(zshard_bin), "plan", str(src), str(dst), "--json", "--shard-shape",
                           f"{SHARD[0]},{SHARD[1]}", "--chunk-shape", f"{CHUNKS[0]},{CHUNKS[1]}"],
                          capture_output=True, text=True, timeout=60)
    assert json.loads(plan.stdout)["arrays"][0]["passthrough"] is True, plan.stdout
    convert(zshard_bin, src, dst)
    copied = 0
    for coord, stored in inner_chunks(dst):
        assert stored == source_chunk(src, fmt, coord), coord
        copied += stored is not None
    assert copied == 12 * 6 - 4  # every chunk but the 2x2 block of fill values zarr-python skipped
    assert_readback(dst, data)


@pytest.mark.parametrize(
    "extra,level,dtype",
    [(["--no-passthrough"], 3, "<u2"), ([], 5, "<u2"), (["--compressor", "zstd:5"], 3, "<u2"), ([], 3, ">u2")],
    ids=["disabled", "other-level", "other-output", "big-endian"],
)
def test_otherwise_chunks_are_reencoded(extra, level, dtype, tmp_path, zshard_bin):
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    data = make_source(src, 2, dtype, level)
    plan = subprocess.run([str(zshard_bin), "plan", str(src), str(dst), "--json", "--shard-shape",
                           f"{SHARD[0]},{SHARD[1]}", "--chunk-shape", f"{CHUNKS[0]},{CHUNKS[1]}", *extra],
                          capture_output=True, text=True, timeout=60)
    assert json.loads(plan.stdout)["arrays"][0]["passthrough"] is False, plan.stdout
    convert(zshard_bin, src, dst, *extra)
    differs = sum(stored is not None and stored != source_chunk(src, 2, coord)
                  for coord, stored in inner_chunks(dst))
    # With the same zstd library and level, re-encoding can give the very same bytes.
    assert differs > 0 or extra == ["--no-passthrough"]
    assert_readback(dst, data.astype("<u2"))


def skippable_frame(payload: bytes) -> bytes:
    """A zstd skippable frame (RFC 8878, 3.1.2): magic 0x184D2A5?, the payload's length, the payload."""
    return (0x184D2A53).to_bytes(4, "little") + len(payload).to_bytes(4, "little") + payload


def test_skippable_frames_are_dropped(tmp_path, zshard_bin):
    """Issue 31, row 16: zstd chunks with skippable frames (before, between, after the real frame) are
    valid zstd and convert with passthrough; the frames are dropped, since numcodecs refuses a chunk
    that opens with one (content size 0), so zarr-python and tensorstore read the values."""
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    data = make_source(src, 2, "<u2", 3)
    chunks = sorted(p for p in src.iterdir() if not p.name.startswith("."))
    for i, p in enumerate(chunks):
        frame = p.read_bytes()
        skip = skippable_frame(b"x" * (532480 if i == 0 else i))
        p.write_bytes([skip + frame, frame + skip, skip + skip + frame][i % 3])
    convert(zshard_bin, src, dst)
    for coord, stored in inner_chunks(dst):
        if stored is not None:
            assert stored[:4] == b"\x28\xb5\x2f\xfd", coord
            assert b"\x53\x2a\x4d\x18" not in stored, coord
    assert_readback(dst, data)
