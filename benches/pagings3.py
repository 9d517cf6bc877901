"""A small S3 server for W10 (issue 34) that pages listings as S3 does: objects in memory, keys in a sorted
index (sortedcontainers), so a ListObjectsV2 page of 1,000 keys after a start key costs a search and the page,
whatever the bucket holds. The bench servers do not: s3s-fs walks the whole bucket folder for every page (W9b,
10^5 keys: 139 s), and moto filters every key of the bucket for every page; at 10^6 keys either takes hours.

Each object's <Contents> element of a listing page is made once, when it is stored: a page is then a join of 1,000
strings (made per page, strftime and escaping took most of the server's CPU, and the server shares the machine's
cores with zshard). A fixed delay before every response stands in for the link (W10 needs no bandwidth cap: its objects are tiny),
and every request is logged with its kind, as benches/linkproxy logs them. It serves what a zshard conversion
asks of S3 (path-style): GET (with Range), HEAD, PUT (If-None-Match: * refused with 412 when the key exists),
DELETE, the bulk delete (POST ?delete), ListObjectsV2 (prefix, delimiter, start-after, continuation-token,
max-keys). Multipart uploads are refused (501): W10's shards are tiny. Requests are not authenticated.

Usage (in-process): server = PagingS3(delay_s); server.put(bucket, key, data); ...; server.close().
"""
import base64
import hashlib
import http.server
import threading
import time
import xml.etree.ElementTree as ET
from email.utils import formatdate
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

from sortedcontainers import SortedDict

NS = "http://s3.amazonaws.com/doc/2006-03-01/"


class Request:
    """One request as the server saw it (times in seconds since the server started or was reset)."""
    __slots__ = ("method", "path", "kind", "bytes_in", "bytes_out", "status", "start", "end")

    def __init__(self, method, path, kind, bytes_in, bytes_out, status, start, end):
        self.method, self.path, self.kind = method, path, kind
        self.bytes_in, self.bytes_out, self.status, self.start, self.end = bytes_in, bytes_out, status, start, end


class Server(http.server.ThreadingHTTPServer):
    # listen()'s backlog: the default (5) dropped the connections of a burst of concurrent requests,
    # and the client's SYN retries then stalled it for 1, 3, 7 ... s (`nstat`: TcpExtListenOverflows),
    # which no S3 endpoint does. tests/cloud/proxy.py sets the same.
    request_queue_size = 1024


