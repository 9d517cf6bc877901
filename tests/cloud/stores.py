"""A bucket (or container) on one of the test servers as a test's source or destination, the same
methods on each store (S3 on moto, Azure on Azurite, GCS on fake-gcs-server behind gcs_xml.py), so that
one test runs on several of them (`destination`)."""
from urllib.parse import quote

import zarr

from conftest import AZURE_ACCOUNT, S3_ENV, azure_client, azure_env, download_blobs, download_prefix, gcs_env, \
    upload_dir


def create_buckets(s3, *names):
    for name in names:
        s3.create_bucket(Bucket=name)



def open_uploads(s3, bucket):
    """(key, upload id) of every multipart upload open in `bucket`."""
    listed = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    return sorted((u["Key"], u["UploadId"]) for u in listed)



def read_back_from_s3(endpoint, bucket, prefix):
    """The array at s3://bucket/prefix read by zarr-python through obstore (many requests in flight)."""
    from obstore.store import S3Store
    store = S3Store(bucket, prefix=prefix, endpoint=endpoint, region="us-east-1", access_key_id="testing",
                    secret_access_key="testing", client_options={"allow_http": True}, virtual_hosted_style_request=False)
    return zarr.open_array(zarr.storage.ObjectStore(store, read_only=True), mode="r")[:]


class S3Destination:
    """A bucket on moto as a test's destination: zshard's options for an endpoint (moto, or a proxy in
    front of it), what a listing says of its objects, and boto3 to write and read objects."""

    def __init__(self, s3, moto, bucket):
        self.s3, self.server, self.bucket = s3, moto, bucket
        self.upstream = moto  # what a FaultProxy is put in front of
        create_buckets(s3, bucket)

    def url(self, prefix):
        return f"s3://{self.bucket}/{prefix}"

    def options(self, endpoint):
        """zshard's flags and environment to reach the bucket through `endpoint`."""
        return ["--s3-endpoint", endpoint, "--s3-path-style"], S3_ENV

    def request_path(self, key):
        """The path of `key`'s requests, as the proxy logs them."""
        return f"/{self.bucket}/{key}"

    @staticmethod
    def is_part(query):
        """Whether a PUT with this query uploads a part of a multipart upload."""
        return "partNumber" in query

    def listed(self, prefix):
        """{key: (size, ETag)} of the objects under `prefix`/."""
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix + "/")
        return {o["Key"]: (o["Size"], o["ETag"]) for page in pages for o in page.get("Contents", [])}

    def put(self, key, data):
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)

    def delete(self, key):
        self.s3.delete_object(Bucket=self.bucket, Key=key)

    def get(self, key):
        return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def read_array(self, prefix, tmp_path):
        return read_back_from_s3(self.server, self.bucket, prefix)

    def upload_dir(self, local, prefix):
        upload_dir(self.s3, local, self.bucket, prefix)

    def download(self, prefix, local):
        """Every object under `prefix`/ into `local`; their keys relative to the prefix."""
        return download_prefix(self.s3, self.bucket, prefix, local)

    def create_upload(self, key):
        """A multipart upload of `key` opened by a client other than zshard; its upload id."""
        return self.s3.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]

    def open_uploads(self):
        return open_uploads(self.s3, self.bucket)

    def icechunk_storage(self, prefix):
        """icechunk's storage for a repository at `prefix`."""
        import icechunk as ic
        return ic.s3_storage(bucket=self.bucket, prefix=prefix, region="us-east-1", endpoint_url=self.server,
                             allow_http=True, access_key_id="testing", secret_access_key="testing",
                             force_path_style=True)


