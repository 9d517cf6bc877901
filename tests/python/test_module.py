"""The `zshard` module and command as pip installs them (tests/python/run.sh builds the package from
this checkout into a fresh venv): conversions of arrays made by zarr-python and xarray, plan, verify,
finalize, errors, progress, interruption and resume, Dask workers, the console script."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import zshard
from conftest import MANY_OPTIONS, example, tree_bytes, v2_array


def test_convert_zarr_python_array_values_equal(small, tmp_path):
    src, data = small
    dst = tmp_path / "out.zarr"
    report = zshard.convert(src, dst, shard_shape=(20, 40), chunk_shape=(10, 10))
    assert report.status == "ok"
    # 5x2 shards; the last row of shards (rows 80-99) still holds rows 80-89.
    assert report.totals == zshard.Counts(
        shards_total=10,
        shards_skipped=0,
        shards_written=10,
        shards_empty=0,
        chunks_read=80,
        chunks_missing=8,
        bytes_read=report.totals.bytes_read,
        bytes_written=report.totals.bytes_written,
    )
    out = zarr.open_array(str(dst), mode="r")
    assert out.metadata.zarr_format == 3
    assert out.shards == (20, 40) and out.chunks == (10, 10)
    np.testing.assert_array_equal(out[...], zarr.open_array(str(src), mode="r")[...])
    np.testing.assert_array_equal(out[...], data)


def test_convert_xarray_dataset_over_file_url(tmp_path):
    times = np.arange(6)
    ds = xr.Dataset(
        {"temperature": (("time", "y", "x"), np.linspace(250, 300, 6 * 8 * 10).reshape(6, 8, 10).astype("f4"))},
        coords={"time": times, "y": np.arange(8.0), "x": np.arange(10.0)},
        attrs={"title": "test"},
    )
    ds["temperature"].attrs["units"] = "K"
    ds["temperature"][0, 0, 0] = np.nan
    src = tmp_path / "ds-v2.zarr"
    ds.to_zarr(src, zarr_format=2, encoding={"temperature": {"chunks": (2, 4, 5)}})
    dst = tmp_path / "ds-v3.zarr"
    report = zshard.convert(src.as_uri(), dst.as_uri(), shard_shape=None)
    assert report.status == "ok"
    assert set(report.arrays) == {"temperature", "time", "x", "y"}
    source = xr.open_zarr(src)
    output = xr.open_zarr(dst)
    xr.testing.assert_identical(output, source)
    assert zarr.open_group(str(dst), mode="r").metadata.zarr_format == 3


def test_plan_writes_nothing(small, tmp_path):
    src, _ = small
    dst = tmp_path / "planned.zarr"
    plan = zshard.plan(src, dst, shard_shape=(20, 40), memory_limit="1GiB", threads=2)
    (array,) = plan.arrays
    assert array.shape == [100, 80]
    assert array.shard_shape == [20, 40]
    assert array.inner_chunk_shape == [10, 10]
    assert array.shards == 10
    assert (plan.memory_limit, plan.threads, plan.io_threads) == (2**30, 2, 2)
    assert zshard.plan(src, dst, shard_shape=(20, 40), io_threads=5).io_threads == 5
    assert not dst.exists()


def test_verify_finds_a_changed_source_element(small, tmp_path):
    src, data = small
    dst = tmp_path / "out.zarr"
    zshard.convert(src, dst, shard_shape=(20, 40))
    result = zshard.verify(src, dst)
    assert result == zshard.VerifyResult(
        destination=result.destination, shards_checked=10, arrays=1, mismatch_count=0, mismatches=[]
    )
    assert result.ok
    changed = zarr.open_array(str(src), mode="r+")
    changed[15, 45] = -1
    result = zshard.verify(src, dst)
    assert not result.ok
    assert result.mismatch_count == 1
    # Element (15, 45) is in shard (0, 1).
    assert "c/0/1" in result.mismatches[0], result.mismatches


def test_a_corrupt_chunk_raises_chunk_error_naming_array_and_key(small, tmp_path):
    src, _ = small
    (src / "3.4").write_bytes(b"not a blosc frame")
    with pytest.raises(zshard.ChunkError) as raised:
        zshard.convert(src, tmp_path / "out.zarr", shard_shape=(20, 40))
    e = raised.value
    assert e.kind == "decode"
    assert e.key is not None and e.key.endswith("small.zarr/3.4"), e.key
    assert e.array is not None and e.array.endswith("small.zarr"), e.array
    assert "cannot decode chunk" in str(e)


def test_library_warnings_are_python_warnings(small, tmp_path):
    src, _ = small
    (src / "3.4").write_bytes(b"garbage")
    (tmp_path / "file").write_text("")
    # The report cannot be written (its folder would be under a file): a warning, after the failure.
    with pytest.warns(zshard.ZshardWarning, match="cannot write report"), pytest.raises(zshard.ChunkError):
        zshard.convert(src, tmp_path / "out.zarr", shard_shape=(20, 40), report=tmp_path / "file" / "run.json")


def test_report_lists_the_arrays_skipped_as_unsupported(tmp_path):
    """A v2 group of zarr-python whose array `image` names a codec zshard does not read (imagecodecs'
    JPEG 2000): refused by default; with on_unsupported="skip" the rest converts and the report lists
    `image` with its reason."""
    src = tmp_path / "group.zarr"
    root = zarr.open_group(str(src), mode="w", zarr_format=2)
    root.create_array("good", shape=(4,), chunks=(2,), dtype="<i4")[:] = [1, 2, 3, 4]
    root.create_array("image", shape=(4,), chunks=(2,), dtype="u1")
    zarray = src / "image" / ".zarray"
    zarray.write_text(json.dumps({**json.loads(zarray.read_text()), "compressor": {"id": "imagecodecs_jpeg2k"}}))
    reason = f'{zarray}: compressor "imagecodecs_jpeg2k" is not supported'
    with pytest.raises(zshard.ConversionError, match=re.escape(reason)):
        zshard.convert(src, tmp_path / "refused.zarr")

    report = zshard.convert(src, tmp_path / "out.zarr", on_unsupported="skip")
    assert report.status == "ok"
    assert list(report.arrays) == ["good"]
    assert [(path, why.split(" (supported: ")[0]) for path, why in report.skipped_arrays] == [("image", reason)]
    assert report.skipped_arrays == [(s["path"], s["reason"]) for s in report.document["skipped_arrays"]]
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "out.zarr" / "good"), mode="r")[:], [1, 2, 3, 4])
    assert not (tmp_path / "out.zarr" / "image").exists()


def test_options_errors(small, tmp_path):
    src, _ = small
    with pytest.raises(zshard.OptionsError) as raised:
        zshard.convert(src, tmp_path / "out.zarr", shard_shape=(15, 40))
    assert raised.value.array is not None and raised.value.array.endswith("small.zarr")
    assert "does not divide shard shape [15, 40]" in str(raised.value)
    assert isinstance(raised.value, ValueError)
    with pytest.raises(TypeError, match="unexpected keyword argument 'shard_shap'"):
        zshard.convert(src, tmp_path / "out.zarr", shard_shap=(20, 40))  # type: ignore[call-arg]
    with pytest.raises(zshard.OptionsError, match="invalid value 'zstd:lots' for 'compressor'"):
        zshard.plan(src, tmp_path / "out.zarr", compressor="zstd:lots")
    with pytest.raises(zshard.SourceError):
        zshard.plan(tmp_path / "missing.zarr", tmp_path / "out.zarr")
    assert not (tmp_path / "out.zarr").exists()


def test_pyramid_keyword_makes_the_levels(tmp_path):
    """``pyramid=`` and ``downsample=`` (issue 41): an OME-Zarr multiscale image of the array; the plan
    names the levels made from the level above; values out of range raise OptionsError."""
    data = np.arange(64 * 48, dtype="u2").reshape(64, 48) + 1
    src = tmp_path / "image.zarr"
    z = zarr.create_array(str(src), shape=data.shape, chunks=(16, 16), dtype="u2", zarr_format=2,
                          attributes={"_ARRAY_DIMENSIONS": ["y", "x"]})
    z[...] = data
    plan = zshard.plan(src, tmp_path / "p.zarr", pyramid="auto")
    assert [a.made_from for a in plan.arrays] == [None, {"path": "0", "downsample": "mean"},
                                                    {"path": "1", "downsample": "mean"}]
    zshard.convert(src, tmp_path / "out.zarr", pyramid=3, downsample="max")
    level1 = zarr.open_array(str(tmp_path / "out.zarr" / "1"), mode="r")[...]
    np.testing.assert_array_equal(level1, data.reshape(32, 2, 24, 2).max(axis=(1, 3)))
    for bad, says in [(0, "at least 1"), ("many", "'auto'")]:
        with pytest.raises(zshard.OptionsError, match=says):
            zshard.convert(src, tmp_path / "bad.zarr", pyramid=bad)
    with pytest.raises(zshard.OptionsError, match="pyramid"):
        zshard.convert(src, tmp_path / "bad.zarr", downsample="mode")
    assert not (tmp_path / "bad.zarr" / "zarr.json").exists()


def test_finalize_before_every_worker_is_done_names_the_missing_shard(small, tmp_path):
    src, data = small
    dst = tmp_path / "out.zarr"
    zshard.convert(src, dst, shard_shape=(20, 40), worker=(0, 2))
    with pytest.raises(zshard.DestinationError) as raised:
        zshard.finalize(src, dst, shard_shape=(20, 40))
    # Shard g goes to worker g mod 2: the first one worker 1 owns is shard 1, key c/0/1.
    assert raised.value.array == str(src)
    assert raised.value.key == f"{dst}/c/0/1"
    assert "5 shard(s) are not done yet" in str(raised.value)
    zshard.convert(src, dst, shard_shape=(20, 40), worker="1/2")
    finalized = zshard.finalize(src, dst, shard_shape=(20, 40))
    assert (finalized.arrays, finalized.groups, finalized.already_finalized) == (1, 0, False)
    np.testing.assert_array_equal(zarr.open_array(str(dst), mode="r")[...], data)


def test_run_a_job_file_returns_each_conversions_report(small, tmp_path):
    """Issue 44, point 7: ``zshard.run(job)`` runs a job file's conversions as ``zshard run`` does."""
    src, data = small
    job = tmp_path / "job.toml"
    job.write_text(
        "shard_shape = [20, 40]\n\n"
        f"[[conversions]]\nsource = {json.dumps(str(src))}\ndestination = \"a.zarr\"\n\n"
        f"[[conversions]]\nsource = {json.dumps(str(src))}\ndestination = \"b.zarr\"\n"
        "chunk_shape = [10, 20]\n"
    )
    reports = zshard.run(job)
    assert [r.status for r in reports] == ["ok", "ok"]
    assert [Path(r.destination).name for r in reports] == ["a.zarr", "b.zarr"]
    for name, chunks in (("a.zarr", [10, 10]), ("b.zarr", [10, 20])):
        out = zarr.open_array(str(tmp_path / name), mode="r")
        np.testing.assert_array_equal(out[...], data)
        assert list(out.shards) == [20, 40] and list(out.chunks) == chunks
    with pytest.raises(zshard.OptionsError, match="no \\[\\[conversions\\]\\]"):
        empty = tmp_path / "empty.toml"
        empty.write_text("shard_shape = [20, 40]\n")
        zshard.run(empty)


