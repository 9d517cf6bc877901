"""`zshard convert --pyramid` (issue 41): a single array becomes an OME-Zarr 0.5 (or, with `--ome 0.6`,
0.6) multiscale image.

Sources come from zarr-python (Zarr v2 with xarray's `_ARRAY_DIMENSIONS`, whose fill value xarray
masks). Every level is compared with a numpy recomputation from the level above as written (mean:
within 1 for integers; mode: a most frequent value of the block), the image is validated with
ome-zarr-models' 0.5 (or 0.6) models and read back by ome-zarr-py's reader and ngff-zarr, and
`zshard verify` checks every level against its recomputation from the source.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from ome_zarr.io import parse_url
from ome_zarr.reader import Reader
from ome_zarr_models.exceptions import ValidationWarning
from ome_zarr_models.v05.image import Image

from conftest import load_json, run_zshard


def _source(path: Path, data: np.ndarray, dims: list[str], chunks: tuple[int, ...], fill=0) -> None:
    z = zarr.create_array(str(path), shape=data.shape, chunks=chunks, dtype=data.dtype, zarr_format=2,
                          fill_value=fill, attributes={"_ARRAY_DIMENSIONS": dims})
    z[...] = data


def _convert(zshard_bin: Path, src: Path, dst: Path, *extra) -> None:
    r = run_zshard(zshard_bin, ["convert", src, dst, "--threads", "2", *extra])
    assert r.returncode == 0, r.describe()


def _blocks(a: np.ndarray, spatial: list[bool]) -> np.ndarray:
    """`a` as float, NaN-padded to even extents along the spatial axes, with one axis of length 2
    (1 for the others) after each: reducing over the odd axes reduces every block."""
    a = a.astype(np.float64)
    pad = [(0, a.shape[d] % 2 if s else 0) for d, s in enumerate(spatial)]
    a = np.pad(a, pad, constant_values=np.nan)
    shape = []
    for n, s in zip(a.shape, spatial):
        shape += [n // 2, 2] if s else [n, 1]
    return a.reshape(shape)


def _mean(a: np.ndarray, spatial: list[bool], masked=None) -> np.ndarray:
    b = _blocks(a, spatial)
    if masked is not None:
        b = np.where(b == masked, np.nan, b)
    axes = tuple(range(1, b.ndim, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # blocks of only NaN
        return np.nanmean(b, axis=axes)


def _levels(dst: Path) -> list[np.ndarray]:
    datasets = load_json(dst / "zarr.json")["attributes"]["ome"]["multiscales"][0]["datasets"]
    return [zarr.open_array(str(dst / d["path"]), mode="r")[...] for d in datasets]


def _validated_and_read(dst: Path, levels: list[np.ndarray], version: str = "0.5") -> dict:
    """The image validated by ome-zarr-models' models of `version` (its warnings errors) and read
    by ome-zarr-py and ngff-zarr, each level equal to what zarr-python reads; returns the
    multiscale."""
    assert load_json(dst / "zarr.json")["attributes"]["ome"]["version"] == version
    with warnings.catch_warnings():
        warnings.simplefilter("error", ValidationWarning)
        model = Image if version == "0.5" else _image_06()
        model.from_zarr(zarr.open_group(str(dst), mode="r"))
    node = next(iter(Reader(parse_url(str(dst)))()))
    assert len(node.data) == len(levels)
    for k, (read, level) in enumerate(zip(node.data, levels)):
        np.testing.assert_array_equal(np.asarray(read), level, err_msg=f"ome-zarr-py level {k}")
    ngff_zarr = pytest.importorskip("ngff_zarr")
    multiscales = ngff_zarr.from_ngff_zarr(str(dst))
    assert len(multiscales.images) == len(levels)
    for k, (image, level) in enumerate(zip(multiscales.images, levels)):
        np.testing.assert_array_equal(np.asarray(image.data), level, err_msg=f"ngff-zarr level {k}")
    return load_json(dst / "zarr.json")["attributes"]["ome"]["multiscales"][0]


@pytest.mark.parametrize(
    "dims,shape,chunks,args",
    [
        (["y", "x"], (301, 250), (64, 64), ["--pyramid", "auto", "--shard-shape", "128,128"]),
        (["z", "y", "x"], (17, 90, 66), (8, 32, 32), ["--pyramid", "3"]),
        (["c", "y", "x"], (3, 129, 64), (1, 32, 32), ["--pyramid", "auto"]),
    ],
)
def test_mean_levels_match_numpy(zshard_bin, tmp_path, dims, shape, chunks, args):
    data = np.random.default_rng(41).integers(1, 60000, size=shape, dtype=np.uint16)
    data.flat[::97] = 0  # the fill value, which xarray masks: no part of the mean
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    _source(src, data, dims, chunks)
    _convert(zshard_bin, src, dst, *args)
    levels = _levels(dst)
    np.testing.assert_array_equal(levels[0], data)
    spatial = [d in ("x", "y", "z") for d in dims]
    for k in range(1, len(levels)):
        expected = _mean(levels[k - 1], spatial, masked=0)
        assert levels[k].shape == expected.shape, f"level {k}"
        assert levels[k].dtype == np.uint16
        filled = np.where(np.isnan(expected), 0, expected)
        assert np.abs(levels[k].astype(np.float64) - filled).max() <= 1, f"level {k}"
    # auto stops at the first level whose spatial extent fits one inner chunk.
    if "auto" in args:
        inner = [c for c, s in zip(chunks, spatial) if s]
        last = [n for n, s in zip(levels[-1].shape, spatial) if s]
        above = [n for n, s in zip(levels[-2].shape, spatial) if s]
        assert all(n <= c for n, c in zip(last, inner)) and not all(n <= c for n, c in zip(above, inner))
    multiscale = _validated_and_read(dst, levels)
    assert [a["name"] for a in multiscale["axes"]] == dims
    for k, dataset in enumerate(multiscale["datasets"]):
        scale, translation = dataset["coordinateTransformations"]
        assert scale["scale"] == [2.0**k if s else 1.0 for s in spatial]
        assert translation["translation"] == [(2**k - 1) / 2 if s else 0.0 for s in spatial]


def test_float_nan_does_not_pull_the_mean(zshard_bin, tmp_path):
    data = np.random.default_rng(7).normal(size=(131, 77)).astype(np.float32)
    data[::3, ::5] = np.nan
    data[40:44, 10:14] = np.nan  # blocks of only NaN stay NaN
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    _source(src, data, ["y", "x"], (32, 32), fill=np.nan)
    _convert(zshard_bin, src, dst, "--pyramid", "4")
    levels = _levels(dst)
    for k in range(1, len(levels)):
        expected = _mean(levels[k - 1], [True, True])
        np.testing.assert_allclose(levels[k], expected, rtol=1e-6, equal_nan=True, err_msg=f"level {k}")
    assert np.isnan(levels[1][20, 5]) and np.isnan(levels[1][21, 6])
    _validated_and_read(dst, levels)


def test_labels_take_a_most_frequent_value(zshard_bin, tmp_path):
    rng = np.random.default_rng(3)
    data = rng.integers(0, 4, size=(2, 61, 70), dtype=np.uint8)
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    _source(src, data, ["z", "y", "x"], (2, 16, 16))
    _convert(zshard_bin, src, dst, "--pyramid", "3", "--downsample", "mode")
    levels = _levels(dst)
    for k in range(1, len(levels)):
        blocks = _blocks(levels[k - 1], [True, True, True])
        for index in np.ndindex(levels[k].shape):
            block = blocks[index[0], :, index[1], :, index[2], :].ravel()
            block = block[~np.isnan(block)]
            values, counts = np.unique(block, return_counts=True)
            assert levels[k][index] in values[counts == counts.max()], (k, index, block)
    assert _validated_and_read(dst, levels)["type"] == "mode"


def test_an_ome_zarr_0_4_image_of_one_level_gets_levels(zshard_bin, tmp_path):
    """An OME-Zarr 0.4 image of one level (czyx, micrometer units), as ome-zarr-py writes it with its
    other levels removed; the output has levels, keeps the axes' units and the level's scale, and
    validates."""
    from ome_zarr.format import FormatV04
    from ome_zarr.io import parse_url as url
    from ome_zarr.writer import write_image

    data = np.random.default_rng(5).integers(0, 4000, size=(2, 6, 70, 50), dtype=np.uint16)
    src, dst = tmp_path / "image.ome.zarr", tmp_path / "dst.ome.zarr"
    fmt = FormatV04()
    root = zarr.group(store=url(str(src), mode="w", fmt=fmt).store, zarr_format=2)
    axes = [{"name": "c", "type": "channel"}] + [
        {"name": n, "type": "space", "unit": "micrometer"} for n in "zyx"]
    write_image(data, root, axes=axes, fmt=fmt, storage_options={"chunks": (1, 2, 32, 32)})
    multiscales = root.attrs["multiscales"]
    for dataset in multiscales[0]["datasets"][1:]:
        shutil.rmtree(src / dataset["path"])
    first = multiscales[0]["datasets"][0]
    first["coordinateTransformations"] = [{"type": "scale", "scale": [1.0, 2.0, 0.5, 0.5]}]
    multiscales[0]["datasets"] = [first]
    multiscales[0]["axes"] = axes  # ome-zarr-py 0.21 leaves the units out
    root.attrs["multiscales"] = multiscales
    _convert(zshard_bin, src, dst, "--pyramid", "3")
    levels = _levels(dst)
    np.testing.assert_array_equal(levels[0], data)
    for k in range(1, len(levels)):
        expected = _mean(levels[k - 1], [False, True, True, True])
        assert np.abs(levels[k].astype(np.float64) - expected).max() <= 1, f"level {k}"
    multiscale = _validated_and_read(dst, levels)
    assert multiscale["axes"] == axes
    scale, translation = multiscale["datasets"][2]["coordinateTransformations"]
    assert scale["scale"] == [1.0, 8.0, 2.0, 2.0]
    assert translation["translation"] == [0.0, 3.0, 0.75, 0.75]


def _image_06():
    """ome-zarr-models' 0.6 image model (1.8 on today's stack; last year's 1.7 has none: skipped)."""
    return pytest.importorskip("ome_zarr_models.v06.image", reason="ome-zarr-models without 0.6 models").Image


