//! `linkproxy`: the link of the cloud benches (`benches/cloud.py`, issue 21). A reverse proxy on
//! 127.0.0.1 in front of an S3 server that holds the first byte of every response for a fixed delay,
//! caps the bandwidth in each direction, serves local files with ranges (kerchunk targets) and logs
//! every request.
//!
//! It does what the Python proxy of the cloud tests (`tests/cloud/proxy.py`) does for the benches, at a
//! fraction of its CPU: on a 2-core machine that proxy took 2.5 to 3 s of CPU during a 4 s W7 run, so the
//! bench measured the proxy as much as the tools. The tests keep the Python proxy, which also injects
//! faults.
//!
//! ```text
//! linkproxy --upstream-port 9000 [--bandwidth BYTES_PER_SECOND]
//! ```
//!
//! It prints `listening PORT` once it accepts connections. Control requests, never delayed or logged:
//! - `POST /__linkproxy/latency` with the delay in seconds as the body;
//! - `POST /__linkproxy/reset`: forgets the log, times start again from 0;
//! - `GET /__linkproxy/log`: one request a line, tab-separated: start, end (seconds), method, kind,
//!   bytes in, bytes out, status, path;
//! - `POST /__linkproxy/files` with `PREFIX<TAB>DIR`: GET and HEAD under PREFIX are served from DIR.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::{Bytes, BytesMut};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_LENGTH};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};

/// Bodies are paced in slices of this size, so that the cap spreads evenly over concurrent requests.
const SLICE: usize = 64 * 1024;
const CONTROL: &str = "/__linkproxy/";

type Body = BoxBody<Bytes, Infallible>;

fn main() -> anyhow::Result<()> {
    let options = Options::parse(std::env::args().skip(1))?;
    // One thread: the proxy's work per request is small, and a bench must leave the cores to the tools.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(serve(options))
}

#[derive(Debug)]
struct Options {
    upstream_port: u16,
    /// Bytes per second in each direction, shared by every connection.
    bandwidth: Option<f64>,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> anyhow::Result<Options> {
        let mut upstream_port = None;
        let mut bandwidth = None;
        while let Some(flag) = args.next() {
            let value = args
                .next()
                .with_context(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--upstream-port" => upstream_port = Some(value.parse().context("--upstream-port")?),
                "--bandwidth" => bandwidth = Some(value.parse().context("--bandwidth")?),
                _ => bail!("unknown flag {flag} (usage: linkproxy --upstream-port PORT [--bandwidth BYTES_PER_SECOND])"),
            }
        }
        Ok(Options {
            upstream_port: upstream_port.context("--upstream-port is required")?,
            bandwidth: bandwidth.filter(|b: &f64| *b > 0.0),
        })
    }
}

async fn serve(options: Options) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    println!("listening {}", listener.local_addr()?.port());
    let link = Arc::new(Link::new(&options));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, or a connection reset before it was taken: the link stays up.
                eprintln!("linkproxy: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        // Headers and body go out in separate writes: without this the body would wait for the
        // client's delayed ACK (40 ms on Linux). A connection already reset fails later on its own.
        let _ = stream.set_nodelay(true);
        let link = Arc::clone(&link);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let link = Arc::clone(&link);
                async move { Ok::<_, Infallible>(link.handle(req).await) }
            });
            // A client that hangs up mid-request is part of a run, not an error of the proxy.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// One request as logged.
#[derive(Debug, Clone)]
struct Entry {
    start: f64,
    end: f64,
    method: String,
    kind: &'static str,
    bytes_in: usize,
    bytes_out: usize,
    /// The answer's status; `aborted` when the client hung up before the body's end, `cancelled`
    /// when it hung up before the answer.
    status: String,
    path: String,
}

#[derive(Debug)]
struct Shared {
    epoch: Instant,
    latency: Duration,
    log: Vec<Entry>,
    files: Vec<(String, PathBuf)>,
}

/// The link: its settings, its two directions and its log.
#[derive(Debug)]
struct Link {
    upstream_port: u16,
    client: Client<HttpConnector, Full<Bytes>>,
    up: Pacer,
    down: Pacer,
    shared: Mutex<Shared>,
}