def test_finalize_reuses_the_options_the_workers_recorded(small, tmp_path):
    """Issue 44, point 1: ``finalize`` without shapes takes the workers' from DST's claim."""
    src, data = small
    dst = tmp_path / "out.zarr"
    for worker in ("0/2", "1/2"):
        zshard.convert(src, dst, shard_shape=(20, 40), chunk_shape=(10, 20), worker=worker)
    finalized = zshard.finalize(src, dst)
    assert (finalized.arrays, finalized.already_finalized) == (1, False)
    out = zarr.open_array(str(dst), mode="r")
    np.testing.assert_array_equal(out[...], data)
    assert list(out.shards) == [20, 40] and list(out.chunks) == [10, 20]


def test_progress_callback_gets_increasing_figures(many_shards, tmp_path):
    src, _ = many_shards
    seen: list[zshard.Progress] = []
    report = zshard.convert(src, tmp_path / "out.zarr", progress=seen.append, **MANY_OPTIONS)
    # Calls while the source is listed (if any came) count its objects, before any shard.
    listing = [p for p in seen if p.shards_total == 0]
    assert seen[: len(listing)] == listing, seen
    assert all(p.shards_done == p.bytes_read == 0 for p in listing), listing
    seen = seen[len(listing) :]
    # At most one call per 100 ms and one at the end: at least one while it runs.
    assert len(seen) >= 2, seen
    for before, after in zip(seen, seen[1:]):
        assert after.shards_done > before.shards_done
        assert after.chunks_read > before.chunks_read
        assert after.bytes_read > before.bytes_read
        assert after.bytes_written > before.bytes_written
    assert all(p.shards_total == 256 for p in seen)
    # The source's 1,024 chunks and `.zarray` were listed, and a few objects of the destination's
    # state (its lease and claim) by the survey beside it; the count stays as it stood then.
    listed = seen[-1].objects_listed
    assert 1024 < listed < 1024 + 8, listed
    assert all(p.objects_listed == listed for p in seen)
    assert seen[-1] == zshard.Progress(
        shards_done=256,
        shards_total=256,
        chunks_read=1024,
        bytes_read=report.totals.bytes_read,
        bytes_written=report.totals.bytes_written,
        objects_listed=listed,
    )


