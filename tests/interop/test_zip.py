"""Zip stores as sources (issue 16, point 3).

Inputs are written by zarr-python 3.1's own `zarr.storage.ZipStore` (Zarr v2 and v3 hierarchies, a
sharded v3 array, stored and deflated members) and by ome-zarr-py (an OME-Zarr 0.5 image, zipped into
an `.ozx` as RFC-9 lays it out: the root `zarr.json` first, members stored). Every array is converted
and compared element by element with what zarr-python reads from the zip itself, then read back with
zarr-python and tensorstore. zshard's `-v` log of its reads of the zip file (`zip read start= end=`)
shows that the file is read by range: its tail once for the central directory, then each member
read lies inside that member, and members of arrays that are not converted are not read at all.
"""

from __future__ import annotations

import os
import re
import subprocess
import zipfile
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from ome_zarr.format import FormatV05
from ome_zarr.io import parse_url
from ome_zarr.writer import write_image

from conftest import assert_same, read_with_tensorstore, run_zshard

TAIL_READ = 256 << 10  # what zshard's first read of a zip takes from its end (crates/store/src/zip.rs)


def _zip_group(path: Path, mode: str = "r", **kwargs) -> zarr.Group:
    return zarr.open_group(zarr.storage.ZipStore(path, mode=mode, **kwargs), mode=mode)


def _write_v3(path: Path, compression: int = zipfile.ZIP_STORED) -> None:
    """A v3 hierarchy in one zip: attributes on groups, several arrays, a sharded one, fill values."""
    store = zarr.storage.ZipStore(path, mode="w", compression=compression)
    root = zarr.open_group(store, mode="w", zarr_format=3, attributes={"title": "zipped v3"})
    a = root.create_array("temperature", shape=(60, 45), chunks=(16, 10), dtype="float32",
                          fill_value=float("nan"), attributes={"units": "K"})
    values = np.linspace(250, 300, 60 * 45, dtype="float32").reshape(60, 45)
    values[:16] = np.nan  # a band of fill
    a[:] = values
    sub = root.create_group("ocean", attributes={"depth": "surface"})
    s = sub.create_array("salinity", shape=(100, 30), chunks=(10, 10), shards=(50, 30), dtype="int16",
                         fill_value=-1)
    s[:] = (np.arange(100 * 30) % 997).reshape(100, 30).astype("int16")
    m = sub.create_array("mask", shape=(33,), chunks=(8,), dtype="uint8", fill_value=0)
    m[:] = np.arange(33) % 3
    store.close()


def _write_v2(path: Path) -> None:
    """A v2 hierarchy in one zip: blosc and zstd, a big-endian array, a nested group with attributes."""
    store = zarr.storage.ZipStore(path, mode="w")
    root = zarr.open_group(store, mode="w", zarr_format=2, attributes={"title": "zipped v2"})
    a = root.create_array("counts", shape=(97, 33), chunks=(10, 11), dtype="uint16",
                          compressors=numcodecs.Zstd(level=1), fill_value=0)
    a[:] = (np.arange(97 * 33) % 6000).reshape(97, 33).astype("uint16")
    g = root.create_group("nested/deeper", attributes={"level": 2})
    b = g.create_array("big_endian", shape=(40, 12), chunks=(7, 5), dtype=">f8",
                       compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE))
    b[:] = np.arange(40 * 12, dtype=">f8").reshape(40, 12) / 7
    store.close()


def _arrays(group: zarr.Group) -> dict[str, zarr.Array]:
    return {path: node for path, node in group.members(max_depth=None) if isinstance(node, zarr.Array)}


def _groups(group: zarr.Group) -> dict[str, dict]:
    found = {"": dict(group.attrs)}
    for path, node in group.members(max_depth=None):
        if isinstance(node, zarr.Group):
            found[path] = dict(node.attrs)
    return found


def _assert_converted(zip_path: Path, out: Path) -> set[str]:
    """Every array of the zip (as zarr-python reads it) equals the converted one, element by element,
    read by zarr-python and by tensorstore; groups and their attributes are kept. The array paths."""
    source = _zip_group(zip_path)
    output = zarr.open_group(str(out), mode="r")
    want, got = _arrays(source), _arrays(output)
    assert sorted(got) == sorted(want)
    for path, array in want.items():
        expected = array[...]
        assert_same(got[path][...], expected, f"zarr-python read of {out}/{path}")
        assert_same(read_with_tensorstore(out / path), expected, f"tensorstore read of {out}/{path}")
        attrs = got[path].attrs.asdict()
        if array.metadata.zarr_format == 2:
            # v2 fill values are kept as xarray's `_FillValue` (crates/zarr/src/xarray.rs).
            attrs.pop("_FillValue")
        assert attrs == array.attrs.asdict(), path
        assert type(got[path].metadata.codecs[0]).__name__ == "ShardingCodec", path
    groups = _groups(source)
    assert {k: v for k, v in _groups(output).items() if k in groups} == groups
    return set(want)


