"""Shards written around the page cache on XFS with 4 KiB sectors and on btrfs, on real loop devices.

zshard writes local shards with direct I/O on ext4, XFS and btrfs, at the alignment the kernel gives
(`statx`): gathered into aligned blocks, the last one padded and the file cut to its length, the index
at the start filled in last. A loop device with 4 KiB logical sectors is what a 4Kn disk asks for.
Each case converts a noise array (shards of more than 2 MiB) whole and in parts, with the index at the
end and at the start, onto the mounted filesystem and checks: the shard files are byte for byte those
of the same conversion in the test's temporary folder, zarr-python reads the values back exactly, and
util-linux's fincore finds at most one page of each shard cached (XFS zeroes the tail block of a
truncated file through the cache). Source chunks of 256 KiB and more stored there and not cached are
read directly too (issue 43): the values read back exactly and one probed page of each stays cached.
Needs root, losetup and mkfs.xfs / mkfs.btrfs (tests/run.sh installs
xfsprogs and btrfs-progs); skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import assert_readback, cached_bytes, convert_ok, evict, noise_source, shape_arg

SHAPE, SHARD, INNER = (1024, 2048), (1024, 1024), (64, 64)
PAGE = 4096


def sh(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(params=[("xfs", 4096), ("btrfs", 512)], ids=["xfs-4k-sectors", "btrfs"])
def mounted(request, tmp_path):
    fs, sector = request.param
    tools = ["losetup", "mount", "umount", "fincore", f"mkfs.{fs}"]
    if os.geteuid() != 0 or not all(shutil.which(t) for t in tools):
        pytest.skip(f"needs root and {', '.join(tools)}")
    image = tmp_path / f"{fs}.img"
    with open(image, "wb") as f:
        f.truncate(320 * 2**20)  # XFS's smallest filesystem is 300 MiB
    try:
        loop = sh("losetup", "--show", "-f", "--sector-size", str(sector), str(image))
    except subprocess.CalledProcessError as e:
        pytest.skip(f"no loop device here: {e.stderr.strip()}")
    point = tmp_path / "mnt"
    point.mkdir()
    try:
        sh(f"mkfs.{fs}", "-q", loop)
        sh("mount", loop, str(point))
        try:
            yield point
        finally:
            sh("umount", str(point))
    finally:
        sh("losetup", "-d", loop)


def test_shards_on_xfs_with_4k_sectors_and_btrfs(mounted: Path, tmp_path, zshard_bin):
    src = tmp_path / "noise.zarr"
    data = noise_source(src, SHAPE, (100, 100), seed=11)
    for index in ("end", "start"):
        for parts in ([], ["--memory-limit", "50MiB"]):
            opts = ["--shard-shape", shape_arg(SHARD), "--chunk-shape", shape_arg(INNER), "--index-location",
                    index, *parts, "--quiet"]
            name = f"{index}-{'parts' if parts else 'whole'}.zarr"
            here, there = tmp_path / name, mounted / name
            convert_ok(zshard_bin, src, here, *opts)
            convert_ok(zshard_bin, src, there, *opts)
            shards = sorted(p.relative_to(there) for p in (there / "c").rglob("*") if p.is_file())
            assert len(shards) == 2, shards
            for rel in shards:
                cached = cached_bytes(there / rel)
                assert cached <= PAGE, f"{name}/{rel}: {cached} bytes in the page cache"
                assert (there / rel).read_bytes() == (here / rel).read_bytes(), f"{name}/{rel} differs"
            assert_readback(there, data)
    # Issue 43: source chunks there that are not cached are read around the page cache, whole (their
    # lengths are no multiple of the 4 KiB alignment), and only the probed page of each stays cached.
    big = mounted / "big.zarr"
    data = noise_source(big, SHAPE, (512, 512), seed=13)
    chunks = [p for p in sorted(big.iterdir()) if p.is_file() and not p.name.startswith(".")]
    for p in chunks:
        evict(p)
    out = tmp_path / "from-there.zarr"
    convert_ok(zshard_bin, big, out, "--shard-shape", shape_arg(SHARD), "--chunk-shape", shape_arg(INNER),
               "--quiet")
    for p in chunks:
        assert cached_bytes(p) <= PAGE, f"{p.name}: {cached_bytes(p)} bytes in the page cache"
    assert_readback(out, data)