def test_keyboard_interrupt_from_the_callback_stops_and_a_rerun_resumes_to_the_same_bytes(
    many_shards, many_converted, tmp_path
):
    src, data = many_shards
    dst = tmp_path / "out.zarr"

    def interrupt(progress: zshard.Progress) -> None:
        if progress.shards_done >= 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        zshard.convert(src, dst, progress=interrupt, **MANY_OPTIONS)
    assert not (dst / "zarr.json").exists()
    shards_before = {p.name for p in (dst / "c").rglob("*") if p.is_file()}
    assert 10 <= len(shards_before) < 256
    seen: list[zshard.Progress] = []
    resumed = zshard.convert(src, dst, progress=seen.append, **MANY_OPTIONS)
    assert resumed.status == "ok"
    assert resumed.totals.shards_skipped >= 10
    assert resumed.totals.shards_skipped + resumed.totals.shards_written == 256
    # Issue 44: the resumed run's progress counts the whole conversion from what was done, as status
    # does (after any calls while the source is listed).
    seen = [p for p in seen if p.shards_total]
    assert all(p.shards_total == 256 for p in seen), seen
    assert seen[0].shards_done >= resumed.totals.shards_skipped, (seen[0], resumed.totals)
    assert seen[-1].shards_done == 256
    assert tree_bytes(dst) == many_converted
    np.testing.assert_array_equal(zarr.open_array(str(dst), mode="r")[...], data)


