//! Issue 15, remaining gap 4: kerchunk targets reached through an HTTP proxy are checked by the
//! addresses the *target's* host name resolves to (the client itself only connects to the proxy),
//! against a tiny forwarding proxy and a tiny server on 127.0.0.1.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{loopback_alias, read_v3};
use serde_json::json;

/// Four `u16` values, the chunk of array `x`.
const DATA: [u8; 8] = [1, 0, 2, 0, 3, 0, 4, 0];

/// Reads a request's head (request line and headers) from `reader`.
fn read_head(reader: &mut impl BufRead) -> Option<(String, Vec<String>)> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 || header.trim().is_empty() {
            break;
        }
        headers.push(header.trim_end().to_string());
    }
    Some((line.trim_end().to_string(), headers))
}

/// Starts a thread answering every connection of `listener` with `serve`; counts connections.
fn serve(listener: TcpListener, serve: fn(TcpStream)) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counter.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || serve(stream));
        }
    });
    count
}

/// The data server: [`DATA`] (or the requested range of it) for any path.
fn data(mut stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let Some((_, headers)) = read_head(&mut reader) else {
        return;
    };
    let range = headers.iter().find_map(|h| {
        let spec = h.to_ascii_lowercase();
        let (a, b) = spec.strip_prefix("range: bytes=")?.split_once('-')?;
        Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?))
    });
    let (a, b) = range.unwrap_or((0, DATA.len() - 1));
    let b = b.min(DATA.len() - 1);
    let mut response = format!(
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {a}-{b}/{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        DATA.len(),
        b + 1 - a
    )
    .into_bytes();
    response.extend_from_slice(&DATA[a..=b]);
    let _ = stream.write_all(&response);
}

/// The proxy: forwards `GET http://host:port/path` to host:port as `GET /path`, and the answer back.
fn proxy(mut client: TcpStream) {
    let mut reader = BufReader::new(client.try_clone().expect("clone"));
    let Some((line, headers)) = read_head(&mut reader) else {
        return;
    };
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return;
    };
    let Some(rest) = target.strip_prefix("http://") else {
        let _ = client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let Ok(mut upstream) = TcpStream::connect(authority) else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    for header in headers {
        if !header.to_ascii_lowercase().starts_with("proxy-") {
            head.push_str(&header);
            head.push_str("\r\n");
        }
    }
    head.push_str("\r\n");
    let _ = upstream.write_all(head.as_bytes());
    let mut answer = Vec::new();
    let _ = upstream.read_to_end(&mut answer);
    let _ = client.write_all(&answer);
}

/// `zshard convert` of a reference set whose one chunk is at `url`, with HTTP_PROXY=`proxy`.
fn convert_through(proxy: &str, url: &str, dir: &Path, dst: &str, extra: &[&str]) -> Output {
    let doc = json!({"version": 1, "refs": {
        "x/.zarray": {"zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "<u2",
                      "compressor": null, "fill_value": 0, "order": "C", "filters": null},
        "x/0": [url, 0, 8]}});
    let src = dir.join("refs.json");
    std::fs::write(&src, doc.to_string()).expect("write");
    let mut command = Command::new(env!("CARGO_BIN_EXE_zshard"));
    command
        .args(["convert", src.to_str().expect("utf-8")])
        .arg(dir.join(dst))
        .args(["--quiet", "--retry-timeout", "5"])
        .args(extra);
    for name in [
        "NO_PROXY",
        "no_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        command.env_remove(name);
    }
    command
        .env("HTTP_PROXY", proxy)
        .env("http_proxy", proxy)
        .output()
        .expect("run zshard")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

#[test]
fn through_a_proxy_the_targets_resolved_addresses_are_checked() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = serve(listener, data);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let proxy_url = format!(
        "http://127.0.0.1:{}",
        listener.local_addr().expect("addr").port()
    );
    let proxied = serve(listener, proxy);
    let tmp = tempfile::tempdir().expect("tempdir");
    let alias = loopback_alias();
    let url = format!("http://{alias}:{port}/data.bin");

    let out = convert_through(&proxy_url, &url, tmp.path(), "a.zarr", &[]);
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{e}");
    for part in [
        url.as_str(),
        &format!("the connection to {alias} is refused"),
        "is a loopback address",
    ] {
        assert!(e.contains(part), "{part:?} in {e}");
    }
    assert_eq!(
        proxied.load(Ordering::SeqCst),
        0,
        "nothing reached the proxy"
    );
    assert_eq!(
        server.load(Ordering::SeqCst),
        0,
        "nothing reached the server"
    );

    let prefix = format!("http://{alias}:{port}/");
    let out = convert_through(
        &proxy_url,
        &url,
        tmp.path(),
        "b.zarr",
        &["--allow-ref-prefix", &prefix],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read_v3(&tmp.path().join("b.zarr/x")).0, DATA);
    assert!(
        proxied.load(Ordering::SeqCst) >= 1,
        "it went through the proxy"
    );
}