class PagingS3:
    def __init__(self, delay_s=0.0, page=1000):
        self.delay = delay_s
        self.page = page
        self.buckets = {}  # name -> SortedDict key -> (bytes, etag, mtime)
        self.lock = threading.Lock()
        self.log = []
        self.epoch = time.monotonic()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: with Nagle's algorithm on, the body waits for
            # the client's delayed ACK of the headers (about 40 ms on Linux), which no S3 server adds.
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def handle_one(self):
                started = time.monotonic()
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, headers, out, kind = server.serve(self.command, self.path, self.headers, body)
                wait = started + server.delay - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out) if self.command != "HEAD" else headers.get(
                    "x-length", len(out))))
                self.end_headers()
                if self.command != "HEAD" and out:
                    self.wfile.write(out)
                with server.lock:
                    server.log.append(Request(self.command, self.path, kind, len(body), len(out), str(status),
                                              started - server.epoch, time.monotonic() - server.epoch))

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_one

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    # -- direct access (preparing a destination without requests) ---------------------------------------
    def bucket(self, name):
        with self.lock:
            self.buckets.setdefault(name, SortedDict())

    def put(self, bucket, key, data):
        etag = '"' + hashlib.md5(data).hexdigest() + '"'
        with self.lock:
            self.buckets.setdefault(bucket, SortedDict())[key] = stored(key, bytes(data), etag)
        return etag

    def keys(self, bucket, prefix=""):
        objects = self.buckets.get(bucket, SortedDict())
        return [k for k in objects.irange(minimum=prefix) if k.startswith(prefix)] if prefix else list(objects)

    def get(self, bucket, key):
        found = self.buckets.get(bucket, {}).get(key)
        return None if found is None else found[0]

    def remove(self, bucket, prefix):
        with self.lock:
            objects = self.buckets.get(bucket, SortedDict())
            for k in [k for k in objects.irange(minimum=prefix) if k.startswith(prefix)]:
                del objects[k]

    def reset(self):
        with self.lock:
            self.log = []
            self.epoch = time.monotonic()

    @property
    def requests(self):
        with self.lock:
            return list(self.log)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- the S3 API -------------------------------------------------------------------------------------
    def serve(self, method, raw_path, headers, body):
        parts = urlsplit(raw_path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        path = unquote(parts.path).lstrip("/")
        bucket, _, key = path.partition("/")
        if "uploads" in query or "uploadId" in query:
            return 501, {}, error("NotImplemented", "multipart uploads"), "multipart"
        with self.lock:
            objects = self.buckets.get(bucket)
        if objects is None:
            return 404, {}, error("NoSuchBucket", bucket), method
        if method == "GET" and not key:
            return self.list(objects, bucket, query)
        if method == "POST" and "delete" in query:
            return self.delete_many(objects, body)
        if method == "PUT":
            if "x-amz-copy-source" in headers:
                return 501, {}, error("NotImplemented", "copy"), "PUT"
            etag = '"' + hashlib.md5(body).hexdigest() + '"'
            with self.lock:
                if headers.get("If-None-Match") == "*" and key in objects:
                    return 412, {}, error("PreconditionFailed", key), "PUT"
                objects[key] = stored(key, body, etag)
            return 200, {"ETag": etag}, b"", "PUT"
        if method == "DELETE":
            with self.lock:
                objects.pop(key, None)
            return 204, {}, b"", "DELETE"
        if method in ("GET", "HEAD"):
            found = objects.get(key)
            if found is None:
                return 404, {}, error("NoSuchKey", key), method
            data, etag, mtime, _ = found
            meta = {"ETag": etag, "Last-Modified": formatdate(mtime, usegmt=True),
                    "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
            rng = headers.get("Range")
            if rng and rng.startswith("bytes="):
                first, _, last = rng[6:].partition("-")
                if first == "":
                    start, end = max(len(data) - int(last), 0), len(data) - 1
                else:
                    start, end = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
                if start >= len(data):
                    return 416, {}, error("InvalidRange", key), "range GET"
                meta["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                return 206, meta, data[start:end + 1], "range GET"
            if method == "HEAD":
                meta["x-length"] = len(data)
            return 200, meta, data if method == "GET" else b"", method
        return 405, {}, error("MethodNotAllowed", method), method

    def list(self, objects, bucket, query):
        prefix = query.get("prefix", "")
        delimiter = query.get("delimiter", "")
        max_keys = min(int(query.get("max-keys", self.page)), self.page)
        token = query.get("continuation-token")
        after = base64.urlsafe_b64decode(token).decode() if token else query.get("start-after", "")
        contents, prefixes, last, truncated = [], [], None, False
        with self.lock:
            keys = objects.irange(minimum=max(after, prefix) if after else prefix,
                                  inclusive=(not after or prefix > after, True))
            for k in keys:
                if not k.startswith(prefix):
                    break
                if len(contents) + len(prefixes) >= max_keys:
                    truncated = True
                    break
                rest = k[len(prefix):]
                if delimiter and delimiter in rest:
                    common = prefix + rest.split(delimiter, 1)[0] + delimiter
                    if not prefixes or prefixes[-1] != common:
                        prefixes.append(common)
                    last = k
                    continue
                contents.append(objects[k][3])
                last = k
        out = [f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="{NS}"><Name>{escape(bucket)}</Name>'
               f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(contents) + len(prefixes)}</KeyCount>"
               f"<MaxKeys>{max_keys}</MaxKeys><IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"]
        out.extend(contents)
        for p in prefixes:
            out.append(f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>")
        if truncated and last is not None:
            out.append(f"<NextContinuationToken>{base64.urlsafe_b64encode(last.encode()).decode()}"
                       f"</NextContinuationToken>")
        out.append("</ListBucketResult>")
        return 200, {"Content-Type": "application/xml"}, "".join(out).encode(), "LIST"

    def delete_many(self, objects, body):
        root = ET.fromstring(body)
        keys = [el.text or "" for el in root.iter() if el.tag.endswith("Key")]
        with self.lock:
            for k in keys:
                objects.pop(k, None)
        out = "".join(f"<Deleted><Key>{escape(k)}</Key></Deleted>" for k in keys)
        return 200, {"Content-Type": "application/xml"}, (
            f'<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="{NS}">{out}</DeleteResult>').encode(), \
            "DELETE"


def stored(key, data, etag):
    """An object as the server keeps it: bytes, ETag, modification time, and its <Contents> element of a listing
    page, made once here: made for every key of every page, it took most of the server's CPU (10^6 keys)."""
    mtime = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(mtime))
    element = (f"<Contents><Key>{escape(key)}</Key><LastModified>{stamp}</LastModified>"
               f"<ETag>{escape(etag, {chr(34): '&quot;'})}</ETag><Size>{len(data)}</Size>"
               f"<StorageClass>STANDARD</StorageClass></Contents>")
    return data, etag, mtime, element


def error(code, what):
    return (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{escape(str(what))}'
            f"</Message></Error>").encode()
