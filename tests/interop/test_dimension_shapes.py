"""Shard and inner chunk shapes by dimension name (issue 17, point 5), and `plan --json`'s warnings.

An xarray Dataset holds arrays of ranks 1, 2 and 3 over the dimensions time, lat and lon, so one
positional `--shard-shape` cannot fit them all; `--shard-shape time=48,lat=20 --chunk-shape lon=30`
does. Sources are written by xarray itself (`to_zarr`, Zarr v2 and v3); the output's shapes are read
back with zarr-python and its values with xarray (`assert_identical`).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from conftest import run_zshard

SHAPE_OPTIONS = ["--shard-shape", "time=48,lat=20", "--chunk-shape", "lon=30"]

# Per array: (inner chunk shape, shard shape) those options give. Unnamed extents keep the default
# rule: inner = the source chunk (set in `_dataset`'s encodings), shard = grown from the inner chunk
# up to the array (lon: 30 -> 60, the whole axis; 60 x 20 x 48 float32 is far below 64 MiB).
EXPECTED = {
    "t2m": ((12, 10, 30), (48, 20, 60)),
    "orog": ((10, 30), (20, 60)),
    "index": ((12,), (48,)),
    "time": ((24,), (48,)),
    "lat": ((10,), (20,)),
    "lon": ((30,), (60,)),
}


def _dataset() -> xr.Dataset:
    """Ranks 3, 2 and 1 over time (96), lat (40) and lon (60), with coordinates for each dimension."""
    rng = np.random.default_rng(17)
    time = pd.date_range("2000-01-01", periods=96, freq="h")
    t2m = rng.normal(280.0, 5.0, size=(96, 40, 60)).astype("float32")
    t2m[3, 4, 5] = np.nan
    ds = xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), t2m, {"units": "K"}),
            "orog": (("lat", "lon"), rng.uniform(0, 3000, size=(40, 60)), {"units": "m"}),
            "index": (("time",), np.arange(96, dtype="int32")),
        },
        coords={
            "time": time,
            "lat": ("lat", np.linspace(-90, 90, 40), {"units": "degrees_north"}),
            "lon": ("lon", np.linspace(0, 354, 60), {"units": "degrees_east"}),
        },
    )
    chunks = {"t2m": (12, 10, 15), "orog": (10, 15), "index": (12,), "time": (24,), "lat": (10,), "lon": (60,)}
    for name, shape in chunks.items():
        ds[name].encoding["chunks"] = shape
    ds["t2m"].encoding["_FillValue"] = -9999.0
    return ds


@pytest.fixture(params=[2, 3], ids=["zarr_v2", "zarr_v3"])
def source(request, tmp_path: Path) -> Path:
    src = tmp_path / f"ds_v{request.param}.zarr"
    _dataset().to_zarr(src, zarr_format=request.param, mode="w", consolidated=request.param == 2)
    return src


def _quietly(open_fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return open_fn(*args, **kwargs).load()


def test_shapes_by_name_apply_to_every_array_with_those_dimensions(tmp_path: Path, zshard_bin: Path, source: Path) -> None:
    dst = tmp_path / "out.zarr"
    r = run_zshard(zshard_bin, ["convert", source, dst, "--quiet", "--threads", "2", *SHAPE_OPTIONS])
    assert r.returncode == 0, r.describe()
    group = zarr.open_group(str(dst), mode="r")
    assert sorted(group.array_keys()) == sorted(EXPECTED)
    for name, (inner, shard) in EXPECTED.items():
        array = group[name]
        assert (array.chunks, array.shards) == (inner, shard), name
    expected = _quietly(xr.open_zarr, source)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opened = xr.open_zarr(dst).load()
    xr.testing.assert_identical(expected, opened)
    assert int(opened["t2m"].isnull().sum()) == 1


def test_plan_json_shows_dimension_names_and_chosen_shapes(zshard_bin: Path, source: Path, tmp_path: Path) -> None:
    r = run_zshard(zshard_bin, ["plan", source, tmp_path / "out.zarr", "--json", *SHAPE_OPTIONS])
    assert r.returncode == 0, r.describe()
    doc = json.loads(r.stdout)
    assert doc["warnings"] == []
    got = {
        a["path"]: (a["dimension_names"], tuple(a["inner_chunk_shape"]), tuple(a["shard_shape"]))
        for a in doc["arrays"]
    }
    dims = {"t2m": ["time", "lat", "lon"], "orog": ["lat", "lon"], "index": ["time"]}
    assert got == {name: (dims.get(name, [name]), *shapes) for name, shapes in EXPECTED.items()}
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.parametrize(
    "options, needle",
    [
        (["--shard-shape", "tme=48"], "--shard-shape: no dimension named tme in any array of"),
        (["--chunk-shape", "lon=30,latt=5"], "--chunk-shape: no dimension named latt in any array of"),
        (["--shard-shape", "time=48,20"], "mixes extents by position and by dimension name"),
    ],
    ids=["misspelt-shard", "misspelt-chunk", "mixed-forms"],
)
def test_misspelt_names_and_mixed_forms_are_refused(
    tmp_path: Path, zshard_bin: Path, source: Path, options: list[str], needle: str
) -> None:
    dst = tmp_path / "out.zarr"
    r = run_zshard(zshard_bin, ["convert", source, dst, "--quiet", *options])
    assert r.returncode == 1, r.describe()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.describe()
    if "no dimension named" in needle:
        assert lines[0].endswith("the dimension names are: lat, lon, time"), r.describe()
    assert not dst.exists()


def test_positional_shapes_on_one_array_are_unchanged(tmp_path: Path, zshard_bin: Path, source: Path) -> None:
    dst = tmp_path / "t2m.zarr"
    r = run_zshard(
        zshard_bin,
        ["convert", source / "t2m", dst, "--quiet", "--shard-shape", "24,20,60", "--chunk-shape", "12,10,15"],
    )
    assert r.returncode == 0, r.describe()
    out = zarr.open_array(str(dst), mode="r")
    assert (out.chunks, out.shards) == ((12, 10, 15), (24, 20, 60))
    assert out.metadata.dimension_names == ("time", "lat", "lon")
    np.testing.assert_array_equal(out[:], zarr.open_array(str(source / "t2m"), mode="r")[:])


def test_plan_json_includes_reader_warnings(tmp_path: Path, zshard_bin: Path) -> None:
    src = tmp_path / "s_v2.zarr"
    group = zarr.open_group(str(src), mode="w", zarr_format=2)
    a = group.create_array("names", shape=(3,), chunks=(3,), dtype="<U3", fill_value="ab")
    a[:] = np.array(["x", "ab", "zzz"])
    a.attrs.update({"_ARRAY_DIMENSIONS": ["n"], "_FillValue": "ab"})
    r = run_zshard(zshard_bin, ["plan", src, tmp_path / "out.zarr", "--json"])
    assert r.returncode == 0, r.describe()
    doc = json.loads(r.stdout)
    message = (
        'xarray masks the Zarr v2 fill value "ab" of this fixed_length_utf32(3 characters) array, but '
        "cannot read a _FillValue for it in Zarr v3: xarray reads the output unmasked"
    )
    assert doc["warnings"] == [f"array names: {message}"]
    (names,) = doc["arrays"]
    assert (names["path"], names["dimension_names"], names["warnings"]) == ("names", ["n"], [message])


def test_shapes_by_name_on_netcdf_kerchunk_references(tmp_path: Path, zshard_bin: Path) -> None:
    """kerchunk keeps netCDF's dimension names as `_ARRAY_DIMENSIONS`: the same names apply."""
    import kerchunk.hdf as kerchunk_hdf

    nc, refs, dst = tmp_path / "a.nc", tmp_path / "refs.json", tmp_path / "nc_v3.zarr"
    ds = _dataset()
    for name in ds.variables:
        ds[name].encoding["chunksizes"] = ds[name].encoding.pop("chunks")
    ds.to_netcdf(nc, engine="h5netcdf")
    with open(nc, "rb") as f:
        references = kerchunk_hdf.SingleHdf5ToZarr(f, str(nc), inline_threshold=0).translate()
    refs.write_text(json.dumps(references))
    r = run_zshard(zshard_bin, ["convert", refs, dst, "--quiet", "--threads", "2", *SHAPE_OPTIONS])
    assert r.returncode == 0, r.describe()
    group = zarr.open_group(str(dst), mode="r")
    for name, (inner, shard) in EXPECTED.items():
        assert (group[name].chunks, group[name].shards) == (inner, shard), name
    expected = _quietly(
        xr.open_dataset,
        "reference://",
        engine="zarr",
        backend_kwargs={"consolidated": False, "zarr_format": 2, "storage_options": {"fo": str(refs)}},
    )
    xr.testing.assert_identical(expected, _quietly(xr.open_zarr, dst))
