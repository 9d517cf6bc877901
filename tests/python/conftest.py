"""Shared inputs of the Python package's tests: arrays written by zarr-python, and the output's files."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import zarr

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "crates" / "python" / "examples"


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by its relative path, with its bytes; the records a finished
    conversion keeps for the next run (``.zshard-records``) name the versions (inode, modification
    time) of its files, which differ from run to run, and are left out."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".zshard-records"
    }


def example(name: str) -> ModuleType:
    """A module of crates/python/examples, imported from its file."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def v2_array(path: Path, data: np.ndarray, chunks: tuple[int, ...], fill_value: object = 0) -> zarr.Array:
    """``data`` written by zarr-python as a Zarr v2 array (with zarr-python's default compressor) at ``path``."""
    array = zarr.create_array(
        str(path), shape=data.shape, chunks=chunks, dtype=data.dtype, fill_value=fill_value, zarr_format=2
    )
    array[...] = data
    return array


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A 100x80 int32 v2 array in 10x10 chunks; the last row of chunks holds only the fill value
    (zarr-python does not store them)."""
    data = np.arange(100 * 80, dtype="i4").reshape(100, 80)
    data[90:, :] = 0
    src = tmp_path / "small.zarr"
    v2_array(src, data, (10, 10))
    return src, data


@pytest.fixture(scope="session")
def many_shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A 512x512 float64 v2 array in 16x16 chunks (1024 chunks, 256 shards of 32x32): a conversion
    long enough on one thread to be watched and interrupted. Shared by the tests: none changes it."""
    rng = np.random.default_rng(19)
    data = rng.standard_normal((512, 512))
    src = tmp_path_factory.mktemp("many") / "many.zarr"
    v2_array(src, data, (16, 16), fill_value=np.nan)
    return src, data


@pytest.fixture(scope="session")
def long_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2048x2048 float64 v2 array in 16x16 chunks (16,384 chunks, 4,096 shards of 32x32): a
    conversion with ``MANY_OPTIONS`` of about a second here, long enough that a signal sent once it
    has started arrives while it runs (``many_shards`` now converts in under a tenth of a second)."""
    data = np.random.default_rng(23).standard_normal((2048, 2048))
    src = tmp_path_factory.mktemp("long") / "long.zarr"
    v2_array(src, data, (16, 16), fill_value=np.nan)
    return src


# gzip:9 keeps the one thread busy for a few hundred milliseconds: since shards are no longer
# fsynced one by one, the run was over within two progress intervals (100 ms), too soon to watch.
MANY_OPTIONS = {"shard_shape": (32, 32), "threads": 1, "io_threads": 1, "compressor": "gzip:9"}


@pytest.fixture(scope="session")
def many_converted(many_shards, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The files of one uninterrupted conversion of ``many_shards`` with ``MANY_OPTIONS``."""
    import zshard

    dst = tmp_path_factory.mktemp("reference") / "reference.zarr"
    zshard.convert(many_shards[0], dst, **MANY_OPTIONS)
    return tree_bytes(dst)
