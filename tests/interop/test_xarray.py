"""xarray/CF datasets through zshard (issue 17, points 1 and 2).

Inputs come from the real producers: xarray's own Zarr v2 writer (`to_zarr(zarr_format=2)`, Datasets
and DataTrees) and a netCDF file written by xarray with h5netcdf, referenced with kerchunk. The output
must open in xarray exactly as the source does (`xr.testing.assert_identical`), with every warning
turned into an error (xarray warns when a store has no consolidated metadata), and open with
`zarr.open_consolidated`.
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

from conftest import load_json, run_zshard

# b64(struct.pack("<d", v)): what xarray's own v3 writer puts in the `_FillValue` attribute of floats.
B64_MINUS_9999 = "AAAAAICHw8A="
B64_NAN = "AAAAAAAA+H8="


def _dataset() -> xr.Dataset:
    """Every CF feature of the issue: masked floats, packed ints, CF times, ranks 1 and 2, strings, bool."""
    time = pd.date_range("2000-01-01", periods=4, freq="6h")
    temp = np.array([[1.5, np.nan, 3.0], [4.0, 5.0, np.nan], [7.0, 8.0, 9.0], [np.nan, 1.0, 2.0]])
    ds = xr.Dataset(
        {
            "temp": (("time", "station"), temp, {"units": "K", "long_name": "air temperature"}),
            "precip": (("time", "station"), np.array([[0.0, 1.0, np.nan]] * 4), {"units": "mm"}),
            "depth": (("station",), np.array([10.0, np.nan, 30.0]), {"units": "m"}),
            "flag": (("time",), np.array([True, False, True, True])),
        },
        coords={
            "time": time,
            "station": np.array(["north", "south", "east"], dtype=object),
            "lat": (("station",), np.array([50.0, 40.0, 45.0]), {"units": "degrees_north"}),
        },
        attrs={"title": "zshard xarray test", "Conventions": "CF-1.8"},
    )
    ds["temp"].encoding.update(_FillValue=-9999.0, dtype="float32")
    # Packed: int16 on disk, scale_factor/add_offset decoded to float, -32768 masked.
    ds["precip"].encoding.update(dtype="int16", scale_factor=0.5, add_offset=1.0, _FillValue=-32768)
    ds["depth"].encoding.update(_FillValue=-9999.0)
    ds["time"].encoding.update(units="hours since 1999-12-31", calendar="proleptic_gregorian")
    return ds


def _convert(zshard_bin: Path, src: Path, dst: Path, *extra) -> str:
    r = run_zshard(zshard_bin, ["convert", src, dst, "--threads", "2", *extra])
    assert r.returncode == 0, r.describe()
    return r.stderr


def _same_value(a, b) -> bool:
    """Equal encodings (v2 gives np.float32(-9999.0) where v3 gives -9999.0: the same value)."""
    return a is b or a == b or (a != a and b != b)


def _quietly(open_fn, *args, **kwargs):
    """The source is Zarr v2, which xarray reads without complaint either way; load it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return open_fn(*args, **kwargs).load()


