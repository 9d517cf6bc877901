"""Icechunk repositories on S3 (moto), as zshard's source and destination (issue 20).

The source repository is written with the real `icechunk` Python package (1.1.x) through its
`s3_storage` (endpoint, http, static credentials, path style), with native chunks and inline chunks
(smaller than the repository's inline threshold) written by zarr-python. zshard converts it into a
second repository on S3 and into plain sharded Zarr on S3; both are read back (the repository
through icechunk) and compared element by element with what icechunk + zarr-python read from the
source.
"""
import icechunk as ic
import numpy as np
import zarr

from conftest import S3_ENV, download_prefix, run_zshard


def storage(moto, bucket, prefix):
    return ic.s3_storage(bucket=bucket, prefix=prefix, region="us-east-1", endpoint_url=moto, allow_http=True,
                         access_key_id="testing", secret_access_key="testing", force_path_style=True)


def arrays(group):
    return {path: np.asarray(node[()]) for path, node in group.members(max_depth=None)
            if isinstance(node, zarr.Array)}


def read_repo(moto, bucket, prefix, branch="main"):
    repo = ic.Repository.open(storage(moto, bucket, prefix))
    return arrays(zarr.open_group(repo.readonly_session(branch=branch).store, mode="r"))


def commits(moto, bucket, prefix, branch="main"):
    repo = ic.Repository.open(storage(moto, bucket, prefix))
    return [snapshot.message for snapshot in repo.ancestry(branch=branch)]


def assert_same(got, want):
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        assert got[name].dtype == w.dtype, name
        np.testing.assert_array_equal(got[name], w, err_msg=name)


def make_source(moto, bucket, prefix):
    """Native float32 chunks and inline int16 chunks, in one commit on main."""
    repo = ic.Repository.create(storage(moto, bucket, prefix))
    session = repo.writable_session("main")
    root = zarr.group(session.store, attributes={"title": "icechunk on s3"})
    native = np.random.default_rng(7).normal(size=(40, 60)).astype("f4")
    root.create_array("native", shape=native.shape, chunks=(10, 15), dtype="f4")[:] = native
    inline = np.arange(24, dtype="i2") - 5
    root.create_group("grp").create_array("inline", shape=(24,), chunks=(6,), dtype="i2", fill_value=-1)[:] = inline
    session.commit("source on s3")
    return read_repo(moto, bucket, prefix)


S3_FLAGS = ["--s3-path-style", "--quiet", "--threads", "2"]


def test_icechunk_on_s3_to_a_second_repository_and_to_plain_zarr(s3, moto, tmp_path):
    for bucket in ("icesrc", "icedst"):
        s3.create_bucket(Bucket=bucket)
    values = make_source(moto, "icesrc", "repo")
    assert values["native"].shape == (40, 60) and values["grp/inline"][0] == -5

    # Into a second repository on S3: exactly one commit after the repository's initial one.
    run_zshard("convert", "s3://icesrc/repo", "s3://icedst/repo", "--source-format", "icechunk",
               "--output-format", "icechunk", "--message", "zshard on s3", "--s3-endpoint", moto, *S3_FLAGS,
               env=S3_ENV)
    assert commits(moto, "icedst", "repo") == ["zshard on s3", "Repository initialized"]
    assert_same(read_repo(moto, "icedst", "repo"), values)
    session = ic.Repository.open(storage(moto, "icedst", "repo")).readonly_session(branch="main")
    native = zarr.open_array(session.store, path="native", mode="r")
    assert type(native.metadata.codecs[0]).__name__ == "ShardingCodec"
    # Nothing of the staging is left beside the repository's objects.
    left = [o["Key"] for o in s3.list_objects_v2(Bucket="icedst", Prefix="repo/").get("Contents", [])]
    assert left and not [k for k in left if ".zshard" in k], left

    # Into plain sharded Zarr on S3, the endpoint from the environment this time.
    run_zshard("convert", "s3://icesrc/repo", "s3://icedst/plain.zarr", "--source-format", "icechunk",
               *S3_FLAGS, env={**S3_ENV, "AWS_ENDPOINT_URL": moto, "AWS_ALLOW_HTTP": "true"})
    keys = download_prefix(s3, "icedst", "plain.zarr", tmp_path / "plain.zarr")
    assert "zarr.json" in keys and not any(k.startswith(".zshard") for k in keys)
    plain = zarr.open_group(str(tmp_path / "plain.zarr"), mode="r")
    assert plain.attrs["title"] == "icechunk on s3"
    assert_same(arrays(plain), values)
    # The source is unchanged: still its one commit.
    assert commits(moto, "icesrc", "repo") == ["source on s3", "Repository initialized"]
