"""Scheduled ETL (issue 40): rerunning the same `zshard convert` after the source changed rewrites
only the shards made from what changed, follows growth and new attributes, and writes nothing when
nothing changed. Sources are changed by their real producers (zarr-python 3.4 / 2.18 for Zarr v2,
v3 and sharded v3, h5py + kerchunk for references, icechunk for repositories); the output is read
back with zarr-python and compared element by element with the changed source.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import run_zshard

SHARDS = "32,32"


def _convert(zshard_bin: Path, src: Path | str, dst: Path, *extra) -> dict:
    report = dst.parent / f"{dst.name}.report.json"
    r = run_zshard(
        zshard_bin,
        ["convert", src, dst, "--quiet", "--threads", "2", "--shard-shape", SHARDS, "--report", report, *extra],
    )
    assert r.returncode == 0, r.describe()
    return json.loads(report.read_text())


def _files(dst: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file below `dst` with its inode, modification time (ns) and bytes."""
    out = {}
    for p in sorted(dst.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(dst))] = (st.st_ino, st.st_mtime_ns, p.read_bytes())
    return out


def _changed(before: dict, after: dict) -> set[str]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def _shards(changed: set[str]) -> set[str]:
    """The shard keys among `changed` (no metadata document, no kept records or source versions)."""
    kept = ("zarr.json", ".zshard-records", ".zshard-source-versions")
    return {k for k in changed if not k.endswith(kept)}


def _same(dst: Path, want: np.ndarray, path: str = "") -> None:
    got = zarr.open_array(str(dst), path=path, mode="r")
    assert got.shape == want.shape
    np.testing.assert_array_equal(got[...], want)


@pytest.mark.parametrize("fmt", ["v2", "v3", "sharded-v3"])
def test_zarr_sources_one_changed_chunk_growth_and_attributes(zshard_bin, tmp_path, fmt):
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    data = np.arange(96 * 80, dtype="i4").reshape(96, 80)
    kwargs = {"zarr_format": 2} if fmt == "v2" else {"zarr_format": 3}
    if fmt == "sharded-v3":
        kwargs["shards"] = (16, 16)
    a = zarr.create_array(str(src), shape=data.shape, chunks=(8, 8), dtype="i4", fill_value=0, **kwargs)
    a[...] = data
    a.attrs["units"] = "K"
    first = _convert(zshard_bin, src, dst)
    assert first["update"] is None
    before = _files(dst)

    # Nothing changed: nothing written, status complete.
    again = _convert(zshard_bin, src, dst)
    assert again["status"] == "complete" and again["totals"]["chunks_read"] == 0
    assert _changed(before, _files(dst)) == set()

    # One element of rows 40..47, columns 32..39: output shard (1, 1).
    a[44, 35] = -1
    data[44, 35] = -1
    report = _convert(zshard_bin, src, dst)
    assert report["status"] == "ok"
    # The shard's other inner chunks are copied as they stood; from a sharded source, the chunks
    # of the changed source shard (4 of them, one version) are all converted again.
    copied = 12 if fmt == "sharded-v3" else 15
    assert report["update"] == {"shards_rewritten": 1, "shards_added": 0, "shards_removed": 0, "inner_chunks_copied": copied}
    assert report["totals"]["chunks_read"] == 16 - copied
    after = _files(dst)
    assert _shards(_changed(before, after)) == {"c/1/1"}
    _same(dst, data)

    # 30 rows appended and a new attribute: shard row 3 is new; rows 0..2 keep their files.
    a.resize((126, 80))
    a[96:126, :] = 7
    a.attrs["units"] = "degC"
    data = np.concatenate([data, np.full((30, 80), 7, dtype="i4")])
    report = _convert(zshard_bin, src, dst)
    assert report["update"] == {"shards_rewritten": 0, "shards_added": 3, "shards_removed": 0, "inner_chunks_copied": 0}
    assert _shards(_changed(after, _files(dst))) == {"c/3/0", "c/3/1", "c/3/2"}
    _same(dst, data)
    assert zarr.open_array(str(dst), mode="r").attrs["units"] == "degC"


def test_a_group_where_one_array_changed(zshard_bin, tmp_path):
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    root = zarr.open_group(str(src), mode="w", zarr_format=2)
    t = root.create_array("t", shape=(64, 64), chunks=(8, 8), dtype="f4", fill_value=np.nan)
    t[...] = np.arange(64 * 64, dtype="f4").reshape(64, 64)
    u = root.create_array("u", shape=(64, 64), chunks=(8, 8), dtype="u1", fill_value=0)
    u[...] = 3
    _convert(zshard_bin, src, dst)
    before = _files(dst)
    t[0, 0] = -5
    report = _convert(zshard_bin, src, dst)
    assert report["update"] == {"shards_rewritten": 1, "shards_added": 0, "shards_removed": 0, "inner_chunks_copied": 15}
    assert _shards(_changed(before, _files(dst))) == {"t/c/0/0"}
    out = zarr.open_group(str(dst), mode="r")
    np.testing.assert_array_equal(out["t"][...], t[...])
    np.testing.assert_array_equal(out["u"][...], u[...])


