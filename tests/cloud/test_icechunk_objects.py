"""Icechunk repositories on S3 (moto) and GCS (fake-gcs-server behind gcs_xml.py), as zshard's source and
destination (issue 20; GCS since issue 45).

The source repository is written with the real `icechunk` Python package (1.1.x: spec version 1; 2.x:
spec version 2) through its `s3_storage` (endpoint, http, static credentials, path style) or `gcs_storage`
(the front's URL as `google_base_url`), with native chunks and inline chunks (smaller than the
repository's inline threshold) written by zarr-python. zshard converts it into a second repository and
into plain sharded Zarr on the same store; both are read back (the repository through icechunk) and
compared element by element with what icechunk + zarr-python read from the source. A second repository's
virtual chunks point into an HDF5 file (written by h5py) on the same S3 server, through the repository's
virtual chunk container for that bucket.
"""
import h5py
import icechunk as ic
import numpy as np
import pytest
import zarr

from conftest import S3_ENV, run_zshard
from stores import destination


def s3_storage(moto, bucket, prefix):
    return ic.s3_storage(bucket=bucket, prefix=prefix, region="us-east-1", endpoint_url=moto, allow_http=True,
                         access_key_id="testing", secret_access_key="testing", force_path_style=True)


def arrays(group):
    return {path: np.asarray(node[()]) for path, node in group.members(max_depth=None)
            if isinstance(node, zarr.Array)}


def read_repo(dst, prefix, branch="main"):
    """The arrays of the repository at `prefix` of `dst` (a stores.py destination) as icechunk reads them."""
    repo = ic.Repository.open(dst.icechunk_storage(prefix))
    return arrays(zarr.open_group(repo.readonly_session(branch=branch).store, mode="r"))


def commits(dst, prefix, branch="main"):
    repo = ic.Repository.open(dst.icechunk_storage(prefix))
    return [snapshot.message for snapshot in repo.ancestry(branch=branch)]


def assert_same(got, want):
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        assert got[name].dtype == w.dtype, name
        np.testing.assert_array_equal(got[name], w, err_msg=name)


def make_source(dst, prefix):
    """Native float32 chunks and inline int16 chunks, in one commit on main."""
    repo = ic.Repository.create(dst.icechunk_storage(prefix))
    session = repo.writable_session("main")
    root = zarr.group(session.store, attributes={"title": "icechunk on an object store"})
    native = np.random.default_rng(7).normal(size=(40, 60)).astype("f4")
    root.create_array("native", shape=native.shape, chunks=(10, 15), dtype="f4")[:] = native
    inline = np.arange(24, dtype="i2") - 5
    root.create_group("grp").create_array("inline", shape=(24,), chunks=(6,), dtype="i2", fill_value=-1)[:] = inline
    session.commit("source")
    return read_repo(dst, prefix)


S3_FLAGS = ["--s3-path-style", "--quiet", "--threads", "2"]
FLAGS = ["--quiet", "--threads", "2"]
# Flags of conversions into repositories zshard makes: spec 2 by default, which icechunk 1.x cannot read.
NEW = [] if int(ic.__version__.split(".")[0]) >= 2 else ["--icechunk-spec", "1"]
# The object stores icechunk and zshard both reach: S3 (moto) and GCS (fake-gcs-server behind the XML front,
# icechunk's GCS client at its `google_base_url`, as zshard's is with STORAGE_EMULATOR_HOST).
STORES = ["s3", "gcs"]