def _verify(zshard_bin: Path, src: Path, dst: Path) -> None:
    r = run_zshard(zshard_bin, ["verify", src, dst])
    assert r.returncode == 0, r.describe()
    assert "mismatch" not in r.stderr


def _v06_transform(dataset: dict) -> tuple[list[float], list[float]]:
    """A 0.6 level's one transformation (RFC-5) from its array into the image's coordinate
    system, as its scale and translation."""
    (transform,) = dataset["coordinateTransformations"]
    assert transform["input"] == {"path": dataset["path"]}
    assert transform["output"] == {"name": "physical"}
    if transform["type"] == "scale":
        return transform["scale"], [0.0] * len(transform["scale"])
    assert transform["type"] == "sequence"
    scale, translation = transform["transformations"]
    return scale["scale"], translation["translation"]


@pytest.mark.parametrize("dims,shape,chunks", [(["y", "x"], (301, 250), (64, 64)),
                                               (["c", "z", "y", "x"], (2, 9, 70, 40), (1, 4, 16, 16))])
def test_ome_0_6_pyramid_validates_reads_and_verifies(zshard_bin, tmp_path, dims, shape, chunks):
    _image_06()
    data = np.random.default_rng(6).integers(1, 60000, size=shape, dtype=np.uint16)
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    _source(src, data, dims, chunks)
    _convert(zshard_bin, src, dst, "--pyramid", "3", "--ome", "0.6")
    levels = _levels(dst)
    np.testing.assert_array_equal(levels[0], data)
    spatial = [d in ("x", "y", "z") for d in dims]
    for k in range(1, len(levels)):
        expected = _mean(levels[k - 1], spatial, masked=0)
        assert np.abs(levels[k].astype(np.float64) - expected).max() <= 1, f"level {k}"
    multiscale = _validated_and_read(dst, levels, "0.6")
    assert "axes" not in multiscale
    (system,) = multiscale["coordinateSystems"]
    assert system["name"] == "physical"
    assert [a["name"] for a in system["axes"]] == dims
    for k, dataset in enumerate(multiscale["datasets"]):
        scale, translation = _v06_transform(dataset)
        assert scale == [2.0**k if s else 1.0 for s in spatial]
        assert translation == [(2**k - 1) / 2 if s else 0.0 for s in spatial]
    _verify(zshard_bin, src, dst)