def test_zarr_2_18_writes_the_change(zshard_bin, tmp_path):
    """The v2 source as zarr-python 2.18 changes it (its own venv, as the suite's other 2.18 tests)."""
    python = os.environ.get("ZSHARD_ZARR2_PYTHON")
    if not python:
        pytest.fail("ZSHARD_ZARR2_PYTHON (zarr-python 2.18's interpreter, set by tests/interop/run.sh) is not set")
    import subprocess

    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    make = (
        "import zarr, numpy as np, sys\n"
        "a = zarr.open_array(sys.argv[1], mode='w', shape=(64, 64), chunks=(8, 8), dtype='<u2', fill_value=0)\n"
        "a[...] = np.arange(64 * 64, dtype='<u2').reshape(64, 64)\n"
    )
    change = "import zarr, sys\nzarr.open_array(sys.argv[1], mode='r+')[63, 63] = 1\n"
    subprocess.run([python, "-c", make, str(src)], check=True)
    _convert(zshard_bin, src, dst)
    before = _files(dst)
    subprocess.run([python, "-c", change, str(src)], check=True)
    report = _convert(zshard_bin, src, dst)
    assert report["update"] == {"shards_rewritten": 1, "shards_added": 0, "shards_removed": 0, "inner_chunks_copied": 15}
    assert _shards(_changed(before, _files(dst))) == {"c/1/1"}
    _same(dst, zarr.open_array(str(src), mode="r")[...])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fsspec's Parquet through fastparquet
@pytest.mark.parametrize("layout", ["json", "parquet"])
def test_kerchunk_references_grown_hdf5(zshard_bin, tmp_path, layout):
    """An HDF5 dataset grows (new chunks at new offsets; the old ones stay where they are), its
    references are made again by kerchunk (JSON, or Parquet by `kerchunk.df.refs_to_dataframe`): the
    new rows' shards are added, and the file's own new version rewrites the shards made from it."""
    import shutil

    h5py = pytest.importorskip("h5py")
    kerchunk_hdf = pytest.importorskip("kerchunk.hdf")
    kerchunk_df = pytest.importorskip("kerchunk.df")
    h5 = tmp_path / "data.h5"
    with h5py.File(h5, "w") as f:
        d = f.create_dataset("v", shape=(64, 40), maxshape=(None, 40), chunks=(8, 8), dtype="<i4")
        d[...] = np.arange(64 * 40, dtype="<i4").reshape(64, 40)

    def refs() -> Path:
        """The references made again, into the same file (what a nightly job does)."""
        with open(h5, "rb") as fh:
            doc = kerchunk_hdf.SingleHdf5ToZarr(fh, url=str(h5), inline_threshold=0).translate()
        if layout == "json":
            out = tmp_path / "refs.json"
            out.write_text(json.dumps(doc))
            return out
        out = tmp_path / "refs.parq"
        shutil.rmtree(out, ignore_errors=True)
        kerchunk_df.refs_to_dataframe(doc, str(out), record_size=5)
        return out

    dst = tmp_path / "dst.zarr"
    _convert(zshard_bin, refs(), dst, "--allow-ref-prefix", str(tmp_path))
    before = _files(dst)
    with h5py.File(h5, "r+") as f:
        f["v"].resize((80, 40))
        f["v"][64:80] = -3
    report = _convert(zshard_bin, refs(), dst, "--allow-ref-prefix", str(tmp_path))
    assert report["status"] == "ok", report
    # The file itself was written (its version changed), so the shards made from it are converted
    # again too: a file rewritten in place with the same ranges would look the same otherwise.
    assert report["update"] == {"shards_rewritten": 4, "shards_added": 2, "shards_removed": 0, "inner_chunks_copied": 0}
    assert {"v/c/2/0", "v/c/2/1"} <= _shards(_changed(before, _files(dst)))
    with h5py.File(h5, "r") as f:
        _same(dst, f["v"][...], "v")