def _convert(zshard_bin: Path, src: Path, dst: Path, *opts, env: dict | None = None):
    argv = [str(zshard_bin), "convert", str(src), str(dst), "--quiet", *map(str, opts)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, f"{argv} failed ({out.returncode}):\n{out.stderr}"
    return out


@pytest.mark.parametrize("name", ["v3.zip", "v3-upper.ZIP"])
def test_a_v3_hierarchy_in_a_zip_store(zshard_bin, tmp_path, name):
    src, dst = tmp_path / name, tmp_path / "out.zarr"
    _write_v3(src)
    assert {i.compress_type for i in zipfile.ZipFile(src).infolist()} == {zipfile.ZIP_STORED}
    _convert(zshard_bin, src, dst)
    assert _assert_converted(src, dst) == {"temperature", "ocean/salinity", "ocean/mask"}
    # The source's sharded array keeps its inner chunks, so they are copied as they are.
    salinity = zarr.open_array(str(dst / "ocean/salinity"), mode="r")
    assert salinity.metadata.codecs[0].chunk_shape == (10, 10)


def test_a_v2_hierarchy_in_a_zip_store(zshard_bin, tmp_path):
    src, dst = tmp_path / "v2.zip", tmp_path / "out.zarr"
    _write_v2(src)
    _convert(zshard_bin, src, dst)
    assert _assert_converted(src, dst) == {"counts", "nested/deeper/big_endian"}


def test_deflated_members_are_inflated(zshard_bin, tmp_path):
    src, dst = tmp_path / "deflated.zip", tmp_path / "out.zarr"
    _write_v3(src, compression=zipfile.ZIP_DEFLATED)
    infos = zipfile.ZipFile(src).infolist()
    assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}
    assert any(i.compress_size < i.file_size for i in infos)  # really compressed
    _convert(zshard_bin, src, dst, "--compressor", "source")
    _assert_converted(src, dst)


def test_ls_and_verify_read_a_zip(zshard_bin, tmp_path):
    src, dst = tmp_path / "v3.zip", tmp_path / "out.zarr"
    _write_v3(src)
    ls = run_zshard(zshard_bin, ["ls", src])
    assert ls.returncode == 0, ls.describe()
    assert [line.split()[0] for line in ls.stdout.splitlines()[1:]] == [
        "ocean/mask", "ocean/salinity", "temperature"]
    _convert(zshard_bin, src, dst)
    verify = run_zshard(zshard_bin, ["verify", src, dst])
    assert verify.returncode == 0, verify.describe()


def _write_ozx(folder: Path, ozx: Path) -> None:
    """An OME-Zarr 0.5 image written by ome-zarr-py, zipped as RFC-9's `.ozx`: root `zarr.json`
    first, then the other `zarr.json` documents, then the chunks; every member stored, with ZIP64
    local headers, and the archive comment naming the OME-Zarr version."""
    fmt = FormatV05()
    root = zarr.group(store=parse_url(str(folder), mode="w", fmt=fmt).store, zarr_format=3)
    pixels = np.random.default_rng(16).integers(0, 4000, size=(2, 4, 128, 96), dtype=np.uint16)
    write_image(pixels, root, axes="czyx", fmt=fmt, storage_options={"chunks": (1, 2, 64, 48)})
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    order = sorted(files, key=lambda f: (f != "zarr.json", not f.endswith("zarr.json"), f))
    with zipfile.ZipFile(ozx, "w", compression=zipfile.ZIP_STORED) as z:
        for name in order:
            # ZIP64 local headers (RFC-9 asks for ZIP64): an extra field the central directory lacks.
            with z.open(name, "w", force_zip64=True) as member:
                member.write((folder / name).read_bytes())
        z.comment = b'{"ome": {"version": "0.5"}}'