@pytest.mark.parametrize("store", STORES)
def test_icechunk_to_a_second_repository_and_to_plain_zarr(store, request, tmp_path):
    src = destination(request, store, f"icesrc-{store}")
    dst = destination(request, store, f"icedst-{store}")
    values = make_source(src, "repo")
    assert values["native"].shape == (40, 60) and values["grp/inline"][0] == -5
    flags, env = dst.options(dst.upstream)

    # Into a second repository: exactly one commit after the repository's initial one.
    run_zshard("convert", src.url("repo"), dst.url("repo"), "--source-format", "icechunk",
               "--output-format", "icechunk", "--message", "zshard", *flags, *FLAGS, *NEW, env=env)
    assert commits(dst, "repo") == ["zshard", "Repository initialized"]
    assert_same(read_repo(dst, "repo"), values)
    # Without --source-format the repository is not taken for a broken Zarr: the error says what to pass.
    refused = run_zshard("convert", src.url("repo"), dst.url("other.zarr"), *flags, *FLAGS, env=env,
                         check=False)
    assert refused.returncode != 0 and "--source-format icechunk" in refused.stderr, refused.stderr
    assert "Icechunk repository" in refused.stderr, refused.stderr
    session = ic.Repository.open(dst.icechunk_storage("repo")).readonly_session(branch="main")
    native = zarr.open_array(session.store, path="native", mode="r")
    assert type(native.metadata.codecs[0]).__name__ == "ShardingCodec"
    # Nothing of the staging is left beside the repository's objects but what the commit keeps for
    # a later update (issue 40): the documents, kept records and the Icechunk source's chunk
    # versions, no shard.
    left = list(dst.listed("repo"))
    kept = ("zarr.json", ".zshard-records", ".zshard-source-versions", ".zshard-kept-after-commit")
    assert left and not [k for k in left if ".zshard" in k and not k.endswith(kept)], left

    # Into plain sharded Zarr; on S3 the endpoint from the environment this time.
    if store == "s3":
        flags, env = ["--s3-path-style"], {**S3_ENV, "AWS_ENDPOINT_URL": dst.upstream, "AWS_ALLOW_HTTP": "true"}
    run_zshard("convert", src.url("repo"), dst.url("plain.zarr"), "--source-format", "icechunk", *flags, *FLAGS,
               env=env)
    keys = dst.download("plain.zarr", tmp_path / "plain.zarr")
    assert "zarr.json" in keys and not any(k.startswith(".zshard") for k in keys)
    plain = zarr.open_group(str(tmp_path / "plain.zarr"), mode="r")
    assert plain.attrs["title"] == "icechunk on an object store"
    assert_same(arrays(plain), values)
    # The source is unchanged: still its one commit.
    assert commits(src, "repo") == ["source", "Repository initialized"]


@pytest.mark.parametrize("store", STORES)
def test_two_workers_store_their_shards_and_finalize_commits_once(store, request):
    """Each worker copies its staged shards into the repository's chunk storage on the server
    (S3's CopyObject, GCS's copy); finalize stores nothing itself and commits once."""
    src = destination(request, store, f"icewsrc-{store}")
    dst = destination(request, store, f"icewdst-{store}")
    values = make_source(src, "repo")
    flags, env = dst.options(dst.upstream)
    common = [src.url("repo"), dst.url("repo"), "--source-format", "icechunk", "--output-format",
              "icechunk", "--message", "two workers", *flags, *NEW]

    def chunk_objects():
        return sorted(dst.listed("repo/chunks"))

    stored = 0
    for worker in ("0/2", "1/2"):
        run = run_zshard("convert", *common, "--worker", worker, env=env)
        stored += int(run.stderr.split("stored ")[1].split(" shard(s)")[0])
        assert len(chunk_objects()) == stored
    assert stored == 2  # one shard per array, one array per worker
    before = chunk_objects()
    done = run_zshard("finalize", *common, env=env)
    assert "2 chunk(s), 2 of them stored by the workers" in done.stderr, done.stderr
    assert chunk_objects() == before
    assert commits(dst, "repo") == ["two workers", "Repository initialized"]
    assert_same(read_repo(dst, "repo"), values)
    left = list(dst.listed("repo"))
    # Only what the commit keeps for a later update (issue 40) stays staged: no shard.
    kept = ("zarr.json", ".zshard-records", ".zshard-source-versions", ".zshard-kept-after-commit")
    assert not [k for k in left if ".zshard" in k and not k.endswith(kept)], left


# The HDF5 dataset referenced as virtual chunks: raw (uncompressed, chunked) big-endian int16.
H5_SHAPE, H5_CHUNKS = (20, 12), (5, 4)


def write_h5(path):
    data = (np.arange(240, dtype=">i2").reshape(H5_SHAPE) * 7 - 500).astype(">i2")
    with h5py.File(path, "w") as f:
        f.create_dataset("v", data=data, chunks=H5_CHUNKS)
    return data


