"""Kerchunk reference sets as zshard input (issue 4).

HDF5 files are written with h5py, references generated with kerchunk
(`SingleHdf5ToZarr` -> JSON v0/v1, `kerchunk.df.refs_to_dataframe` -> Parquet),
converted with the real `zshard convert`, and every output array is read back
with zarr-python and compared with what h5py reads.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import h5py
import numcodecs
import numpy as np
import pytest
import kerchunk.df as kerchunk_df
import kerchunk.hdf as kerchunk_hdf
import zarr

from conftest import run_zshard

# fsspec writes Parquet references through pandas' fastparquet engine, which pandas deprecates.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# Arrays of the main HDF5 file, path -> expected values (filled in by the fixture).
ARRAYS = ["gz", "raw", "contig", "scalar", "grp/sub/d", "grp/sub/partial"]


def _write_h5(path: Path) -> None:
    rng = np.random.default_rng(4)
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "kerchunk interop"
        f.create_dataset(
            "gz",
            data=rng.normal(size=(40, 60)).astype("f4"),
            chunks=(7, 11),
            compression="gzip",
            shuffle=True,
        )
        f.create_dataset(
            "raw",
            data=np.arange(200, dtype=">i2").reshape(20, 10) * 3 - 100,
            chunks=(5, 4),
        )
        f.create_dataset("contig", data=np.arange(50, dtype="u8") ** 2)
        f.create_dataset("scalar", data=np.float64(3.25))
        g = f.create_group("grp/sub")
        g.attrs["units"] = "m"
        g.create_dataset("d", data=np.arange(16, dtype="i4").reshape(4, 4), chunks=(2, 2))
        # Only some chunks are ever written: the others are not allocated, have no reference, and
        # read as the fill value.
        p = g.create_dataset("partial", shape=(6, 6), dtype="u2", chunks=(3, 3), fillvalue=7)
        p[0:3, 0:3] = 1
        p[3:6, 3:6] = 2


def _h5_values(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        return {name: np.asarray(f[name][()]) for name in ARRAYS}


def _refs(h5: Path, url: str | None = None, inline: int = 500) -> dict:
    with open(h5, "rb") as fh:
        return kerchunk_hdf.SingleHdf5ToZarr(fh, url=url or str(h5), inline_threshold=inline).translate()


def _convert(zshard_bin: Path, src: Path, dst: Path, *extra) -> None:
    r = run_zshard(zshard_bin, ["convert", src, dst, "--quiet", "--threads", "2", *extra])
    assert r.returncode == 0, r.describe()


def _fails(zshard_bin: Path, src: Path, dst: Path, *extra) -> str:
    r = run_zshard(zshard_bin, ["convert", src, dst, "--quiet", "--threads", "2", *extra])
    assert r.returncode != 0, r.describe()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.describe()
    return lines[0]


def _assert_matches(dst: Path, expected: dict[str, np.ndarray]) -> None:
    root = zarr.open_group(str(dst), mode="r")
    assert root.attrs["title"] == "kerchunk interop"
    assert root["grp/sub"].attrs["units"] == "m"
    for name, want in expected.items():
        got = root[name][()]
        assert got.shape == want.shape, name
        assert got.dtype == want.dtype.newbyteorder("=") or got.dtype == want.dtype, (name, got.dtype)
        np.testing.assert_array_equal(got, want, err_msg=name)


def _no_data(dst: Path) -> bool:
    """Nothing under a final shard key (zarr.json documents and state files aside)."""
    if not dst.exists():
        return True
    return not any(p.is_file() and "c" in p.relative_to(dst).parts for p in dst.rglob("*"))


@pytest.fixture(scope="module")
def h5(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    d = tmp_path_factory.mktemp("kerchunk")
    path = d / "data.h5"
    _write_h5(path)
    return path, _h5_values(path)


# --------------------------------------------------------------------------
# conversions
# --------------------------------------------------------------------------


def test_json_v1_inline_and_ranges(zshard_bin, h5, tmp_path):
    path, expected = h5
    doc = _refs(path)
    # Small chunks (contig, scalar, grp/sub/d) are inlined (base64 or text) at the default threshold.
    inline = [k for k, v in doc["refs"].items() if not isinstance(v, list) and "/.z" not in k and not k.startswith(".z")]
    assert "scalar/0" in inline, inline
    refs = path.parent / "v1.json"
    refs.write_text(json.dumps(doc))
    _convert(zshard_bin, refs, tmp_path / "out")
    _assert_matches(tmp_path / "out", expected)


def test_json_v0_ranges_only(zshard_bin, h5, tmp_path):
    path, expected = h5
    refs = path.parent / "v0.json"
    v0 = _refs(path, inline=0)["refs"]
    refs.write_text(json.dumps(v0))
    _convert(zshard_bin, refs, tmp_path / "out")
    _assert_matches(tmp_path / "out", expected)


def test_relative_targets_and_compressed_json(zshard_bin, h5, tmp_path):
    path, expected = h5
    # Relative URL: resolved against the reference file's folder.
    doc = json.dumps(_refs(path, url="data.h5", inline=0)).encode()
    gz = path.parent / "rel.json.gz"
    gz.write_bytes(gzip.compress(doc))
    _convert(zshard_bin, gz, tmp_path / "gz")
    _assert_matches(tmp_path / "gz", expected)
    zst = path.parent / "rel.json.zst"
    zst.write_bytes(numcodecs.Zstd(level=3).encode(doc))
    _convert(zshard_bin, zst, tmp_path / "zst")
    _assert_matches(tmp_path / "zst", expected)


def test_lenient_json(zshard_bin, h5, tmp_path):
    """A trailing comma and a bare NaN fill value, as Python's json writes them."""
    path, expected = h5
    refs = _refs(path, inline=0)
    text = json.dumps(refs["refs"], indent=1)
    zarray = json.loads(refs["refs"]["gz/.zarray"])
    zarray["fill_value"] = float("nan")
    text = text.replace(json.dumps(refs["refs"]["gz/.zarray"]), json.dumps(json.dumps(zarray)))
    text = text.rstrip().rstrip("}") + ",\n}"
    assert "NaN" in text and ",\n}" in text
    lenient = path.parent / "lenient.json"
    lenient.write_text(text)
    _convert(zshard_bin, lenient, tmp_path / "out")
    _assert_matches(tmp_path / "out", expected)
    assert np.isnan(zarr.open_array(str(tmp_path / "out" / "gz"), mode="r").fill_value)