impl Link {
    fn new(options: &Options) -> Link {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Link {
            upstream_port: options.upstream_port,
            // Kept-alive connections to the server: a new one per request would cost the server CPU
            // that the tools measured beside it need.
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(1024)
                .build(connector),
            up: Pacer::new(options.bandwidth),
            down: Pacer::new(options.bandwidth),
            shared: Mutex::new(Shared {
                epoch: Instant::now(),
                latency: Duration::ZERO,
                log: Vec::new(),
                files: Vec::new(),
            }),
        }
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn seconds(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.shared().epoch)
            .as_secs_f64()
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let started = Instant::now();
        let path = req
            .uri()
            .path_and_query()
            .map_or_else(|| req.uri().path().to_string(), |p| p.as_str().to_string());
        if let Some(command) = path.strip_prefix(CONTROL) {
            let command = command.to_string();
            return self.control(&command, req).await;
        }
        let method = req.method().clone();
        let kind = kind_of(&method, &path, req.headers().contains_key("range"));
        // Logged even when the client hangs up before the answer (hyper then drops this future).
        let mut unanswered = Unanswered {
            link: Arc::clone(&self),
            entry: Some(Entry {
                start: self.seconds(started),
                end: 0.0,
                method: method.to_string(),
                kind,
                bytes_in: 0,
                bytes_out: 0,
                status: "cancelled".to_string(),
                path: path.clone(),
            }),
        };
        let served = if method == Method::GET || method == Method::HEAD {
            self.file_for(&path)
        } else {
            None
        };
        // The delay counts from the request's arrival (its body received), as the Python proxy counts
        // it: the server's own time is part of the delay, not added to it.
        let mut arrived = Instant::now();
        let answer = match served {
            Some(file) => {
                let range = req
                    .headers()
                    .get("range")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                let head = method == Method::HEAD;
                // File reads block: off the one thread that runs every connection's timers.
                tokio::task::spawn_blocking(move || match resolve(&file.0, &file.1) {
                    Some(file) => serve_file(&file, range.as_deref(), head),
                    None => Answer::empty(StatusCode::NOT_FOUND),
                })
                .await
                .unwrap_or_else(|_| Answer::empty(StatusCode::INTERNAL_SERVER_ERROR))
            }
            None => match self
                .forward(req, &path, &mut arrived, &mut unanswered)
                .await
            {
                Ok(answer) => answer,
                Err(e) => {
                    eprintln!("linkproxy: {method} {path}: {e:#}");
                    Answer::empty(StatusCode::BAD_GATEWAY)
                }
            },
        };
        let latency = self.shared().latency;
        if let Some(due) = arrived.checked_add(latency) {
            wait_until(due).await;
        }
        let Answer {
            status,
            headers,
            data,
        } = answer;
        let mut response = Response::builder().status(status);
        let length = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.clone());
        for (name, value) in headers
            .into_iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case("content-length"))
        {
            response = response.header(name, value);
        }
        // A HEAD answer states the object's length, which its (empty) body does not carry.
        let length = if method == Method::HEAD {
            length.unwrap_or_else(|| HeaderValue::from_static("0"))
        } else {
            HeaderValue::from(data.len())
        };
        response = response.header(CONTENT_LENGTH, length);
        let entry = unanswered.entry.take().map(|mut entry| {
            entry.status = status.as_u16().to_string();
            entry
        });
        let data = if method == Method::HEAD {
            Bytes::new()
        } else {
            data
        };
        let body = Sending {
            link: Arc::clone(&self),
            data,
            offset: 0,
            entry,
        }
        .into_body();
        response
            .body(body)
            .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "bad response headers"))
    }

    /// Sends `req` on to the server (its body paced on the up-link; `arrived` set and the body's size
    /// entered in `unanswered`'s log entry once it is all in), and returns the server's answer.
    async fn forward(
        &self,
        req: Request<Incoming>,
        path: &str,
        arrived: &mut Instant,
        unanswered: &mut Unanswered,
    ) -> anyhow::Result<Answer> {
        let (parts, mut incoming) = req.into_parts();
        let mut body = BytesMut::new();
        while let Some(frame) = incoming.frame().await {
            if let Ok(data) = frame?.into_data() {
                for piece in data.chunks(SLICE) {
                    self.up.take(piece.len()).await;
                }
                body.extend_from_slice(&data);
            }
        }
        let bytes_in = body.len();
        *arrived = Instant::now();
        if let Some(entry) = unanswered.entry.as_mut() {
            entry.bytes_in = bytes_in;
        }
        let mut upstream = Request::builder()
            .method(parts.method)
            .uri(format!("http://127.0.0.1:{}{path}", self.upstream_port));
        for (name, value) in &parts.headers {
            if !matches!(
                name.as_str(),
                "transfer-encoding" | "connection" | "content-length"
            ) {
                upstream = upstream.header(name, value);
            }
        }
        let upstream = upstream
            .header(CONTENT_LENGTH, bytes_in)
            .body(Full::new(body.freeze()))?;
        let response = self.client.request(upstream).await?;
        let status = response.status();
        let headers = response
            .headers()
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "transfer-encoding" | "connection" | "date" | "server"
                )
            })
            .map(|(k, v)| (k.as_str().to_string(), v.clone()))
            .collect();
        let data = response.into_body().collect().await?.to_bytes();
        Ok(Answer {
            status,
            headers,
            data,
        })
    }

    /// For a path under a served folder: the folder and the path inside it.
    fn file_for(&self, path: &str) -> Option<(PathBuf, String)> {
        let path = path.split('?').next().unwrap_or(path);
        let shared = self.shared();
        shared.files.iter().find_map(|(prefix, dir)| {
            let rel = path.strip_prefix(prefix.as_str())?;
            Some((dir.clone(), rel.to_string()))
        })
    }

    async fn control(&self, command: &str, req: Request<Incoming>) -> Response<Body> {
        let body = match req.into_body().collect().await {
            Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
            Err(_) => return plain(StatusCode::BAD_REQUEST, "unreadable body"),
        };
        let mut shared = self.shared();
        match command {
            "latency" => match body.trim().parse::<f64>() {
                Ok(s) if (0.0..=3600.0).contains(&s) => shared.latency = Duration::from_secs_f64(s),
                _ => return plain(StatusCode::BAD_REQUEST, "latency: seconds expected"),
            },
            "reset" => {
                shared.log.clear();
                shared.epoch = Instant::now();
            }
            "files" => match body.split_once('\t') {
                Some((prefix, dir)) => {
                    shared.files.retain(|(p, _)| p != prefix);
                    shared
                        .files
                        .push((prefix.to_string(), PathBuf::from(dir.trim_end())));
                }
                None => return plain(StatusCode::BAD_REQUEST, "files: PREFIX<TAB>DIR expected"),
            },
            "log" => {
                let text: String = shared.log.iter().map(log_line).collect();
                return plain(StatusCode::OK, &text);
            }
            _ => return plain(StatusCode::NOT_FOUND, "unknown control request"),
        }
        plain(StatusCode::OK, "")
    }

    fn record(&self, mut entry: Entry) {
        let mut shared = self.shared();
        entry.end = Instant::now()
            .saturating_duration_since(shared.epoch)
            .as_secs_f64();
        shared.log.push(entry);
    }
}