def test_kerchunk_target_rewritten_in_place_with_the_same_ranges(zshard_bin, tmp_path):
    """An uncompressed HDF5 dataset written again in place: its references (target, offset, length) stay
    exactly as they were, but the target file's own version changed, so the update sees it and
    converts the shards made from that file again."""
    h5py = pytest.importorskip("h5py")
    kerchunk_hdf = pytest.importorskip("kerchunk.hdf")
    h5 = tmp_path / "data.h5"
    with h5py.File(h5, "w") as f:
        d = f.create_dataset("v", shape=(64, 40), chunks=(8, 8), dtype="<i4")
        d[...] = np.arange(64 * 40, dtype="<i4").reshape(64, 40)

    def refs() -> Path:
        with open(h5, "rb") as fh:
            doc = kerchunk_hdf.SingleHdf5ToZarr(fh, url=str(h5), inline_threshold=0).translate()
        out = tmp_path / "refs.json"
        out.write_text(json.dumps(doc))
        return out

    dst = tmp_path / "dst.zarr"
    first = refs().read_text()
    _convert(zshard_bin, tmp_path / "refs.json", dst, "--allow-ref-prefix", str(tmp_path))
    with h5py.File(h5, "r+") as f:
        f["v"][3, 3] = -42
    assert refs().read_text() == first  # the same references
    report = _convert(zshard_bin, tmp_path / "refs.json", dst, "--allow-ref-prefix", str(tmp_path))
    assert report["status"] == "ok" and report["update"]["shards_rewritten"] == 4, report
    with h5py.File(h5, "r") as f:
        _same(dst, f["v"][...], "v")


@pytest.mark.parametrize("spec", [1, 2])
def test_icechunk_new_snapshot(zshard_bin, tmp_path, spec):
    """A repository source (spec version 1 or 2) gets a new snapshot that rewrites one chunk: only
    its shard is written."""
    ic = pytest.importorskip("icechunk")
    repo_dir, dst = tmp_path / "repo", tmp_path / "dst.zarr"
    repo = ic.Repository.create(ic.local_filesystem_storage(str(repo_dir)), **_spec_kwargs(ic, spec))
    session = repo.writable_session("main")
    a = zarr.create_array(session.store, name="a", shape=(64, 64), chunks=(8, 8), dtype="f8", fill_value=0.0)
    a[...] = np.arange(64 * 64, dtype="f8").reshape(64, 64)
    session.commit("first")
    _convert(zshard_bin, repo_dir, dst)
    before = _files(dst)
    again = _convert(zshard_bin, repo_dir, dst)
    assert again["status"] == "complete"

    session = repo.writable_session("main")
    zarr.open_array(session.store, path="a", mode="r+")[40, 40] = -1.0
    session.commit("one chunk")
    report = _convert(zshard_bin, repo_dir, dst)
    assert report["update"] == {"shards_rewritten": 1, "shards_added": 0, "shards_removed": 0, "inner_chunks_copied": 15}
    assert _shards(_changed(before, _files(dst))) == {"a/c/1/1"}
    session = repo.readonly_session(branch="main")
    _same(dst, zarr.open_array(session.store, path="a", mode="r")[...], "a")


def _traced_convert(zshard_bin: Path, src: Path, dst: Path, trace: Path, *extra) -> tuple[dict, str, set[str]]:
    """`zshard convert` (with `extra` options) under strace: its report, its stderr, and every
    file it opened below `src/manifests` (the repository's manifests, by name)."""
    report = dst.parent / f"{dst.name}.report.json"
    argv = ["convert", str(src), str(dst), "--quiet", "--threads", "2",
            "--shard-shape", SHARDS, "--report", str(report), *map(str, extra)]
    stderr, opened = _traced(zshard_bin, src, trace, argv)
    return json.loads(report.read_text()), stderr, opened


def _traced(zshard_bin: Path, src: Path, trace: Path, args: list[str]) -> tuple[str, set[str]]:
    """`zshard ARGS` under strace: its stderr, and the manifests of the repository `src` it
    opened (by name)."""
    import subprocess

    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=open,openat", "-o", str(trace),
                        str(zshard_bin), *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    manifests = str(src / "manifests") + "/"
    opened = {line.split(manifests, 1)[1].split('"', 1)[0]
              for line in trace.read_text().splitlines() if manifests in line}
    return r.stderr, opened