def _with_unsupported_gz(doc: dict) -> dict:
    """kerchunk's references with array `gz` stored under kerchunk's own GRIB codec (`grib`, which
    zshard does not read) in place of HDF5's deflate."""
    zarray = json.loads(doc["refs"]["gz/.zarray"])
    zarray["filters"], zarray["compressor"] = None, {"id": "grib", "var": "t"}
    doc["refs"]["gz/.zarray"] = json.dumps(zarray)
    return doc


@pytest.mark.parametrize("layout", ["json", "parquet"])
def test_on_unsupported_skip_converts_the_other_arrays(zshard_bin, h5, tmp_path, layout):
    path, expected = h5
    doc = _with_unsupported_gz(_refs(path, inline=100))
    if layout == "json":
        refs = tmp_path / "refs.json"
        refs.write_text(json.dumps(doc))
    else:
        refs = tmp_path / "refs.parq"
        kerchunk_df.refs_to_dataframe(doc, str(refs), record_size=5)
    reason = 'gz/.zarray: compressor "grib" is not supported'
    # The default refuses before writing, naming the array's document and the codec.
    line = _fails(zshard_bin, refs, tmp_path / "refused", "--ref-root", path.parent)
    assert reason in line, line
    assert _no_data(tmp_path / "refused")

    report = tmp_path / "report.json"
    run = run_zshard(zshard_bin, ["convert", refs, tmp_path / "out", "--threads", "2", "--ref-root", path.parent,
                                  "--on-unsupported", "skip", "--report", report])
    assert run.returncode == 0, run.describe()
    assert f"zshard: skipped array gz: {reason}" in run.stderr, run.describe()
    done = json.loads(report.read_text())
    assert [(s["path"], reason in s["reason"]) for s in done["skipped_arrays"]] == [("gz", True)]
    assert sorted(a["path"] for a in done["arrays"]) == sorted(set(ARRAYS) - {"gz"})
    assert not (tmp_path / "out" / "gz").exists()
    _assert_matches(tmp_path / "out", {k: v for k, v in expected.items() if k != "gz"})