def test_verify_names_the_level_and_chunk_of_an_altered_lower_level(zshard_bin, tmp_path):
    """A pyramid verifies against its source; a level 2 element changed through zarr-python is
    reported at level 2, by array and chunk key, and nowhere else."""
    data = np.random.default_rng(2).integers(1, 60000, size=(128, 96), dtype=np.uint16)
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    _source(src, data, ["y", "x"], (32, 32))
    _convert(zshard_bin, src, dst, "--pyramid", "3", "--shard-shape", "64,64", "--chunk-shape", "16,16")
    _verify(zshard_bin, src, dst)
    level = zarr.open_array(str(dst / "2"), mode="r+")
    level[20, 5] = int(level[20, 5]) + 1
    r = run_zshard(zshard_bin, ["verify", src, dst])
    assert r.returncode != 0, r.describe()
    mismatches = [line for line in r.stderr.splitlines() if "mismatch:" in line]
    assert len(mismatches) == 1, r.stderr
    # Level 2 is 32 x 24 in shards of 16 x 16 (level 0's shard region), inner chunks of 16 x 16.
    assert "/2/c/1/0: level 2: inner chunk 0: 1 element(s) differ" in mismatches[0], r.stderr
    assert "first at [20, 5]" in mismatches[0], r.stderr