@pytest.mark.parametrize("spec", [1, 2])
def test_icechunk_source_update_reads_only_what_the_snapshot_diff_names(zshard_bin, tmp_path, spec):
    """An Icechunk source at the snapshot it was converted from: the rerun reads no manifest. At a
    later snapshot that rewrote one chunk of array a: only the manifest holding a's chunks now is
    read (array b's, unchanged, is not: Icechunk's diff says nothing changed there). A snapshot
    the destination was made from that is no longer an ancestor (the branch was reset) is said,
    and the versions listed whole. Values compared with icechunk's own read at every step."""
    ic = pytest.importorskip("icechunk")
    if not str(ic.__version__).startswith("2"):
        pytest.skip("icechunk 2 makes the repository")
    repo_dir, dst = tmp_path / "repo", tmp_path / "dst.zarr"
    repo = ic.Repository.create(ic.local_filesystem_storage(str(repo_dir)), **_spec_kwargs(ic, spec))
    session = repo.writable_session("main")
    root = zarr.group(store=session.store)
    for name, start in (("a", 0.0), ("b", 1e6)):
        arr = root.create_array(name, shape=(64, 64), chunks=(8, 8), dtype="f8", fill_value=0.0)
        arr[...] = np.arange(64 * 64, dtype="f8").reshape(64, 64) + start
    first = session.commit("first")

    def check() -> None:
        session = repo.readonly_session(branch="main")
        for name in ("a", "b"):
            _same(dst, zarr.open_array(session.store, path=name, mode="r")[...], name)

    def manifests() -> set[str]:
        return {p.name for p in (repo_dir / "manifests").iterdir()}

    report, _, _ = _traced_convert(zshard_bin, repo_dir, dst, tmp_path / "t0")
    assert report["status"] == "ok"
    check()

    # The same snapshot: nothing read from the manifests, nothing written.
    before = _files(dst)
    report, _, opened = _traced_convert(zshard_bin, repo_dir, dst, tmp_path / "t1")
    assert report["status"] == "complete" and opened == set(), opened
    assert _changed(before, _files(dst)) == set()

    # One chunk of a rewritten: the new manifest of a only.
    old = manifests()
    session = repo.writable_session("main")
    zarr.open_array(session.store, path="a", mode="r+")[40, 40] = -1.0
    session.commit("one chunk of a")
    new = manifests() - old
    assert new, "the commit wrote a manifest for a"
    report, stderr, opened = _traced_convert(zshard_bin, repo_dir, dst, tmp_path / "t2")
    assert report["update"]["shards_rewritten"] == 1 and report["update"]["shards_added"] == 0
    assert opened <= new and opened, (opened, new)
    assert "listed again" not in stderr, stderr
    assert _shards(_changed(before, _files(dst))) == {"a/c/1/1"}
    check()

    # A resize of b (metadata changed): b's versions listed whole, the growth converted.
    session = repo.writable_session("main")
    b = zarr.open_array(session.store, path="b", mode="r+")
    b.resize((80, 64))
    b[64:, :] = 3.0
    session.commit("b grows")
    report, _, _ = _traced_convert(zshard_bin, repo_dir, dst, tmp_path / "t3")
    assert report["update"]["shards_added"] == 2, report["update"]
    check()

    # The branch reset under the recorded snapshot: said, listed whole, values right.
    repo.reset_branch("main", first)
    session = repo.writable_session("main")
    zarr.open_array(session.store, path="b", mode="r+")[0, 0] = -5.0
    session.commit("another history")
    report, stderr, opened = _traced_convert(zshard_bin, repo_dir, dst, tmp_path / "t4")
    assert report["status"] == "ok"
    assert "no longer an ancestor" in stderr, stderr
    check()


def test_icechunk_source_versions_of_another_array_are_not_trusted(zshard_bin, tmp_path):
    """The kept source versions name the repository and the array they were listed from: a file
    that describes another array (here b's, at a's path: the same repository and snapshot, the
    same grid) is ignored and a's versions listed whole, so a later diff that deletes a chunk of a
    (which b never stored) rewrites its shard. Trusted, b's versions would have hidden that: the
    shard would keep a's old values."""
    ic = pytest.importorskip("icechunk")
    repo_dir, dst = tmp_path / "repo", tmp_path / "dst.zarr"
    repo = ic.Repository.create(ic.local_filesystem_storage(str(repo_dir)))
    session = repo.writable_session("main")
    root = zarr.group(store=session.store)
    a = root.create_array("a", shape=(64, 64), chunks=(8, 8), dtype="f8", fill_value=0.0)
    a[...] = np.arange(64 * 64, dtype="f8").reshape(64, 64) + 1
    b = root.create_array("b", shape=(64, 64), chunks=(8, 8), dtype="f8", fill_value=0.0)
    b[32:, 32:] = 7.0  # b stores the chunks of one quarter only
    session.commit("first")

    def check() -> None:
        session = repo.readonly_session(branch="main")
        for name in ("a", "b"):
            _same(dst, zarr.open_array(session.store, path=name, mode="r")[...], name)

    assert _convert(zshard_bin, repo_dir, dst)["status"] == "ok"
    kept = dst / "a" / ".zshard-source-versions"
    assert kept.read_bytes() != (dst / "b" / ".zshard-source-versions").read_bytes()
    kept.write_bytes((dst / "b" / ".zshard-source-versions").read_bytes())
    # At the same snapshot: b's versions are not taken for a's (a's shards made from what a's
    # listing names, as recorded: nothing to rewrite), and a's own are kept again.
    report, _, opened = _traced_convert(zshard_bin, repo_dir, dst, tmp_path / "t1")
    assert report["status"] in ("complete", "ok") and (report["update"] or {}).get("shards_rewritten", 0) == 0, report
    assert opened, "a's manifest is listed"
    check()

    # A chunk of a back to the fill value (Icechunk deletes it): its shard is rewritten.
    session = repo.writable_session("main")
    zarr.open_array(session.store, path="a", mode="r+")[0:8, 0:8] = 0.0
    session.commit("a chunk of a gone")
    report = _convert(zshard_bin, repo_dir, dst)
    assert report["update"]["shards_rewritten"] == 1, report["update"]
    check()
    # The run that wrote kept a's own: its header names the repository and a.
    header = kept.read_bytes().split(b"\n")[:3]
    assert header[1:] == [json.dumps(str(repo_dir.resolve())).encode(), b'"a"'], header


