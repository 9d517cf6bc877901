"""zshard against real storage servers on loopback: round trips through S3 (moto), Azure Blob
(Azurite) and GCS (fake-gcs-server), injected faults, multipart uploads, a kill during one, and fast failures."""
import json
import os
import signal
import subprocess
import time
from urllib.parse import parse_qs, urlsplit

import numcodecs
import numpy as np
import pytest
import zarr

from conftest import (AZURE_ACCOUNT, AZURE_KEY, S3_ENV, ZSHARD, azure_client, azure_env, download_blobs,
                      download_prefix, free_port, gcs_env, run_zshard, upload_dir)
from stores import create_buckets, destination, read_back_from_s3


def make_group(path):
    """A Zarr v2 group with two arrays (blosc and zstd), some chunks missing, written by zarr-python."""
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    a = root.create_array("temperature", shape=(300, 200), chunks=(50, 40), dtype="float32",
                          compressors=numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
                          fill_value=float("nan"))
    values = np.linspace(-40, 40, 300 * 200, dtype="float32").reshape(300, 200)
    values[:50] = np.nan  # a band of fill: those shards are not written
    a[:] = values
    b = root.create_array("sub/counts", shape=(97, 33, 20), chunks=(10, 11, 20), dtype="uint16",
                          compressors=numcodecs.Zstd(level=1), fill_value=0)
    b[:] = (np.arange(97 * 33 * 20) % 6000).reshape(97, 33, 20).astype("uint16")
    return {"temperature": values, "sub/counts": b[:]}


def assert_same(local_out, expected):
    g = zarr.open_group(str(local_out), mode="r")
    for name, want in expected.items():
        got = g[name][:]
        assert got.dtype == want.dtype, name
        assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), name
        assert g[name].metadata.codecs[0].__class__.__name__ == "ShardingCodec", name


S3_OPTS = ["--shard-shape", "100,80", "--chunk-shape", "50,40"]


def test_zarr_v2_on_s3_to_sharded_v3_on_s3(tmp_path, s3, moto):
    expected = make_group(tmp_path / "in.zarr")
    create_buckets(s3, "src1", "dst1")
    upload_dir(s3, tmp_path / "in.zarr", "src1", "data/in.zarr")
    run_zshard("convert", "s3://src1/data/in.zarr", "s3://dst1/out.zarr", "--s3-endpoint", moto,
               "--s3-path-style", "--quiet", env=S3_ENV)
    keys = download_prefix(s3, "dst1", "out.zarr", tmp_path / "out.zarr")
    assert "zarr.json" in keys and not any(k.startswith(".zshard/") for k in keys)
    assert_same(tmp_path / "out.zarr", expected)
    run_zshard("verify", "s3://src1/data/in.zarr", "s3://dst1/out.zarr", "--s3-endpoint", moto,
               "--s3-path-style", "--quiet", env=S3_ENV)


def test_local_zarr_to_azure(tmp_path, azurite):
    expected = make_group(tmp_path / "in.zarr")
    client = azure_client(azurite)
    client.create_container("out")
    run_zshard("convert", tmp_path / "in.zarr", "az://out/sharded.zarr", "--quiet", env=azure_env(azurite))
    local = tmp_path / "downloaded"
    assert "zarr.json" in download_blobs(client.get_container_client("out"), "sharded.zarr", local)
    assert_same(local, expected)


def test_zarr_v2_on_gcs_to_sharded_v3_on_gcs(tmp_path, gcs):
    """gs:// to gs:// through fake-gcs-server, found from STORAGE_EMULATOR_HOST alone (no flags), read
    back equal to what zarr-python wrote, and verified."""
    expected = make_group(tmp_path / "in.zarr")
    gcs.create_bucket("gsrc1")
    gcs.create_bucket("gdst1")
    gcs.upload_dir(tmp_path / "in.zarr", "gsrc1", "data/in.zarr")
    run_zshard("convert", "gs://gsrc1/data/in.zarr", "gs://gdst1/out.zarr", "--quiet",
               env=gcs_env(gcs.endpoint))
    keys = gcs.download_prefix("gdst1", "out.zarr", tmp_path / "out.zarr")
    assert "zarr.json" in keys and not any(k.startswith(".zshard/") for k in keys), keys
    assert_same(tmp_path / "out.zarr", expected)
    run_zshard("verify", "gs://gsrc1/data/in.zarr", "gs://gdst1/out.zarr", "--quiet", env=gcs_env(gcs.endpoint))


@pytest.mark.parametrize("store", ["s3", "gcs"])
def test_faults_are_retried_and_the_output_is_exact(store, request, tmp_path, fault_proxy):
    expected = make_group(tmp_path / "in.zarr")
    src = destination(request, store, f"src2-{store}")
    dst = destination(request, store, f"dst2-{store}")
    src.upload_dir(tmp_path / "in.zarr", "in.zarr")
    proxy = fault_proxy(upstream=dst.upstream, fail_rate=0.10, drop_rate=0.05)
    flags, env = dst.options(proxy.endpoint)
    report = tmp_path / "report.json"
    run_zshard("convert", src.url("in.zarr"), dst.url("out.zarr"), *flags, "--quiet", "--report", report, env=env)
    outcomes = [o for (_, _, _, o) in proxy.log]
    assert outcomes.count("503") >= 3 and outcomes.count("dropped") >= 1, outcomes
    # Which dropped answers reach zshard's own retry layer (the report's `retries`) depends on which requests
    # the seeded rolls hit: object_store retries a GET whose body breaks off by itself, unseen by that counter
    # (the counter is checked by store::retry's unit tests). What holds for every roll: the output is exact.
    dst.download("out.zarr", tmp_path / "out.zarr")
    assert_same(tmp_path / "out.zarr", expected)


def big_array(path):
    """16 MiB of incompressible bytes in one shard."""
    a = zarr.create_array(store=str(path), shape=(4096, 4096), chunks=(1024, 1024), dtype="uint8",
                          zarr_format=2, compressors=None, fill_value=0)
    data = np.random.default_rng(1).integers(0, 256, size=(4096, 4096), dtype="uint8")
    a[:] = data
    return data


BIG_OPTS = ["--shard-shape", "4096,4096", "--chunk-shape", "1024,1024", "--compressor", "none",
            "--part-size", "5MiB"]


# The stores whose multipart uploads a run records and aborts: S3 (moto) and GCS (fake-gcs-server behind the XML
# front, which keeps the uploads as GCS does). Azure's uncommitted blocks have no upload to abort.
MULTIPART_STORES = ["s3", "gcs"]


@pytest.mark.parametrize("store", MULTIPART_STORES)
def test_large_shards_use_multipart_uploads(store, request, tmp_path, fault_proxy):
    data = big_array(tmp_path / "big.zarr")
    dst = destination(request, store, f"dst3-{store}")
    dst.upload_dir(tmp_path / "big.zarr", "big.zarr")
    proxy = fault_proxy(upstream=dst.upstream)
    flags, env = dst.options(proxy.endpoint)
    run_zshard("convert", dst.url("big.zarr"), dst.url("out.zarr"), *flags, "--quiet", *BIG_OPTS, env=env)
    shard = dst.request_path("out.zarr/c/0/0")
    creates = [e for e in proxy.log if e[0] == "POST" and e[1].startswith(shard + "?uploads")]
    parts = [e for e in proxy.log if e[0] == "PUT" and e[1].startswith(shard + "?") and "partNumber=" in e[1]]
    assert len(creates) == 1 and len(parts) == 4, proxy.log
    assert all(size <= 5 << 20 for (_, _, size, _) in parts)
    dst.download("out.zarr", tmp_path / "out.zarr")
    assert np.array_equal(zarr.open_array(str(tmp_path / "out.zarr"), mode="r")[:], data)


def big_source_beside_foreign_uploads(tmp_path, dst):
    """big_array uploaded to DST's big.zarr, and in DST two multipart uploads that are not zshard's, one
    inside the destination's prefix (out.zarr) and one beside it (never to be touched). Returns the array's
    values and those uploads."""
    data = big_array(tmp_path / "big.zarr")
    dst.upload_dir(tmp_path / "big.zarr", "big.zarr")
    foreign = sorted((key, dst.create_upload(key)) for key in ("out.zarr/c/9/9", "elsewhere/object"))
    return data, foreign


