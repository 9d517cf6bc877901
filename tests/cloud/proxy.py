"""The reverse proxy in front of the S3 servers of the cloud tests and the cloud benches (benches/cloud.py):
it injects faults (503 slow-downs, connections dropped mid-body, delayed multipart parts), adds a fixed
delay to the first byte of every response and a bandwidth cap (a link with latency), serves local files
over HTTP with ranges (kerchunk targets), and logs every request.

Imported by conftest.py (tests) and benches/cloud.py, so there is one proxy. Standard library only.
"""
import http.client
import os
import re
import random
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

# Bodies are sent and received in slices of this size, so that the bandwidth cap paces them smoothly.
SLICE = 64 * 1024


class Server(ThreadingHTTPServer):
    # listen()'s backlog: the default (5) drops the connections of a burst of concurrent requests, and
    # the client's SYN retries then stall it for seconds (1, 2, 4, ... s).
    request_queue_size = 1024
    daemon_threads = True


class Pacer:
    """A link of `rate` bytes per second shared by every connection in one direction: each slice takes
    its turn on the link (None: no cap)."""

    def __init__(self, rate):
        self.rate = rate
        self.lock = threading.Lock()
        self.free_at = 0.0

    def take(self, n):
        if not self.rate or n <= 0:
            return
        with self.lock:
            start = max(time.monotonic(), self.free_at)
            self.free_at = start + n / self.rate
            until = self.free_at
        delay = until - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, timeout=30):
    """Returns once something accepts connections on 127.0.0.1:`port`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


@dataclass
class Request:
    """One request as the proxy saw it (times in seconds since the proxy started)."""
    method: str
    path: str
    kind: str
    bytes_in: int  # request body
    bytes_out: int  # response body
    status: str
    start: float  # the request's headers arrived
    end: float  # the response's last byte was sent
    detail: str = ""  # the keys of a bulk delete (its path names only the bucket)
    # The response's first byte was about to be sent. A client can only send a request that waits for this
    # response after it: unlike `end` (noted after the last byte, by a thread that a loaded machine may hold
    # back while the client already sent its next request), it orders requests without slack.
    replied: float = 0.0


def kind_of(method, path, headers):
    """What an S3/HTTP request is, for the request log: GET, range GET, PUT, multipart (create, part,
    complete, abort), LIST, HEAD, DELETE, POST."""
    query = parse_qs(urlsplit(path).query, keep_blank_values=True)
    if method == "GET":
        if "list-type" in query or "prefix" in query or "delimiter" in query:
            return "LIST"
        return "range GET" if headers.get("Range") else "GET"
    if "uploads" in query or "uploadId" in query:
        return "multipart"
    if method == "POST" and "delete" in query:
        return "DELETE"
    return method


class FaultProxy:
    """A reverse proxy to `upstream_port` on 127.0.0.1 that fails, drops or delays a fraction of requests.

    latency: seconds between a request's arrival (its body received) and the first byte of its response.
    bandwidth: bytes per second in each direction, shared by every connection (None: no cap).
    files: {"/prefix/": directory}: GET and HEAD of paths under a prefix are served from the directory
    (with byte ranges), not by the upstream.
    """

    def __init__(self, upstream_port, fail_rate=0.0, drop_rate=0.0, delay_parts=0.0, seed=7, latency=0.0,
                 bandwidth=None, files=None):
        self.upstream_port = upstream_port
        self.fail_rate, self.drop_rate, self.delay_parts = fail_rate, drop_rate, delay_parts
        self.latency = latency
        self.down_link, self.up_link = Pacer(bandwidth), Pacer(bandwidth)
        self.files = dict(files or {})
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.log = []  # (method, path, request bytes, outcome)
        self.requests = []  # Request, in the order they completed
        self.epoch = time.monotonic()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                # Headers and body go out in separate writes: without TCP_NODELAY the body waits for
                # the client's delayed ACK of the headers (40 ms on Linux), a delay nobody asked for.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args):
                pass

            def read_body(self):
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().strip().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return bytes(out)
                        proxy.up_link.take(size)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                out = bytearray()
                while len(out) < length:
                    n = min(SLICE, length - len(out))
                    proxy.up_link.take(n)
                    piece = self.rfile.read(n)
                    if not piece:
                        break
                    out += piece
                return bytes(out)

            def reply(self, status, headers, data, started, arrived, body_in, drop=False, detail=""):
                kind = kind_of(self.command, self.path, self.headers)
                wait = arrived + proxy.latency - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                replied = time.monotonic() - proxy.epoch
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                sent = data[: len(data) // 2] if drop else data
                if self.command != "HEAD":
                    view = memoryview(sent)
                    for i in range(0, len(view), SLICE):
                        proxy.down_link.take(min(SLICE, len(view) - i))
                        self.wfile.write(view[i:i + SLICE])
                self.wfile.flush()
                proxy.requests_append(Request(self.command, self.path, kind, body_in,
                                              0 if self.command == "HEAD" else len(sent),
                                              "dropped" if drop else str(status),
                                              started - proxy.epoch, time.monotonic() - proxy.epoch, detail,
                                              replied))

            def serve_file(self, directory, rel, started):
                path = os.path.realpath(os.path.join(directory, rel))
                if not path.startswith(os.path.realpath(directory) + os.sep) or not os.path.isfile(path):
                    self.reply(404, [("Content-Length", "0")], b"", started, time.monotonic(), 0)
                    return
                size = os.path.getsize(path)
                first, last, status = 0, size - 1, 200
                wanted = self.headers.get("Range", "")
                if wanted.startswith("bytes="):
                    a, _, b = wanted[6:].split(",")[0].strip().partition("-")
                    if a:
                        first, last = int(a), min(int(b), size - 1) if b else size - 1
                    else:
                        first, last = max(0, size - int(b)), size - 1
                    status = 206
                    if first > last:
                        self.reply(416, [("Content-Range", f"bytes */{size}"), ("Content-Length", "0")], b"",
                                   started, time.monotonic(), 0)
                        return
                data = b""
                if self.command == "GET":
                    with open(path, "rb") as fh:
                        fh.seek(first)
                        data = fh.read(last - first + 1)
                headers = [("Content-Length", str(last - first + 1)), ("Accept-Ranges", "bytes"),
                           ("Content-Type", "application/octet-stream"),
                           ("Last-Modified", self.date_time_string(int(os.path.getmtime(path))))]
                if status == 206:
                    headers.append(("Content-Range", f"bytes {first}-{last}/{size}"))
                proxy.record(self.command, self.path, 0, str(status))
                self.reply(status, headers, data, started, time.monotonic(), 0)

            def handle_any(self):
                started = time.monotonic()
                if proxy.down:
                    proxy.record(self.command, self.path, 0, "down")
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                for prefix, directory in proxy.files.items():
                    if self.command in ("GET", "HEAD") and self.path.startswith(prefix):
                        self.serve_file(directory, urlsplit(self.path).path[len(prefix):], started)
                        return
                body = self.read_body()
                arrived = time.monotonic()
                with proxy.lock:
                    roll = proxy.random.random()
                if roll < proxy.fail_rate:
                    proxy.record(self.command, self.path, len(body), "503")
                    xml = b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>"
                    self.reply(503, [("Content-Type", "application/xml"), ("Content-Length", str(len(xml)))],
                               xml, started, arrived, len(body))
                    return
                if proxy.delay_parts and "partNumber=" in self.path:
                    # Recorded on arrival, so that a test can act while the part is still held back
                    # (other requests are recorded when the upstream has answered).
                    proxy.record(self.command, self.path, len(body), "delayed")
                    time.sleep(proxy.delay_parts)
                # The body's length replaces the client's header whatever its case: two Content-Length
                # headers are a bad request to Azurite (Node's HTTP parser).
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("transfer-encoding", "connection", "content-length")}
                headers["Content-Length"] = str(len(body))
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                upstream.connect()
                upstream.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                data = response.read()
                upstream.close()
                # Only successful answers lose their body: a client must read those to the end (and retry
                # when it cannot), while a 404's body adds nothing to its status.
                drop = roll < proxy.fail_rate + proxy.drop_rate and len(data) > 16 and 200 <= response.status < 300
                proxy.record(self.command, self.path, len(body), "dropped" if drop else str(response.status))
                out_headers = [(k, v) for k, v in response.getheaders()
                               if k.lower() not in ("transfer-encoding", "connection", "content-length", "date",
                                                    "server")]
                # A HEAD answer states the object's length, which the body does not carry.
                length = response.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
                out_headers.append(("Content-Length", length or "0"))
                detail = " ".join(re.findall(r"<Key>(.*?)</Key>", body.decode("utf-8", "replace"))) \
                    if kind_of(self.command, self.path, self.headers) == "DELETE" else ""
                self.reply(response.status, out_headers, data, started, arrived, len(body), drop=drop, detail=detail)
                if drop:
                    # Half the body went out; now the connection goes away.
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any

        self.handler = Handler
        self.down = False
        self.port = 0
        self.serve()

    def serve(self):
        self.server = Server(("127.0.0.1", self.port), self.handler)
        # Clients that hang up (a killed zshard, a dropped body) are part of these tests, not errors.
        self.server.handle_error = lambda request, address: None
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take_down(self):
        """An outage: new connections are refused, requests on open ones are cut off unanswered."""
        self.down = True
        self.server.shutdown()
        self.server.server_close()

    def bring_up(self):
        self.serve()
        self.down = False

    def outage(self, seconds):
        """Takes the endpoint down now and brings it back after `seconds` (in the background)."""
        self.take_down()
        timer = threading.Timer(seconds, self.bring_up)
        timer.daemon = True
        timer.start()
        return timer

    def record(self, method, path, size, outcome):
        with self.lock:
            self.log.append((method, path, size, outcome))

    def requests_append(self, request):
        with self.lock:
            self.requests.append(request)

    def reset(self):
        """Forgets the requests logged so far (between the runs of a bench)."""
        with self.lock:
            self.log.clear()
            self.requests.clear()
            self.epoch = time.monotonic()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def close(self):
        if not self.down:
            self.server.shutdown()
            self.server.server_close()