def test_icechunk_overwrite_keeps_the_source_versions_of_its_own_run(zshard_bin, tmp_path):
    """`--overwrite` at the same snapshot replaces the kept source versions (it removed the old
    ones and kept none: the next run listed every manifest again); the next run then reads none."""
    ic = pytest.importorskip("icechunk")
    repo_dir, dst = tmp_path / "repo", tmp_path / "dst.zarr"
    repo = ic.Repository.create(ic.local_filesystem_storage(str(repo_dir)))
    session = repo.writable_session("main")
    a = zarr.create_array(session.store, name="a", shape=(64, 64), chunks=(8, 8), dtype="f8", fill_value=0.0)
    a[...] = np.arange(64 * 64, dtype="f8").reshape(64, 64)
    session.commit("first")
    _convert(zshard_bin, repo_dir, dst)
    report = _convert(zshard_bin, repo_dir, dst, "--overwrite")
    assert report["status"] == "ok"
    assert (dst / "a" / ".zshard-source-versions").is_file()
    report, _, opened = _traced_convert(zshard_bin, repo_dir, dst, tmp_path / "t1")
    assert report["status"] == "complete" and opened == set(), opened
    session = repo.readonly_session(branch="main")
    _same(dst, zarr.open_array(session.store, path="a", mode="r")[...], "a")


def _two_array_repository(tmp_path):
    """An icechunk 2 repository (skipped without it) whose first commit holds arrays a and b, 64 x 64
    float64 in 8 x 8 chunks; returns icechunk, the repository, its folder and a destination path."""
    ic = pytest.importorskip("icechunk")
    if not str(ic.__version__).startswith("2"):
        pytest.skip("icechunk 2 makes the repository")
    repo_dir, dst = tmp_path / "repo", tmp_path / "dst.zarr"
    repo = ic.Repository.create(ic.local_filesystem_storage(str(repo_dir)))
    session = repo.writable_session("main")
    root = zarr.group(store=session.store)
    for name, start in (("a", 0.0), ("b", 1e6)):
        arr = root.create_array(name, shape=(64, 64), chunks=(8, 8), dtype="f8", fill_value=0.0)
        arr[...] = np.arange(64 * 64, dtype="f8").reshape(64, 64) + start
    session.commit("first")
    return ic, repo, repo_dir, dst