def test_parquet_several_files(zshard_bin, h5, tmp_path):
    path, expected = h5
    parq = path.parent / "refs.parq"
    kerchunk_df.refs_to_dataframe(_refs(path, inline=100), str(parq), record_size=5)
    files = sorted(p.name for p in (parq / "gz").glob("refs.*.parq"))
    assert len(files) == 8, files  # 6x6 chunks, 5 per file
    _convert(zshard_bin, parq, tmp_path / "out")
    _assert_matches(tmp_path / "out", expected)


def test_parquet_missing_chunks_read_as_fill_value(zshard_bin, h5, tmp_path):
    path, expected = h5
    refs = _refs(path, inline=0)["refs"]
    # gz has a 6x6 grid; chunks 0..4 (all of refs.0.parq, so that file is never written) and 17 go.
    for n in [0, 1, 2, 3, 4, 17]:
        del refs[f"gz/{n // 6}.{n % 6}"]
    parq = tmp_path / "missing.parq"
    kerchunk_df.refs_to_dataframe({"version": 1, "refs": refs}, str(parq), record_size=5)
    assert not (parq / "gz" / "refs.0.parq").exists()
    assert (parq / "gz" / "refs.3.parq").exists()
    # The HDF5 file lives elsewhere: --ref-root admits it.
    _convert(zshard_bin, parq, tmp_path / "out", "--ref-root", path.parent)
    got = zarr.open_group(str(tmp_path / "out"), mode="r")["gz"][()]
    want = expected["gz"].copy()
    for n in [0, 1, 2, 3, 4, 17]:
        i, j = n // 6, n % 6
        want[i * 7 : (i + 1) * 7, j * 11 : (j + 1) * 11] = 0.0
    np.testing.assert_array_equal(got, want)


def test_string_variable_converts(zshard_bin, tmp_path):
    """Fixed-length bytes (h5py `S3`) become zarr-python's `null_terminated_bytes` and read back equal,
    whether kerchunk inlined the chunks or referenced them."""
    h5 = tmp_path / "strings.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("s", data=np.array([b"ab", b"cde", b"", b"xyz", b"q"], dtype="S3"), chunks=(2,))
        f.create_dataset("x", data=np.arange(4, dtype="i4"))
    for inline in (0, 500):
        refs = tmp_path / f"strings{inline}.json"
        refs.write_text(json.dumps(_refs(h5, inline=inline)))
        dst = tmp_path / f"out{inline}"
        _convert(zshard_bin, refs, dst)
        g = zarr.open_group(str(dst), mode="r")
        with h5py.File(h5, "r") as f:
            for name in ("s", "x"):
                want, got = f[name][...], g[name][...]
                assert got.dtype == want.dtype, (name, got.dtype)
                np.testing.assert_array_equal(got, want)
        meta = json.loads((dst / "s" / "zarr.json").read_text())
        assert meta["data_type"] == {"name": "null_terminated_bytes", "configuration": {"length_bytes": 3}}


def test_vlen_string_variable_converts(zshard_bin, tmp_path):
    """Variable-length HDF5 strings: kerchunk embeds them as `|O` + vlen-utf8 chunks; they become v3
    `string` arrays that zarr-python reads equal to h5py, across inner chunks that straddle source ones."""
    h5 = tmp_path / "vstrings.h5"
    words = ["", "ab", "h\u00e9llo", "\u65e5\u672c", "x" * 300, "z"]
    data = np.array([words[i % len(words)] for i in range(23)], dtype=object)
    with h5py.File(h5, "w") as f:
        f.create_dataset("s", data=data, dtype=h5py.string_dtype(), chunks=(4,))
    refs = tmp_path / "vstrings.json"
    refs.write_text(json.dumps(_refs(h5, inline=0)))
    dst = tmp_path / "out"
    _convert(zshard_bin, refs, dst, "--shard-shape", "9", "--chunk-shape", "3")
    meta = json.loads((dst / "s" / "zarr.json").read_text())
    assert meta["data_type"] == "string"
    got = zarr.open_array(str(dst / "s"), mode="r")[...]
    with h5py.File(h5, "r") as f:
        want = [x.decode() for x in f["s"][...]]
    assert [str(x) for x in got] == want