class AzureDestination:
    """A container on Azurite as a test's destination (see S3Destination), through azure-storage-blob."""

    def __init__(self, azurite, container):
        self.container = azure_client(azurite).create_container(container)
        self.name, self.upstream = container, azurite

    def url(self, prefix):
        return f"az://{self.name}/{prefix}"

    def options(self, endpoint):
        return [], azure_env(endpoint)

    def request_path(self, key):
        return f"/{AZURE_ACCOUNT}/{self.name}/{key}"

    @staticmethod
    def is_part(query):
        """A block of a blob put as a block list (a multipart upload)."""
        return query.get("comp") == ["block"]

    def listed(self, prefix):
        return {b.name: (b.size, b.etag) for b in self.container.list_blobs(name_starts_with=prefix + "/")}

    def put(self, key, data):
        self.container.upload_blob(key, data, overwrite=True)

    def get(self, key):
        return self.container.download_blob(key).readall()

    def read_array(self, prefix, tmp_path):
        download_blobs(self.container, prefix, tmp_path / "downloaded")
        return zarr.open_array(str(tmp_path / "downloaded"), mode="r")[:]

    def upload_dir(self, local, prefix):
        for path in local.rglob("*"):
            if path.is_file():
                self.put(f"{prefix}/{path.relative_to(local).as_posix()}", path.read_bytes())

    def download(self, prefix, local):
        return download_blobs(self.container, prefix, local)


class GcsDestination:
    """A bucket on fake-gcs-server as a test's destination (see S3Destination): zshard talks to the XML front
    (gcs_xml.py), which object_store's GCS client needs; objects are written and read through the server's
    JSON API."""

    def __init__(self, gcs, bucket):
        self.gcs, self.bucket, self.upstream = gcs, bucket, gcs.endpoint
        gcs.create_bucket(bucket)

    def url(self, prefix):
        return f"gs://{self.bucket}/{prefix}"

    def options(self, endpoint):
        return [], gcs_env(endpoint)

    def request_path(self, key):
        # object_store escapes the bucket's and the object's names whole: every byte but letters and digits.
        def escaped(name):
            return "".join(c if c.isascii() and c.isalnum() else f"%{ord(c):02X}" for c in name)
        return f"/{escaped(self.bucket)}/{escaped(key)}"

    @staticmethod
    def is_part(query):
        return "partNumber" in query

    def listed(self, prefix):
        return {k: (int(o["size"]), o["etag"]) for k, o in self.gcs.listed(self.bucket, prefix).items()}

    def put(self, key, data):
        self.gcs.put(self.bucket, key, data)

    def delete(self, key):
        self.gcs.json("DELETE", f"/storage/v1/b/{self.bucket}/o/{quote(key, safe='')}")

    def get(self, key):
        return self.gcs.get(self.bucket, key)

    def read_array(self, prefix, tmp_path):
        self.gcs.download_prefix(self.bucket, prefix, tmp_path / "downloaded")
        return zarr.open_array(str(tmp_path / "downloaded"), mode="r")[:]

    def upload_dir(self, local, prefix):
        self.gcs.upload_dir(local, self.bucket, prefix)

    def download(self, prefix, local):
        return self.gcs.download_prefix(self.bucket, prefix, local)

    def create_upload(self, key):
        """An XML multipart upload of `key` opened through the front (GCS's XML API); its upload id."""
        return self.gcs.create_upload(self.bucket, key)

    def open_uploads(self):
        return self.gcs.open_uploads(self.bucket)

    def icechunk_storage(self, prefix):
        """icechunk's storage for a repository at `prefix`, through the XML front as zshard's (object_store's
        GCS client at `google_base_url`; a token that is never checked, so that writes need no metadata
        server)."""
        import icechunk as ic
        return ic.gcs_storage(bucket=self.bucket, prefix=prefix, bearer_token="emulator",
                              config={"google_base_url": self.upstream, "allow_http": "true"})


def destination(request, store, bucket):
    """A new bucket (container) named `bucket` on the server of `store` (s3, azure or gcs), started for the
    test that asks (`request`)."""
    if store == "s3":
        return S3Destination(request.getfixturevalue("s3"), request.getfixturevalue("moto"), bucket)
    if store == "azure":
        return AzureDestination(request.getfixturevalue("azurite"), bucket)
    return GcsDestination(request.getfixturevalue("gcs"), bucket)
