//! The network policy of kerchunk targets at connection time, through the binary, against tiny
//! HTTP servers on 127.0.0.1: a host name that resolves to loopback is refused unless an allowed
//! prefix names it, and redirects are followed only to URLs the policy allows. Every server counts
//! the requests it received, so a refusal is shown to have sent nothing.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{loopback_alias, read_v3, zshard};
use serde_json::json;

/// What a server answers for a path.
#[derive(Clone)]
enum Answer {
    /// The bytes, whole or the requested range (206).
    Body(Vec<u8>),
    /// 302 to this URL.
    Redirect(String),
    /// As `Body` to a GET, with this ETag; 405 to a HEAD (a server that does not allow HEAD).
    NoHead(Vec<u8>, &'static str),
    /// 500 to every request.
    Failing,
    /// 405 to a HEAD, 500 to a GET.
    NoHeadFailing,
}

/// A server on 127.0.0.1 answering `GET` by the routes it is given later; counts requests.
struct Server {
    port: u16,
    requests: Arc<AtomicUsize>,
    routes: Arc<std::sync::Mutex<Vec<(String, Answer)>>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let requests = Arc::new(AtomicUsize::new(0));
        let routes: Arc<std::sync::Mutex<Vec<(String, Answer)>>> = Arc::default();
        let (count, table) = (requests.clone(), routes.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let table = table.lock().expect("routes").clone();
                std::thread::spawn(move || answer(stream, &table));
            }
        });
        Server {
            port,
            requests,
            routes,
        }
    }

    fn route(&self, path: &str, answer: Answer) {
        let mut routes = self.routes.lock().expect("routes");
        routes.retain(|(p, _)| p != path);
        routes.push((path.to_string(), answer));
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Answers one request on `stream` and closes it.
fn answer(mut stream: std::net::TcpStream, routes: &[(String, Answer)]) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let head = line.starts_with("HEAD ");
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut range = None;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
            break;
        }
        let lower = header.to_ascii_lowercase();
        if let Some(spec) = lower.strip_prefix("range: bytes=") {
            let (a, b) = spec.trim().split_once('-').expect("range");
            range = Some((
                a.parse::<usize>().expect("start"),
                b.parse::<usize>().expect("end"),
            ));
        }
    }
    let response = match routes.iter().find(|(p, _)| *p == path).map(|(_, a)| a) {
        Some(Answer::NoHeadFailing) if head => {
            b"HTTP/1.1 405 Method Not Allowed\r\nAllow: GET\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                .to_vec()
        }
        Some(Answer::Failing | Answer::NoHeadFailing) => {
            b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                .to_vec()
        }
        Some(Answer::NoHead(..)) if head => {
            b"HTTP/1.1 405 Method Not Allowed\r\nAllow: GET\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                .to_vec()
        }
        Some(Answer::Body(body) | Answer::NoHead(body, _)) => match range {
            Some((a, b)) => {
                let b = b.min(body.len() - 1);
                let etag = match routes.iter().find(|(p, _)| *p == path).map(|(_, a)| a) {
                    Some(Answer::NoHead(_, etag)) => format!("ETag: \"{etag}\"\r\n"),
                    _ => String::new(),
                };
                let mut head = format!(
                    "HTTP/1.1 206 Partial Content\r\n{etag}Content-Range: bytes {a}-{b}/{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len(),
                    b + 1 - a
                )
                .into_bytes();
                head.extend_from_slice(&body[a..=b]);
                head
            }
            None => {
                let mut head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                head.extend_from_slice(body);
                head
            }
        },
        Some(Answer::Redirect(to)) => format!(
            "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .into_bytes(),
        None => {
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
        }
    };
    let _ = stream.write_all(&response);
}

/// Four `u16` values, the chunk of array `x`.
const DATA: [u8; 8] = [1, 0, 2, 0, 3, 0, 4, 0];

/// A reference set in `dir` whose one chunk `x/0` is the 8 bytes at `url`.
fn refs(dir: &Path, url: &str) -> std::path::PathBuf {
    let doc = json!({"version": 1, "refs": {
        "x/.zarray": {"zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "<u2",
                      "compressor": null, "fill_value": 0, "order": "C", "filters": null},
        "x/0": [url, 0, 8]}});
    let path = dir.join("refs.json");
    std::fs::write(&path, doc.to_string()).expect("write");
    path
}