def test_json_v1_templates_and_gen(zshard_bin, tmp_path):
    """Hand-written: kerchunk does not emit gen. Chunks of g come from gen with arithmetic offsets,
    h's from refs with templated URLs (plain and called)."""
    g = np.arange(48, dtype="<u2").reshape(6, 8)
    h = np.arange(10, dtype="<f8") / 4
    blob = bytearray(b"H" * 100)
    for i in range(2):
        for j in range(2):
            blob += g[i * 3 : (i + 1) * 3, j * 4 : (j + 1) * 4].tobytes()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "blob.bin").write_bytes(bytes(blob))
    (tmp_path / "data" / "h.bin").write_bytes(b"xx" + h.tobytes())
    zarray = lambda shape, chunks, dtype: {  # noqa: E731
        "zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": dtype,
        "compressor": None, "fill_value": 0, "order": "C", "filters": None}
    doc = {
        "version": 1,
        "templates": {"d": "data", "f": "{{dir}}/{{name}}.bin"},
        "gen": [
            {
                "key": "g/{{i}}.{{j}}",
                "url": "{{d}}/blob.bin",
                "offset": "{{100 + (i * 2 + j) * 24}}",
                "length": "{{3 * 4 * 2}}",
                "dimensions": {"i": {"stop": 2}, "j": [0, 1]},
            }
        ],
        "refs": {
            ".zgroup": {"zarr_format": 2},
            ".zattrs": {"title": "gen"},
            "g/.zarray": zarray([6, 8], [3, 4], "<u2"),
            "h/.zarray": zarray([10], [5], "<f8"),
            "h/0": ["{{f(dir=d, name='h')}}", 2, 40],
            "h/1": ["{{d}}/h.bin", 42, 40],
        },
    }
    refs = tmp_path / "gen.json"
    refs.write_text(json.dumps(doc))
    _convert(zshard_bin, refs, tmp_path / "out")
    root = zarr.open_group(str(tmp_path / "out"), mode="r")
    np.testing.assert_array_equal(root["g"][()], g)
    np.testing.assert_array_equal(root["h"][()], h)
    assert root.attrs["title"] == "gen"


# --------------------------------------------------------------------------
# security and bad input
# --------------------------------------------------------------------------


def _one_array(tmp_path: Path, chunk_ref) -> Path:
    doc = {
        ".zgroup": {"zarr_format": 2},
        "x/.zarray": {"zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "|u1",
                      "compressor": None, "fill_value": 0, "order": "C", "filters": None},
        "x/0": chunk_ref,
    }
    sub = tmp_path / "refs"
    sub.mkdir(exist_ok=True)
    p = sub / "r.json"
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize(
    "target, reason",
    [
        (["/etc/passwd", 0, 4], "outside the reference root"),
        (["file:///etc/passwd"], "outside the reference root"),
        (["../secret.bin", 0, 4], "climbs out"),
        (["~/.aws/credentials"], "home-relative"),
        (["http://169.254.169.254/latest/meta-data/iam", 0, 4], "link-local"),
        (["http://127.0.0.1:9/x.bin", 0, 4], "loopback"),
        (["ftp://example.org/x.bin", 0, 4], "scheme ftp"),
    ],
)
def test_refused_targets(zshard_bin, tmp_path, target, reason):
    (tmp_path / "secret.bin").write_bytes(b"SECRET!!")
    refs = _one_array(tmp_path, target)
    line = _fails(zshard_bin, refs, tmp_path / "out")
    assert "x/0" in line and "refused" in line and reason in line, line
    assert _no_data(tmp_path / "out")


