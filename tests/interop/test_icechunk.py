"""Icechunk repositories as zshard source and destination (issue 20).

Repositories are made with the real `icechunk` Python package (1.1.x: spec version 1; 2.x: spec version
2 by default, and 1 on request, both tested here): native chunks
written through zarr-python, inline chunks (smaller than the repository's inline threshold), and
virtual chunks set with `store.set_virtual_ref` into an HDF5 file written by h5py. zshard converts
them to plain sharded Zarr and into other repositories; everything is read back through icechunk +
zarr-python and compared element by element with what icechunk + zarr-python (and h5py) read from
the source.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import h5py
import icechunk as ic
import numpy as np
import pytest
import zarr

from conftest import run_zshard

# icechunk 2.x reads and writes spec versions 1 and 2 (new repositories: 2); 1.x only spec 1.
ICECHUNK2 = int(ic.__version__.split(".")[0]) >= 2
# Flags of conversions into repositories zshard makes: in spec 2 by default, which icechunk 1.x cannot
# read, so under it they ask for spec 1.
NEW = [] if ICECHUNK2 else ["--icechunk-spec", "1"]


def _spec_version(repo_dir: Path) -> int:
    """The repository's spec version as icechunk reads it (1.x reads only version 1)."""
    if not ICECHUNK2:
        ic.Repository.open(ic.local_filesystem_storage(str(repo_dir)))
        return 1
    return int(ic.Repository.fetch_spec_version(ic.local_filesystem_storage(str(repo_dir))))


def _create(repo_dir: Path, spec_version: int | None = None, **kwargs):
    """A new repository made by icechunk, in `spec_version` (icechunk's default when None)."""
    if spec_version is not None:
        kwargs["spec_version"] = spec_version
    return ic.Repository.create(ic.local_filesystem_storage(str(repo_dir)), **kwargs)


# Two HDF5 datasets referenced as virtual chunks: raw (uncompressed, chunked) big-endian int16.
H5_SHAPE, H5_CHUNKS = (20, 12), (5, 4)


def _write_h5(path: Path) -> np.ndarray:
    data = (np.arange(240, dtype=">i2").reshape(H5_SHAPE) * 7 - 500).astype(">i2")
    with h5py.File(path, "w") as f:
        f.create_dataset("v", data=data, chunks=H5_CHUNKS)
    return data


