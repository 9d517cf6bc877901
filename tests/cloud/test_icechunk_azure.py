"""Icechunk repositories on Azure Blob Storage (Azurite), as zshard's source and destination (issue 20).

The source repository is written with the real `icechunk` Python package (1.1.x or 2.x) through its
`azure_storage` (the emulator account and key; `use_emulator` with AZURITE_BLOB_STORAGE_URL, as
object_store reads them), with native and inline chunks written by zarr-python. zshard converts it
into a second repository on Azurite and into plain sharded Zarr there, taking its Azure settings
from the same environment as for plain az:// locations. Both are read back (the repository through
icechunk) and compared element by element with what icechunk + zarr-python read from the source.
"""
import icechunk as ic
import numpy as np
import pytest
import zarr

from conftest import AZURE_ACCOUNT, AZURE_KEY, azure_client, azure_env, download_blobs, run_zshard
from test_icechunk_objects import NEW, arrays, assert_same


@pytest.fixture
def azure(azurite, monkeypatch):
    """Azurite, with its URL where icechunk's Azure client (in this process) looks for it."""
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azurite)
    return azurite


def storage(container, prefix):
    return ic.azure_storage(account=AZURE_ACCOUNT, container=container, prefix=prefix, access_key=AZURE_KEY,
                            config={"use_emulator": "true"})


def read_repo(container, prefix, branch="main"):
    repo = ic.Repository.open(storage(container, prefix))
    return arrays(zarr.open_group(repo.readonly_session(branch=branch).store, mode="r"))


def commits(container, prefix, branch="main"):
    repo = ic.Repository.open(storage(container, prefix))
    return [snapshot.message for snapshot in repo.ancestry(branch=branch)]


def make_source(container, prefix):
    """Native float64 chunks and inline uint8 chunks, in one commit on main."""
    repo = ic.Repository.create(storage(container, prefix))
    session = repo.writable_session("main")
    root = zarr.group(session.store, attributes={"title": "icechunk on azure"})
    native = np.random.default_rng(11).normal(size=(30, 50))
    root.create_array("native", shape=native.shape, chunks=(10, 20), dtype="f8")[:] = native
    inline = np.arange(20, dtype="u1") * 3
    root.create_group("grp").create_array("inline", shape=(20,), chunks=(5,), dtype="u1", fill_value=7)[:] = inline
    session.commit("source on azure")
    return read_repo(container, prefix)


FLAGS = ["--quiet", "--threads", "2"]


def test_icechunk_on_azure_to_a_second_repository_and_to_plain_zarr(azure, tmp_path):
    client = azure_client(azure)
    for container in ("icesrc", "icedst"):
        client.create_container(container)
    values = make_source("icesrc", "repo")
    assert values["native"].shape == (30, 50) and values["grp/inline"][1] == 3

    # Into a second repository on Azurite: exactly one commit after the repository's initial one.
    run_zshard("convert", "az://icesrc/repo", "az://icedst/repo", "--source-format", "icechunk",
               "--output-format", "icechunk", "--message", "zshard on azure", *FLAGS, *NEW,
               env=azure_env(azure))
    assert commits("icedst", "repo") == ["zshard on azure", "Repository initialized"]
    assert_same(read_repo("icedst", "repo"), values)
    session = ic.Repository.open(storage("icedst", "repo")).readonly_session(branch="main")
    native = zarr.open_array(session.store, path="native", mode="r")
    assert type(native.metadata.codecs[0]).__name__ == "ShardingCodec"
    # Nothing of the staging is left beside the repository's objects but what the commit keeps for
    # a later update (issue 40): the documents, kept records and source versions, no shard.
    left = [b.name for b in client.get_container_client("icedst").list_blobs(name_starts_with="repo/")]
    kept = ("zarr.json", ".zshard-records", ".zshard-source-versions", ".zshard-kept-after-commit")
    assert left and not [name for name in left if ".zshard" in name and not name.endswith(kept)], left

    # Into plain sharded Zarr on Azurite.
    run_zshard("convert", "az://icesrc/repo", "az://icedst/plain.zarr", "--source-format", "icechunk", *FLAGS,
               env=azure_env(azure))
    keys = download_blobs(client.get_container_client("icedst"), "plain.zarr", tmp_path / "plain.zarr")
    assert "zarr.json" in keys and not any(k.startswith(".zshard") for k in keys), keys
    plain = zarr.open_group(str(tmp_path / "plain.zarr"), mode="r")
    assert plain.attrs["title"] == "icechunk on azure"
    assert_same(arrays(plain), values)
    # The source is unchanged: still its one commit.
    assert commits("icesrc", "repo") == ["source on azure", "Repository initialized"]