def test_icechunk_source_split_run_keeps_the_versions_an_unsplit_run_keeps(zshard_bin, tmp_path):
    """A conversion split with `--worker I/N` + `finalize` keeps the source versions an unsplit run
    keeps (finalize lists at the snapshot it checks every worker's shards against), so the next
    nightly split run reads only the manifests Icechunk's diff names: each worker and finalize
    open only the new manifest of the array that changed, and finalize lists nothing whole. Values
    compared with icechunk's own read."""
    ic, repo, repo_dir, dst = _two_array_repository(tmp_path)

    def split(step: str) -> tuple[list[dict], set[str], str]:
        """Two workers then finalize, traced: the workers' reports, every manifest opened, and
        finalize's stderr."""
        reports, opened = [], set()
        for i in range(2):
            report = tmp_path / f"{step}-w{i}.json"
            _, seen = _traced(zshard_bin, repo_dir, tmp_path / f"{step}-w{i}.trace",
                              ["convert", str(repo_dir), str(dst), "--quiet", "--threads", "2",
                               "--shard-shape", SHARDS, "--worker", f"{i}/2", "--report", str(report)])
            reports.append(json.loads(report.read_text()))
            opened |= seen
        stderr, seen = _traced(zshard_bin, repo_dir, tmp_path / f"{step}-f.trace", ["finalize", str(dst)])
        return reports, opened | seen, stderr

    def check() -> None:
        session = repo.readonly_session(branch="main")
        for name in ("a", "b"):
            _same(dst, zarr.open_array(session.store, path=name, mode="r")[...], name)

    split("first")
    check()
    for name in ("a", "b"):
        assert (dst / name / ".zshard-source-versions").is_file(), name

    old = {p.name for p in (repo_dir / "manifests").iterdir()}
    session = repo.writable_session("main")
    zarr.open_array(session.store, path="a", mode="r+")[40, 40] = -1.0
    session.commit("one chunk of a")
    new = {p.name for p in (repo_dir / "manifests").iterdir()} - old
    before = _files(dst)
    reports, opened, stderr = split("update")
    assert sum(r["update"]["shards_rewritten"] for r in reports if r["update"]) == 1, reports
    assert opened and opened <= new, (opened, new)
    assert "listed again" not in stderr, stderr
    assert _shards(_changed(before, _files(dst))) == {"a/c/1/1"}
    check()

    # The next unsplit run at the same snapshot: nothing read from the manifests, nothing written.
    before = _files(dst)
    report, _, opened = _traced_convert(zshard_bin, repo_dir, dst, tmp_path / "t-after")
    assert report["status"] == "complete" and opened == set(), opened
    assert _changed(before, _files(dst)) == set()