def kill_during_an_upload(proxy, args, env, settle=1.5):
    """Runs `zshard convert ARGS` through `proxy` (made with delay_parts) and kills it (SIGKILL) as soon as
    its first upload part reaches the proxy, then waits `settle` seconds for the parts in flight to land."""
    start = len(proxy.log)
    proc = subprocess.Popen([ZSHARD, "convert", *map(str, args)], env={**os.environ, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not any("partNumber=" in e[1] for e in proxy.log[start:]):
        time.sleep(0.05)
    started = any("partNumber=" in e[1] for e in proxy.log[start:])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert started, "the upload never started"
    time.sleep(settle)


@pytest.mark.parametrize("store", MULTIPART_STORES)
def test_a_kill_during_a_multipart_upload_leaves_no_object_and_the_rerun_aborts_it(store, request, tmp_path,
                                                                                    fault_proxy):
    dst = destination(request, store, f"dst4-{store}")
    data, foreign = big_source_beside_foreign_uploads(tmp_path, dst)
    proxy = fault_proxy(upstream=dst.upstream, delay_parts=1.0)
    flags, env = dst.options(proxy.endpoint)
    convert = [dst.url("big.zarr"), dst.url("out.zarr"), *flags, "--quiet", *BIG_OPTS]
    kill_during_an_upload(proxy, convert, env)
    assert dst.listed("out.zarr/c") == {}, "a shard object is visible after a killed multipart upload"
    assert "out.zarr/zarr.json" not in dst.listed("out.zarr")
    # The killed upload is open, and recorded (object path and upload id) under .zshard/uploads/.
    orphans = [u for u in dst.open_uploads() if u not in foreign]
    assert [key for key, _ in orphans] == ["out.zarr/c/0/0"], orphans
    records = list(dst.listed("out.zarr/.zshard/uploads"))
    assert len(records) == 1 and records[0].startswith("out.zarr/.zshard/uploads/w0of1/"), records
    record = json.loads(dst.get(records[0]))
    assert record == {"path": "out.zarr/c/0/0", "upload_id": orphans[0][1]}, record
    # The rerun aborts what the killed run left open, and only that.
    run_zshard("convert", *convert, env=env)
    assert dst.open_uploads() == foreign
    assert not any(k.startswith(".zshard/") for k in dst.download("out.zarr", tmp_path / "out.zarr"))
    assert np.array_equal(zarr.open_array(str(tmp_path / "out.zarr"), mode="r")[:], data)


@pytest.mark.parametrize("store", MULTIPART_STORES)
def test_overwrite_aborts_the_uploads_a_killed_run_left_open(store, request, tmp_path, fault_proxy):
    """Issue 31 row 6: a run killed during a multipart upload leaves it open and recorded under
    .zshard/uploads/; once its lease is stale, an --overwrite with other options removes that state,
    and must abort the recorded upload first (else it stays open forever, its record gone). Uploads
    that are not zshard's stay."""
    dst = destination(request, store, f"dst6-{store}")
    data, foreign = big_source_beside_foreign_uploads(tmp_path, dst)
    proxy = fault_proxy(upstream=dst.upstream, delay_parts=1.0)
    flags, env = dst.options(proxy.endpoint)
    env = {**env, "ZSHARD_LEASE_STALE_SECONDS": "2"}
    common = [dst.url("big.zarr"), dst.url("out.zarr"), *flags, "--quiet"]
    # Parts in flight land, and the killed run's lease goes stale.
    kill_during_an_upload(proxy, [*common, *BIG_OPTS], env, settle=2.5)
    orphans = [u for u in dst.open_uploads() if u not in foreign]
    assert [key for key, _ in orphans] == ["out.zarr/c/0/0"], orphans
    assert len(dst.listed("out.zarr/.zshard/uploads")) == 1
    # Other options (two shards of 2048 rows instead of one), replacing what the killed run left.
    run_zshard("convert", *common, "--overwrite", "--shard-shape", "2048,4096", *BIG_OPTS[2:], env=env)
    assert dst.open_uploads() == foreign
    keys = dst.download("out.zarr", tmp_path / "out.zarr")
    # The shards, the metadata, and what each shard was made from (kept for the next run, issue 40).
    assert sorted(keys) == [".zshard-records", "c/0/0", "c/1/0", "zarr.json"], keys
    out = zarr.open_array(str(tmp_path / "out.zarr"), mode="r")
    assert out.shards == (2048, 4096)
    assert np.array_equal(out[:], data)


@pytest.mark.parametrize("store", MULTIPART_STORES)
def test_a_worker_aborts_only_its_own_orphaned_uploads(store, request, tmp_path, fault_proxy):
    """Two workers: worker 0's upload is killed; worker 1 runs and leaves worker 0's upload alone (worker 0
    might still be running); worker 0's rerun aborts its own orphan; finalize then finds nothing open."""
    big_array(tmp_path / "big.zarr")
    dst = destination(request, store, f"workers-{store}")
    proxy = fault_proxy(upstream=dst.upstream, delay_parts=1.0)
    flags, env = dst.options(proxy.endpoint)
    opts = [tmp_path / "big.zarr", dst.url("out.zarr"), *flags, "--quiet", "--shard-shape", "2048,4096",
            *BIG_OPTS[2:]]
    kill_during_an_upload(proxy, [*opts, "--worker", "0/2"], env)
    assert [k for k, _ in dst.open_uploads()] == ["out.zarr/c/0/0"]
    run_zshard("convert", *opts, "--worker", "1/2", env=env)
    assert [k for k, _ in dst.open_uploads()] == ["out.zarr/c/0/0"], "worker 1 aborted worker 0's upload"
    run_zshard("convert", *opts, "--worker", "0/2", env=env)
    assert dst.open_uploads() == []
    run_zshard("finalize", *opts, env=env)
    assert dst.open_uploads() == []
    keys = sorted(dst.listed("out.zarr"))
    assert keys == ["out.zarr/.zshard-records", "out.zarr/c/0/0", "out.zarr/c/1/0", "out.zarr/zarr.json"], keys


@pytest.mark.parametrize("store", ["s3", "gcs"])
def test_missing_bucket_fails_fast_with_the_url(store, request, tmp_path):
    make_group(tmp_path / "in.zarr")
    if store == "s3":
        url, flags, env = "s3://no-such-bucket/out.zarr", ["--s3-endpoint", request.getfixturevalue("moto"),
                                                         "--s3-path-style"], S3_ENV
    else:
        url, flags, env = "gs://no-such-bucket/out.zarr", [], gcs_env(request.getfixturevalue("gcs").endpoint)
    started = time.time()
    out = run_zshard("convert", tmp_path / "in.zarr", url, *flags, "--quiet", env=env, check=False)
    assert out.returncode != 0
    assert time.time() - started < 20
    assert url in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_bad_credentials_fail_fast_with_the_url(tmp_path, azurite):
    make_group(tmp_path / "in.zarr")
    azure_client(azurite).create_container("creds")
    wrong = "A" * 86 + "=="
    started = time.time()
    out = run_zshard("convert", tmp_path / "in.zarr", "az://creds/out.zarr", "--quiet",
                     env=azure_env(azurite, key=wrong), check=False)
    assert out.returncode != 0
    assert time.time() - started < 20
    assert "az://creds/out.zarr" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_request_counts_against_the_minimum(tmp_path, s3, fault_proxy):
    """Not a timing assertion: counts PUT/GET requests of one conversion for the record, and checks that
    every shard goes up in exactly one PUT."""
    make_group(tmp_path / "in.zarr")
    create_buckets(s3, "src5", "dst5")
    upload_dir(s3, tmp_path / "in.zarr", "src5", "in.zarr")
    proxy = fault_proxy()
    run_zshard("convert", "s3://src5/in.zarr", "s3://dst5/out.zarr", "--s3-endpoint", proxy.endpoint,
               "--s3-path-style", "--quiet", env=S3_ENV)
    src_chunks = sum(1 for p in (tmp_path / "in.zarr").rglob("*") if p.is_file() and not p.name.startswith("."))
    shard_puts = [e for e in proxy.log if e[0] == "PUT" and "/c/" in e[1]]
    out = {k for (m, k, _, _) in shard_puts}
    assert len(shard_puts) == len(out), "a shard was uploaded more than once"
    gets = [e for e in proxy.log if e[0] == "GET"]
    chunk_gets = [e for e in gets if "/src5/" in e[1] and not e[1].split("?")[0].rsplit("/", 1)[-1].startswith(".")]
    summary = {
        "requests": len(proxy.log),
        "PUT": sum(1 for e in proxy.log if e[0] == "PUT"),
        "shard PUTs": len(shard_puts), "shards written": len(out),
        "GET": len(gets), "chunk GETs": len(chunk_gets), "source chunks": src_chunks,
        "bytes sent (PUT bodies)": sum(e[2] for e in proxy.log if e[0] == "PUT"),
        "by method": {m: sum(1 for e in proxy.log if e[0] == m) for m in sorted({e[0] for e in proxy.log})},
        "non-data requests": sorted({f"{e[0]} {e[1].split('?')[0].rsplit('/', 1)[-1]}" for e in proxy.log
                                     if "/c/" not in e[1] and e[0] != "GET"}),
    }
    print("REQUEST-COUNTS", json.dumps(summary))


def test_kerchunk_references_over_http_to_s3(tmp_path, s3, moto):
    """HDF5 chunks served over HTTP by a local server, described by kerchunk references, materialized
    into sharded Zarr on S3 and read back equal to what h5py reads."""
    import functools
    import http.server
    import os
    import threading

    import h5py
    from kerchunk.hdf import SingleHdf5ToZarr

    data = np.arange(120 * 90, dtype="int32").reshape(120, 90) * 3
    h5 = tmp_path / "served" / "data.h5"
    h5.parent.mkdir()
    with h5py.File(h5, "w") as f:
        f.create_dataset("x", data=data, chunks=(20, 30), compression="gzip", shuffle=True)
    class RangeHandler(http.server.SimpleHTTPRequestHandler):
        """Serves byte ranges (`Range: bytes=a-b` -> 206), as object stores and web servers do."""

        def log_message(self, *args):
            pass

        def do_GET(self):
            header = self.headers.get("Range")
            path = self.translate_path(self.path)
            if not header or not os.path.isfile(path):
                return super().do_GET()
            blob = open(path, "rb").read()
            first, last = header.removeprefix("bytes=").split("-")
            start, end = int(first), min(int(last), len(blob) - 1)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(blob)}")
            self.send_header("Content-Length", str(end - start + 1))
            self.end_headers()
            self.wfile.write(blob[start:end + 1])

    handler = functools.partial(RangeHandler, directory=str(h5.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        refs = SingleHdf5ToZarr(str(h5), inline_threshold=0).translate()
        # Point every chunk reference at the HTTP server (kerchunk writes the path it read from).
        chunks = 0
        for key, value in refs["refs"].items():
            if isinstance(value, list):
                refs["refs"][key] = [f"{base}/data.h5", *value[1:]]
                chunks += 1
        assert chunks == 18
        (tmp_path / "refs.json").write_text(json.dumps(refs))
        create_buckets(s3, "dst6")
        # Loopback targets are refused unless named: a reference set is untrusted input.
        refused = run_zshard("convert", tmp_path / "refs.json", "s3://dst6/out.zarr", "--s3-endpoint", moto,
                             "--s3-path-style", "--quiet", env=S3_ENV, check=False)
        assert refused.returncode != 0 and "127.0.0.1" in refused.stderr, refused.stderr
        run_zshard("convert", tmp_path / "refs.json", "s3://dst6/out.zarr", "--s3-endpoint", moto,
                   "--s3-path-style", "--allow-ref-prefix", base + "/", "--quiet", env=S3_ENV)
    finally:
        server.shutdown()
    download_prefix(s3, "dst6", "out.zarr", tmp_path / "out.zarr")
    got = zarr.open_group(str(tmp_path / "out.zarr"), mode="r")["x"][:]
    assert got.dtype == data.dtype and np.array_equal(got, data)


def test_a_parquet_reference_set_on_s3_is_detected_from_the_root_documents(tmp_path, s3, moto):
    """A kerchunk Parquet reference folder on S3 (no `.json` name) is told from a Zarr hierarchy by its
    `.zmetadata`, read with the other root documents in one round (issue 21), and its references into an
    HDF5 file on S3 convert to what h5py reads."""
    import h5py
    import kerchunk.df
    from kerchunk.hdf import SingleHdf5ToZarr

    data = np.arange(64 * 48, dtype="float32").reshape(64, 48) / 7
    h5 = tmp_path / "data.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("x", data=data, chunks=(16, 16), compression="gzip", shuffle=True)
    with open(h5, "rb") as fh:
        refs = SingleHdf5ToZarr(fh, url="s3://src9/data.h5", inline_threshold=0).translate()
    kerchunk.df.refs_to_dataframe(refs, str(tmp_path / "refs.parq"), record_size=4)
    create_buckets(s3, "src9", "dst9")
    s3.upload_file(str(h5), "src9", "data.h5")
    upload_dir(s3, tmp_path / "refs.parq", "src9", "refs.parq")
    run_zshard("convert", "s3://src9/refs.parq", "s3://dst9/out.zarr", "--s3-endpoint", moto, "--s3-path-style",
               "--quiet", env=S3_ENV)
    download_prefix(s3, "dst9", "out.zarr", tmp_path / "out.zarr")
    got = zarr.open_group(str(tmp_path / "out.zarr"), mode="r")["x"][:]
    assert got.dtype == data.dtype and np.array_equal(got, data)


@pytest.mark.parametrize("store", MULTIPART_STORES)
@pytest.mark.parametrize("index", ["end", "start"])
def test_a_shard_converted_in_parts_streams_to_an_object_store(index, store, request, tmp_path, fault_proxy):
    """Under a memory limit the 16 MiB shard is converted in 1 MiB parts: with the index at the end the
    parts stream into a multipart upload as they are encoded; with the index at the start they are
    spooled locally and uploaded after the index. Either way the object equals the one written whole."""
    data = big_array(tmp_path / "big.zarr")
    dst = destination(request, store, f"parts-{index}-{store}")
    opts = [*BIG_OPTS, "--index-location", index, "--threads", "2"]
    flags, env = dst.options(dst.upstream)
    # plan checks the destination as convert finds it (issue 44): it is given the endpoint too.
    plan = run_zshard("plan", tmp_path / "big.zarr", dst.url("parts.zarr"), "--json", *opts,
                      "--memory-limit", "100MiB", *flags, env=env)
    assert json.loads(plan.stdout)["arrays"][0]["parts_per_shard"] == 16, plan.stdout
    proxy = fault_proxy(upstream=dst.upstream)
    flags, env = dst.options(proxy.endpoint)
    run_zshard("convert", tmp_path / "big.zarr", dst.url("parts.zarr"), *flags, "--quiet", *opts,
               "--memory-limit", "100MiB", env=env)
    run_zshard("convert", tmp_path / "big.zarr", tmp_path / "whole.zarr", "--quiet", *opts)
    shard = dst.request_path("parts.zarr/c/0/0")
    parts = [e for e in proxy.log if e[0] == "PUT" and e[1].startswith(shard + "?") and "partNumber=" in e[1]]
    assert len(parts) == 4, proxy.log
    dst.download("parts.zarr", tmp_path / "parts.zarr")
    assert (tmp_path / "parts.zarr/c/0/0").read_bytes() == (tmp_path / "whole.zarr/c/0/0").read_bytes()
    assert np.array_equal(zarr.open_array(str(tmp_path / "parts.zarr"), mode="r")[:], data)


@pytest.mark.parametrize("store", ["s3", "azure", "gcs"])
def test_sharded_sources_on_object_stores_are_read_by_inner_chunk(store, request, tmp_path):
    """A v3 array that zarr-python stored in shards (index at the end) is read from S3, Azure and GCS by
    inner chunk: the index through a suffix range request, then the inner chunks' ranges. Resharded to the
    same store with the index at the start, and that output read back from it (the index through a leading
    range) into a local copy; every step equals what zarr-python wrote."""
    src = tmp_path / "src.zarr"
    a = zarr.create_array(str(src), shape=(300, 200), chunks=(25, 20), shards=(100, 80), dtype="int32",
                          compressors=[zarr.codecs.ZstdCodec(level=3)], fill_value=-1, zarr_format=3)
    data = (np.arange(300 * 200, dtype="int32") * 7919 % 100003).reshape(300, 200)
    data[:100, :80] = -1  # one whole source shard of the fill value: not stored
    a[:] = data
    dst = destination(request, store, f"sharded-{store}")
    dst.upload_dir(src, "in.zarr")
    flags, env = dst.options(dst.upstream)
    # Same inner chunks and codecs: the inner chunks are copied; the index goes to the start.
    run_zshard("convert", dst.url("in.zarr"), dst.url("resharded.zarr"), *flags, "--quiet",
               "--shard-shape", "200,160", "--chunk-shape", "25,20", "--compressor", "zstd:3",
               "--index-location", "start", env=env)
    # Read back by inner chunk (index at the start), rechunked, into a local directory.
    run_zshard("convert", dst.url("resharded.zarr"), tmp_path / "local.zarr", *flags, "--quiet",
               "--shard-shape", "150,100", "--chunk-shape", "30,50", env=env)
    dst.download("resharded.zarr", tmp_path / "resharded.zarr")
    for out in ("resharded.zarr", "local.zarr"):
        got = zarr.open_array(str(tmp_path / out), mode="r")[:]
        assert got.dtype == data.dtype and np.array_equal(got, data), out


def small_array_on_s3(tmp_path, s3, bucket):
    expected = make_group(tmp_path / "in.zarr")
    create_buckets(s3, bucket)
    return expected


ENDPOINT_ENV_ONLY = {"AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_DEFAULT_REGION": "us-east-1", "AWS_SESSION_TOKEN": "session"}


def test_s3_from_the_standard_environment_only(tmp_path, s3, moto):
    """AWS_ENDPOINT_URL and AWS_ALLOW_HTTP as the AWS CLI and MinIO users set them, no flags."""
    expected = small_array_on_s3(tmp_path, s3, "envonly")
    env = {**ENDPOINT_ENV_ONLY, "AWS_ENDPOINT_URL": moto}
    run_zshard("convert", tmp_path / "in.zarr", "s3://envonly/out.zarr", "--quiet", env=env)
    download_prefix(s3, "envonly", "out.zarr", tmp_path / "out.zarr")
    assert_same(tmp_path / "out.zarr", expected)
    run_zshard("verify", tmp_path / "in.zarr", "s3://envonly/out.zarr", "--quiet", env=env)


def test_a_flag_overrides_the_environment(tmp_path, s3, moto):
    """AWS_ENDPOINT_URL names a port nobody listens on; --s3-endpoint wins. Without the flag the same
    environment fails, naming the destination."""
    expected = small_array_on_s3(tmp_path, s3, "flagwins")
    env = {**ENDPOINT_ENV_ONLY, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
    failed = run_zshard("convert", tmp_path / "in.zarr", "s3://flagwins/out.zarr", "--quiet", "--retry-timeout", "1",
                        env=env, check=False)
    assert failed.returncode == 1 and "s3://flagwins/out.zarr" in failed.stderr, failed.stderr
    run_zshard("convert", tmp_path / "in.zarr", "s3://flagwins/out.zarr", "--quiet", "--s3-endpoint", moto, env=env)
    download_prefix(s3, "flagwins", "out.zarr", tmp_path / "out.zarr")
    assert_same(tmp_path / "out.zarr", expected)


def test_azure_from_the_standard_environment_only(tmp_path, azurite):
    """An account, its key and AZURE_STORAGE_ENDPOINT over http with AZURE_ALLOW_HTTP, no emulator switch."""
    expected = make_group(tmp_path / "in.zarr")
    client = azure_client(azurite)
    client.create_container("envonly")
    env = {"AZURE_STORAGE_ACCOUNT_NAME": AZURE_ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": AZURE_KEY,
           "AZURE_STORAGE_ENDPOINT": f"{azurite}/{AZURE_ACCOUNT}", "AZURE_ALLOW_HTTP": "true"}
    run_zshard("convert", tmp_path / "in.zarr", "az://envonly/sharded.zarr", "--quiet", env=env)
    local = tmp_path / "downloaded"
    download_blobs(client.get_container_client("envonly"), "sharded.zarr", local)
    assert_same(local, expected)


def test_an_outage_shorter_than_the_retry_timeout_is_ridden_out(tmp_path, s3, fault_proxy):
    """The endpoint refuses connections for 3 s from the start of the run: with --retry-timeout 30 the
    run waits it out, exits 0, and the data is exact."""
    expected = small_array_on_s3(tmp_path, s3, "outage")
    proxy = fault_proxy()
    started = time.time()
    proxy.outage(3.0)
    run_zshard("convert", tmp_path / "in.zarr", "s3://outage/out.zarr", "--s3-endpoint", proxy.endpoint,
               "--s3-path-style", "--quiet", "--retry-timeout", "30", env=S3_ENV)
    took = time.time() - started
    assert 3.0 <= took < 30, took
    download_prefix(s3, "outage", "out.zarr", tmp_path / "out.zarr")
    assert_same(tmp_path / "out.zarr", expected)
    print(f"OUTAGE-RIDDEN-OUT {took:.2f}s")


def test_a_permanent_outage_fails_after_about_the_retry_timeout(tmp_path, s3, fault_proxy):
    small_array_on_s3(tmp_path, s3, "gone")
    proxy = fault_proxy()
    proxy.take_down()
    started = time.time()
    out = run_zshard("convert", tmp_path / "in.zarr", "s3://gone/out.zarr", "--s3-endpoint", proxy.endpoint,
                     "--s3-path-style", "--quiet", "--retry-timeout", "6", env=S3_ENV, check=False)
    took = time.time() - started
    print(f"PERMANENT-OUTAGE {took:.2f}s: {out.stderr.strip()}")
    assert out.returncode == 1, out.stderr
    assert 6 <= took < 12, took
    assert "s3://gone/out.zarr" in out.stderr and "retry_timeout: 6s" in out.stderr, out.stderr


def test_concurrent_runs_with_different_options_cannot_both_write_to_s3(tmp_path, s3, moto):
    """The claim on an S3 destination is a create-only PUT (If-None-Match: *): of two runs started together
    with different options, exactly one converts and the other is refused; the winner's output reads back
    exactly and verifies. Three rounds, so that the runs overlap at different points."""
    expected = small_array_on_s3(tmp_path, s3, "claims")
    env = {**S3_ENV, "AWS_ALLOW_HTTP": "true"}
    layouts = {"a": ["--index-location", "end"], "b": ["--index-location", "start", "--compressor", "zstd:1"]}
    for round_ in range(3):
        dst = f"s3://claims/out{round_}.zarr"
        runs = {name: subprocess.Popen([ZSHARD, "convert", str(tmp_path / "in.zarr"), dst, "--s3-endpoint", moto,
                                        "--s3-path-style", "--quiet", "--threads", "1", *layout],
                                       stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
                for name, layout in layouts.items()}
        outcomes = {name: (p.wait(timeout=300), p.stderr.read()) for name, p in runs.items()}
        winners = [name for name, (code, _) in outcomes.items() if code == 0]
        assert len(winners) == 1, outcomes
        loser = next(name for name in layouts if name not in winners)
        code, stderr = outcomes[loser]
        assert code == 1 and "different options" in stderr, outcomes
        local = tmp_path / f"out{round_}.zarr"
        keys = download_prefix(s3, "claims", f"out{round_}.zarr", local)
        assert not any(k.startswith(".zshard/") for k in keys), keys
        assert_same(local, expected)
        run_zshard("verify", tmp_path / "in.zarr", dst, "--s3-endpoint", moto, "--s3-path-style", "--quiet", env=env)


def test_a_zip_on_s3_is_read_by_range(tmp_path, s3, fault_proxy):
    """A zarr-python ZipStore (v3, a plain and a sharded array) on S3: every GET of the zip is a ranged
    one (the tail for the central directory, then one per member), never the whole file."""
    src = tmp_path / "in.zip"
    store = zarr.storage.ZipStore(src, mode="w")
    root = zarr.open_group(store, mode="w", zarr_format=3, attributes={"title": "zipped"})
    plain = root.create_array("plain", shape=(512, 512), chunks=(128, 128), dtype="float32", compressors=None)
    plain[:] = np.random.default_rng(3).random((512, 512), dtype="float32")
    sharded = root.create_array("sub/sharded", shape=(90, 40), chunks=(10, 10), shards=(30, 40), dtype="int32")
    sharded[:] = np.arange(90 * 40, dtype="int32").reshape(90, 40)
    store.close()
    create_buckets(s3, "srczip")
    s3.upload_file(str(src), "srczip", "data/in.zip")
    proxy = fault_proxy()
    out = run_zshard("convert", "s3://srczip/data/in.zip", tmp_path / "out.zarr", "--s3-endpoint", proxy.endpoint,
                     "--s3-path-style", "--quiet", "-v", env={**S3_ENV, "RUST_LOG": "zshard_store::zip=debug"})
    source = zarr.open_group(zarr.storage.ZipStore(src, mode="r"), mode="r")
    assert_same(tmp_path / "out.zarr", {"plain": source["plain"][:], "sub/sharded": source["sub/sharded"][:]})
    zip_requests = [r for r in proxy.requests if r.path.split("?")[0] == "/srczip/data/in.zip"]
    gets = [r for r in zip_requests if r.method == "GET"]
    assert [r.method for r in zip_requests if r.method != "GET"] == ["HEAD"]
    assert gets and all(r.kind == "range GET" for r in gets), gets
    assert len(gets) == out.stderr.count("zip read"), out.stderr
    size, tail = src.stat().st_size, 256 << 10  # zshard's first read: the file's last 256 KiB
    assert size > 3 * tail and gets[0].bytes_out == tail
    assert all(r.bytes_out < tail for r in gets[1:]), gets  # members: a 64 KiB chunk, a shard, metadata
    assert sum(r.bytes_out for r in gets) < size + tail
    print("ZIP-REQUESTS", json.dumps({"zip bytes": size, "GET": len(gets), "bytes read": sum(r.bytes_out for r in gets)}))
def test_a_zip_missing_on_s3_is_named_as_missing(tmp_path, s3, moto):
    """A `.zip` source with no object of that name (nor Zarr metadata under it as a folder) fails with
    one line naming the location as missing, and writes nothing."""
    create_buckets(s3, "nozip")
    out = run_zshard("convert", "s3://nozip/data/missing.zip", tmp_path / "out.zarr", "--s3-endpoint", moto,
                     "--s3-path-style", "--quiet", env=S3_ENV, check=False)
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip().splitlines() == [
        "zshard: error: s3://nozip/data/missing.zip does not exist: no zip file of that name, "
        "nor a Zarr hierarchy in a folder of that name"], out.stderr
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.parametrize("store", MULTIPART_STORES)
def test_a_shard_streamed_in_parts_but_within_one_upload_part_is_one_put(store, request, tmp_path, fault_proxy):
    """Under a memory limit the 16 MiB shard is converted in 1 MiB parts (16), but it fits one upload part
    (32 MiB by default): it goes up in one PUT, without a multipart upload (create, record of its id,
    part, complete, removal of the record: five requests, four of them round trips in series)."""
    data = big_array(tmp_path / "big.zarr")
    dst = destination(request, store, f"onepart-{store}")
    proxy = fault_proxy(upstream=dst.upstream)
    flags, env = dst.options(proxy.endpoint)
    run_zshard("convert", tmp_path / "big.zarr", dst.url("big.zarr"), *flags, "--quiet", *BIG_OPTS[:-2],
               "--memory-limit", "210MiB", env=env)
    assert [r.path for r in proxy.requests if r.kind == "multipart"] == []
    shards = dst.request_path("big.zarr/c/")
    shard_puts = [(r.path, r.bytes_in) for r in proxy.requests if r.method == "PUT" and r.path.startswith(shards)]
    assert shard_puts == [(dst.request_path("big.zarr/c/0/0"), 16 * 2**20 + 16 * 16 + 4)], shard_puts
    dst.download("big.zarr", tmp_path / "out.zarr")
    assert np.array_equal(zarr.open_array(str(tmp_path / "out.zarr"), mode="r")[:], data)


def test_remote_reference_targets_are_read_with_many_requests_in_flight(tmp_path):
    """A local kerchunk JSON whose targets are remote, converted to a local folder: the shards' reads
    overlap (the remote I/O threads), not two shards at a time as for local I/O. The targets are served
    by the proxy with 0.3 s to the first byte; one request per reference (--ref-coalesce-gap off)."""
    import h5py
    from kerchunk.hdf import SingleHdf5ToZarr

    from proxy import FaultProxy

    data = (np.arange(256 * 256, dtype="float32").reshape(256, 256) % 977) * 0.5
    served = tmp_path / "served"
    served.mkdir()
    with h5py.File(served / "data.h5", "w") as f:
        f.create_dataset("x", data=data, chunks=(32, 32), compression="gzip", shuffle=True)
    proxy = FaultProxy(free_port(), latency=0.3, files={"/files/": str(served)})
    try:
        refs = SingleHdf5ToZarr(str(served / "data.h5"), inline_threshold=0).translate()
        for key, value in refs["refs"].items():
            if isinstance(value, list):
                refs["refs"][key] = [f"{proxy.endpoint}/files/data.h5", *value[1:]]
        (tmp_path / "refs.json").write_text(json.dumps(refs))
        run_zshard("convert", tmp_path / "refs.json", tmp_path / "out.zarr", "--shard-shape", "128,128",
                   "--ref-coalesce-gap", "off", "--allow-ref-prefix", proxy.endpoint + "/", "--quiet")
    finally:
        proxy.close()
    reads = [r for r in proxy.requests if r.kind == "range GET"]
    assert len(reads) == 64  # 8x8 chunks, one request each
    events = sorted([(r.start, 1) for r in reads] + [(r.end, -1) for r in reads])
    peak = max(sum(d for _, d in events[:i + 1]) for i in range(len(events)))
    # Two fetch threads would hold two shards' 16 reads each in flight at most.
    assert peak > 32, f"at most {peak} reads in flight"
    got = zarr.open_group(str(tmp_path / "out.zarr"), mode="r")["x"][:]
    assert got.dtype == data.dtype and np.array_equal(got, data)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_hierarchy_without_consolidated_metadata_is_read_in_a_few_round_trips(tmp_path, s3, moto, fault_proxy,
                                                                                zarr_format):
    """Issue 34: a remote hierarchy without consolidated metadata (40 arrays, 24 in the root and 16 in a
    subgroup) is walked with its children's documents read side by side (up to --max-requests at a time), a few
    round trips per group instead of one per document (v2: 2-3 per array; 80-120 in series before). `plan` names every array; the conversion reads
    back element by element as zarr-python reads the source."""
    root = zarr.open_group(str(tmp_path / "in.zarr"), mode="w", zarr_format=zarr_format)
    sub = root.create_group("sub", attributes={"kind": "subgroup"})
    expected = {}
    for group, prefix, count in ((root, "", 24), (sub, "sub/", 16)):
        for i in range(count):
            name = f"a{i:02d}"
            values = (np.arange(12 * 10) * (i + 1) % 251).reshape(12, 10).astype("uint8")
            array = group.create_array(name, shape=(12, 10), chunks=(6, 5), dtype="uint8", fill_value=0,
                                       attributes={"index": i})
            array[:] = values
            expected[prefix + name] = values
    assert not (tmp_path / "in.zarr" / ".zmetadata").exists()
    bucket = f"walk{zarr_format}"
    create_buckets(s3, bucket)
    upload_dir(s3, tmp_path / "in.zarr", bucket, "in.zarr")
    proxy = fault_proxy(latency=0.1)
    plan = json.loads(run_zshard("plan", f"s3://{bucket}/in.zarr", tmp_path / "planned.zarr", "--json",
                                 "--s3-endpoint", proxy.endpoint, "--s3-path-style", env=S3_ENV).stdout)
    assert sorted(a["path"] for a in plan["arrays"]) == sorted(expected)
    documents = [r for r in proxy.requests if r.method == "GET" and r.path.split("?")[0].rsplit("/", 1)[-1]
                 in ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")]
    assert len(documents) >= 40
    # The root's documents, the two groups' listings and their children's documents; slack for a loaded
    # machine.
    assert serial_round_trips(proxy.requests) <= 10, timeline(proxy.requests)

    run_zshard("convert", f"s3://{bucket}/in.zarr", tmp_path / "out.zarr", "--s3-endpoint", moto,
               "--s3-path-style", "--quiet", env=S3_ENV)
    out = zarr.open_group(str(tmp_path / "out.zarr"), mode="r")
    assert out["sub"].attrs["kind"] == "subgroup"
    for path, values in expected.items():
        got = out[path]
        assert got.attrs["index"] == int(path[-2:]), path
        assert got.dtype == values.dtype and np.array_equal(got[:], values), path


def serial_round_trips(requests):
    """The longest chain of `requests` each starting after the previous one ended: the round trips paid one
    after another (requests sent side by side overlap, and count once)."""
    chain, last_end = 0, float("-inf")
    for r in sorted(requests, key=lambda r: r.end):
        if r.start >= last_end:
            chain, last_end = chain + 1, r.end
    return chain


def state_protocol_requests(proxy, src_bucket, dst_bucket):
    """The destination's requests before the first chunk GET of the source and after the last shard PUT."""
    first_chunk = first_chunk_get(proxy, src_bucket)
    shard_puts = [r for r in proxy.requests if r.method == "PUT" and r.path.startswith(f"/{dst_bucket}/") and "/c/" in r.path]
    last_shard = max((r.end for r in shard_puts), default=None)
    dst = [r for r in proxy.requests if r.path.startswith(f"/{dst_bucket}")]
    before = [r for r in dst if r.end <= first_chunk]
    after = [r for r in dst if last_shard is not None and r.start >= last_shard]
    return before, after, shard_puts


def first_chunk_get(proxy, src_bucket):
    """When the first GET of a source chunk (not a metadata document) started."""
    def chunk_get(r):
        name = r.path.split("?")[0].rsplit("/", 1)[-1]
        return (r.method == "GET" and r.path.startswith(f"/{src_bucket}/") and r.status == "200"
                and not name.startswith(".") and name not in ("zarr.json", "attributes.json"))
    return min(r.start for r in proxy.requests if chunk_get(r))


def requests_before_first_chunk(proxy, src_bucket):
    """The whole run's requests (source and destination) that ended before its first chunk GET began."""
    first_chunk = first_chunk_get(proxy, src_bucket)
    return [r for r in proxy.requests if r.end <= first_chunk]


def timeline(requests):
    return [(f"{r.start:.3f}-{r.end:.3f}", r.method, r.path + (f" [{r.detail}]" if r.detail else ""))
            for r in sorted(requests, key=lambda r: r.start)]


def test_the_state_protocol_costs_a_few_round_trips_on_s3(tmp_path, s3, fault_proxy):
    """Issue 21: with a delay on every response, the destination's state protocol (lease, claim, checks of
    what the destination holds, options record; at the end the metadata, the last records and the removal
    of the state) costs a fixed few round trips, its independent requests side by side: 3 on the
    destination before the first chunk is fetched (was 13, then 4), 3 after the last shard is written (was
    6); the source's root documents cost 1 (was 5, then 2), the lease's write going out beside them, and
    the options record beside the first chunk fetches: 3 in all before the first chunk (was 6). A resume
    finds what is done from listings and record files, never a request per shard (4 in all before its
    first chunk, was 6), and an --overwrite of a finished conversion removes its marker beside the claim.
    The order the protocol needs (lease, then claim, then the checks; options recorded before any shard;
    the claim removed last) is checked on the proxy's log, and the output read back element by element."""
    root = zarr.open_group(str(tmp_path / "in.zarr"), mode="w", zarr_format=2)
    a = root.create_array("v", shape=(800, 800), chunks=(100, 100), dtype="uint16",
                          compressors=numcodecs.Zstd(level=1), fill_value=0)
    values = (np.arange(800 * 800) % 6000).reshape(800, 800).astype("uint16")
    a[:] = values
    create_buckets(s3, "src7", "dst7")
    upload_dir(s3, tmp_path / "in.zarr", "src7", "in.zarr")
    # A delay well above the scheduling jitter of a loaded machine, so requests sent side by side overlap.
    proxy = fault_proxy(latency=0.2)
    convert = ["convert", "s3://src7/in.zarr/v", "s3://dst7/out.zarr", "--s3-endpoint", proxy.endpoint,
               "--s3-path-style", "--quiet", "--shard-shape", "200,200", "--chunk-shape", "100,100"]
    run_zshard(*convert, env=S3_ENV)
    before, after, shard_puts = state_protocol_requests(proxy, "src7", "dst7")
    assert serial_round_trips(before) <= 4, timeline(before)
    # 5 (was 3): what each shard was made from is kept for the next run (issue 40): the state's listing
    # with the reads of the kept records and manifest, then this run's record files, before the metadata.
    assert serial_round_trips(after) <= 5, timeline(after)
    # 3 in all (was 6); one of slack, as a loaded machine can delay the proxy's view of a request.
    ahead = requests_before_first_chunk(proxy, "src7")
    assert serial_round_trips(ahead) <= 4, timeline(ahead)
    assert len(shard_puts) == 16
    # The source's root documents side by side, the reference-set probe among them (was 5 in series, then
    # the probe's `.zmetadata` and then the rest).
    source_documents = [r for r in proxy.requests if r.path.startswith("/src7/") and r.path.rsplit("/", 1)[-1]
                        in (".zmetadata", "attributes.json", "zarr.json", ".zarray", ".zattrs", ".zgroup")]
    assert serial_round_trips(source_documents) <= 2, timeline(source_documents)
    assert len([r for r in source_documents if r.path.endswith("/.zmetadata")]) == 1, timeline(source_documents)

    destination = [r for r in proxy.requests if r.path.startswith("/dst7/")]

    def one(method, suffix):
        found = [r for r in destination if r.method == method and r.path.split("?")[0].endswith(suffix)]
        assert len(found) == 1, (method, suffix, [(r.method, r.path) for r in destination])
        return found[0]
    lease = [r for r in before if r.method == "PUT" and "/.zshard/leases/" in r.path]
    claim, options = one("PUT", "/.zshard/claim.json"), one("PUT", "/.zshard/options/w0of1.json")
    # Orders are checked with 50 ms of slack for the proxy's clock under load (a thread that sent a
    # response can note its end after the next request arrived); out of order would be a whole delay.
    slack = 0.05
    assert len(lease) == 1 and lease[0].end <= claim.start + slack
    # The lease goes out beside the source's documents, the options record beside the first chunk reads.
    assert lease[0].start < min(r.end for r in source_documents), timeline(source_documents + lease)
    assert first_chunk_get(proxy, "src7") < options.end, timeline(ahead + [options])
    listings = [r for r in before if r.kind == "LIST"]
    assert listings and all(claim.end <= r.start + slack for r in listings), timeline(listings + [claim])
    assert all(options.end <= r.start + slack for r in shard_puts)
    # The claim's removal (a one-key bulk delete) is the last request: every other one was answered before it
    # was sent (`replied`, which needs no slack: a thread noting `end` late once made this check fail).
    claim_removal = [r for r in proxy.requests if r.kind == "DELETE" and r.path.startswith("/dst7")
                     and r.detail.endswith("/.zshard/claim.json")]
    assert len(claim_removal) == 1, timeline(proxy.requests[-8:])
    last = claim_removal[0]
    late = [r for r in proxy.requests if r is not last and r.replied > last.start]
    assert late == [], timeline(late + [last])
    keys = download_prefix(s3, "dst7", "out.zarr", tmp_path / "out.zarr")
    assert [k for k in keys if k.startswith(".zshard/")] == []
    assert np.array_equal(zarr.open_array(str(tmp_path / "out.zarr"), mode="r")[:], values)

    # A resume: the first run stops at a damaged chunk of the last shard, the rerun converts the rest.
    bad = "in.zarr/v/7.7"
    good = s3.get_object(Bucket="src7", Key=bad)["Body"].read()
    s3.put_object(Bucket="src7", Key=bad, Body=b"damaged")
    resume = [c.replace("out.zarr", "resumed.zarr") for c in convert]
    failed = run_zshard(*resume, env=S3_ENV, check=False)
    assert failed.returncode == 1 and "7.7" in failed.stderr, failed.stderr
    s3.put_object(Bucket="src7", Key=bad, Body=good)
    proxy.reset()
    run_zshard(*resume, env=S3_ENV)
    before, after, _ = state_protocol_requests(proxy, "src7", "dst7")
    assert serial_round_trips(before) <= 4, [(r.method, r.path) for r in before]
    # 4 in all (was 6), one of slack.
    ahead = requests_before_first_chunk(proxy, "src7")
    assert serial_round_trips(ahead) <= 5, timeline(ahead)
    shard_reads = [r.path for r in proxy.requests if r.method in ("GET", "HEAD") and "/resumed.zarr/c/" in r.path]
    assert shard_reads == []
    assert [r.path for r in proxy.requests if r.method == "PUT" and "/options/" in r.path] == []
    download_prefix(s3, "dst7", "resumed.zarr", tmp_path / "resumed.zarr")
    assert np.array_equal(zarr.open_array(str(tmp_path / "resumed.zarr"), mode="r")[:], values)

    # --overwrite of the finished conversion: lease, the listing with the reads of the plan's documents
    # beside it (was a round trip each), marker, removals, then the claim with the marker's removal beside
    # it (was a round trip of its own), then the checks (was 9 with the options, then 7).
    proxy.reset()
    run_zshard(*convert, "--overwrite", env=S3_ENV)
    before, _, shard_puts = state_protocol_requests(proxy, "src7", "dst7")
    assert serial_round_trips(before) <= 6, timeline(before)
    assert len(shard_puts) == 16
    marker = [r for r in proxy.requests if r.method == "PUT" and r.path.endswith("/.zshard/overwriting")]
    claim = [r for r in proxy.requests if r.method == "PUT" and r.path.endswith("/out.zarr/.zshard/claim.json")]
    assert len(marker) == 1 and len(claim) == 1 and marker[0].end <= claim[0].start + slack
    keys = download_prefix(s3, "dst7", "out.zarr", tmp_path / "overwritten.zarr")
    assert [k for k in keys if k.startswith(".zshard/")] == []
    assert np.array_equal(zarr.open_array(str(tmp_path / "overwritten.zarr"), mode="r")[:], values)


# (store, source shape, source chunks, dtype, zshard's layout): 16 shards of about 20 KiB, each in one PUT;
# 4 shards of 6 MiB, each a multipart upload (S3) or a block list (Azure) of 2 parts.
SMALL_SHARDS = ((400, 400), (100, 100), "uint16",
                ["--shard-shape", "100,100", "--chunk-shape", "50,50", "--compressor", "zstd:1"])
BIG_SHARDS = ((12288, 2048), (1536, 2048), "uint8",
              ["--shard-shape", "3072,2048", "--chunk-shape", "1536,2048", "--compressor", "none",
               "--part-size", "5MiB"])
JUNKED_DESTINATIONS = {"s3": ("s3", *SMALL_SHARDS), "s3-multipart": ("s3", *BIG_SHARDS),
                       "azure": ("azure", *SMALL_SHARDS), "azure-multipart": ("azure", *BIG_SHARDS),
                       "gcs": ("gcs", *SMALL_SHARDS), "gcs-multipart": ("gcs", *BIG_SHARDS)}


def recorded_done(dst, prefix):
    """The shard keys of the array at `prefix` that its `.zshard/done/` records name as written (lines
    `array-path<TAB>i,j<TAB>size<TAB>crc32c<TAB>version`; all-fill shards go elsewhere)."""
    done = set()
    for key in dst.listed(f"{prefix}/.zshard/done"):
        for line in dst.get(key).decode().splitlines():
            fields = line.split("\t")
            if len(fields) >= 3:
                done.add(f"{prefix}/c/" + fields[1].replace(",", "/"))
    return done


def uploaded_in_parts(proxy, dst):
    """The paths of the objects `proxy` saw uploaded in parts into `dst`."""
    puts = [urlsplit(r.path) for r in proxy.requests if r.method == "PUT"]
    return {url.path for url in puts if dst.is_part(parse_qs(url.query))}


@pytest.mark.parametrize("case", list(JUNKED_DESTINATIONS))
def test_a_resume_rewrites_a_done_shard_replaced_by_junk_of_the_same_length(case, request, tmp_path, fault_proxy):
    """Issue 31 row 14 on object stores: a resume trusted a recorded shard whose listed size matched, so a done
    shard replaced by random bytes of the same length stayed (zshard verify then reported a crc32c mismatch).
    Each done shard's record now carries the ETag the store gave it when it was written (a PUT's, a multipart
    upload's completion, Azure's, GCS's), and the resume compares it with the listing's (no request per shard): a
    shard written again since is converted again, and only those and the missing ones are written: here by an
    unpartitioned run after worker 0 of 2 did half of the shards."""
    store, shape, chunks, dtype, layout = JUNKED_DESTINATIONS[case]
    dst = destination(request, store, f"junk-{case}")
    src = tmp_path / "in.zarr"
    a = zarr.create_array(str(src), shape=shape, chunks=chunks, dtype=dtype, compressors=numcodecs.Zstd(level=1),
                          fill_value=0, zarr_format=2)
    values = ((np.arange(np.prod(shape), dtype="uint64") * 7) % 60000 % np.iinfo(dtype).max).astype(dtype)
    values = values.reshape(shape)
    a[:] = values
    proxy = fault_proxy(upstream=dst.upstream)
    flags, env = dst.options(proxy.endpoint)
    convert = ["convert", src, dst.url("out.zarr"), *flags, "--quiet", *layout]
    # The first run converts half of the shards: worker 0 of 2 (a run stopped at a damaged chunk could have
    # aborted every upload in flight).
    run_zshard(*convert, "--worker", "0/2", env=env)
    shard_shape = layout[layout.index("--shard-shape") + 1].split(",")
    grid = [n // int(s) for n, s in zip(shape, shard_shape)]
    shards = {"out.zarr/c/" + "/".join(map(str, i)) for i in np.ndindex(*grid)}
    listed = {k: v for k, v in dst.listed("out.zarr").items() if "/c/" in k}
    # The shards the rerun may skip: listed and recorded done.
    trusted = set(listed) & recorded_done(dst, "out.zarr")
    assert trusted == set(listed) and 0 < len(listed) < len(shards), (sorted(listed), sorted(trusted))
    junk_key = min(trusted)
    multipart = "--part-size" in layout
    if multipart:
        assert {dst.request_path(k) for k in listed} <= uploaded_in_parts(proxy, dst), proxy.log
    # A done shard replaced by random bytes of the same length (another ETag, the same size).
    size, etag = listed[junk_key]
    junk = np.random.default_rng(14).integers(0, 256, size, dtype="uint8").tobytes()
    dst.put(junk_key, junk)
    assert dst.listed("out.zarr")[junk_key][0] == size
    assert dst.listed("out.zarr")[junk_key][1] != etag
    proxy.reset()
    run_zshard(*convert, env=env)
    shard_paths = dst.request_path("out.zarr/c/")
    puts = [r.path.split("?")[0] for r in proxy.requests if r.method == "PUT" and r.path.startswith(shard_paths)]
    written = set(puts)
    assert written == {dst.request_path(k) for k in shards - trusted | {junk_key}}, sorted(written)
    if multipart:
        assert dst.request_path(junk_key) in uploaded_in_parts(proxy, dst), proxy.log
    else:
        assert len(puts) == len(written), sorted(puts)  # one PUT each
    # No request per shard: the ETags came with the listing.
    assert [r.path for r in proxy.requests if r.method in ("GET", "HEAD") and r.path.startswith(shard_paths)] == []
    assert dst.get(junk_key) != junk
    got = dst.read_array("out.zarr", tmp_path)
    assert got.dtype == values.dtype and np.array_equal(got, values)


def test_a_resume_of_ten_thousand_shards_on_s3_costs_listing_pages_not_requests_per_shard(tmp_path, s3, moto,
                                                                                           fault_proxy):
    """Issue 34 (W10 at 10^4, for CI; benches/cloud.py runs 10^6): a destination with about 99 % of 10,000
    shards done is resumed with its shard listing cut into pages listed side by side, the record files read side
    by side, no request per listed shard, and one PUT per missing shard; the output read back element by
    element. (Counts, not timings: moto pages listings at 1,000 keys as S3 does.)"""
    rows, cols = 100, 100
    src = tmp_path / "many.zarr"
    src.mkdir()
    (src / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [rows, cols], "chunks": [1, cols], "dtype": "|u1", "compressor": None,
        "fill_value": 0, "order": "C", "filters": None}))
    values = ((np.arange(rows * cols) % 251) + 1).astype("uint8").reshape(rows, cols)
    for r in range(rows):
        (src / f"{r}.0").write_bytes(values[r].tobytes())
    create_buckets(s3, "dst10")
    convert = ["convert", str(src), "s3://dst10/w10.zarr", "--s3-endpoint", moto, "--s3-path-style", "--quiet",
               "--shard-shape", "1,1", "--chunk-shape", "1,1", "--compressor", "none"]
    # The first run stops in the damaged last row: about 99 % of the shards are done.
    bad = src / f"{rows - 1}.0"
    bad.write_bytes(b"x")
    failed = run_zshard(*convert, env=S3_ENV, check=False, timeout=600)
    assert failed.returncode == 1, failed.stderr
    bad.write_bytes(values[-1].tobytes())
    paginator = s3.get_paginator("list_objects_v2")
    done = sum(len(p.get("Contents", [])) for p in paginator.paginate(Bucket="dst10", Prefix="w10.zarr/c/"))
    assert rows * cols * 0.9 <= done < rows * cols, done
    records = [o["Key"] for p in paginator.paginate(Bucket="dst10", Prefix="w10.zarr/.zshard/done/")
               for o in p.get("Contents", [])]
    proxy = fault_proxy(latency=0.05)
    run_zshard(*[c if c != moto else proxy.endpoint for c in convert], env=S3_ENV, timeout=600)
    dst = [r for r in proxy.requests if "/dst10" in r.path]
    shard_listings = [r for r in dst if r.kind == "LIST" and "prefix=w10.zarr%2Fc%2F" in r.path]
    # 10 pages of 1,000 keys, each segment listed from its own start key: 10 segments of one page, each
    # maybe followed by an empty one.
    assert 10 <= len(shard_listings) <= 20, [r.path for r in shard_listings]
    # Side by side: 2 in series (a segment and its empty follow-up); one of slack, as a loaded machine
    # can start a segment's first page late (3 seen once with a load average of 12). In series, 10-20.
    assert serial_round_trips(shard_listings) <= 3, timeline(shard_listings)
    assert [r.path for r in dst if r.method in ("GET", "HEAD") and "/w10.zarr/c/" in r.path] == []
    record_reads = [r for r in dst if r.method == "GET" and "/.zshard/done/" in r.path]
    assert len(record_reads) == len(records) and serial_round_trips(record_reads) <= 1, timeline(record_reads)
    shard_puts = [r for r in dst if r.method == "PUT" and "/w10.zarr/c/" in r.path]
    assert len(shard_puts) == rows * cols - done
    got = read_back_from_s3(moto, "dst10", "w10.zarr")
    assert got.dtype == values.dtype and np.array_equal(got, values)


def test_a_sharded_source_on_s3_is_listed_in_segments_side_by_side(tmp_path, s3, moto, fault_proxy):
    """Issue 40: a nothing-changed rerun over an already-sharded Zarr v3 source of 10,000 shards (20,000 inner
    chunks) on S3 lists the source's shard keys in segments cut on the shard grid, listed side by side, as a
    chunk-per-object source's are; it was one listing of 10 pages in series. (Counts, not timings: moto pages
    listings at 1,000 keys as S3 does.)"""
    rows, cols = 100, 200
    src = tmp_path / "plain.zarr"
    src.mkdir()
    (src / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [rows, cols], "chunks": [rows, cols], "dtype": "|u1", "compressor": None,
        "fill_value": 0, "order": "C", "filters": None}))
    values = ((np.arange(rows * cols) % 251) + 1).astype("uint8").reshape(rows, cols)
    (src / "0.0").write_bytes(values.tobytes())
    create_buckets(s3, "src11", "dst11")
    s3_args = ["--s3-endpoint", moto, "--s3-path-style", "--quiet"]
    run_zshard("convert", str(src), "s3://src11/sharded.zarr", *s3_args, "--shard-shape", "1,2", "--chunk-shape",
               "1,1", "--compressor", "none", env=S3_ENV, timeout=600)
    # The destination in 100 shards: the source's listing is cut on the source's grid alone, and 10,000
    # destination shards more would double the test's requests through moto.
    convert = ["convert", "s3://src11/sharded.zarr", "s3://dst11/out.zarr", *s3_args, "--shard-shape", "1,200",
               "--chunk-shape", "1,1", "--compressor", "none"]
    run_zshard(*convert, env=S3_ENV, timeout=600)
    proxy = fault_proxy(latency=0.05)
    rerun = run_zshard(*[c if c != moto else proxy.endpoint for c in convert], env=S3_ENV, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    listings = [r for r in proxy.requests
                if "/src11" in r.path and r.kind == "LIST" and "prefix=sharded.zarr%2Fc%2F" in r.path]
    # 10 pages of shard keys: about 12 segments of under a page, each maybe followed by an empty page.
    assert 10 <= len(listings) <= 30, [r.path for r in listings]
    # Side by side (one segment and its follow-up in series, one of slack for a loaded machine); one
    # listing took 10 in series.
    assert serial_round_trips(listings) <= 3, timeline(listings)
    # Nothing changed: no shard or metadata written (the lease and claim are), no source chunk read.
    assert [r.path for r in proxy.requests if r.method == "PUT"
            and ("/dst11/out.zarr/c/" in r.path or r.path.endswith("zarr.json"))] == []
    assert [r.path for r in proxy.requests if r.method == "GET" and "/src11/sharded.zarr/c/" in r.path] == []
    got = read_back_from_s3(moto, "dst11", "out.zarr")
    assert got.dtype == values.dtype and np.array_equal(got, values)


@pytest.mark.parametrize("store", ["s3", "gcs"])
def test_status_with_two_stale_workers_and_a_live_one(store, request, tmp_path):
    """`zshard status` of a partitioned conversion into S3 (moto) or GCS, from the bucket alone: the shards
    done per array and worker against the objects there, two workers whose leases are stale and one
    whose lease is live; `status JOB.toml` shows the same; after the last workers the status is
    finished and `--watch` returns at once."""
    expected = make_group(tmp_path / "in.zarr")
    source = destination(request, store, f"statussrc-{store}")
    target = destination(request, store, f"statusdst-{store}")
    source.upload_dir(tmp_path / "in.zarr", "in.zarr")
    src, dst = source.url("in.zarr"), target.url("out.zarr")
    flags, env = target.options(target.upstream)
    layout = [*S3_OPTS, "--include", "temperature"]
    run_zshard("convert", src, dst, *layout, "--worker", "0/3", "--quiet", *flags, env=env)
    now_ms = int(time.time() * 1000)
    for worker, renewed_ms in (("w0of3", now_ms - 3_600_000), ("w1of3", now_ms - 600_000), ("w2of3", now_ms)):
        lease = {"host": "node7", "pid": 99, "worker": worker, "started": "2026-11-27T00:00:00Z",
                 "renewed_ms": renewed_ms, "stale_after_ms": 60000}
        target.put(f"out.zarr/.zshard/leases/{worker}-node7-99-1.json", json.dumps(lease).encode())

    def shard_objects():
        return {k: size for k, (size, _) in target.listed("out.zarr").items() if "/c/" in k and "/.zshard/" not in k}

    status = json.loads(run_zshard("status", dst, "--json", *flags, env=env).stdout)
    written = shard_objects()
    assert status["phase"] == "in_progress" and not status["finished"]
    # temperature: 300x200 in 100x80 shards, 3x3; worker 0 owns shards 0, 3 and 6 (none only fill).
    assert [(a["path"], a["shards_planned"], a["shards_done"], a["shards_empty"]) for a in status["arrays"]] == [
        ("temperature", 9, 3, 0)]
    assert status["totals"]["bytes_written"] == sum(written.values())
    assert sum(a["shards_written"] for a in status["arrays"]) == len(written)
    workers = [(w["worker"], w["started"], w["live"], len(w["leases"])) for w in status["workers"]]
    assert workers == [("w0of3", True, False, 1), ("w1of3", False, False, 1), ("w2of3", False, True, 1)]
    assert status["workers"][0]["shards_done"] == status["workers"][0]["shards_planned"]
    assert status["totals"]["shards_done"] == status["workers"][0]["shards_done"]
    assert status["finalize_waits_for"] == ["w1of3", "w2of3"]
    table = run_zshard("status", dst, *flags, env=env).stdout
    assert "finalize waits for worker(s): 1/3, 2/3" in table, table
    assert [line.split()[3] for line in table.splitlines() if line.split()[:1] in (["0/3"], ["1/3"], ["2/3"])] == [
        "done", "stale", "live"], table

    job = tmp_path / "job.toml"
    storage = f'[storage]\ns3_endpoint = "{target.upstream}"\ns3_path_style = true\n' if store == "s3" else ""
    job.write_text(f'shard_shape = [100, 80]\nchunk_shape = [50, 40]\ninclude = ["temperature"]\n{storage}'
                   f'[[conversions]]\nsource = "{src}"\ndestination = "{dst}"\n')
    from_job = json.loads(run_zshard("status", job, "--json", env=env).stdout)
    assert len(from_job) == 1
    assert from_job[0]["totals"] == status["totals"] and from_job[0]["destination"] == status["destination"]

    target.delete("out.zarr/.zshard/leases/w2of3-node7-99-1.json")
    for worker in ("1/3", "2/3"):
        run_zshard("convert", src, dst, *layout, "--worker", worker, "--quiet", *flags, env=env)
    started = time.monotonic()
    watched = run_zshard("status", dst, "--json", "--watch", "30", *flags, env=env, timeout=25).stdout
    assert time.monotonic() - started < 20
    last = json.loads(watched.splitlines()[-1])
    assert last["finished"] and last["finalize_waits_for"] == []
    assert last["totals"]["shards_done"] == last["totals"]["shards_planned"]
    assert last["totals"]["bytes_written"] == sum(shard_objects().values())
    run_zshard("finalize", src, dst, *layout, "--quiet", *flags, env=env)
    target.download("out.zarr", tmp_path / "out.zarr")
    assert_same(tmp_path / "out.zarr", {"temperature": expected["temperature"]})



@pytest.mark.parametrize("form", ["json", "parquet"])
def test_reference_reads_coalesce_across_the_shards_in_flight(form, tmp_path, s3, fault_proxy):
    """A 2048x2048 HDF5 dataset on S3 in 128x256 chunks (rows of 8 chunks, contiguous in the file),
    converted through kerchunk references into 4 shards of 2048x512: each shard's row of 2 chunks lies
    384 KiB from its next row, beyond the coalescing gap, so read shard by shard the run takes 16
    requests per shard, 64 in all. The fetchers read the 4 shards in flight together, so each row of
    the file is one range: 16 GETs or fewer. `plan` predicts the count, from the byte ranges of a JSON
    reference file and of a Parquet reference set (kerchunk's `refs_to_dataframe`, 4 files of 32
    references) alike. Values are h5py's."""
    import h5py
    import kerchunk.df
    from kerchunk.hdf import SingleHdf5ToZarr

    data = (np.arange(2048 * 2048, dtype="uint32").reshape(2048, 2048) * 2654435761 % 65521).astype("uint16")
    h5 = tmp_path / "data.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("x", data=data, chunks=(128, 256))
    src, dst = f"src11-{form}", f"dst11-{form}"
    with open(h5, "rb") as fh:
        refs = SingleHdf5ToZarr(fh, url=f"s3://{src}/data.h5", inline_threshold=0).translate()
    if form == "json":
        references = tmp_path / "refs.json"
        references.write_text(json.dumps(refs))
    else:
        references = tmp_path / "refs.parq"
        kerchunk.df.refs_to_dataframe(refs, str(references), record_size=32)
        assert len(list(references.glob("x/refs.*.parq"))) == 4
    create_buckets(s3, src, dst)
    s3.upload_file(str(h5), src, "data.h5")
    proxy = fault_proxy()
    flags = ["--s3-endpoint", proxy.endpoint, "--s3-path-style", "--shard-shape", "2048,512"]
    plan = json.loads(run_zshard("plan", references, f"s3://{dst}/out.zarr", *flags, "--json", env=S3_ENV).stdout)
    proxy.reset()
    run_zshard("convert", references, f"s3://{dst}/out.zarr", *flags, "--quiet", env=S3_ENV)
    gets = [r for r in proxy.requests if r.method == "GET" and r.path.startswith(f"/{src}/data.h5")]
    shard_puts = [r for r in proxy.requests if r.method == "PUT" and "/out.zarr/x/c/" in r.path]
    print(f"{form}: reference GETs: {len(gets)}, {sum(r.bytes_out for r in gets)} bytes; plan: {plan.get('cost')}")
    assert len(shard_puts) == 4
    assert len(gets) <= 16, len(gets)
    cost = plan["cost"]
    assert cost["gets_from_references"] is True
    assert cost["get_requests"] == len(gets)
    # The ranges between the chunks (HDF5's own structures) are read too: what the GETs returned.
    assert cost["get_bytes"] == sum(r.bytes_out for r in gets) >= 2048 * 2048 * 2
    assert cost["put_requests"] == 4 + 1 + 1 and cost["put_bytes"] == 2048 * 2048 * 2
    download_prefix(s3, dst, "out.zarr", tmp_path / "out.zarr")
    got = zarr.open_group(str(tmp_path / "out.zarr"), mode="r")["x"][:]
    assert got.dtype == data.dtype and np.array_equal(got, data)


def test_concurrent_runs_with_different_options_cannot_both_write_to_gcs(tmp_path, gcs):
    """The claim on a GCS destination is a create-only PUT (x-goog-if-generation-match: 0, which
    fake-gcs-server enforces): of two runs started together with different options, exactly one converts
    and the other is refused; the winner's output reads back exactly."""
    expected = make_group(tmp_path / "in.zarr")
    gcs.create_bucket("gclaims")
    layouts = {"a": ["--index-location", "end"], "b": ["--index-location", "start", "--compressor", "zstd:1"]}
    runs = {name: subprocess.Popen([ZSHARD, "convert", str(tmp_path / "in.zarr"), "gs://gclaims/out.zarr", "--quiet",
                                    "--threads", "1", *layout], stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, **gcs_env(gcs.endpoint)})
            for name, layout in layouts.items()}
    outcomes = {name: (p.wait(timeout=300), p.stderr.read()) for name, p in runs.items()}
    winners = [name for name, (code, _) in outcomes.items() if code == 0]
    assert len(winners) == 1, outcomes
    code, stderr = outcomes[next(name for name in layouts if name not in winners)]
    assert code == 1 and "different options" in stderr, outcomes
    keys = gcs.download_prefix("gclaims", "out.zarr", tmp_path / "out.zarr")
    assert not any(k.startswith(".zshard/") for k in keys), keys
    assert_same(tmp_path / "out.zarr", expected)


def test_plan_gives_the_stored_bytes_and_every_request_of_an_s3_migration(tmp_path, s3, moto, fault_proxy):
    """Issue 44, point 6: `plan` of an S3-to-S3 migration lists the source's chunks (the proxy sees the
    listing) for the bytes they are stored in, counts the listing among the source's requests, and prices
    both sides' requests at S3 Standard's list prices; the run then takes the requests counted: its chunk
    GETs, its shard PUTs, no more listings of the source than the plan counts."""
    root = zarr.open_group(str(tmp_path / "in.zarr"), mode="w", zarr_format=2)
    a = root.create_array("v", shape=(400, 300), chunks=(50, 50), dtype="uint16",
                          compressors=numcodecs.Zstd(level=1), fill_value=0)
    a[:] = (np.arange(400 * 300) % 977).reshape(400, 300).astype("uint16")
    create_buckets(s3, "src44", "dst44")
    upload_dir(s3, tmp_path / "in.zarr", "src44", "in.zarr")
    chunks = [o for o in s3.list_objects_v2(Bucket="src44", Prefix="in.zarr/v/")["Contents"]
              if not o["Key"].rsplit("/", 1)[-1].startswith(".")]
    assert len(chunks) == 8 * 6
    proxy = fault_proxy()
    flags = ["--s3-endpoint", proxy.endpoint, "--s3-path-style", "--shard-shape", "100,150"]
    plan = json.loads(run_zshard("plan", "s3://src44/in.zarr", "s3://dst44/out.zarr", "--json", *flags,
                                 env=S3_ENV).stdout)
    cost, estimate = plan["cost"], plan["estimate"]
    assert cost["stored_bytes_in"] == sum(o["Size"] for o in chunks), cost
    assert cost["raw_bytes_in"] == 400 * 300 * 2
    assert cost["source_requests"] == {"list": 1, "head": 0, "get": 48, "put": 0, "delete": 0}, cost
    source_lists = [r for r in proxy.requests if r.path.startswith("/src44") and r.kind == "LIST"]
    assert len(source_lists) >= 1, [(r.method, r.path) for r in proxy.requests]
    # Both sides are on S3: every request priced, PUT/LIST at $0.005 and GET/HEAD at $0.0004 per 1,000.
    both = [cost["source_requests"], cost["destination_requests"]]
    expected = sum((r["put"] + r["list"]) * 0.005 + (r["get"] + r["head"]) * 0.0004 for r in both) / 1000
    assert estimate["request_price_usd"] == pytest.approx(expected)
    assert estimate["assumptions"]["prices"]["name"].startswith("S3 Standard")
    # The shards (4 x 2), the array's and the root group's zarr.json, and the state's PUTs.
    assert cost["put_requests"] == 8 + 2, cost
    assert cost["destination_requests"]["put"] > cost["put_requests"] and cost["state_requests"]["claim"] > 0

    proxy.reset()
    run_zshard("convert", "s3://src44/in.zarr", "s3://dst44/out.zarr", "--quiet", *flags, env=S3_ENV)
    source = [r for r in proxy.requests if r.path.startswith("/src44")]
    chunk_gets = [r for r in source if r.method == "GET" and r.kind != "LIST"
                  and r.path.split("?")[0].rsplit("/", 1)[-1][0].isdigit()]
    assert len(chunk_gets) == cost["get_requests"] == 48
    assert len([r for r in source if r.kind == "LIST"]) <= cost["source_requests"]["list"] + 1
    shard_puts = [r for r in proxy.requests if r.path.startswith("/dst44/out.zarr/v/c/") and r.method == "PUT"]
    assert len(shard_puts) == 8