def test_a_zipped_ome_zarr_image(zshard_bin, tmp_path):
    src, dst = tmp_path / "image.ozx", tmp_path / "out.ome.zarr"
    _write_ozx(tmp_path / "image.ome.zarr", src)
    _convert(zshard_bin, src, dst)
    with zipfile.ZipFile(src) as z:
        assert z.getinfo("s0/c/0/0/0/0").extra == b""  # the central directory's entry has no ZIP64 field
    levels = _assert_converted(src, dst)
    assert levels == {"s0", "s1", "s2", "s3", "s4"}
    source = _zip_group(src)
    assert zarr.open_group(str(dst), mode="r").attrs["ome"] == source.attrs["ome"]


READ = re.compile(r"zip read .*start=(\d+) end=(\d+)")


def _member_spans(path: Path) -> dict[str, range]:
    """Each member's local header and data, as bytes of the file."""
    spans = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            header = 30 + len(info.filename.encode()) + len(info.extra)
            spans[info.filename] = range(info.header_offset, info.header_offset + header + info.compress_size)
    return spans


def test_the_zip_is_read_by_range(zshard_bin, tmp_path):
    """One conversion's reads of a 1 MiB zip, from zshard's own log of them: the tail once (the central
    directory), then reads inside single members; with --include, the other array's chunks are not read."""
    src = tmp_path / "counted.zip"
    store = zarr.storage.ZipStore(src, mode="w")
    root = zarr.open_group(store, mode="w", zarr_format=3)
    for name in ("wanted", "other"):
        a = root.create_array(name, shape=(512, 512), chunks=(128, 128), dtype="float32", compressors=None)
        a[:] = np.random.default_rng(len(name)).random((512, 512), dtype="float32")
    store.close()
    size = src.stat().st_size
    assert size > 2 * TAIL_READ
    out = _convert(zshard_bin, src, tmp_path / "out.zarr", "--include", "wanted", "-v",
                   env={"RUST_LOG": "zshard_store::zip=debug"})
    reads = [(int(a), int(b)) for a, b in READ.findall(out.stderr)]
    assert reads[0] == (size - TAIL_READ, size), reads[:3]
    spans = _member_spans(src)
    read_members = []
    for start, end in reads[1:]:
        inside = [name for name, span in spans.items() if start in span and end - 1 in span]
        assert len(inside) == 1, (start, end)
        read_members.append(inside[0])
    chunks = {n for n in spans if n.startswith("wanted/c/")}
    assert len(chunks) == 16
    # Each chunk of the converted array is read exactly once, and none of the other array's.
    assert sorted(m for m in read_members if "/c/" in m) == sorted(chunks)
    assert not any(m.startswith("other/c/") for m in read_members)
    other = sum(len(span) for name, span in spans.items() if name.startswith("other/c/"))
    assert sum(end - start for start, end in reads[1:]) <= size - other
    _assert_converted_subset(src, tmp_path / "out.zarr", "wanted")


def _assert_converted_subset(src: Path, out: Path, path: str) -> None:
    expected = _zip_group(src)[path][...]
    assert_same(zarr.open_array(str(out / path), mode="r")[...], expected, path)


def test_a_damaged_zip_names_the_zip(zshard_bin, tmp_path):
    src = tmp_path / "cut.zip"
    _write_v3(src)
    data = src.read_bytes()
    src.write_bytes(data[: len(data) - 30])  # the end of central directory record is gone
    r = run_zshard(zshard_bin, ["convert", src, tmp_path / "out.zarr"])
    assert r.returncode == 1, r.describe()
    assert f"{src}: not a readable zip file" in r.stderr, r.describe()
    assert not (tmp_path / "out.zarr" / "zarr.json").exists()


def test_a_damaged_member_names_the_zip_and_the_member(zshard_bin, tmp_path):
    src = tmp_path / "flipped.zip"
    _write_v3(src)
    with zipfile.ZipFile(src) as z:
        info = z.getinfo("ocean/mask/c/2")
    data = bytearray(src.read_bytes())
    data[info.header_offset + 30 + len(info.filename) + len(info.extra) + 3] ^= 0xFF
    src.write_bytes(bytes(data))
    r = run_zshard(zshard_bin, ["convert", src, tmp_path / "out.zarr"])
    assert r.returncode == 1, r.describe()
    assert f"{src}: member ocean/mask/c/2: its CRC-32 is" in r.stderr, r.describe()


def test_a_member_compressed_by_another_method_is_refused_by_name(zshard_bin, tmp_path):
    src = tmp_path / "bzip2.zip"
    _write_v3(src, compression=zipfile.ZIP_BZIP2)
    r = run_zshard(zshard_bin, ["convert", src, tmp_path / "out.zarr"])
    assert r.returncode == 1, r.describe()
    assert f"{src}: member zarr.json: it uses compression method Bzip2" in r.stderr, r.describe()