def test_an_ome_zarr_0_4_pyramid_is_written_as_0_6(zshard_bin, tmp_path):
    """An OME-Zarr 0.4 image of several levels, as ome-zarr-py writes it, converted level by level
    with `--ome 0.6`: its axes (with units) become its coordinate system, each level's scale one
    transformation into it."""
    _image_06()
    from ome_zarr.format import FormatV04
    from ome_zarr.io import parse_url as url
    from ome_zarr.writer import write_image

    data = np.random.default_rng(8).integers(0, 4000, size=(2, 64, 48), dtype=np.uint16)
    src, dst = tmp_path / "image.ome.zarr", tmp_path / "dst.ome.zarr"
    fmt = FormatV04()
    root = zarr.group(store=url(str(src), mode="w", fmt=fmt).store, zarr_format=2)
    axes = [{"name": "c", "type": "channel"}] + [
        {"name": n, "type": "space", "unit": "micrometer"} for n in "yx"]
    write_image(data, root, axes=axes, fmt=fmt, scaler=None, storage_options={"chunks": (1, 32, 32)})
    multiscales = root.attrs["multiscales"]
    multiscales[0]["axes"] = axes  # ome-zarr-py 0.21 leaves the units out
    root.attrs["multiscales"] = multiscales
    expected_scales = [d["coordinateTransformations"][0]["scale"] for d in multiscales[0]["datasets"]]
    _convert(zshard_bin, src, dst, "--ome", "0.6")
    levels = _levels(dst)
    multiscale = _validated_and_read(dst, levels, "0.6")
    assert multiscale["coordinateSystems"][0]["axes"] == axes
    assert [_v06_transform(d)[0] for d in multiscale["datasets"]] == expected_scales
    r = run_zshard(zshard_bin, ["verify", src, dst, "--ome", "0.6"])
    assert r.returncode == 0, r.describe()