def test_icechunk_source_plan_of_an_update_reads_only_what_the_snapshot_diff_names(zshard_bin, tmp_path):
    """`zshard plan` on a finished destination takes the versions as the update would: at the
    snapshot the destination was made from it reads no manifest, at a later one only the manifest
    Icechunk's diff names (array b's, unchanged, is not read), and says which shard an update
    rewrites."""
    ic, repo, repo_dir, dst = _two_array_repository(tmp_path)
    _convert(zshard_bin, repo_dir, dst)

    import subprocess

    def plan(step: str) -> set[str]:
        """The manifests `zshard plan` opens."""
        _, opened = _traced(zshard_bin, repo_dir, tmp_path / f"{step}.trace",
                            ["plan", str(repo_dir), str(dst), "--shard-shape", SHARDS, "--json"])
        return opened

    def plan_json() -> dict:
        r = subprocess.run([str(zshard_bin), "plan", str(repo_dir), str(dst), "--shard-shape", SHARDS, "--json"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    opened = plan("same")
    assert opened == set(), opened
    update = {a["path"]: a for a in plan_json()["update"]["arrays"]}
    assert update["a"]["shards_to_rewrite"] == 0 and update["b"]["shards_to_rewrite"] == 0

    old = {p.name for p in (repo_dir / "manifests").iterdir()}
    session = repo.writable_session("main")
    zarr.open_array(session.store, path="a", mode="r+")[40, 40] = -1.0
    session.commit("one chunk of a")
    new = {p.name for p in (repo_dir / "manifests").iterdir()} - old
    opened = plan("changed")
    assert opened and opened <= new, (opened, new)
    update = {a["path"]: a for a in plan_json()["update"]["arrays"]}
    assert update["a"]["shards_to_rewrite"] == 1 and update["b"]["shards_to_rewrite"] == 0, update
    # And the update the plan described, with the values icechunk reads.
    report = _convert(zshard_bin, repo_dir, dst)
    assert report["update"]["shards_rewritten"] == 1
    session = repo.readonly_session(branch="main")
    _same(dst, zarr.open_array(session.store, path="a", mode="r")[...], "a")


def _spec_kwargs(ic, spec: int) -> dict:
    """How to ask `ic` (icechunk 2.x or 1.x) for a repository of spec version `spec`; 1.x writes
    only version 1."""
    if not str(ic.__version__).startswith("2"):
        if spec != 1:
            pytest.skip("icechunk 1.x writes spec version 1 only")
        return {}
    return {"spec_version": spec}


def _icechunk_commits(ic, repo_dir: Path) -> list[str]:
    repo = ic.Repository.open(ic.local_filesystem_storage(str(repo_dir)))
    return [info.id for info in repo.ancestry(branch="main")]


def _icechunk_chunk_coordinates(ic, repo_dir: Path, path: str = "/") -> set[tuple[int, ...]]:
    """The coordinates of every chunk reference of the array at `path` on main (its shards)."""
    import asyncio

    repo = ic.Repository.open(ic.local_filesystem_storage(str(repo_dir)))
    session = repo.readonly_session(branch="main")

    async def collect():
        return {tuple(c) async for c in session.chunk_coordinates(path)}

    return asyncio.run(collect())


@pytest.mark.parametrize("spec", [1, 2])
def test_icechunk_destination_one_commit_per_update(zshard_bin, tmp_path, spec):
    """Into an Icechunk repository: a changed chunk, growth, new attributes and a chunk gone to the
    fill value each make one commit that rewrites only their shards; nothing changed makes none."""
    ic = pytest.importorskip("icechunk")
    src, repo_dir = tmp_path / "src.zarr", tmp_path / "repo"
    ic.Repository.create(ic.local_filesystem_storage(str(repo_dir)), **_spec_kwargs(ic, spec))
    data = np.arange(96 * 80, dtype="i4").reshape(96, 80) + 1
    a = zarr.create_array(str(src), shape=data.shape, chunks=(8, 8), dtype="i4", fill_value=0, zarr_format=3)
    a[...] = data
    a.attrs["units"] = "K"

    def read() -> zarr.Array:
        repo = ic.Repository.open(ic.local_filesystem_storage(str(repo_dir)))
        return zarr.open_array(repo.readonly_session(branch="main").store, mode="r")

    def chunk_files() -> set[str]:
        return {str(p.relative_to(repo_dir)) for p in (repo_dir / "chunks").rglob("*") if p.is_file()}

    first = _convert(zshard_bin, src, repo_dir)
    assert first["status"] == "ok"
    commits = _icechunk_commits(ic, repo_dir)
    stored = chunk_files()
    assert len(stored) == 9  # 3 x 3 shards of 32 x 32

    # Nothing changed: no commit, status complete.
    again = _convert(zshard_bin, src, repo_dir)
    assert again["status"] == "complete" and again["totals"]["chunks_read"] == 0
    assert _icechunk_commits(ic, repo_dir) == commits and chunk_files() == stored

    # One element: one commit, one new chunk object (shard (1, 1)), every other shard kept. The
    # rewritten shard reads one source chunk and copies its 15 other inner chunks from the shard
    # as zshard's commit holds it.
    a[44, 35] = -1
    data[44, 35] = -1
    report = _convert(zshard_bin, src, repo_dir)
    assert report["update"] == {"shards_rewritten": 1, "shards_added": 0, "shards_removed": 0, "inner_chunks_copied": 15}
    assert report["totals"]["chunks_read"] == 1
    assert len(_icechunk_commits(ic, repo_dir)) == len(commits) + 1
    assert len(chunk_files() - stored) == 1
    got = read()
    np.testing.assert_array_equal(got[...], data)

    # Growth along the first axis and a new attribute: a new row of shards, the metadata.
    a.resize((120, 80))
    a[96:, :] = 5
    a.attrs["units"] = "degC"
    data = np.concatenate([data, np.full((24, 80), 5, dtype="i4")])
    report = _convert(zshard_bin, src, repo_dir)
    assert report["update"] == {"shards_rewritten": 0, "shards_added": 3, "shards_removed": 0, "inner_chunks_copied": 0}
    got = read()
    assert got.shape == (120, 80) and got.attrs["units"] == "degC"
    np.testing.assert_array_equal(got[...], data)

    # A whole shard's region back to the fill value: its chunk reference goes; a shrink removes the
    # shards beyond the new extent.
    a[0:32, 0:32] = 0
    data[0:32, 0:32] = 0
    a.resize((64, 80))
    data = data[:64]
    report = _convert(zshard_bin, src, repo_dir)
    assert report["status"] == "ok"
    got = read()
    assert got.shape == (64, 80)
    np.testing.assert_array_equal(got[...], data)
    refs = _icechunk_chunk_coordinates(ic, repo_dir)
    assert (0, 0) not in refs and refs == {(i, j) for i in range(2) for j in range(3)} - {(0, 0)}

    # And again nothing: no commit.
    commits = _icechunk_commits(ic, repo_dir)
    again = _convert(zshard_bin, src, repo_dir)
    assert again["status"] == "complete"
    assert _icechunk_commits(ic, repo_dir) == commits


@pytest.mark.parametrize("at", [".zshard-commit.json#1", ".zshard-committed.json#1"])
def test_icechunk_update_killed_before_or_after_its_commit(zshard_bin, tmp_path, at):
    """kill -9 during an update into an Icechunk repository, before its commit (at the write of the
    commit record) or right after it: the rerun ends with exactly one commit for the update and the
    changed values."""
    import subprocess

    ic = pytest.importorskip("icechunk")
    src, repo_dir = tmp_path / "src.zarr", tmp_path / "repo"
    ic.Repository.create(ic.local_filesystem_storage(str(repo_dir)))
    data = np.arange(64 * 64, dtype="i4").reshape(64, 64) + 1
    a = zarr.create_array(str(src), shape=data.shape, chunks=(8, 8), dtype="i4", fill_value=0, zarr_format=3)
    a[...] = data
    _convert(zshard_bin, src, repo_dir)
    commits = _icechunk_commits(ic, repo_dir)
    a[3, 60] = -7
    data[3, 60] = -7
    argv = [str(zshard_bin), "convert", str(src), str(repo_dir), "--quiet", "--shard-shape", SHARDS]
    killed = subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", "-P", str(repo_dir / ".zshard-staging" / at),
                             "-e", "inject=rename:signal=KILL:when=1", *argv], capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()
    rerun = subprocess.run(argv, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert len(_icechunk_commits(ic, repo_dir)) == len(commits) + 1
    repo = ic.Repository.open(ic.local_filesystem_storage(str(repo_dir)))
    np.testing.assert_array_equal(zarr.open_array(repo.readonly_session(branch="main").store, mode="r")[...], data)
    # And a third run has nothing to do.
    again = _convert(zshard_bin, src, repo_dir)
    assert again["status"] == "complete" and len(_icechunk_commits(ic, repo_dir)) == len(commits) + 1


def test_icechunk_destination_without_its_staging_is_converted_whole_not_taken_for_done(zshard_bin, tmp_path):
    """The staging folder that a commit keeps is gone (removed by hand, or a fresh copy of the
    repository): a source that grew since is converted whole and committed, never reported as
    already committed."""
    import shutil

    ic = pytest.importorskip("icechunk")
    src, repo_dir = tmp_path / "src.zarr", tmp_path / "repo"
    ic.Repository.create(ic.local_filesystem_storage(str(repo_dir)), **_spec_kwargs(ic, 1))
    a = zarr.create_array(str(src), shape=(64, 64), chunks=(8, 8), dtype="i4", fill_value=0, zarr_format=3)
    a[...] = 1
    _convert(zshard_bin, src, repo_dir)
    shutil.rmtree(repo_dir / ".zshard-staging")
    a.resize((96, 64))
    a[64:, :] = 2
    report = _convert(zshard_bin, src, repo_dir)
    assert report["status"] == "ok", report
    repo = ic.Repository.open(ic.local_filesystem_storage(str(repo_dir)))
    got = zarr.open_array(repo.readonly_session(branch="main").store, mode="r")
    np.testing.assert_array_equal(got[...], a[...])


def test_zip_source_written_anew_with_one_changed_chunk(zshard_bin, tmp_path):
    """A Zarr hierarchy in a zip (zarr-python's `ZipStore`) written anew with one chunk changed:
    only that chunk's shard is rewritten (members are told by their CRC-32 and sizes)."""
    from zarr.storage import ZipStore

    src, dst = tmp_path / "src.zip", tmp_path / "dst.zarr"
    data = np.arange(64 * 64, dtype="u2").reshape(64, 64)

    def write(values):
        store = ZipStore(str(src), mode="w")
        a = zarr.create_array(store, shape=values.shape, chunks=(8, 8), dtype="u2", fill_value=0)
        a[...] = values
        store.close()

    write(data)
    _convert(zshard_bin, src, dst)
    before = _files(dst)
    data[44, 35] = 1
    write(data)
    report = _convert(zshard_bin, src, dst)
    assert report["status"] == "ok"
    assert report["update"] == {"shards_rewritten": 1, "shards_added": 0, "shards_removed": 0, "inner_chunks_copied": 15}
    assert _shards(_changed(before, _files(dst))) == {"c/1/1"}
    _same(dst, data)
    again = _convert(zshard_bin, src, dst)
    assert again["status"] == "complete"


def test_n5_source_one_changed_block(zshard_bin, tmp_path):
    """An N5 dataset written by tensorstore's n5 driver, one block written again."""
    ts = pytest.importorskip("tensorstore")
    src, dst = tmp_path / "src.n5", tmp_path / "dst.zarr"
    spec = {
        "driver": "n5",
        "kvstore": {"driver": "file", "path": str(src)},
        "metadata": {"dimensions": [64, 64], "blockSize": [8, 8], "dataType": "uint16",
                     "compression": {"type": "raw"}},
    }
    data = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    ts.open(spec, create=True).result()[...].write(data).result()
    _convert(zshard_bin, src, dst)
    before = _files(dst)
    data[44, 35] = 1
    ts.open(spec).result()[44, 35].write(1).result()
    report = _convert(zshard_bin, src, dst)
    assert report["status"] == "ok"
    assert report["update"]["shards_rewritten"] == 1 and report["update"]["shards_added"] == 0
    assert _shards(_changed(before, _files(dst))) == {"c/1/1"}
    _same(dst, data)
    again = _convert(zshard_bin, src, dst)
    assert again["status"] == "complete"