fn log_line(e: &Entry) -> String {
    format!(
        "{:.4}\t{:.4}\t{}\t{}\t{}\t{}\t{}\t{}\n",
        e.start, e.end, e.method, e.kind, e.bytes_in, e.bytes_out, e.status, e.path
    )
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_string())).boxed());
    *response.status_mut() = status;
    response
}

/// What an S3/HTTP request is, for the log (as `tests/cloud/proxy.py` names them).
fn kind_of(method: &Method, path: &str, ranged: bool) -> &'static str {
    let query = path.split_once('?').map_or("", |(_, q)| q);
    let has = |key: &str| {
        query
            .split('&')
            .any(|pair| pair.split('=').next() == Some(key))
    };
    match *method {
        Method::GET if has("list-type") || has("prefix") || has("delimiter") => "LIST",
        Method::GET if ranged => "range GET",
        Method::GET => "GET",
        _ if has("uploads") || has("uploadId") => "multipart",
        Method::POST if has("delete") => "DELETE",
        Method::PUT => "PUT",
        Method::POST => "POST",
        Method::HEAD => "HEAD",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    }
}

/// The file at `rel` inside `dir`, unless it is missing or outside `dir`.
fn resolve(dir: &Path, rel: &str) -> Option<PathBuf> {
    let full = dir.join(rel).canonicalize().ok()?;
    let root = dir.canonicalize().ok()?;
    (full.starts_with(root) && full.is_file()).then_some(full)
}