fn convert(src: &Path, dst: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "convert",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
        "--quiet",
        // A refusal is not retried; a short timeout keeps a regression from hanging the test.
        "--retry-timeout",
        "5",
    ];
    args.extend_from_slice(extra);
    zshard(&args)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

#[test]
fn host_names_resolving_to_loopback_need_an_allowed_prefix() {
    let server = Server::start();
    server.route("/data.bin", Answer::Body(DATA.to_vec()));
    let port = server.port;
    let tmp = tempfile::tempdir().expect("tempdir");

    // A name from the hosts file: the text says nothing, the resolved address does.
    let alias = loopback_alias();
    let url = format!("http://{alias}:{port}/data.bin");
    let src = refs(tmp.path(), &url);
    let out = convert(&src, &tmp.path().join("a.zarr"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e = stderr(&out);
    assert_eq!(e.lines().count(), 1, "{e}");
    for part in [
        url.as_str(),
        &format!("the connection to {alias} is refused"),
        "127.0.0.1 is a loopback address",
        &format!("--allow-ref-prefix names the host {alias}"),
    ] {
        assert!(e.contains(part), "{part:?} in {e}");
    }
    assert_eq!(server.requests(), 0, "nothing reached the server");
    assert!(!tmp.path().join("a.zarr/x/c").exists());

    // `localhost` is refused by its name; named by an allowed prefix, it is read.
    let url = format!("http://localhost:{port}/data.bin");
    let src = refs(tmp.path(), &url);
    let out = convert(&src, &tmp.path().join("b.zarr"), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("it is a loopback address"),
        "{}",
        stderr(&out)
    );
    let prefix = format!("http://localhost:{port}/");
    let out = convert(
        &src,
        &tmp.path().join("b.zarr"),
        &["--allow-ref-prefix", &prefix],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read_v3(&tmp.path().join("b.zarr/x")).0, DATA);

    // The alias, allowed by a prefix that names it, is read too.
    let url = format!("http://{alias}:{port}/data.bin");
    let src = refs(tmp.path(), &url);
    let prefix = format!("http://{alias}:{port}/");
    let out = convert(
        &src,
        &tmp.path().join("c.zarr"),
        &["--allow-ref-prefix", &prefix],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read_v3(&tmp.path().join("c.zarr/x")).0, DATA);
}

#[test]
fn redirects_are_followed_only_within_the_allowed_prefixes() {
    let (allowed, other) = (Server::start(), Server::start());
    let base = format!("http://127.0.0.1:{}", allowed.port);
    let elsewhere = format!("http://127.0.0.1:{}/data.bin", other.port);
    other.route("/data.bin", Answer::Body(DATA.to_vec()));
    allowed.route("/away.bin", Answer::Redirect(elsewhere.clone()));
    allowed.route("/moved.bin", Answer::Redirect(format!("{base}/data.bin")));
    allowed.route("/data.bin", Answer::Body(DATA.to_vec()));
    let prefix = format!("{base}/");
    let tmp = tempfile::tempdir().expect("tempdir");

    // To another port of the same host: not within the allowed prefix.
    let src = refs(tmp.path(), &format!("{base}/away.bin"));
    let out = convert(
        &src,
        &tmp.path().join("a.zarr"),
        &["--allow-ref-prefix", &prefix],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e = stderr(&out);
    assert_eq!(e.lines().count(), 1, "{e}");
    let redirect = format!("the redirect from {base}/away.bin to {elsewhere} is refused");
    assert!(e.contains(&redirect), "{redirect:?} in {e}");
    assert!(e.contains("it is a loopback address"), "{e}");
    // The target's version (a HEAD, see `ChunkReader::chunk_versions`) and the read: each refused
    // once, not retried.
    assert_eq!(allowed.requests(), 2, "one request each, not retried");
    assert_eq!(other.requests(), 0, "the redirect was not followed");
    assert!(!tmp.path().join("a.zarr/x/c").exists());

    // Within the prefix: followed.
    let src = refs(tmp.path(), &format!("{base}/moved.bin"));
    let out = convert(
        &src,
        &tmp.path().join("b.zarr"),
        &["--allow-ref-prefix", &prefix],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read_v3(&tmp.path().join("b.zarr/x")).0, DATA);
    // The version's HEAD and the read, each as the redirect and the data.
    assert_eq!(allowed.requests(), 6, "the redirect and the data, twice");
}

#[test]
fn a_remote_zip_that_does_not_exist_is_named_as_missing() {
    // The server answers 404 to everything: no zip file, and no Zarr metadata in a folder of that
    // name (which a `.zip` location that is no object is read as).
    let server = Server::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let url = format!("http://127.0.0.1:{}/data/missing.zip", server.port);
    let dst = tmp.path().join("out.zarr");
    let out = zshard(&[
        "convert",
        &url,
        dst.to_str().expect("utf-8"),
        "--quiet",
        "--retry-timeout",
        "5",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e = stderr(&out);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains(&format!(
            "{url} does not exist: no zip file of that name, nor a Zarr hierarchy in a folder of that name"
        )),
        "{e}"
    );
    assert!(server.requests() > 0);
    assert!(!dst.exists());
}

/// Issue 40: a target file whose version (its HEAD) cannot be read, after the retries, fails the
/// update naming its URL, instead of rewriting every shard that reads from it (and recording them
/// without a version, to be rewritten again the next night). A target that answers again brings
/// back the run with nothing to do.
#[test]
fn a_target_whose_version_cannot_be_read_fails_the_update_naming_it() {
    let server = Server::start();
    let base = format!("http://127.0.0.1:{}", server.port);
    server.route("/data.bin", Answer::Body(DATA.to_vec()));
    let prefix = format!("{base}/");
    let allow = ["--allow-ref-prefix", prefix.as_str(), "--retries", "1"];
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = refs(tmp.path(), &format!("{base}/data.bin"));
    let dst = tmp.path().join("out.zarr");
    let out = convert(&src, &dst, &allow);
    assert!(out.status.success(), "{}", stderr(&out));
    let shard = dst.join("x/c/0");
    let written = std::fs::metadata(&shard)
        .expect("shard")
        .modified()
        .expect("mtime");

    server.route("/data.bin", Answer::Failing);
    let out = convert(&src, &dst, &allow);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains(&format!("cannot read the version of {base}/data.bin")),
        "{e}"
    );
    let now = std::fs::metadata(&shard)
        .expect("shard")
        .modified()
        .expect("mtime");
    assert_eq!(now, written, "the shard is not rewritten");

    server.route("/data.bin", Answer::Body(DATA.to_vec()));
    let out = convert(&src, &dst, &allow);
    assert!(out.status.success(), "{}", stderr(&out));
    let now = std::fs::metadata(&shard)
        .expect("shard")
        .modified()
        .expect("mtime");
    assert_eq!(now, written, "nothing changed: the shard is not rewritten");
    assert_eq!(read_v3(&dst.join("x")).0, DATA);
}

/// Issue 40: a server that does not allow HEAD (405) still gives each target's version, from the
/// answer to a GET of its first byte: a rerun with nothing changed rewrites nothing, and a new
/// ETag rewrites the shards reading from that file.
#[test]
fn a_target_whose_server_refuses_head_is_versioned_by_a_get() {
    let server = Server::start();
    let base = format!("http://127.0.0.1:{}", server.port);
    server.route("/data.bin", Answer::NoHead(DATA.to_vec(), "v1"));
    let prefix = format!("{base}/");
    let allow = ["--allow-ref-prefix", prefix.as_str(), "--retries", "1"];
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = refs(tmp.path(), &format!("{base}/data.bin"));
    let dst = tmp.path().join("out.zarr");
    let out = convert(&src, &dst, &allow);
    assert!(out.status.success(), "{}", stderr(&out));
    let shard = dst.join("x/c/0");
    let mtime = |path: &Path| {
        std::fs::metadata(path)
            .expect("shard")
            .modified()
            .expect("mtime")
    };
    let written = mtime(&shard);

    let out = convert(&src, &dst, &allow);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mtime(&shard), written, "nothing changed: not rewritten");

    let changed: Vec<u8> = DATA.iter().map(|b| b.wrapping_mul(3)).collect();
    server.route("/data.bin", Answer::NoHead(changed.clone(), "v2"));
    let out = convert(&src, &dst, &allow);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_ne!(mtime(&shard), written, "a new ETag: rewritten");
    assert_eq!(read_v3(&dst.join("x")).0, changed);

    // HEAD refused (which object_store takes for "not found") and the GET failing: no version to
    // compare, so the update fails naming the file rather than take it for missing (unchanged).
    let rewritten = mtime(&shard);
    server.route("/data.bin", Answer::NoHeadFailing);
    let out = convert(&src, &dst, &allow);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("cannot read the version of {base}/data.bin")),
        "{}",
        stderr(&out)
    );
    assert_eq!(mtime(&shard), rewritten);
}
