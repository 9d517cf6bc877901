"""Scheduled ETL on object stores (issue 40): rerunning the same conversion after the source changed
rewrites only the shards made from what changed, on S3 (moto), Azure (Azurite) and GCS (fake-gcs-server);
the other objects keep their ETags. Values are read back with zarr-python and compared with the changed source."""
import json
import shutil

import numpy as np
import pytest
import zarr

from conftest import azure_client, azure_env, download_blobs, run_zshard
from stores import destination

OPTS = ["--shard-shape", "100,80", "--chunk-shape", "50,40"]


def make_source(path):
    a = zarr.create_array(str(path), shape=(300, 200), chunks=(50, 40), dtype="float32", zarr_format=2,
                          fill_value=float("nan"))
    a[:] = np.linspace(-40, 40, 300 * 200, dtype="float32").reshape(300, 200)
    return a


def shards(changed):
    return {k for k in changed if k.startswith("c/")}


def changed(before, after):
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


@pytest.mark.parametrize("store", ["s3", "gcs"])
def test_one_changed_chunk_rewrites_exactly_its_shard(store, request, tmp_path, fault_proxy):
    """On S3 the update goes through the proxy, which shows that the rewritten shard's three copied inner
    chunks came with its index in one request (a suffix range that held the whole shard)."""
    local = tmp_path / "src.zarr"
    a = make_source(local)
    dst = destination(request, store, f"upd-{store}")
    dst.upload_dir(local, "in.zarr")
    flags, env = dst.options(dst.upstream)

    def args_through(flags):
        return ["convert", dst.url("in.zarr"), dst.url("out.zarr"), *flags, "--quiet", *OPTS,
                "--report", tmp_path / "r.json"]

    args = args_through(flags)

    def etags():
        return {k[len("out.zarr/"):]: etag for k, (_, etag) in dst.listed("out.zarr").items()}

    run_zshard(*args, env=env)
    before = etags()
    assert ".zshard-records" in before and not any(k.startswith(".zshard/") for k in before)

    run_zshard(*args, env=env)
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "complete"
    assert changed(before, etags()) == set()

    # Rows 120..125 of column 100: chunk (2, 2), output shard (1, 1); the producer uploads that chunk only.
    a[120:125, 100] = 1000.0
    dst.put("in.zarr/2.2", (local / "2.2").read_bytes())
    planned = json.loads(run_zshard("plan", *args[1:3], *flags, *OPTS, "--json", env=env).stdout)
    # The changed source chunk, and the old shard with its three copied inner chunks: one request.
    assert planned["update"]["cost"]["get_requests"] == 2, planned["update"]
    proxy = fault_proxy() if store == "s3" else None
    if proxy:
        run_zshard(*args_through(dst.options(proxy.endpoint)[0]), env=env)
        old_shard = [r for r in proxy.requests
                     if r.method == "GET" and r.path.split("?")[0] == dst.request_path("out.zarr/c/1/1")]
        assert [r.kind for r in old_shard] == ["range GET"], old_shard
    else:
        run_zshard(*args, env=env)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["update"] == {"shards_rewritten": 1, "shards_added": 0, "shards_removed": 0, "inner_chunks_copied": 3}, report
    # The shard's three unchanged inner chunks were read from the shard as it stood, not converted.
    assert report["totals"]["chunks_read"] == 1, report
    assert shards(changed(before, etags())) == {"c/1/1"}
    dst.download("out.zarr", tmp_path / "out.zarr")
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "out.zarr"), mode="r")[:], a[:])


def test_appended_rows_into_azure_add_only_new_shards(tmp_path, azurite):
    local = tmp_path / "src.zarr"
    a = make_source(local)
    client = azure_client(azurite)
    client.create_container("uout")
    container = client.get_container_client("uout")
    args = ["convert", local, "az://uout/sharded.zarr", "--quiet", *OPTS, "--report", tmp_path / "r.json"]
    run_zshard(*args, env=azure_env(azurite))

    def etags():
        return {b.name[len("sharded.zarr/"):]: b.etag for b in container.list_blobs(name_starts_with="sharded.zarr/")}

    before = etags()
    a.resize((400, 200))
    a[300:400, :] = 7.0
    run_zshard(*args, env=azure_env(azurite))
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["update"] == {"shards_rewritten": 0, "shards_added": 3, "shards_removed": 0, "inner_chunks_copied": 0}, report
    assert shards(changed(before, etags())) == {"c/3/0", "c/3/1", "c/3/2"}
    out = tmp_path / "out"
    download_blobs(container, "sharded.zarr", out)
    np.testing.assert_array_equal(zarr.open_array(str(out), mode="r")[:], a[:])