def test_ref_root_and_allowed_prefix_admit_targets(zshard_bin, tmp_path):
    (tmp_path / "secret.bin").write_bytes(b"\x01\x02\x03\x04")
    # Relative targets resolve against --ref-root instead of the reference file's folder (refs/).
    refs = _one_array(tmp_path, ["secret.bin", 0, 4])
    line = _fails(zshard_bin, refs, tmp_path / "none")
    assert "refs/secret.bin does not exist" in line, line
    _convert(zshard_bin, refs, tmp_path / "a", "--ref-root", tmp_path)
    np.testing.assert_array_equal(zarr.open_group(str(tmp_path / "a"), mode="r")["x"][()], [1, 2, 3, 4])
    refs = _one_array(tmp_path, [str(tmp_path / "secret.bin"), 0, 4])
    _convert(zshard_bin, refs, tmp_path / "b", "--allow-ref-prefix", str(tmp_path) + "/")


def _parquet_without_record_0(h5: Path, parq: Path) -> None:
    """gz's references with chunks 0..4 left out: kerchunk writes no refs.0.parq for them."""
    refs = _refs(h5, inline=0)["refs"]
    for n in range(5):
        del refs[f"gz/0.{n}"]
    kerchunk_df.refs_to_dataframe({"version": 1, "refs": refs}, str(parq), record_size=5)
    assert not (parq / "gz" / "refs.0.parq").exists()


def test_parquet_strict_refs_refuse_a_missing_record_file(zshard_bin, h5, tmp_path):
    path, _ = h5
    parq = tmp_path / "missing.parq"
    _parquet_without_record_0(path, parq)
    line = _fails(zshard_bin, parq, tmp_path / "out", "--ref-root", path.parent, "--strict-refs")
    want = f"{parq / 'gz' / 'refs.0.parq'}: is missing (--strict-refs"
    assert "array gz" in line and want in line, line
    assert _no_data(tmp_path / "out")


def _truncate(f: Path) -> None:
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _garble(f: Path) -> None:
    data = bytearray(f.read_bytes())
    data[4:-8] = bytes(len(data) - 12)  # keeps the PAR1 magic at both ends
    f.write_bytes(bytes(data))


def _directory(f: Path) -> None:
    f.unlink()
    f.mkdir()


def _link_out(f: Path) -> None:
    outside = f.parent.parent.parent / "outside.parq"
    f.rename(outside)
    f.symlink_to(outside)


@pytest.mark.parametrize(
    "damage, expect",
    [
        (_truncate, "refs.3.parq"),
        (_garble, "refs.3.parq"),
        (_directory, "refs.3.parq"),
        (_link_out, "outside the reference set"),
    ],
    ids=["truncated", "garbled", "directory", "symlink-out"],
)
def test_parquet_unreadable_record_files_fail_naming_file_and_array(
    zshard_bin, h5, tmp_path, damage, expect
):
    path, _ = h5
    parq = tmp_path / "refs.parq"
    kerchunk_df.refs_to_dataframe(_refs(path, inline=0), str(parq), record_size=5)
    damage(parq / "gz" / "refs.3.parq")
    line = _fails(zshard_bin, parq, tmp_path / "out", "--ref-root", path.parent)
    assert "array gz" in line and expect in line and str(parq / "gz" / "refs.3.parq") in line, line
    assert not (tmp_path / "out" / "zarr.json").exists()


def test_parquet_refused_target(zshard_bin, tmp_path):
    parq = tmp_path / "p.parq"
    kerchunk_df.refs_to_dataframe(
        {".zgroup": json.dumps({"zarr_format": 2}),
         "x/.zarray": json.dumps({"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "|u1",
                                  "compressor": None, "fill_value": 0, "order": "C", "filters": None}),
         "x/0": ["/etc/passwd", 0, 2], "x/1": ["/etc/passwd", 2, 2]},
        str(parq), record_size=10)
    line = _fails(zshard_bin, parq, tmp_path / "out")
    assert "/etc/passwd" in line and "refused" in line, line
    assert _no_data(tmp_path / "out")