/// An answer to send back: from the server, a local file, or the proxy itself.
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: Vec<(String, HeaderValue)>,
    data: Bytes,
}

impl Answer {
    fn empty(status: StatusCode) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            data: Bytes::new(),
        }
    }
}

/// A local file, whole or the one range asked for (`bytes=A-B`, `bytes=A-`, `bytes=-N`).
fn serve_file(path: &Path, range: Option<&str>, head: bool) -> Answer {
    let Ok(size) = std::fs::metadata(path).map(|m| m.len()) else {
        return Answer::empty(StatusCode::NOT_FOUND);
    };
    let mut headers = vec![
        (
            "accept-ranges".to_string(),
            HeaderValue::from_static("bytes"),
        ),
        (
            "content-type".to_string(),
            HeaderValue::from_static("application/octet-stream"),
        ),
    ];
    let (first, last, status) = match range.and_then(|r| r.strip_prefix("bytes=")) {
        None => (0, size.saturating_sub(1), StatusCode::OK),
        Some(spec) => {
            let spec = spec.split(',').next().unwrap_or("").trim();
            let (a, b) = spec.split_once('-').unwrap_or((spec, ""));
            let parsed = if a.is_empty() {
                b.parse::<u64>()
                    .ok()
                    .map(|n| (size.saturating_sub(n), size.saturating_sub(1)))
            } else {
                a.parse::<u64>().ok().map(|first| {
                    let last = b
                        .parse::<u64>()
                        .map_or(size.saturating_sub(1), |l| l.min(size.saturating_sub(1)));
                    (first, last)
                })
            };
            match parsed {
                Some((first, last)) if first <= last && first < size => {
                    (first, last, StatusCode::PARTIAL_CONTENT)
                }
                _ => {
                    headers.push((
                        "content-range".to_string(),
                        HeaderValue::from_str(&format!("bytes */{size}"))
                            .unwrap_or(HeaderValue::from_static("bytes */0")),
                    ));
                    return Answer {
                        status: StatusCode::RANGE_NOT_SATISFIABLE,
                        headers,
                        data: Bytes::new(),
                    };
                }
            }
        }
    };
    let length = if size == 0 { 0 } else { last - first + 1 };
    if status == StatusCode::PARTIAL_CONTENT {
        if let Ok(v) = HeaderValue::from_str(&format!("bytes {first}-{last}/{size}")) {
            headers.push(("content-range".to_string(), v));
        }
    }
    headers.push(("content-length".to_string(), HeaderValue::from(length)));
    if head {
        return Answer {
            status,
            headers,
            data: Bytes::new(),
        };
    }
    match read_range(path, first, length) {
        Ok(data) => Answer {
            status,
            headers,
            data,
        },
        Err(_) => Answer::empty(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

fn read_range(path: &Path, first: u64, length: u64) -> std::io::Result<Bytes> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(first))?;
    let mut data = Vec::with_capacity(usize::try_from(length).unwrap_or(0));
    file.take(length).read_to_end(&mut data)?;
    Ok(data.into())
}

/// A request not answered yet: logged as `cancelled` if its handler is dropped before the answer.
#[derive(Debug)]
struct Unanswered {
    link: Arc<Link>,
    entry: Option<Entry>,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            self.link.record(entry);
        }
    }
}

/// A response body on its way out, paced on the down-link; logged when it ends or is dropped.
#[derive(Debug)]
struct Sending {
    link: Arc<Link>,
    data: Bytes,
    offset: usize,
    entry: Option<Entry>,
}

