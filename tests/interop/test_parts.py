"""Shards converted in parts under --memory-limit: bytes identical to whole shards, values exact.

A shard bigger than the memory limit allows is read, decoded, reassembled, encoded and written in parts
of whole inner chunks, streamed into the shard in order (the index reserved at the start, or written
last at the end). zarr-python writes the sources. Every case checks that `zshard plan` really cuts the
shards into parts, that the shard files are byte for byte those of a conversion without a limit, and
that zarr-python (and tensorstore, for the types it has) reads the values back exactly.

Matrix: index {start, end} x threads {1, 2} x data types x {aligned, rechunked} chunks, plus
passthrough (encoded chunks copied) and variable-length strings.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr

from conftest import (assert_readback, cached_bytes, convert_ok, evict, filesystem, noise_source,
                      read_with_zarr, run_zshard, shape_arg)

SHAPE, SHARD, INNER = (640, 1040), (640, 520), (32, 40)
# Leaves the data about 2 MiB above the fixed base: shards of these arrays need several parts.
LIMIT = "50MiB"


def values(dtype: str) -> np.ndarray:
    n = SHAPE[0] * SHAPE[1]
    dt = np.dtype(dtype)
    if dt.kind == "f":
        v = (np.sin(np.arange(n) / 97.0) * 1e3).astype(dtype)
        v[::13] = np.nan
    else:
        v = (np.arange(n) * 2654435761 % 1000003).astype(dtype)
    v = v.reshape(SHAPE)
    v[:64, :80] = 0  # whole chunks of the fill value: not stored
    return v


def make_source(path: Path, dtype: str, chunks: tuple[int, int], fmt: int = 2, level: int = 1) -> np.ndarray:
    data = values(dtype)
    comp = numcodecs.Zstd(level=level) if fmt == 2 else [zarr.codecs.ZstdCodec(level=level)]
    a = zarr.create_array(str(path), shape=SHAPE, chunks=chunks, dtype=dtype, compressors=comp,
                          fill_value=0, zarr_format=fmt)
    a[:] = data
    return data


def plan_parts(zshard_bin: Path, src: Path, dst: Path, *opts: str) -> dict:
    r = run_zshard(zshard_bin, ["plan", src, dst, "--json", *opts])
    assert r.returncode == 0, r.describe()
    return json.loads(r.stdout)["arrays"][0]


def shard_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted((root / "c").rglob("*")) if p.is_file()}


def layout(threads: int, index: str) -> list[str]:
    return ["--shard-shape", shape_arg(SHARD), "--chunk-shape", shape_arg(INNER), "--threads", str(threads),
            "--index-location", index]


def convert_in_parts(zshard_bin: Path, src: Path, tmp_path: Path, threads: int, index: str,
                     *extra: str) -> tuple[Path, dict]:
    """Converts with and without the limit; checks parts are used and the shard bytes are equal."""
    parted, whole = tmp_path / f"parts-{index}-{threads}.zarr", tmp_path / f"whole-{index}-{threads}.zarr"
    opts = [*layout(threads, index), *extra]
    planned = plan_parts(zshard_bin, src, parted, *opts, "--memory-limit", LIMIT)
    assert planned["parts_per_shard"] > 1, planned
    assert plan_parts(zshard_bin, src, whole, *opts)["parts_per_shard"] == 1
    convert_ok(zshard_bin, src, parted, *opts, "--memory-limit", LIMIT, "--quiet")
    convert_ok(zshard_bin, src, whole, *opts, "--quiet")
    files = shard_files(parted)
    assert files == shard_files(whole), "shards written in parts differ from shards written whole"
    assert not any("#" in name for name in files), "a staging file was left behind"
    return parted, planned


@pytest.mark.parametrize("index", ["end", "start"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["|u1", "<i2", ">i4", "<f8"])
@pytest.mark.parametrize("chunks", [(64, 40), (50, 70)], ids=["aligned", "rechunked"])
def test_parts_equal_whole_shards(index, threads, dtype, chunks, tmp_path, zshard_bin):
    src = tmp_path / "src.zarr"
    data = make_source(src, dtype, chunks)
    dst, _ = convert_in_parts(zshard_bin, src, tmp_path, threads, index)
    assert_readback(dst, data)


@pytest.mark.parametrize("index", ["end", "start"])
def test_shards_on_local_disk_are_written_around_the_page_cache(index, tmp_path, zshard_bin):
    """Shards written whole (1 MiB and more) and in parts go around the page cache where the filesystem
    takes direct I/O: fincore finds none of their pages cached right after the conversion (a buffered
    write leaves them all there). Values and bytes as usual: parts equal whole shards, zarr reads back."""
    if shutil.which("fincore") is None:
        pytest.skip("fincore (util-linux) is missing")
    if filesystem(tmp_path) == "tmpfs":
        pytest.skip("tmpfs holds every file in the page cache")
    src = tmp_path / "noise.zarr"
    shape, shard, inner = (1024, 2048), (1024, 1024), (64, 64)
    data = noise_source(src, shape, (100, 100), seed=7)
    opts = ["--shard-shape", shape_arg(shard), "--chunk-shape", shape_arg(inner), "--index-location", index]
    whole, parted = tmp_path / "whole.zarr", tmp_path / "parted.zarr"
    convert_ok(zshard_bin, src, whole, *opts, "--quiet")
    convert_ok(zshard_bin, src, parted, *opts, "--memory-limit", LIMIT, "--quiet")
    assert plan_parts(zshard_bin, src, tmp_path / "planned.zarr", *opts, "--memory-limit", LIMIT)[
        "parts_per_shard"] > 1
    shards = sorted((whole / "c").rglob("*"))
    shards = [p for p in shards if p.is_file()]
    assert len(shards) == 2 and all(p.stat().st_size > 2 * 1024 * 1024 for p in shards)
    for p in shards + [p for p in (parted / "c").rglob("*") if p.is_file()]:
        assert cached_bytes(p) == 0, f"{p}: {cached_bytes(p)} of {p.stat().st_size} bytes in the page cache"
    assert shard_files(whole) == shard_files(parted)
    assert_readback(whole, data)


def test_uncached_source_chunks_are_read_around_the_page_cache(tmp_path, zshard_bin):
    """Issue 43: source chunk files of 256 KiB and more that are not in the page cache are read with
    direct I/O where the filesystem takes it, so a conversion leaves at most the one page it probed of
    each in the cache (a buffered read leaves them whole); a cached source is read from the cache as
    before. The values read back exactly either way, and the shards are the same bytes."""
    if shutil.which("fincore") is None:
        pytest.skip("fincore (util-linux) is missing")
    fs = filesystem(tmp_path)
    if fs not in ("ext2/ext3", "xfs", "btrfs"):
        pytest.skip(f"direct reads are for local disk filesystems, not {fs}")
    src = tmp_path / "noise.zarr"
    data = noise_source(src, (1024, 2048), (512, 512), seed=11)
    chunks = [p for p in sorted(src.rglob("*")) if p.is_file() and not p.name.startswith(".")]
    assert len(chunks) == 8 and all(p.stat().st_size >= 256 * 1024 for p in chunks)
    for p in chunks:
        evict(p)
    if any(cached_bytes(p) for p in chunks):
        pytest.skip("the kernel kept the source's pages after POSIX_FADV_DONTNEED")
    opts = ["--shard-shape", "1024,1024", "--chunk-shape", "256,256", "--quiet"]
    cold, hot = tmp_path / "cold.zarr", tmp_path / "hot.zarr"
    convert_ok(zshard_bin, src, cold, *opts)
    for p in chunks:
        assert cached_bytes(p) <= 4096, f"{p}: {cached_bytes(p)} of {p.stat().st_size} bytes in the page cache"
    for p in chunks:
        p.read_bytes()
    convert_ok(zshard_bin, src, hot, *opts)
    for p in chunks:
        assert cached_bytes(p) >= p.stat().st_size, f"{p}: a cached source stays cached"
    assert shard_files(cold) == shard_files(hot)
    assert_readback(cold, data)


@pytest.mark.parametrize("index", ["end", "start"])
def test_passthrough_in_parts_copies_the_encoded_chunks(index, tmp_path, zshard_bin):
    src = tmp_path / "src.zarr"
    data = make_source(src, "<u2", INNER, fmt=3, level=3)
    dst, planned = convert_in_parts(zshard_bin, src, tmp_path, 2, index)
    assert planned["passthrough"] is True
    assert_readback(dst, data)


@pytest.mark.parametrize("index", ["end", "start"])
def test_strings_in_parts(index, tmp_path, zshard_bin):
    src = tmp_path / "src.zarr"
    n = SHAPE[0] * SHAPE[1]
    data = np.array([f"s{i % 977}" * (i % 5) for i in range(n)], dtype=object).reshape(SHAPE)
    a = zarr.create_array(str(src), shape=SHAPE, chunks=(50, 70), dtype=str, zarr_format=3)
    a[:] = data
    dst, _ = convert_in_parts(zshard_bin, src, tmp_path, 2, index)
    got = read_with_zarr(dst)
    assert got.shape == SHAPE and all(g == w for g, w in zip(got.ravel().tolist(), data.ravel().tolist()))


def test_a_limit_too_small_for_the_source_chunks_is_refused_before_writing(tmp_path, zshard_bin):
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    # One source chunk of 5 MiB decoded cannot fit 2 MiB above the base with any part size.
    make_source(src, "<f8", SHAPE)
    r = run_zshard(zshard_bin, ["convert", src, dst, *layout(1, "end"), "--memory-limit", LIMIT])
    assert r.returncode != 0
    assert "memory limit" in r.stderr and "--memory-limit" in r.stderr, r.stderr
    assert not (dst / "c").exists()


def chunks_read(run) -> int:
    """The source chunks a conversion read, from its summary line."""
    m = re.search(r"read .* in (\d+) source chunk\(s\)", run.stdout + run.stderr)
    assert m, run.describe()
    return int(m.group(1))


@pytest.mark.parametrize("dtype, kept", [("|u1", True), ("<f8", False)])
def test_a_source_chunk_under_several_parts_is_read_once_when_the_limit_allows(dtype, kept, tmp_path,
                                                                             zshard_bin):
    """Straddling source chunks are kept between the parts of a shard when the memory limit has room
    for them (u1), and read again for each part when it has not (f8 at the same limit); both write the
    same bytes as whole shards (test_parts_equal_whole_shards)."""
    src = tmp_path / "src.zarr"
    data = make_source(src, dtype, (50, 70))
    parted, whole = tmp_path / "parts.zarr", tmp_path / "whole.zarr"
    opts = layout(2, "end")
    planned = plan_parts(zshard_bin, src, parted, *opts, "--memory-limit", LIMIT)
    assert planned["parts_per_shard"] > 1 and planned["source_chunks_kept_between_parts"] is kept, planned
    in_parts = chunks_read(convert_ok(zshard_bin, src, parted, *opts, "--memory-limit", LIMIT))
    at_once = chunks_read(convert_ok(zshard_bin, src, whole, *opts))
    # 13 x 15 source chunks; the shard boundary at column 520 cuts source column 7, which the first
    # shard hands over to the second (issue 43): every source chunk is read once.
    assert at_once == 13 * 15
    if kept:
        assert in_parts == at_once
    else:
        assert in_parts > at_once
    assert_readback(parted, data)


@pytest.mark.parametrize("inner, passthrough", [(INNER, True), ((50, 70), False)], ids=["same-inner", "rechunked"])
def test_a_source_in_one_big_shard_is_read_by_inner_chunk_within_the_limit(inner, passthrough, tmp_path, zshard_bin):
    """zarr-python stores the whole f8 array (5 MiB) in one shard. Read by inner chunk, it converts
    under a limit that the whole shard (as one source chunk, refused above) would not fit; with the
    output's inner chunks and codecs the encoded inner chunks are copied as they are."""
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    data = values("<f8")
    shard = tuple(math.ceil(n / i) * i for n, i in zip(SHAPE, inner))  # one shard, whole inner chunks
    a = zarr.create_array(str(src), shape=SHAPE, chunks=inner, shards=shard, dtype="<f8",
                          compressors=[zarr.codecs.ZstdCodec(level=3)], fill_value=0, zarr_format=3)
    a[:] = data
    opts = [*layout(2, "end"), "--compressor", "zstd:3", "--memory-limit", LIMIT]
    planned = plan_parts(zshard_bin, src, dst, *opts)
    assert planned["source_shard_shape"] == list(shard), planned
    assert planned["source_chunk_shape"] == list(inner), planned
    assert planned["passthrough"] is passthrough, planned
    r = convert_ok(zshard_bin, src, dst, *opts)
    # Each inner chunk of the source once (those of the fill value are not stored: they read as
    # missing), or once per part when the limit leaves no room to keep them between parts.
    stored = math.ceil(SHAPE[0] / inner[0]) * math.ceil(SHAPE[1] / inner[1])
    if planned["source_chunks_kept_between_parts"] or passthrough:
        assert chunks_read(r) == stored
    else:
        assert chunks_read(r) > stored
    assert_readback(dst, data)