@pytest.mark.parametrize(
    "case, expect",
    [
        ("malformed", "bad.json"),
        ("template", "x/0"),
        ("beyond_end", "beyond its end"),
        ("missing_target", "does not exist"),
        ("key_escape", "escape"),
    ],
)
def test_bad_json_input(zshard_bin, tmp_path, case, expect):
    (tmp_path / "refs").mkdir()
    (tmp_path / "refs" / "t.bin").write_bytes(b"\x01\x02\x03")
    zarray = {"zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "|u1",
              "compressor": None, "fill_value": 0, "order": "C", "filters": None}
    doc = {"version": 1, "refs": {".zgroup": {"zarr_format": 2}, "x/.zarray": zarray}}
    text = None
    if case == "malformed":
        text = '{"version": 1, "refs": {"x/0": ["t.bin", 0, 4]'
    elif case == "template":
        doc["refs"]["x/0"] = ["{{nowhere}}/t.bin", 0, 4]
    elif case == "beyond_end":
        doc["refs"]["x/0"] = ["t.bin", 0, 4]
    elif case == "missing_target":
        doc["refs"]["x/0"] = ["gone.bin", 0, 4]
    elif case == "key_escape":
        doc["refs"]["../evil/.zarray"] = zarray
    p = tmp_path / "refs" / "bad.json"
    p.write_text(text if text is not None else json.dumps(doc))
    line = _fails(zshard_bin, p, tmp_path / "out")
    assert expect in line, line
    assert _no_data(tmp_path / "out")
    assert not (tmp_path / "evil").exists()


def test_parquet_files_disagreeing_with_grid(zshard_bin, tmp_path):
    zarray = {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "|u1",
              "compressor": None, "fill_value": 0, "order": "C", "filters": None}
    (tmp_path / "t.bin").write_bytes(bytes(range(4)))
    parq = tmp_path / "p.parq"
    kerchunk_df.refs_to_dataframe(
        {".zgroup": json.dumps({"zarr_format": 2}), "x/.zarray": json.dumps(zarray),
         "x/0": [str(tmp_path / "t.bin"), 0, 2], "x/1": [str(tmp_path / "t.bin"), 2, 2]},
        str(parq), record_size=1)
    _convert(zshard_bin, parq, tmp_path / "ok")
    original = (parq / ".zmetadata").read_text()

    def edit(shape, chunks, record_size):
        meta = json.loads(original)
        meta["metadata"]["x/.zarray"].update(shape=shape, chunks=chunks)
        meta["record_size"] = record_size
        (parq / ".zmetadata").write_text(json.dumps(meta))

    # One chunk in the grid, but refs.1.parq exists.
    edit([2], [2], 1)
    line = _fails(zshard_bin, parq, tmp_path / "a")
    assert "refs.1.parq" in line and "beyond the chunk grid" in line, line
    # Four chunks per file now, but refs.0.parq holds one row.
    edit([8], [1], 4)
    line = _fails(zshard_bin, parq, tmp_path / "b")
    assert "refs.0.parq" in line and "rows" in line, line
    assert _no_data(tmp_path / "b")


# --------------------------------------------------------------------------
# coalescing
# --------------------------------------------------------------------------


def _requests(stderr: str) -> tuple[int, int]:
    m = re.search(r"(\d+) chunk reference\(s\) read with (\d+) request\(s\)", stderr)
    assert m, stderr
    return int(m.group(1)), int(m.group(2))


def test_coalescing_reduces_requests(zshard_bin, tmp_path, monkeypatch):
    h5 = tmp_path / "small.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("v", data=np.arange(200_000, dtype="u2"), chunks=(100,))
    refs = tmp_path / "small.json"
    refs.write_text(json.dumps(_refs(h5, inline=0)))
    monkeypatch.setenv("ZSHARD_KERCHUNK_STATS", "1")
    counts = {}
    for gap in ["64KiB", "off"]:
        r = run_zshard(zshard_bin, ["convert", refs, tmp_path / gap, "--threads", "2", "--quiet",
                                    "--chunk-shape", "100", "--shard-shape", "20000",
                                    "--ref-coalesce-gap", gap])
        assert r.returncode == 0, r.describe()
        counts[gap] = _requests(r.stderr)
        got = zarr.open_group(str(tmp_path / gap), mode="r")["v"][()]
        np.testing.assert_array_equal(got, np.arange(200_000, dtype="u2"))
    print(f"\nkerchunk coalescing, 2000 chunks of 200 bytes: {counts}")
    assert counts["off"] == (2000, 2000)
    assert counts["64KiB"][0] == 2000 and counts["64KiB"][1] <= 10