def _strictly(open_fn, *args, **kwargs):
    """Opens the output with every warning an error (no consolidated metadata is a RuntimeWarning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return open_fn(*args, **kwargs).load()


@pytest.fixture()
def v2_dataset(tmp_path: Path) -> Path:
    src = tmp_path / "ds_v2.zarr"
    _dataset().to_zarr(src, zarr_format=2, mode="w", consolidated=True)
    return src


def test_cf_dataset_reads_identical_in_xarray(tmp_path: Path, zshard_bin: Path, v2_dataset: Path) -> None:
    dst = tmp_path / "ds_v3.zarr"
    _convert(zshard_bin, v2_dataset, dst, "--quiet")
    expected = _quietly(xr.open_zarr, v2_dataset)
    # The source really is masked and packed, so identity below is about masking, not luck.
    assert expected["temp"].dtype == np.float32 and int(expected["temp"].isnull().sum()) == 3
    assert expected["precip"].encoding["scale_factor"] == 0.5
    for opened in (
        _strictly(xr.open_zarr, dst),
        _strictly(xr.open_dataset, dst, engine="zarr"),
        _strictly(xr.open_zarr, dst, zarr_format=3),
    ):
        xr.testing.assert_identical(expected, opened)
        for name in ("temp", "precip", "depth", "time"):
            for key in ("_FillValue", "scale_factor", "add_offset", "dtype", "units", "calendar"):
                assert _same_value(opened[name].encoding.get(key), expected[name].encoding.get(key)), (name, key)
    # The attributes as xarray's own v3 writer writes them.
    temp = load_json(dst / "temp" / "zarr.json")
    assert temp["attributes"] == {
        "units": "K", "long_name": "air temperature", "coordinates": "lat", "_FillValue": B64_MINUS_9999
    }
    assert temp["dimension_names"] == ["time", "station"] and temp["data_type"] == "float32"
    precip = load_json(dst / "precip" / "zarr.json")["attributes"]
    assert precip == {
        "units": "mm", "scale_factor": 0.5, "add_offset": 1.0, "coordinates": "lat", "_FillValue": -32768
    }
    assert load_json(dst / "lat" / "zarr.json")["attributes"] == {"units": "degrees_north", "_FillValue": B64_NAN}
    # Unmasked in v2 (fill_value null): no _FillValue.
    for name in ("time", "station", "flag"):
        assert "_FillValue" not in load_json(dst / name / "zarr.json")["attributes"], name


def test_consolidated_metadata_lists_every_array(tmp_path: Path, zshard_bin: Path, v2_dataset: Path) -> None:
    dst = tmp_path / "ds_v3.zarr"
    _convert(zshard_bin, v2_dataset, dst, "--quiet")
    root = load_json(dst / "zarr.json")
    consolidated = root["consolidated_metadata"]
    assert (consolidated["kind"], consolidated["must_understand"]) == ("inline", False)
    names = ["depth", "flag", "lat", "precip", "station", "temp", "time"]
    assert sorted(consolidated["metadata"]) == names
    # Each entry is the array's own zarr.json.
    for name in names:
        assert consolidated["metadata"][name] == load_json(dst / name / "zarr.json"), name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        group = zarr.open_consolidated(str(dst), mode="r")
    assert sorted(group.array_keys()) == names
    assert group.attrs["title"] == "zshard xarray test"
    np.testing.assert_array_equal(group["depth"][:], [10.0, -9999.0, 30.0])


def test_no_consolidate_writes_no_consolidated_metadata(tmp_path: Path, zshard_bin: Path, v2_dataset: Path) -> None:
    dst = tmp_path / "ds_v3.zarr"
    _convert(zshard_bin, v2_dataset, dst, "--quiet", "--no-consolidate")
    assert "consolidated_metadata" not in load_json(dst / "zarr.json")
    with pytest.raises(ValueError, match="Consolidated metadata requested"):
        zarr.open_consolidated(str(dst), mode="r")
    # xarray still reads it, with the warning consolidation avoids.
    with pytest.warns(RuntimeWarning, match="Failed to open Zarr store with consolidated metadata"):
        opened = xr.open_zarr(dst).load()
    xr.testing.assert_identical(_quietly(xr.open_zarr, v2_dataset), opened)


def test_datatree_groups_read_identical(tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "tree_v2.zarr", tmp_path / "tree_v3.zarr"
    child = xr.Dataset({"sst": (("x",), np.array([280.0, np.nan, 282.5]), {"units": "K"})}, attrs={"level": 1})
    child["sst"].encoding["_FillValue"] = -1.0
    grand = xr.Dataset({"count": (("y", "x"), np.array([[1, 2, 3], [4, -5, 6]], dtype="int32"))})
    grand["count"].encoding["_FillValue"] = -5
    tree = xr.DataTree.from_dict({"/": _dataset(), "/ocean": child, "/ocean/deep": grand})
    tree.to_zarr(src, zarr_format=2, mode="w", consolidated=True)
    _convert(zshard_bin, src, dst, "--quiet")
    expected = _quietly(xr.open_datatree, src, engine="zarr")
    assert int(expected["ocean/deep"]["count"].isnull().sum()) == 1
    xr.testing.assert_identical(expected, _strictly(xr.open_datatree, dst, engine="zarr"))
    xr.testing.assert_identical(
        expected["ocean"].to_dataset(inherit=False), _strictly(xr.open_zarr, dst, group="ocean")
    )
    members = load_json(dst / "zarr.json")["consolidated_metadata"]["metadata"]
    assert {"ocean", "ocean/sst", "ocean/deep", "ocean/deep/count"} <= set(members)
    assert members["ocean/deep"]["consolidated_metadata"] == {"kind": "inline", "must_understand": False, "metadata": {}}
    # Only the root carries consolidated metadata, as zarr-python writes it.
    assert "consolidated_metadata" not in load_json(dst / "ocean" / "zarr.json")


def test_netcdf_kerchunk_references_read_as_xarray_reads_the_references(tmp_path: Path, zshard_bin: Path) -> None:
    import kerchunk.hdf as kerchunk_hdf

    nc, refs, dst = tmp_path / "a.nc", tmp_path / "refs.json", tmp_path / "nc_v3.zarr"
    ds = _dataset().drop_vars("station")  # h5netcdf writes variable-length strings kerchunk inlines
    for name in ds.variables:
        ds[name].encoding.pop("chunks", None)
    ds.to_netcdf(nc, engine="h5netcdf")
    with open(nc, "rb") as f:
        references = kerchunk_hdf.SingleHdf5ToZarr(f, str(nc), inline_threshold=0).translate()
    refs.write_text(json.dumps(references))
    # kerchunk moves netCDF's _FillValue attribute into the .zarray fill_value.
    assert json.loads(references["refs"]["temp/.zarray"])["fill_value"] == -9999.0
    _convert(zshard_bin, refs, dst, "--quiet")
    expected = _quietly(
        xr.open_dataset,
        "reference://",
        engine="zarr",
        backend_kwargs={"consolidated": False, "zarr_format": 2, "storage_options": {"fo": str(refs)}},
    )
    assert int(expected["temp"].isnull().sum()) == 3
    xr.testing.assert_identical(expected, _strictly(xr.open_dataset, dst, engine="zarr"))
    xr.testing.assert_identical(expected, _strictly(xr.open_zarr, dst))


def test_plain_v2_array_with_fill_value_is_masked_as_xarray_masks_it(tmp_path: Path, zshard_bin: Path) -> None:
    # No CF attribute at all: xarray's v2 reader still takes the fill_value as _FillValue.
    src, dst = tmp_path / "plain_v2.zarr", tmp_path / "plain_v3.zarr"
    group = zarr.open_group(str(src), mode="w", zarr_format=2)
    a = group.create_array("counts", shape=(6,), chunks=(3,), dtype="uint8", fill_value=0)
    a[:] = np.array([1, 0, 3, 4, 0, 6], dtype="uint8")
    a.attrs["_ARRAY_DIMENSIONS"] = ["n"]
    zarr.consolidate_metadata(str(src))
    _convert(zshard_bin, src, dst, "--quiet")
    expected = _quietly(xr.open_zarr, src)
    assert expected["counts"].dtype == np.float32 and int(expected["counts"].isnull().sum()) == 2
    xr.testing.assert_identical(expected, _strictly(xr.open_zarr, dst))
    assert load_json(dst / "counts" / "zarr.json")["attributes"] == {"_FillValue": 0}


def test_string_fill_value_xarray_cannot_carry_is_a_warning(tmp_path: Path, zshard_bin: Path) -> None:
    src, dst = tmp_path / "s_v2.zarr", tmp_path / "s_v3.zarr"
    group = zarr.open_group(str(src), mode="w", zarr_format=2)
    a = group.create_array("names", shape=(3,), chunks=(3,), dtype="<U3", fill_value="ab")
    a[:] = np.array(["x", "ab", "zzz"])
    a.attrs.update({"_ARRAY_DIMENSIONS": ["n"], "_FillValue": "ab"})
    stderr = _convert(zshard_bin, src, dst)
    warning = [line for line in stderr.splitlines() if line.startswith("zshard: warning:")]
    assert warning == [
        'zshard: warning: array names: xarray masks the Zarr v2 fill value "ab" of this fixed_length_utf32(3 characters) array, but '
        "cannot read a _FillValue for it in Zarr v3: xarray reads the output unmasked"
    ], stderr
    # No _FillValue attribute: xarray would fail to open the whole store on one.
    assert load_json(dst / "names" / "zarr.json")["attributes"] == {}
    opened = _strictly(xr.open_zarr, dst)
    assert list(opened["names"].values) == ["x", "ab", "zzz"]


def test_partitioned_run_consolidates_once_at_finalize(tmp_path: Path, zshard_bin: Path, v2_dataset: Path) -> None:
    dst = tmp_path / "ds_v3.zarr"
    opts = ["--quiet"]
    for worker in ("0/2", "1/2"):
        r = run_zshard(zshard_bin, ["convert", v2_dataset, dst, "--worker", worker, "--threads", "2", *opts])
        assert r.returncode == 0, r.describe()
        assert not (dst / "zarr.json").exists(), worker
    r = run_zshard(zshard_bin, ["finalize", v2_dataset, dst, *opts])
    assert r.returncode == 0, r.describe()
    metadata = load_json(dst / "zarr.json")["consolidated_metadata"]["metadata"]
    assert sorted(metadata) == ["depth", "flag", "lat", "precip", "station", "temp", "time"]
    xr.testing.assert_identical(_quietly(xr.open_zarr, v2_dataset), _strictly(xr.open_zarr, dst))
