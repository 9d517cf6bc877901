"""The Python snippets of README.md and docs/python.md, run as they are written (issue 44: the docs gave
shard shapes by position, which fails on any xarray dataset), each in a folder of its own holding an
ERA5-like xarray dataset under the names the snippets use (``era5.zarr``, ``era5-v2.zarr``).

A statement that needs cloud credentials (an ``s3://``, ``gs://`` or ``az://`` location), and any later
statement that uses a name it assigns, is not run: each one is named in a warning, so a reader of the
test's output sees what was left out and why. The rest runs as written, and what it converts is read
back with xarray and compared with the dataset.
"""

from __future__ import annotations

import ast
import os
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from conftest import REPO

DOCS = [REPO / "README.md", REPO / "docs" / "python.md"]
FENCE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
NEEDS_CLOUD = re.compile(r"\b(s3|gs|gcs|az|abfs)://")


def snippets() -> list[Any]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 2
            name = f"{doc.relative_to(REPO)}:{line}"
            found.append(pytest.param(name, match.group(1), id=name))
    return found


def runnable(code: str) -> tuple[ast.Module, list[str]]:
    """The statements of ``code`` that run without cloud credentials, and the source of those left
    out: those naming a cloud location, and those using a name one of them assigned."""
    tree = ast.parse(code)
    kept: list[ast.stmt] = []
    left_out: list[str] = []
    unbound: set[str] = set()
    for statement in tree.body:
        source = ast.get_source_segment(code, statement) or ast.unparse(statement)
        used = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if NEEDS_CLOUD.search(source) or used & unbound:
            left_out.append(source)
            unbound |= {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        else:
            kept.append(statement)
    return ast.Module(body=kept, type_ignores=[]), left_out


def era5_like() -> xr.Dataset:
    """An ERA5-like dataset: two variables over (time, latitude, longitude) on ERA5's 0.25° latitudes
    (721 of them, which docs/python.md's shard shape names), with 1-D coordinates."""
    time = np.arange("2024-01-01", "2024-01-05", np.timedelta64(1, "h"), dtype="datetime64[ns]")
    latitude = np.linspace(90, -90, 721, dtype="f8")
    longitude = np.arange(0, 360, 22.5, dtype="f8")
    shape = (time.size, latitude.size, longitude.size)
    rng = np.random.default_rng(44)
    t2m = (273 + 20 * rng.standard_normal(shape)).astype("f4")
    tp = np.abs(rng.standard_normal(shape)).astype("f4")
    ds = xr.Dataset(
        {"t2m": (("time", "latitude", "longitude"), t2m), "tp": (("time", "latitude", "longitude"), tp)},
        coords={"time": time, "latitude": latitude, "longitude": longitude},
    )
    return ds.chunk({"time": 24, "latitude": 721, "longitude": 16})


@pytest.fixture
def dataset() -> xr.Dataset:
    return era5_like()


@pytest.mark.parametrize(("name", "code"), snippets())
def test_the_snippet_runs_on_an_xarray_dataset(name: str, code: str, dataset: xr.Dataset, tmp_path: Path) -> None:
    module, left_out = runnable(code)
    if not module.body:
        pytest.skip(f"{name}: every statement needs cloud credentials")
    for source in left_out:
        warnings.warn(f"{name}: not run, needs cloud credentials: {source}", stacklevel=1)
    for store in ("era5.zarr", "era5-v2.zarr"):
        dataset.to_zarr(tmp_path / store, zarr_format=2, consolidated=True)
    namespace: dict[str, Any] = {"__name__": "__snippet__"}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(module, name, "exec"), namespace)
    finally:
        os.chdir(cwd)
    # What the snippet converted reads back as the dataset, with its sharded layout.
    converted = tmp_path / "era5-v3.zarr"
    assert (converted / "zarr.json").is_file(), f"{name} converted nothing"
    out = xr.open_zarr(converted, zarr_format=3)
    xr.testing.assert_equal(out.compute(), dataset.compute())
    assert out["t2m"].encoding["shards"][0] == 48, out["t2m"].encoding
    report = namespace.get("report")
    assert report is not None and report.status == "ok", report
    assert report.totals.shards_written > 0


def test_the_snippets_are_found_and_only_cloud_statements_are_left_out() -> None:
    """The test above runs every snippet: both files have one, and only docs/python.md's plan of S3
    locations (and its print) is left out."""
    found = {param.id: param.values[1] for param in snippets()}
    assert sorted(found) == sorted(n for n in found if n.startswith(("README.md:", "docs/python.md:")))
    assert any(n.startswith("README.md:") for n in found) and any(n.startswith("docs/python.md:") for n in found)
    left_out = {n: runnable(code)[1] for n, code in found.items()}
    assert all(not out for n, out in left_out.items() if n.startswith("README.md:")), left_out
    python_md = [out for n, out in left_out.items() if n.startswith("docs/python.md:")]
    assert [[s.split("(")[0].strip() for s in out] for out in python_md] == [
        ["plan = zshard.plan", "print"]
    ], python_md