@pytest.mark.parametrize("store", ["s3", "gcs"])
def test_an_update_into_an_icechunk_repository_is_one_commit(store, request, tmp_path):
    """Into an Icechunk repository on S3 or GCS (the staging folder is an object prefix there): a changed chunk
    makes one commit that replaces its shard's chunk only; nothing changed makes none."""
    import icechunk as ic

    dst = destination(request, store, f"icupd-{store}")

    def repository():
        return ic.Repository.open(dst.icechunk_storage("repo"))

    def keys():
        return [k[len("repo/"):] for k in dst.listed("repo")]

    local = tmp_path / "src.zarr"
    a = make_source(local)
    dst.upload_dir(local, "in.zarr")
    flags, env = dst.options(dst.upstream)
    # icechunk 1.x (last year's stack) reads spec version 1 only.
    spec = [] if int(ic.__version__.split(".")[0]) >= 2 else ["--icechunk-spec", "1"]
    args = ["convert", dst.url("in.zarr"), dst.url("repo"), "--output-format", "icechunk", *spec, *flags,
            "--quiet", *OPTS, "--report", tmp_path / "r.json"]
    run_zshard(*args, env=env)
    first = [s.id for s in repository().ancestry(branch="main")]
    chunks_before = {k for k in keys() if k.startswith("chunks/")}
    staged = [k for k in keys() if k.startswith(".zshard-staging/")]
    kept = ("zarr.json", ".zshard-records", ".zshard-source-versions", ".zshard-kept-after-commit")
    assert staged and all(k.endswith(kept) for k in staged)

    run_zshard(*args, env=env)
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "complete"
    assert [s.id for s in repository().ancestry(branch="main")] == first

    a[120:125, 100] = 1000.0
    dst.put("in.zarr/2.2", (local / "2.2").read_bytes())
    run_zshard(*args, env=env)
    report = json.loads((tmp_path / "r.json").read_text())
    # The shard's three unchanged inner chunks are copied from it as zshard's commit holds it.
    assert report["update"] == {"shards_rewritten": 1, "shards_added": 0, "shards_removed": 0, "inner_chunks_copied": 3}, report
    assert report["totals"]["chunks_read"] == 1, report
    assert len(list(repository().ancestry(branch="main"))) == len(first) + 1
    chunks_after = {k for k in keys() if k.startswith("chunks/")}
    assert len(chunks_after - chunks_before) == 1
    got = zarr.open_array(repository().readonly_session(branch="main").store, mode="r")
    np.testing.assert_array_equal(got[:], a[:])


def test_names_that_need_escaping_are_listed_and_updated_on_s3(request, tmp_path):
    """S3's listing pages are read by zshard's own reader (crates/store/src/s3_list.rs), its requests signed
    with object_store's signer: an array whose name needs escaping in the listing's query (space, +, %) and in
    its XML (&), beyond ASCII too, is listed, converted and updated exactly, beside a plain one."""
    local = tmp_path / "src.zarr"
    root = zarr.open_group(str(local), mode="w", zarr_format=2)
    names = ["R&D +1% été", "plain"]
    arrays = {}
    for i, name in enumerate(names):
        arrays[name] = root.create_array(name, shape=(40, 30), chunks=(10, 10), dtype="int32", fill_value=0)
        arrays[name][:] = np.arange(40 * 30, dtype="int32").reshape(40, 30) * (i + 1)
    dst = destination(request, "s3", "names")
    dst.upload_dir(local, "in.zarr")
    flags, env = dst.options(dst.upstream)
    args = ["convert", dst.url("in.zarr"), dst.url("out.zarr"), *flags, "--quiet", "--shard-shape", "20,20",
            "--chunk-shape", "10,10", "--report", tmp_path / "r.json"]

    def check():
        out = tmp_path / "out.zarr"
        shutil.rmtree(out, ignore_errors=True)
        dst.download("out.zarr", out)
        group = zarr.open_group(str(out), mode="r")
        for name, a in arrays.items():
            np.testing.assert_array_equal(group[name][:], a[:], err_msg=name)

    run_zshard(*args, env=env)
    check()
    assert f"out.zarr/{names[0]}/c/1/1" in dst.listed("out.zarr")
    # Chunk (1, 0) of the escaped array: its shard (0, 0) alone is rewritten.
    arrays[names[0]][12, 3] = -5
    dst.put(f"in.zarr/{names[0]}/1.0", (local / names[0] / "1.0").read_bytes())
    run_zshard(*args, env=env)
    report = json.loads((tmp_path / "r.json").read_text())
    # No update at all (`null`) when the rerun did not see the changed chunk.
    counts = report["update"] or {}
    assert (counts.get("shards_rewritten"), counts.get("shards_added"), counts.get("shards_removed")) == (1, 0, 0), \
        report
    check()