def test_ctrl_c_stops_a_conversion_in_a_python_process_and_a_rerun_resumes(long_shards, tmp_path):
    src = long_shards
    dst = tmp_path / "out.zarr"
    script = textwrap.dedent(
        f"""
        import signal, sys, zshard
        # Python leaves Ctrl-C ignored when it started ignored (a test run launched in the background
        # by a shell without job control); a user's interactive session has the default handler.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        def started(p):
            if p.shards_done:
                print("started", flush=True)
        try:
            zshard.convert({str(src)!r}, {str(dst)!r}, progress=started, **{MANY_OPTIONS!r})
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline() == "started\n"
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 3, out
    assert out.endswith("interrupted\n")
    assert not (dst / "zarr.json").exists()
    resumed = zshard.convert(src, dst, **MANY_OPTIONS)
    assert resumed.totals.shards_skipped >= 1
    assert resumed.totals.shards_skipped + resumed.totals.shards_written == 4096
    uninterrupted = tmp_path / "uninterrupted.zarr"
    zshard.convert(src, uninterrupted, **MANY_OPTIONS)
    assert tree_bytes(dst) == tree_bytes(uninterrupted)


def test_three_dask_workers_and_finalize_equal_one_run(many_shards, tmp_path):
    from dask.distributed import Client, LocalCluster

    src, data = many_shards
    one = tmp_path / "one.zarr"
    zshard.convert(src, one, shard_shape=(64, 64))
    dst = tmp_path / "dask.zarr"
    # Worker threads (the GIL is released while converting, so they convert in parallel) start much
    # faster than processes; what processes add, pickling results and errors, is tested below.
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, Client(cluster) as client:
        reports = example("dask_convert").convert_on_dask(client, str(src), str(dst), 3, shard_shape=(64, 64))
    assert sorted(r.worker for r in reports) == [(0, 3), (1, 3), (2, 3)]
    # 64 shards: worker i gets shards i, i+3, ...: 22, 21 and 21.
    assert sorted(r.totals.shards_written for r in reports) == [21, 21, 22]
    assert tree_bytes(dst) == tree_bytes(one)
    np.testing.assert_array_equal(zarr.open_array(str(dst), mode="r")[...], data)


def test_reports_and_errors_survive_pickling_as_between_dask_processes(small, tmp_path):
    import pickle

    src, _ = small
    report = zshard.convert(src, tmp_path / "out.zarr", shard_shape=(20, 40))
    assert pickle.loads(pickle.dumps(report)) == report
    (src / "0.0").write_bytes(b"garbage")
    with pytest.raises(zshard.ChunkError) as raised:
        zshard.convert(src, tmp_path / "other.zarr", shard_shape=(20, 40))
    copy = pickle.loads(pickle.dumps(raised.value))
    assert type(copy) is zshard.ChunkError
    assert (str(copy), copy.kind, copy.array, copy.key) == (
        str(raised.value),
        "decode",
        raised.value.array,
        raised.value.key,
    )
    assert copy.key is not None and copy.key.endswith("/0.0")


def test_etl_task_functions_return_json(small, tmp_path):
    src, data = small
    tasks = example("etl_task")
    dst = tmp_path / "etl.zarr"
    reports = [tasks.convert_task(str(src), str(dst), i, 2, shard_shape=(20, 40)) for i in range(2)]
    assert [json.loads(json.dumps(r))["worker"] for r in reports] == [
        {"index": 0, "count": 2},
        {"index": 1, "count": 2},
    ]
    assert tasks.finalize_task(str(src), str(dst), shard_shape=(20, 40)) == {
        "destination": zshard.finalize(src, dst, shard_shape=(20, 40)).destination,
        "arrays": 1,
        "groups": 0,
    }
    np.testing.assert_array_equal(zarr.open_array(str(dst), mode="r")[...], data)


def test_progress_true_draws_a_tqdm_bar(small, tmp_path, capfd):
    src, _ = small
    zshard.convert(src, tmp_path / "out.zarr", shard_shape=(20, 40), progress=True)
    err = capfd.readouterr().err
    assert "10/10" in err and "shard" in err, err


def test_the_gil_is_released_while_converting(many_shards, tmp_path):
    import threading

    src, _ = many_shards
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1

    counter = threading.Thread(target=count)
    counter.start()
    started = time.perf_counter()
    try:
        zshard.convert(src, tmp_path / "out.zarr", **MANY_OPTIONS)
    finally:
        done.set()
        counter.join()
    elapsed = time.perf_counter() - started
    # A thread holding the GIL for the whole run would leave the counter at a few ticks per poll.
    # Measured: about 2.4 million ticks a second with the GIL released, 50 thousand without.
    assert ticks > 500_000 * elapsed, (ticks, elapsed)


def test_console_script(small, tmp_path):
    script = Path(sys.executable).with_name("zshard")
    version = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=False)
    # The same first line as the binary's: the version and the commit it was built from.
    first_line = version.stdout.splitlines()[0] if version.stdout else ""
    assert version.returncode == 0, version.stderr
    assert first_line.startswith(f"zshard {zshard.__version__} (commit "), version.stdout
    src, data = small
    dst = tmp_path / "cli.zarr"
    run = subprocess.run(
        [str(script), "convert", str(src), str(dst), "--shard-shape", "20,40", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (run.returncode, run.stderr) == (0, "")
    np.testing.assert_array_equal(zarr.open_array(str(dst), mode="r")[...], data)
    # A usage error: exit 2 and clap's message on one line, as from the binary.
    bad = subprocess.run(
        [str(script), "convert", str(src), str(dst), "--index-location", "middle"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.startswith("zshard: error: invalid value 'middle' for '--index-location"), bad.stderr