impl Sending {
    fn into_body(self) -> Body {
        let stream = futures::stream::unfold(self, |mut sending| async move {
            let left = sending.data.len() - sending.offset;
            if left == 0 {
                return None;
            }
            let n = left.min(SLICE);
            sending.link.down.take(n).await;
            let piece = sending.data.slice(sending.offset..sending.offset + n);
            sending.offset += n;
            Some((Ok(Frame::data(piece)), sending))
        });
        StreamBody::new(stream).boxed()
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        if let Some(mut entry) = self.entry.take() {
            entry.bytes_out = self.offset;
            if self.offset < self.data.len() {
                entry.status = "aborted".to_string();
            }
            self.link.record(entry);
        }
    }
}

/// How far the pacing may lag the clock: tokio's timer wakes on whole milliseconds.
const SLACK: Duration = Duration::from_millis(2);

/// Waits until `due`, to within a fraction of a millisecond (tokio's timer alone rounds up to the
/// next millisecond, 5 % of a 20 ms delay): the timer for all but the last 2 ms, then a sleeping
/// thread for the rest. Nothing when `due` has passed.
async fn wait_until(due: Instant) {
    if let Some(coarse) = due.checked_sub(SLACK) {
        if coarse > Instant::now() {
            tokio::time::sleep_until(coarse.into()).await;
        }
    }
    if due > Instant::now() {
        let _ = tokio::task::spawn_blocking(move || {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        })
        .await;
    }
}

/// One direction of the link: slices take turns at `rate` bytes per second.
#[derive(Debug)]
struct Pacer {
    rate: Option<f64>,
    free_at: Mutex<Instant>,
}

impl Pacer {
    fn new(rate: Option<f64>) -> Pacer {
        Pacer {
            rate,
            free_at: Mutex::new(Instant::now()),
        }
    }

    async fn take(&self, n: usize) {
        let Some(rate) = self.rate else { return };
        let until = {
            let mut free_at = self.free_at.lock().unwrap_or_else(|p| p.into_inner());
            // The link's schedule may lag the clock by up to SLACK (a timer that woke late), so that
            // one connection alone still gets the whole rate: the average stays at the cap and a burst
            // is at most SLACK's worth of bytes.
            let now = Instant::now();
            let start = (*free_at).max(now.checked_sub(SLACK).unwrap_or(now));
            *free_at = start + Duration::from_secs_f64(n as f64 / rate);
            *free_at
        };
        if until > Instant::now() {
            tokio::time::sleep_until(until.into()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_named_as_the_python_proxy_names_them() {
        assert_eq!(
            kind_of(&Method::GET, "/b?list-type=2&prefix=a", false),
            "LIST"
        );
        assert_eq!(kind_of(&Method::GET, "/b/k", true), "range GET");
        assert_eq!(
            kind_of(&Method::PUT, "/b/k?partNumber=1&uploadId=x", false),
            "multipart"
        );
        assert_eq!(kind_of(&Method::POST, "/b?delete", false), "DELETE");
        assert_eq!(kind_of(&Method::PUT, "/b/k", false), "PUT");
    }

    #[test]
    fn ranges_are_served_as_asked() {
        let dir = std::env::temp_dir().join(format!("linkproxy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("f");
        std::fs::write(&file, b"0123456789").expect("write");
        let Answer { status, data, .. } = serve_file(&file, Some("bytes=2-4"), false);
        assert_eq!(
            (status, &data[..]),
            (StatusCode::PARTIAL_CONTENT, &b"234"[..])
        );
        let data = serve_file(&file, Some("bytes=-3"), false).data;
        assert_eq!(&data[..], b"789");
        let data = serve_file(&file, Some("bytes=8-"), false).data;
        assert_eq!(&data[..], b"89");
        let status = serve_file(&file, Some("bytes=20-30"), false).status;
        assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE);
        let Answer { status, data, .. } = serve_file(&file, None, false);
        assert_eq!((status, data.len()), (StatusCode::OK, 10));
        std::fs::remove_dir_all(&dir).ok();
    }
}