def _h5_chunks(path: Path) -> list[tuple[tuple[int, ...], int, int]]:
    """(chunk grid position, byte offset, size) of every chunk of dataset v."""
    with h5py.File(path, "r") as f:
        ds = f["v"]
        out = []
        for i in range(ds.id.get_num_chunks()):
            info = ds.id.get_chunk_info(i)
            pos = tuple(o // c for o, c in zip(info.chunk_offset, H5_CHUNKS))
            out.append((pos, info.byte_offset, info.size))
        return out


def _container_prefix(folder: Path) -> str:
    return f"file://{folder}/"


def _make_source(repo_dir: Path, h5: Path, spec_version: int | None = None) -> dict[str, np.ndarray]:
    """A repository with native, inline and virtual chunks; tag v1 is its first commit, main has a
    second commit that changes the native array. Returns main's values."""
    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(
        ic.VirtualChunkContainer(_container_prefix(h5.parent), ic.local_filesystem_store(str(h5.parent)))
    )
    repo = _create(
        repo_dir,
        spec_version,
        config=config,
        authorize_virtual_chunk_access={_container_prefix(h5.parent): None},
    )
    session = repo.writable_session("main")
    root = zarr.group(session.store, attributes={"title": "icechunk interop"})
    native = np.random.default_rng(20).normal(size=(40, 60)).astype("f4")
    a = root.create_array("native", shape=native.shape, chunks=(10, 15), dtype="f4")
    a[:] = native
    inline = np.arange(24, dtype="i2") - 5
    b = root.create_group("grp").create_array("inline", shape=(24,), chunks=(6,), dtype="i2", fill_value=-1)
    b[:] = inline
    root.create_array(
        "virtual",
        shape=H5_SHAPE,
        chunks=H5_CHUNKS,
        dtype=">i2",
        serializer=zarr.codecs.BytesCodec(endian="big"),
        compressors=None,
        fill_value=0,
    )
    for pos, offset, size in _h5_chunks(h5):
        session.store.set_virtual_ref(
            "virtual/c/" + "/".join(map(str, pos)), f"file://{h5}", offset=offset, length=size
        )
    first = session.commit("native, inline and virtual chunks")
    repo.create_tag("v1", first)
    session = repo.writable_session("main")
    zarr.open_array(session.store, path="native", mode="r+")[0:10, :] = 100.0
    session.commit("second commit: a native chunk row changed")
    return _read_repo(repo_dir, h5.parent)


def _arrays(root) -> dict[str, np.ndarray]:
    return {path: np.asarray(node[()]) for path, node in root.members(max_depth=None)
            if isinstance(node, zarr.Array)}


def _read_repo(repo_dir: Path, virtual_folder: Path | None = None, **version) -> dict[str, np.ndarray]:
    """Every array of the repository as icechunk + zarr-python read it."""
    auth = {_container_prefix(virtual_folder): None} if virtual_folder else None
    repo = ic.Repository.open(ic.local_filesystem_storage(str(repo_dir)), authorize_virtual_chunk_access=auth)
    session = repo.readonly_session(**(version or {"branch": "main"}))
    return _arrays(zarr.open_group(session.store, mode="r"))


def _commits(repo_dir: Path, branch: str = "main") -> list[str]:
    repo = ic.Repository.open(ic.local_filesystem_storage(str(repo_dir)))
    return [s.message for s in repo.ancestry(branch=branch)]


def _assert_equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        assert got[name].shape == w.shape, name
        assert got[name].dtype == w.dtype.newbyteorder("=") or got[name].dtype == w.dtype, name
        np.testing.assert_array_equal(got[name], w, err_msg=name)


def _read_zarr(dst: Path) -> dict[str, np.ndarray]:
    root = zarr.open_group(str(dst), mode="r")
    assert root.attrs["title"] == "icechunk interop"
    return _arrays(root)


def _zshard(zshard_bin: Path, *args, ok: bool = True):
    r = run_zshard(zshard_bin, [*args])
    assert (r.returncode == 0) == ok, r.describe()
    return r


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("icechunk")
    (d / "files").mkdir()
    h5 = d / "files" / "data.h5"
    h5_values = _write_h5(h5)
    repo = d / "repo"
    values = _make_source(repo, h5)
    np.testing.assert_array_equal(values["virtual"], h5_values)
    return repo, h5, values


# --------------------------------------------------------------------------
# source
# --------------------------------------------------------------------------


def test_plan_counts_native_inline_and_virtual_chunks(zshard_bin, source, tmp_path):
    repo, h5, _ = source
    r = _zshard(zshard_bin, "plan", repo, tmp_path / "out.zarr")
    assert f", spec version {_spec_version(repo)})" in r.stdout, r.stdout
    # native: 16 chunks, of which the second commit rewrote 4 as constant 100.0, which compress below
    # the inline threshold: 12 native, 4 + 4 inline (grp/inline's and those), 12 virtual.
    assert f"source: icechunk repository {repo}@main (snapshot " in r.stdout, r.stdout
    assert "12 native, 8 inline, 12 virtual chunk(s)" in r.stdout, r.stdout


def test_source_converts_native_inline_and_virtual_chunks(zshard_bin, source, tmp_path):
    repo, h5, values = source
    dst = tmp_path / "out.zarr"
    _zshard(zshard_bin, "convert", repo, dst, "--quiet", "--threads", "2")
    got = _read_zarr(dst)
    _assert_equal(got, values)
    with h5py.File(h5) as f:
        np.testing.assert_array_equal(got["virtual"], f["v"][()])
    assert got["native"][0, 0] == 100.0


def test_source_ref_tag_and_snapshot(zshard_bin, source, tmp_path):
    repo, h5, _ = source
    v1 = _read_repo(repo, h5.parent, tag="v1")
    assert v1["native"][0, 0] != 100.0
    _zshard(zshard_bin, "convert", repo, tmp_path / "tag.zarr", "--quiet", "--source-ref", "v1")
    _assert_equal(_read_zarr(tmp_path / "tag.zarr"), v1)
    snapshot = ic.Repository.open(ic.local_filesystem_storage(str(repo))).lookup_tag("v1")
    _zshard(zshard_bin, "convert", repo, tmp_path / "snap.zarr", "--quiet", "--source-ref", snapshot)
    _assert_equal(_read_zarr(tmp_path / "snap.zarr"), v1)
    r = _zshard(zshard_bin, "convert", repo, tmp_path / "none.zarr", "--quiet", "--source-ref", "nope", ok=False)
    assert '"nope" is not a branch, tag or snapshot id' in r.stderr, r.stderr


def test_virtual_target_outside_the_allowed_folders_is_refused_before_any_read(zshard_bin, source, tmp_path):
    repo, h5, values = source
    # --ref-root narrower than the target's folder: the target escapes it.
    narrow = tmp_path / "elsewhere"
    narrow.mkdir()
    dst = tmp_path / "refused.zarr"
    r = _zshard(zshard_bin, "convert", repo, dst, "--quiet", "--ref-root", narrow, ok=False)
    assert "virtual chunk virtual/c/" in r.stderr and str(h5) in r.stderr, r.stderr
    assert not dst.exists() or not any(p.is_file() for p in dst.rglob("*") if ".zshard" not in p.parts)
    # The same with the target's folder allowed: converts.
    _zshard(zshard_bin, "convert", repo, tmp_path / "ok.zarr", "--quiet", "--ref-root", narrow,
            "--allow-ref-prefix", h5.parent)
    _assert_equal(_read_zarr(tmp_path / "ok.zarr"), values)


def test_virtual_target_outside_the_repository_containers_is_refused(zshard_bin, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    h5 = tmp_path / "b" / "data.h5"
    _write_h5(h5)
    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(
        ic.VirtualChunkContainer(_container_prefix(tmp_path / "a"), ic.local_filesystem_store(str(tmp_path / "a")))
    )
    repo_dir = tmp_path / "repo"
    repo = ic.Repository.create(ic.local_filesystem_storage(str(repo_dir)), config=config)
    session = repo.writable_session("main")
    zarr.create_array(session.store, name="v", shape=H5_SHAPE, chunks=H5_CHUNKS, dtype=">i2",
                      serializer=zarr.codecs.BytesCodec(endian="big"), compressors=None)
    pos, offset, size = _h5_chunks(h5)[0]
    session.store.set_virtual_ref("v/c/0/0", f"file://{h5}", offset=offset, length=size, validate_container=False)
    session.commit("a reference outside every container")
    r = _zshard(zshard_bin, "convert", repo_dir, tmp_path / "out.zarr", "--quiet", "--ref-root", tmp_path,
                ok=False)
    assert "matches none of the repository's virtual chunk containers" in r.stderr, r.stderr


# --------------------------------------------------------------------------
# destination
# --------------------------------------------------------------------------


def test_into_a_new_repository_one_commit(zshard_bin, source, tmp_path):
    repo, h5, values = source
    out = tmp_path / "out-repo"
    r = _zshard(zshard_bin, "convert", repo, out, "--threads", "2", "--output-format", "icechunk", *NEW)
    assert "committed snapshot" in r.stderr and "to branch main" in r.stderr, r.stderr
    _assert_equal(_read_repo(out), values)
    commits = _commits(out)
    assert len(commits) == 2, commits  # the repository's initial commit and zshard's
    assert commits[0].startswith("zshard ") and str(repo) in commits[0], commits[0]
    assert _staging_cleared(out)


def test_into_an_existing_repository_only_this_conversions_arrays(zshard_bin, source, tmp_path):
    repo, h5, values = source
    out = tmp_path / "existing"
    other = ic.Repository.create(ic.local_filesystem_storage(str(out)))
    session = other.writable_session("main")
    root = zarr.group(session.store, attributes={"title": "icechunk interop"})
    keep = np.arange(30, dtype="u1")
    root.create_array("keep", shape=(30,), chunks=(10,), dtype="u1")[:] = keep
    root.create_array("native", shape=(3,), chunks=(3,), dtype="u1")[:] = [1, 2, 3]  # replaced
    session.commit("before zshard")
    main_before = _commits(out)
    _zshard(zshard_bin, "convert", repo, out, "--quiet", "--branch", "dev", "--message", "sharded by zshard")
    assert _commits(out) == main_before  # main untouched
    dev = _commits(out, "dev")
    assert dev == ["sharded by zshard", *main_before], dev
    got = _read_repo(out, branch="dev")
    np.testing.assert_array_equal(got.pop("keep"), keep)
    _assert_equal(got, values)
    # Written in the repository's own version (icechunk's default: 2 under icechunk 2.x).
    assert _spec_version(out) == (2 if ICECHUNK2 else 1)


def test_new_repositories_are_spec_2_unless_spec_1_is_asked_for(zshard_bin, source, tmp_path):
    repo, h5, values = source
    default = tmp_path / "default"
    r = _zshard(zshard_bin, "plan", repo, default, "--output-format", "icechunk")
    assert f"destination: icechunk repository {default} (new), branch main, spec version 2" in r.stdout, r.stdout
    _zshard(zshard_bin, "convert", repo, default, "--quiet", "--output-format", "icechunk")
    # Spec 2: the `repo` object names branches and tags; there is no refs/ folder.
    assert (default / "repo").is_file() and not (default / "refs").exists()
    if ICECHUNK2:
        assert _spec_version(default) == 2
        _assert_equal(_read_repo(default), values)
        assert _commits(default)[1:] == ["Repository initialized"]
    else:
        with pytest.raises(Exception):  # icechunk 1.x cannot read spec 2: why the option exists
            _read_repo(default)
    spec1 = tmp_path / "spec1"
    r = _zshard(zshard_bin, "plan", repo, spec1, "--icechunk-spec", "1")
    assert f"destination: icechunk repository {spec1} (new), branch main, spec version 1" in r.stdout, r.stdout
    _zshard(zshard_bin, "convert", repo, spec1, "--quiet", "--icechunk-spec", "1")
    assert (spec1 / "refs").is_dir() and not (spec1 / "repo").exists()
    assert _spec_version(spec1) == 1
    _assert_equal(_read_repo(spec1), values)
    assert len(_commits(spec1)) == 2
    # An existing repository is written in its own version: asking for another is refused, naming both.
    r = _zshard(zshard_bin, "convert", repo, spec1, "--quiet", "--icechunk-spec", "2", ok=False)
    assert f"icechunk repository {spec1}: it is of Icechunk spec version 1, not 2" in r.stderr, r.stderr
    r = _zshard(zshard_bin, "plan", repo, spec1)
    assert f"destination: icechunk repository {spec1} (existing), branch main, spec version 1" in r.stdout, r.stdout
    r = _zshard(zshard_bin, "plan", repo, tmp_path / "three", "--icechunk-spec", "3", ok=False)
    assert "this zshard writes versions 1 and 2" in r.stderr, r.stderr
    r = _zshard(zshard_bin, "plan", repo, tmp_path / "plain", "--output-format", "zarr", "--icechunk-spec", "1",
                ok=False)
    assert "--icechunk-spec apply to --output-format icechunk" in r.stderr, r.stderr


def test_a_folder_that_is_no_repository_says_so(zshard_bin, source, tmp_path):
    repo, h5, values = source
    folder = tmp_path / "not-a-repo"
    folder.mkdir()
    (folder / "data.bin").write_bytes(b"x")
    r = _zshard(zshard_bin, "convert", folder, tmp_path / "out.zarr", "--source-format", "icechunk", ok=False)
    assert f"icechunk repository {folder}: cannot open: no Icechunk repository there" in r.stderr, r.stderr
    r = _zshard(zshard_bin, "convert", repo, folder, "--output-format", "icechunk", *NEW, ok=False)
    assert f"icechunk repository {folder}: cannot open:" in r.stderr, r.stderr
    assert "holds objects but no Icechunk repository" in r.stderr, r.stderr
    assert "clean prefixes" not in r.stderr, r.stderr


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.skipif(not ICECHUNK2, reason="icechunk 1.x makes no spec-2 repository to mark as spec 3")
def test_a_repository_of_a_newer_spec_version_is_refused_naming_version_and_path(zshard_bin, source, tmp_path):
    """Issue 33: a repository of a spec version zshard does not know (3: a spec-2 repository whose `repo`
    object's header says 3, which icechunk 2.3 refuses too) is refused as source and as destination with
    its version and path, never as a folder that is not clean, and nothing in it changes."""
    repo, h5, values = source
    newer = tmp_path / "newer"
    other = _create(newer, 2)
    session = other.writable_session("main")
    zarr.create_array(session.store, name="keep", shape=(6,), chunks=(3,), dtype="i2")[:] = np.arange(6)
    session.commit("before zshard")
    header = bytearray((newer / "repo").read_bytes())
    # Icechunk's file header: 12 bytes of magic, 24 of the writer's name, then the spec version.
    assert header[:12] == "ICE🧊CHUNK".encode() and header[36] == 2, bytes(header[:40])
    header[36] = 3
    (newer / "repo").write_bytes(bytes(header))
    with pytest.raises(Exception, match="3"):
        ic.Repository.open(ic.local_filesystem_storage(str(newer)))
    before = _files(newer)
    said = f"icechunk repository {newer}: it is of Icechunk spec version 3; this zshard reads and writes versions 1 and 2"
    runs = [
        ["plan", newer, tmp_path / "p.zarr"],
        ["convert", newer, tmp_path / "c.zarr", "--quiet"],
        ["convert", newer, tmp_path / "s.zarr", "--quiet", "--source-format", "icechunk"],
        ["plan", repo, newer, "--output-format", "icechunk"],
        ["convert", repo, newer, "--quiet", "--output-format", "icechunk"],
        ["convert", repo, newer, "--quiet"],  # a DST that holds a repository is written as one
    ]
    for argv in runs:
        r = _zshard(zshard_bin, *argv, ok=False)
        assert said in r.stderr, r.describe()
        assert "clean prefix" not in r.stderr, r.stderr
    assert _files(newer) == before
    assert not any((tmp_path / n).exists() for n in ["p.zarr", "c.zarr", "s.zarr"])


@pytest.mark.skipif(not ICECHUNK2, reason="icechunk 1.x writes spec 1 only, tested by every other test")
def test_spec_1_repository_made_by_icechunk_2_as_source_and_destination(zshard_bin, tmp_path):
    (tmp_path / "files").mkdir()
    h5 = tmp_path / "files" / "data.h5"
    _write_h5(h5)
    repo = tmp_path / "repo"
    values = _make_source(repo, h5, spec_version=1)
    assert _spec_version(repo) == 1 and (repo / "refs").is_dir()
    dst = tmp_path / "out.zarr"
    r = _zshard(zshard_bin, "convert", repo, dst, "--threads", "2")
    _assert_equal(_read_zarr(dst), values)
    v1 = _read_repo(repo, h5.parent, tag="v1")
    _zshard(zshard_bin, "convert", repo, tmp_path / "tag.zarr", "--quiet", "--source-ref", "v1")
    _assert_equal(_read_zarr(tmp_path / "tag.zarr"), v1)
    # Into an existing spec-1 repository beside an array that must not change: one commit, spec 1.
    out = tmp_path / "existing"
    other = _create(out, 1)
    session = other.writable_session("main")
    root = zarr.group(session.store, attributes={"title": "icechunk interop"})
    keep = np.arange(30, dtype="u1")
    root.create_array("keep", shape=(30,), chunks=(10,), dtype="u1")[:] = keep
    session.commit("before zshard")
    before = _commits(out)
    _zshard(zshard_bin, "convert", repo, out, "--quiet", "--message", "sharded by zshard")
    assert _commits(out) == ["sharded by zshard", *before]
    assert _spec_version(out) == 1
    got = _read_repo(out)
    np.testing.assert_array_equal(got.pop("keep"), keep)
    _assert_equal(got, values)


def test_nothing_visible_before_the_commit_and_resume_after_kill(zshard_bin, tmp_path):
    src = tmp_path / "big.zarr"
    data = np.random.default_rng(3).integers(0, 1000, size=(1024, 1024), dtype="u4")
    group = zarr.open_group(str(src), mode="w", zarr_format=2)
    group.create_array("big", shape=data.shape, chunks=(32, 32), dtype="u4")[:] = data
    args = ["convert", src, tmp_path / "out", "--quiet", "--threads", "1", "--output-format", "icechunk",
            "--shard-shape", "64,64", "--compressor", "gzip:9", "--message", "one commit", *NEW]
    argv = [str(zshard_bin)] + [str(a) for a in args]
    started = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True)
    duration = time.monotonic() - started
    reference = _read_repo(tmp_path / "out")
    np.testing.assert_array_equal(reference["big"], data)

    interrupted = 0
    for point, fraction in enumerate([0.1, 0.25, 0.4]):
        dst = tmp_path / f"run{point}"
        ic.Repository.create(ic.local_filesystem_storage(str(dst)))
        before = _commits(dst)
        args[2] = dst
        argv = [str(zshard_bin)] + [str(a) for a in args]
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(duration * fraction)
        killed = child.poll() is None
        child.kill()
        child.wait()
        if killed and _commits(dst) == before:  # killed before its commit: the branch is as it was
            interrupted += 1
        subprocess.run(argv, check=True, capture_output=True)
        assert _commits(dst) == ["one commit", *before]
        _assert_equal(_read_repo(dst), reference)
    assert interrupted >= 2, f"only {interrupted} of 3 kills landed mid-run"


def _staging_cleared(repo: Path) -> bool:
    """Whether the staging folder of `repo` is gone, or holds only what a commit keeps for a later
    update (issue 40): the documents, the kept records, an Icechunk source's chunk versions and the
    marker saying so, no shard."""
    staging = repo / ".zshard-staging"
    if not staging.exists():
        return True
    kept = {"zarr.json", ".zshard-records", ".zshard-source-versions", ".zshard-kept-after-commit"}
    left = [p for p in staging.rglob("*") if p.is_file() and p.name not in kept]
    return left == [] and (staging / ".zshard-kept-after-commit").is_file()


def _chunk_objects(repo: Path) -> dict[str, int]:
    """The repository's chunk objects: name -> inode (a hard link of a staged shard shares its inode)."""
    folder = repo / "chunks"
    return {p.name: p.stat().st_ino for p in folder.iterdir()} if folder.exists() else {}


def _stored(stderr: str) -> int:
    match = re.search(r"stored (\d+) shard\(s\) in the chunk storage", stderr)
    assert match, stderr
    return int(match.group(1))


def test_three_workers_and_finalize_one_commit(zshard_bin, source, tmp_path):
    """Each worker stores its own shards in the repository's chunk storage (hard links of its staged
    shards, no copy); finalize only references them in one commit and stores nothing itself."""
    repo, h5, values = source
    out = tmp_path / "workers"
    common = [repo, out, "--output-format", "icechunk", "--message", "workers", *NEW]
    stored = []
    for i in range(3):
        r = _zshard(zshard_bin, "convert", *common, "--worker", f"{i}/3")
        stored.append(_stored(r.stderr))
        assert _commits(out) == ["Repository initialized"]
        assert len(_chunk_objects(out)) == sum(stored)
    assert min(stored) >= 1, stored
    # A worker run again finds its shards stored and stores nothing.
    assert _stored(_zshard(zshard_bin, "convert", *common, "--worker", "1/3").stderr) == 0
    before = _chunk_objects(out)
    staged = {p.stat().st_ino for p in (out / ".zshard-staging").rglob("*") if p.is_file()}
    assert set(before.values()) <= staged  # hard links of the staged shards
    r = _zshard(zshard_bin, "finalize", *common)
    assert f"{sum(stored)} chunk(s), {sum(stored)} of them stored by the workers" in r.stderr, r.stderr
    assert _chunk_objects(out) == before  # finalize stored no chunk of its own
    assert _commits(out) == ["workers", "Repository initialized"]
    _assert_equal(_read_repo(out), values)


def test_overwrite_forgets_the_shards_workers_stored(zshard_bin, tmp_path):
    """Shards a worker stored ahead are copies of its staged shards. An --overwrite run from another
    source replaces those with shards of the same size (uncompressed, same shape), so it must forget
    the copies, store every shard itself and commit the new values."""
    sources = {}
    for name, scale in (("a", 1), ("b", 3)):
        values = np.arange(64 * 48, dtype="i4").reshape(64, 48) * scale
        sources[name] = tmp_path / f"{name}.zarr"
        array = zarr.create_array(str(sources[name]), shape=values.shape, chunks=(16, 16), dtype="i4")
        array[:] = values
    out = tmp_path / "out"
    flags = ["--output-format", "icechunk", "--compressor", "none", "--shard-shape", "32,48", *NEW]
    assert _stored(_zshard(zshard_bin, "convert", sources["a"], out, *flags, "--worker", "0/2").stderr) == 1
    r = _zshard(zshard_bin, "convert", sources["b"], out, *flags, "--overwrite", "--message", "from b")
    assert "stored by the workers" not in r.stderr and "committed snapshot" in r.stderr, r.stderr
    assert _commits(out) == ["from b", "Repository initialized"]
    want = zarr.open_array(str(sources["b"]), mode="r")[:]
    got = zarr.open_array(ic.Repository.open(ic.local_filesystem_storage(str(out))).readonly_session(
        branch="main").store, mode="r")[:]
    np.testing.assert_array_equal(got, want)


def test_killed_right_after_the_commit_the_rerun_commits_nothing(zshard_bin, source, tmp_path):
    """SIGKILL (strace-injected, as pipelines/zshard/tests/faults.rs does) right after the commit: at the
    rename that writes `.zshard-committed.json`, the first write once the branch has moved. The rerun
    finds the commit on the branch by its token, commits nothing, and removes the staging folder."""
    repo, h5, values = source
    out = tmp_path / "out"
    ic.Repository.create(ic.local_filesystem_storage(str(out)))
    argv = [str(zshard_bin), "convert", str(repo), str(out), "--quiet", "--threads", "2",
            "--output-format", "icechunk", "--message", "once"]
    record = out / ".zshard-staging" / ".zshard-commit.json"
    committed = out / ".zshard-staging" / ".zshard-committed.json#1"
    killed = subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", "-P", str(committed),
                             "-e", "inject=rename:signal=KILL:when=1", *argv], capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()
    assert _commits(out) == ["once", "Repository initialized"]  # the killed run had committed
    assert record.is_file()
    rerun = subprocess.run(argv, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert _commits(out) == ["once", "Repository initialized"]  # no second commit
    _assert_equal(_read_repo(out), values)
    assert _staging_cleared(out)


def test_virtualizarr_dataset_in_a_spec_2_repository_as_source(zshard_bin, tmp_path):
    """The field's route from netCDF to Zarr today: VirtualiZarr virtualizes a netCDF4 (HDF5) file
    into an icechunk 2.x repository (spec 2); zshard converts it, and xarray reads the same dataset."""
    pytest.importorskip("virtualizarr")
    xr = pytest.importorskip("xarray")
    from obstore.store import LocalStore
    from virtualizarr import open_virtual_dataset
    from virtualizarr.parsers import HDFParser
    from virtualizarr.registry import ObjectStoreRegistry

    files = tmp_path / "files"
    files.mkdir()
    nc = files / "data.nc"
    temp = np.arange(12 * 8 * 10, dtype="f4").reshape(12, 8, 10) * 0.5 - 3
    xr.Dataset({"temp": (("time", "y", "x"), temp)},
               coords={"time": np.arange(12, dtype="f8"), "y": np.arange(8), "x": np.arange(10)},
               attrs={"title": "virtualized"}).to_netcdf(
        nc, engine="h5netcdf", encoding={"temp": {"chunksizes": (4, 4, 5)}})
    registry = ObjectStoreRegistry({f"file://{files}": LocalStore(prefix=str(files))})
    vds = open_virtual_dataset(url=f"file://{nc}", parser=HDFParser(), registry=registry, loadable_variables=[])
    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(ic.VirtualChunkContainer(_container_prefix(files),
                                                                ic.local_filesystem_store(str(files))))
    repo = tmp_path / "repo"
    session = _create(repo, config=config, authorize_virtual_chunk_access={_container_prefix(files): None}) \
        .writable_session("main")
    vds.vz.to_icechunk(session.store)
    session.commit("virtualizarr")
    r = _zshard(zshard_bin, "plan", repo, tmp_path / "out.zarr")
    spec = 2 if ICECHUNK2 else 1
    assert f"spec version {spec}): 0 native, 0 inline, 15 virtual chunk(s)" in r.stdout, r.stdout
    _zshard(zshard_bin, "convert", repo, tmp_path / "out.zarr", "--quiet")
    want = xr.open_dataset(nc, engine="h5netcdf").load()
    got = xr.open_zarr(tmp_path / "out.zarr", consolidated=None).load()
    xr.testing.assert_identical(got, want)


# --------------------------------------------------------------------------
# reruns, finalize again, kills during cleanup (issue 31)
# --------------------------------------------------------------------------


def _small_source(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A Zarr v2 group with one 256x256 uint16 array in 32x32 chunks (16 shards of 64x64)."""
    src = tmp_path / "small.zarr"
    data = np.random.default_rng(31).integers(0, 60000, size=(256, 256), dtype="u2")
    group = zarr.open_group(str(src), mode="w", zarr_format=2)
    group.create_array("big", shape=data.shape, chunks=(32, 32), dtype="u2")[:] = data
    return src, data


def _into(src: Path, out: Path, *extra, shards: str = "64,64", message: str = "sharded") -> list[str]:
    return ["convert", src, out, "--threads", "2", "--output-format", "icechunk", "--shard-shape", shards,
            "--message", message, *extra]


def _shards(repo: Path) -> tuple[int, ...]:
    session = ic.Repository.open(ic.local_filesystem_storage(str(repo))).readonly_session(branch="main")
    return zarr.open_group(session.store, mode="r")["big"].shards


def test_a_rerun_of_a_finished_conversion_commits_nothing(zshard_bin, tmp_path):
    """Issue 31 row 9: a rerun with the same options finds the conversion on the branch (its commit
    records the conversion's fingerprint) and does nothing, as a rerun into a finished Zarr output;
    with other options it is refused as Zarr output is, and --overwrite then commits them."""
    src, data = _small_source(tmp_path)
    out = tmp_path / "out"
    _zshard(zshard_bin, *_into(src, out, *NEW))
    assert _commits(out) == ["sharded", "Repository initialized"]
    chunks = _chunk_objects(out)
    assert len(chunks) == 16
    r = _zshard(zshard_bin, *_into(src, out))
    assert _commits(out) == ["sharded", "Repository initialized"]  # no second commit
    assert _chunk_objects(out) == chunks  # nothing stored again
    assert "already complete with these options; nothing to do" in r.stderr, r.stderr
    assert "was committed by an earlier run; nothing committed now" in r.stderr, r.stderr
    assert _staging_cleared(out)
    _assert_equal(_read_repo(out), {"big": data})
    # Other options: refused, nothing committed or left behind.
    r = _zshard(zshard_bin, *_into(src, out, shards="128,128"), ok=False)
    assert 'branch "main" holds array big as zshard committed it' in r.stderr, r.stderr
    assert "use --overwrite to replace it" in r.stderr, r.stderr
    assert _commits(out) == ["sharded", "Repository initialized"]
    assert _chunk_objects(out) == chunks and _staging_cleared(out)
    # --overwrite commits the other options once; a rerun of those is a no-op again.
    _zshard(zshard_bin, *_into(src, out, "--overwrite", shards="128,128", message="again"))
    assert _commits(out) == ["again", "sharded", "Repository initialized"]
    assert _shards(out) == (128, 128)
    _assert_equal(_read_repo(out), {"big": data})
    _zshard(zshard_bin, *_into(src, out, shards="128,128", message="again"))
    assert len(_commits(out)) == 3 and len(_chunk_objects(out)) == 16 + 4


def test_finalize_twice_says_already_finalized(zshard_bin, tmp_path):
    """Issue 31 row 11: finalize of a partitioned conversion run again exits 0 saying it is already
    finalized, and commits nothing."""
    src, data = _small_source(tmp_path)
    out = tmp_path / "out"
    for i in range(2):
        _zshard(zshard_bin, *_into(src, out, *NEW, "--worker", f"{i}/2"))
    finalize = ["finalize", src, out, "--output-format", "icechunk", "--shard-shape", "64,64", "--message",
                "sharded", *NEW]
    r = _zshard(zshard_bin, *finalize)
    assert "committed snapshot" in r.stderr, r.stderr
    chunks = _chunk_objects(out)
    r = _zshard(zshard_bin, *finalize)
    assert f"{out} is already finalized" in r.stderr, r.stderr
    assert _commits(out) == ["sharded", "Repository initialized"]
    assert _chunk_objects(out) == chunks and len(chunks) == 16
    _assert_equal(_read_repo(out), {"big": data})


def _kill_at(path: Path, syscall: str, argv: list) -> None:
    """Runs zshard under strace, killed (SIGKILL) at the first `syscall` on `path`."""
    killed = subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", "-P", str(path),
                             "-e", f"inject={syscall}:signal=KILL:when=1", *map(str, argv)],
                            capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()


def test_killed_while_removing_the_staging_folder_the_rerun_finishes_it(zshard_bin, tmp_path):
    """Issue 31 row 8: killed after the commit, at the unlink of the commit record while removing
    the staging folder (shards still staged, their records gone): the rerun finds the commit, commits
    nothing and removes the staging folder."""
    src, data = _small_source(tmp_path)
    out = tmp_path / "out"
    argv = [zshard_bin, *_into(src, out, *NEW, "--quiet")]
    _kill_at(out / ".zshard-staging" / ".zshard-committed.json", "unlink", argv)
    assert _commits(out) == ["sharded", "Repository initialized"]  # the killed run had committed
    assert (out / ".zshard-staging" / ".zshard-commit.json").is_file()
    chunks = _chunk_objects(out)
    r = _zshard(zshard_bin, *_into(src, out))
    assert "was committed by an earlier run; nothing committed now" in r.stderr, r.stderr
    assert _commits(out) == ["sharded", "Repository initialized"]
    assert _chunk_objects(out) == chunks and len(chunks) == 16
    assert _staging_cleared(out)
    _assert_equal(_read_repo(out), {"big": data})


def test_killed_at_the_branch_reference_rename_the_rerun_removes_its_staged_reference(zshard_bin, tmp_path):
    """Issue 31 row 12: in a spec-1 repository, killed at the rename of the branch's staged reference
    `refs/branch.main/ref.json#1`: the rerun commits once and removes that file, which names the
    killed run's snapshot; a staged reference naming another snapshot, and other files, stay."""
    src, data = _small_source(tmp_path)
    out = tmp_path / "out"
    spec1 = ["--icechunk-spec", "1"]
    staged_ref = out / "refs" / "branch.main" / "ref.json#1"
    _kill_at(staged_ref, "rename", [zshard_bin, *_into(src, out, *spec1, "--quiet")])
    assert staged_ref.is_file() and _commits(out) == ["Repository initialized"]
    initial = ic.Repository.open(ic.local_filesystem_storage(str(out))).lookup_branch("main")
    foreign = out / "refs" / "branch.main" / "ref.json#7"
    foreign.write_text(f'{{"snapshot":"{initial}"}}')
    notes = out / "refs" / "branch.main" / "notes#1"
    notes.write_text("not zshard's")
    _zshard(zshard_bin, *_into(src, out, *spec1))
    assert _commits(out) == ["sharded", "Repository initialized"]
    assert not staged_ref.exists()
    assert foreign.is_file() and notes.is_file()
    foreign.unlink()
    notes.unlink()
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*#*"))
    assert left == [], left
    _assert_equal(_read_repo(out), {"big": data})


@pytest.mark.skipif(not ICECHUNK2, reason="icechunk 1.x reads no spec-2 repository")
def test_killed_at_the_repository_object_rename_the_rerun_removes_its_staged_copy(zshard_bin, tmp_path):
    """Issue 31 row 12 in spec version 2: killed at the rename of `repo#1`, the store's temporary copy of
    the repository object that moves the branch: the rerun commits once and removes that file (its branch
    main names the killed run's snapshot, read by icechunk's format code); a copy naming another snapshot,
    and other files, stay."""
    src, data = _small_source(tmp_path)
    out = tmp_path / "out"
    staged_repo = out / "repo#1"
    _kill_at(staged_repo, "rename", [zshard_bin, *_into(src, out, "--icechunk-spec", "2", "--quiet")])
    assert staged_repo.is_file() and _commits(out) == ["Repository initialized"]
    assert _spec_version(out) == 2
    # A copy of the repository object as it is (main at the initial snapshot), under another number.
    foreign = out / "repo#7"
    foreign.write_bytes((out / "repo").read_bytes())
    notes = out / "notes#1"
    notes.write_text("not zshard's")
    _zshard(zshard_bin, *_into(src, out))
    assert _commits(out) == ["sharded", "Repository initialized"]
    assert not staged_repo.exists()
    assert foreign.is_file() and notes.is_file()
    foreign.unlink()
    notes.unlink()
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*#*"))
    assert left == [], left
    _assert_equal(_read_repo(out), {"big": data})


# --- Pyramids (issue 41): every level and the OME-Zarr group in one commit ---------------------------


def _pyramid_source(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A Zarr v2 yx uint16 image (xarray's `_ARRAY_DIMENSIONS`) whose fill value 0 is masked."""
    from test_pyramid import _source

    data = np.random.default_rng(41).integers(1, 60000, size=(301, 250), dtype=np.uint16)
    data.flat[::89] = 0
    src = tmp_path / "image.zarr"
    _source(src, data, ["y", "x"], (64, 64))
    return src, data


# With `_into`, which gives the shard shape (128,128).
PYRAMID = ["--pyramid", "auto", "--chunk-shape", "32,32"]


def _committed_image(repo: Path) -> tuple[dict, list[np.ndarray]]:
    """The root group's `ome` attributes and every level as icechunk + zarr-python read them from
    main; the image validated by ome-zarr-models' 0.5 models."""
    from ome_zarr_models.v05.image import Image

    session = ic.Repository.open(ic.local_filesystem_storage(str(repo))).readonly_session(branch="main")
    root = zarr.open_group(session.store, mode="r")
    Image.from_zarr(root)
    ome = root.attrs.asdict()["ome"]
    levels = [np.asarray(root[d["path"]][...]) for d in ome["multiscales"][0]["datasets"]]
    return ome, levels


def _check_levels(levels: list[np.ndarray], data: np.ndarray, count: int) -> None:
    """Level 0 is the source; each further level the masked 2x2 mean of the one above (within 1)."""
    from test_pyramid import _mean

    assert len(levels) == count
    np.testing.assert_array_equal(levels[0], data)
    for k in range(1, len(levels)):
        expected = _mean(levels[k - 1], [True, True], masked=0)
        expected = np.where(np.isnan(expected), 0, expected)
        assert levels[k].shape == expected.shape and levels[k].dtype == np.uint16, f"level {k}"
        assert np.abs(levels[k].astype(np.float64) - expected).max() <= 1, f"level {k}"


def test_a_pyramid_into_a_repository_is_one_commit_of_every_level(zshard_bin, tmp_path):
    """`--pyramid` into Icechunk (issue 41): `plan` shows every level (it was refused), `convert`
    commits every level and the OME-Zarr group once, the same image as into plain Zarr, level by level
    equal to a numpy recomputation; a rerun commits nothing."""
    src, data = _pyramid_source(tmp_path)
    plain, out = tmp_path / "plain.zarr", tmp_path / "out"
    _zshard(zshard_bin, "convert", src, plain, "--threads", "2", "--shard-shape", "128,128", *PYRAMID)
    r = _zshard(zshard_bin, "plan", src, out, "--output-format", "icechunk", "--shard-shape", "128,128",
                *PYRAMID, *NEW)
    assert "pyramid" in r.stdout + r.stderr, r.describe()
    _zshard(zshard_bin, *_into(src, out, *PYRAMID, *NEW, shards="128,128", message="pyramid"))
    assert _commits(out) == ["pyramid", "Repository initialized"]
    assert _staging_cleared(out)
    ome, levels = _committed_image(out)
    assert ome == zarr.open_group(str(plain), mode="r").attrs.asdict()["ome"]
    _check_levels(levels, data, 5)
    for k, level in enumerate(levels):
        np.testing.assert_array_equal(level, zarr.open_array(str(plain / str(k)), mode="r")[...])
    chunks = _chunk_objects(out)
    r = _zshard(zshard_bin, *_into(src, out, *PYRAMID, shards="128,128", message="pyramid"))
    assert "already complete with these options; nothing to do" in r.stderr, r.stderr
    assert _commits(out) == ["pyramid", "Repository initialized"] and _chunk_objects(out) == chunks


def test_a_pyramid_into_a_repository_killed_mid_run_is_resumed_into_one_commit(zshard_bin, tmp_path):
    """Killed as it writes a level-1 shard into the staging folder, nothing is on the branch; the
    rerun resumes there and commits every level once."""
    src, data = _pyramid_source(tmp_path)
    out = tmp_path / "out"
    argv = [zshard_bin, *_into(src, out, *PYRAMID, *NEW, "--quiet", shards="128,128", message="pyramid")]
    _kill_at(out / ".zshard-staging" / "1" / "c" / "0" / "0#1", "openat", argv)
    assert _commits(out) == ["Repository initialized"]
    assert (out / ".zshard-staging" / ".zshard" / "claim.json").is_file()
    _zshard(zshard_bin, *argv[1:])
    assert _commits(out) == ["pyramid", "Repository initialized"]
    assert _staging_cleared(out)
    _check_levels(_committed_image(out)[1], data, 5)


def test_a_pyramid_from_three_workers_and_finalize_is_one_commit(zshard_bin, tmp_path):
    """Workers store their shards of the levels they make; `finalize REPO` (the command each worker
    names: not the staging folder, whose finalize would commit nothing) makes the smallest levels
    and commits the image once."""
    src, data = _pyramid_source(tmp_path)
    out = tmp_path / "out"
    for i in range(3):
        r = _zshard(zshard_bin, *_into(src, out, *PYRAMID, *NEW, "--worker", f"{i}/3", shards="128,128",
                                       message="workers"))
        assert f"run `zshard finalize {out}`" in r.stderr, r.stderr
        assert _commits(out) == ["Repository initialized"]
    r = _zshard(zshard_bin, "finalize", out / ".zshard-staging", ok=False)
    assert f"run `zshard finalize {out}`" in r.stderr, r.stderr
    assert not (out / ".zshard-staging" / "zarr.json").exists()
    r = _zshard(zshard_bin, "finalize", out)
    assert "committed snapshot" in r.stderr, r.stderr
    assert len(_commits(out)) == 2
    assert _staging_cleared(out)
    _check_levels(_committed_image(out)[1], data, 5)


def test_a_destination_names_a_node_path_inside_a_repository(zshard_bin, tmp_path):
    """Issue 41 item 6: `REPO#/PATH` puts a single array (and a pyramid's group) at /PATH of an
    existing repository, whose other nodes and root attributes stay; the missing groups above it are
    made; each is one commit, and a rerun commits nothing."""
    src, data = _pyramid_source(tmp_path)
    out = tmp_path / "repo"
    repo = _create(out)
    session = repo.writable_session("main")
    root = zarr.group(session.store, attributes={"title": "mine"})
    root.create_array("other", shape=(4,), dtype="i1")[:] = 3
    session.commit("mine")
    single = _zshard(zshard_bin, *_into(src, f"{out}#/images/a", shards="128,128", message="single"))
    assert "committed snapshot" in single.stderr, single.stderr
    _zshard(zshard_bin, *_into(src, f"{out}#/images/b", *PYRAMID, shards="128,128", message="pyramid"))
    assert _commits(out) == ["pyramid", "single", "mine", "Repository initialized"]
    r = _zshard(zshard_bin, *_into(src, f"{out}#/images/a", shards="128,128", message="single"))
    assert "already complete with these options; nothing to do" in r.stderr, r.stderr
    assert len(_commits(out)) == 4
    session = ic.Repository.open(ic.local_filesystem_storage(str(out))).readonly_session(branch="main")
    root = zarr.open_group(session.store, mode="r")
    assert root.attrs["title"] == "mine"
    np.testing.assert_array_equal(root["other"][...], np.full(4, 3, dtype="i1"))
    assert isinstance(root["images"], zarr.Group)
    a = root["images/a"]
    assert a.shards == (128, 128)
    np.testing.assert_array_equal(a[...], data)
    image = root["images/b"]
    datasets = image.attrs.asdict()["ome"]["multiscales"][0]["datasets"]
    _check_levels([np.asarray(image[d["path"]][...]) for d in datasets], data, 5)


def test_workers_into_a_node_path_status_message_and_staging(zshard_bin, tmp_path):
    """Issue 41: a pyramid made by two workers into `REPO#/PATH`. Before `finalize`, `status` names
    the destination as given and says what is left: `finalize`, which makes the levels no worker
    makes and commits (not "rerun the conversion"); `finalize REPO#/PATH` commits with the workers'
    `--message`; and a conversion refused there leaves no empty staging folders behind (only
    zshard's: a file beside them stays)."""
    import json

    src, data = _pyramid_source(tmp_path)
    out = tmp_path / "repo"
    repo = _create(out)
    session = repo.writable_session("main")
    zarr.group(session.store, attributes={"title": "mine"})
    session.commit("mine")
    dst = f"{out}#/images/b"
    for i in range(2):
        _zshard(zshard_bin, *_into(src, dst, *PYRAMID, "--worker", f"{i}/2", shards="128,128",
                                   message="two workers"))
    table = _zshard(zshard_bin, "status", dst).stdout
    assert table.startswith(f"{dst}: in progress\n"), table
    assert "rerun the conversion" not in table, table
    status = json.loads(_zshard(zshard_bin, "status", dst, "--json").stdout)
    assert status["destination"] == dst, status
    assert status["finished"] is True and status["finalize_waits_for"] == [], status
    left = status["totals"]["shards_planned"] - status["totals"]["shards_done"]
    assert left == status["finalize_makes"] > 0, status
    assert (
        f"every worker is done: run `zshard finalize {dst}`, which makes the {left} shard(s) of the "
        "pyramid level(s) no worker makes" in table
    ), table
    note = (f"staged in {out}/.zshard-staging/images/b: the repository holds none of it until "
            f"`zshard finalize {dst}` commits it")
    assert status["note"] == note, status
    assert f"note: {note}\n" in table, table
    r = _zshard(zshard_bin, "finalize", dst)
    assert "committed snapshot" in r.stderr, r.stderr
    assert _commits(out) == ["two workers", "mine", "Repository initialized"]
    session = ic.Repository.open(ic.local_filesystem_storage(str(out))).readonly_session(branch="main")
    image = zarr.open_group(session.store, mode="r")["images/b"]
    datasets = image.attrs.asdict()["ome"]["multiscales"][0]["datasets"]
    _check_levels([np.asarray(image[d["path"]][...]) for d in datasets], data, 5)
    # Refused (an array where it needs a group): no staging folder of it is left, down to the
    # repository's own staging folder; a file zshard did not write stays, and so do its folders.
    refused = [*_into(src, f"{out}#/images/b/0/deeper/x", *PYRAMID, shards="128,128")]
    shutil_rmtree = __import__("shutil").rmtree
    shutil_rmtree(out / ".zshard-staging")
    r = _zshard(zshard_bin, *refused, ok=False)
    assert "where this conversion writes a group" in r.stderr, r.stderr
    assert not (out / ".zshard-staging").exists(), sorted(map(str, (out / ".zshard-staging").rglob("*")))
    (out / ".zshard-staging" / "images").mkdir(parents=True)
    (out / ".zshard-staging" / "images" / "mine.txt").write_text("not zshard's")
    _zshard(zshard_bin, *refused, ok=False)
    left_over = sorted(str(p.relative_to(out)) for p in (out / ".zshard-staging").rglob("*"))
    assert left_over == [".zshard-staging/images", ".zshard-staging/images/mine.txt"], left_over