def h5_chunks(path):
    """(chunk grid position, byte offset, size) of every chunk of dataset v, as h5py locates them."""
    with h5py.File(path, "r") as f:
        ds = f["v"]
        infos = [ds.id.get_chunk_info(i) for i in range(ds.id.get_num_chunks())]
    return [(tuple(o // c for o, c in zip(i.chunk_offset, H5_CHUNKS)), i.byte_offset, i.size) for i in infos]


def make_virtual_source(moto, bucket, prefix, container):
    """A repository whose only virtual chunk container is the S3 prefix `container`, reached at the S3
    server's endpoint."""
    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(ic.VirtualChunkContainer(
        container, ic.s3_store(region="us-east-1", endpoint_url=moto, allow_http=True, force_path_style=True)))
    credentials = ic.containers_credentials(
        {container: ic.s3_credentials(access_key_id="testing", secret_access_key="testing")})
    repo = ic.Repository.create(s3_storage(moto, bucket, prefix), config=config,
                                authorize_virtual_chunk_access=credentials)
    return repo, credentials


def reference_h5(repo, name, h5, target, validate=True):
    """An array `name` whose chunks are all the chunks of the local HDF5 file `h5`, by reference into its
    copy `target` on S3; committed on main."""
    session = repo.writable_session("main")
    zarr.create_array(session.store, name=name, shape=H5_SHAPE, chunks=H5_CHUNKS, dtype=">i2",
                      serializer=zarr.codecs.BytesCodec(endian="big"), compressors=None, fill_value=0)
    for pos, offset, size in h5_chunks(h5):
        session.store.set_virtual_ref(f"{name}/c/" + "/".join(map(str, pos)), target, offset=offset, length=size,
                                      validate_container=validate)
    session.commit(f"{name}: virtual chunks in {target}")


def test_virtual_chunks_in_an_hdf5_file_on_s3(s3, moto, fault_proxy, tmp_path):
    for bucket in ("icevirt", "h5files"):
        s3.create_bucket(Bucket=bucket)
    h5 = tmp_path / "data.h5"
    want = write_h5(h5)
    # The same file inside the repository's virtual chunk container (data/) and outside it (secret/).
    for key in ("data/data.h5", "secret/data.h5"):
        s3.upload_file(str(h5), "h5files", key)
    repo, credentials = make_virtual_source(moto, "icevirt", "repo", "s3://h5files/data/")
    reference_h5(repo, "virtual", h5, "s3://h5files/data/data.h5")
    repo, credentials = make_virtual_source(moto, "icevirt", "escaping", "s3://h5files/data/")
    reference_h5(repo, "virtual", h5, "s3://h5files/secret/data.h5", validate=False)
    # Icechunk itself reads the references as h5py reads the file.
    reopened = ic.Repository.open(s3_storage(moto, "icevirt", "repo"), authorize_virtual_chunk_access=credentials)
    np.testing.assert_array_equal(
        zarr.open_array(reopened.readonly_session(branch="main").store, path="virtual", mode="r")[:], want)
    proxy = fault_proxy()
    flags = ["--source-format", "icechunk", "--s3-endpoint", proxy.endpoint, *S3_FLAGS]

    # Every chunk read from the HDF5 file on S3 (through the proxy), equal to h5py's values element by element.
    out = tmp_path / "virtual.zarr"
    run_zshard("convert", "s3://icevirt/repo", out, *flags, env=S3_ENV)
    assert [e for e in proxy.log if e[0] == "GET" and e[1].startswith("/h5files/data/data.h5")], proxy.log
    got = zarr.open_array(str(out / "virtual"), mode="r")[:]
    assert got.shape == want.shape and got.dtype == want.dtype.newbyteorder("=")  # zarr-python reads native order
    np.testing.assert_array_equal(got, want)

    # A target outside the repository's virtual chunk containers is refused before any read: the
    # repository is read through the proxy, the HDF5 file never is.
    proxy.log.clear()
    refused = run_zshard("convert", "s3://icevirt/escaping", tmp_path / "refused.zarr", *flags, env=S3_ENV,
                         check=False)
    assert refused.returncode != 0, refused.stderr
    assert "virtual chunk virtual/c/" in refused.stderr, refused.stderr
    assert "s3://h5files/secret/data.h5 matches none of the repository's virtual chunk containers" in refused.stderr
    assert [e for e in proxy.log if e[1].startswith("/icevirt/escaping/")], proxy.log
    assert not [e for e in proxy.log if e[1].startswith("/h5files")], proxy.log