def test_an_ome_zarr_0_4_image_of_one_level_gets_0_6_levels(zshard_bin, tmp_path):
    """A one-level 0.4 image with units and a scale, made a pyramid written as 0.6: the units stay,
    the level's scale is the base of every level's."""
    _image_06()
    data = np.random.default_rng(9).integers(0, 4000, size=(3, 70, 50), dtype=np.uint16)
    src, dst = tmp_path / "image.ome.zarr", tmp_path / "dst.ome.zarr"
    root = zarr.open_group(str(src), mode="w", zarr_format=2)
    root.create_array("0", data=data, chunks=(1, 32, 32))
    axes = [{"name": "c", "type": "channel"}] + [
        {"name": n, "type": "space", "unit": "micrometer"} for n in "yx"]
    root.attrs["multiscales"] = [{"version": "0.4", "name": "cells", "axes": axes, "datasets": [
        {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0, 0.5, 0.5]}]}]}]
    _convert(zshard_bin, src, dst, "--pyramid", "3", "--ome", "0.6")
    levels = _levels(dst)
    np.testing.assert_array_equal(levels[0], data)
    multiscale = _validated_and_read(dst, levels, "0.6")
    assert multiscale["name"] == "cells"
    assert multiscale["coordinateSystems"][0]["axes"] == axes
    assert _v06_transform(multiscale["datasets"][2]) == ([1.0, 2.0, 2.0], [0.0, 0.75, 0.75])
    _verify(zshard_bin, src, dst)


def _files(root: Path) -> dict[str, bytes]:
    """Every file below `root` but zshard's state and the records each array keeps for updates
    (they name each shard's file version), by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and ".zshard" not in p.parts and p.name != ".zshard-records"}


def test_workers_and_finalize_make_the_image_of_one_run(zshard_bin, tmp_path):
    """`--worker I/N` + `finalize` (issue 41): 3 workers each make their level-0 shards and the lower
    shards those alone feed, `finalize DST` the smallest levels (3 and 4 here, whose shards of one
    inner chunk cover 2 level-0 shards) and the metadata: the same files as one run, an image that
    validates and reads in ome-zarr-py and ngff-zarr, and verifies against the source."""
    data = np.random.default_rng(43).integers(1, 60000, size=(301, 250), dtype=np.uint16)
    data.flat[::89] = 0  # the fill value, which xarray masks: no part of the mean
    src, one, dst = tmp_path / "src.zarr", tmp_path / "one.zarr", tmp_path / "dst.zarr"
    _source(src, data, ["y", "x"], (64, 64))
    args = ["--pyramid", "auto", "--shard-shape", "128,128", "--chunk-shape", "32,32"]
    _convert(zshard_bin, src, one, *args)
    for index in range(3):
        _convert(zshard_bin, src, dst, "--worker", f"{index}/3", *args)
    assert not (dst / "zarr.json").exists()
    assert (dst / "2" / "c").is_dir() and not (dst / "3").exists(), "the workers make levels 0 to 2"
    r = run_zshard(zshard_bin, ["finalize", dst])
    assert r.returncode == 0, r.describe()
    made, expected = _files(dst), _files(one)
    assert sorted(made) == sorted(expected)
    assert [k for k in made if made[k] != expected[k]] == []
    levels = _levels(dst)
    assert len(levels) == 5
    np.testing.assert_array_equal(levels[0], data)
    for k in range(1, len(levels)):
        expected_level = np.where(np.isnan(e := _mean(levels[k - 1], [True, True], masked=0)), 0, e)
        assert np.abs(levels[k].astype(np.float64) - expected_level).max() <= 1, f"level {k}"
    _validated_and_read(dst, levels)
    _verify(zshard_bin, src, dst)
