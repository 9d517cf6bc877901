//! Helpers for the end-to-end tests: write Zarr v2 sources with zshard's codecs, run the binary, and
//! read sharded output back through zshard's own shard decoder.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use zshard_codecs::build_chain;
use zshard_core::{c_order, copy_region, grid_shape, product, DataType, NodeKind, Region};
use zshard_zarr::{parse_v2_array, parse_v3_node};

/// A deterministic value for element `i` (C-order position), little-endian.
pub fn element(dtype: DataType, i: u64) -> Vec<u8> {
    match dtype {
        DataType::UInt8 => vec![(i.wrapping_mul(7) + 3) as u8],
        DataType::Int16 => ((i as i64 * 37 - 5000) as i16).to_le_bytes().to_vec(),
        DataType::UInt16 => ((i.wrapping_mul(13)) as u16).to_le_bytes().to_vec(),
        DataType::Float32 => ((i as f32) * 0.25 - 100.0).to_le_bytes().to_vec(),
        DataType::Float64 => ((i as f64).sin() * 1e3).to_le_bytes().to_vec(),
        other => panic!("no test values for {other}"),
    }
}

/// The expected array: values everywhere except the first `zeros` elements, which hold 0 (the fill).
pub fn expected(dtype: DataType, shape: &[u64], zeros: u64) -> Vec<u8> {
    (0..product(shape))
        .flat_map(|i| {
            if i < zeros {
                vec![0; dtype.size()]
            } else {
                element(dtype, i)
            }
        })
        .collect()
}

/// Writes a Zarr v2 array at `dir` holding `data` (little-endian C order), skipping chunks that only
/// hold zeros (the fill value), so they are missing in the source.
pub fn write_v2(
    dir: &Path,
    dtype: DataType,
    shape: &[u64],
    chunks: &[u64],
    compressor: Value,
    data: &[u8],
) {
    std::fs::create_dir_all(dir).expect("create source dir");
    update_v2(dir, dtype, shape, chunks, compressor, data);
}

/// Writes the Zarr v2 array at `dir` (as [`write_v2`] made it) anew as a producer updating it in place
/// does: only the chunks whose bytes change are written (so the others keep their file, inode and
/// modification time), chunks that now hold only zeros are removed, and `.zarray` is written with
/// `shape`. Returns the keys of the chunks written or removed.
pub fn update_v2(
    dir: &Path,
    dtype: DataType,
    shape: &[u64],
    chunks: &[u64],
    compressor: Value,
    data: &[u8],
) -> Vec<String> {
    let zarray = json!({"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": dtype.v2_typestr(),
        "compressor": compressor, "fill_value": 0, "order": "C", "filters": null});
    let text = serde_json::to_vec(&zarray).expect("json");
    if std::fs::read(dir.join(".zarray")).ok().as_deref() != Some(&text[..]) {
        std::fs::write(dir.join(".zarray"), &text).expect("write .zarray");
    }
    let meta = parse_v2_array("test", &text, None).expect("valid .zarray");
    let repr = meta.chunk_repr();
    let chain = build_chain(&meta.codecs, &repr).expect("codecs");
    let origin = vec![0; shape.len()];
    let mut changed = Vec::new();
    for coord in c_order(&grid_shape(shape, chunks)) {
        let region = Region::of_chunk(&coord, chunks, shape);
        let mut raw = vec![0u8; repr.byte_len()];
        copy_region(
            data,
            shape,
            &origin,
            &mut raw,
            chunks,
            &region.start,
            &region,
            dtype.size(),
        );
        let key = meta.chunk_key_encoding.key(&coord);
        let path = dir.join(&key);
        if raw.iter().all(|&b| b == 0) {
            if path.exists() {
                std::fs::remove_file(&path).expect("remove chunk");
                changed.push(key);
            }
            continue;
        }
        let encoded = chain.encode(raw, &repr).expect("encode");
        if std::fs::read(&path).ok().as_deref() != Some(&encoded[..]) {
            std::fs::write(&path, encoded).expect("write chunk");
            changed.push(key);
        }
    }
    changed
}

/// The binary under test: `ZSHARD_BIN` when set (an older build, to show a test fails there, or a
/// copy made right after building, which other builds into a shared target folder cannot replace
/// mid-test), else the one cargo built.
pub fn binary() -> PathBuf {
    std::env::var_os("ZSHARD_BIN")
        .map_or_else(|| env!("CARGO_BIN_EXE_zshard").into(), PathBuf::from)
}

/// Runs the zshard binary (see [`binary`]).
pub fn zshard(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .output()
        .expect("run zshard")
}

/// A 64 x 64 uint16 Zarr v2 array in 16 x 16 zstd chunks at `dir/name`.
pub fn small_source(dir: &Path, name: &str) -> PathBuf {
    let src = dir.join(name);
    let data = expected(DataType::UInt16, &[64, 64], 0);
    write_v2(
        &src,
        DataType::UInt16,
        &[64, 64],
        &[16, 16],
        json!({"id": "zstd", "level": 3}),
        &data,
    );
    src
}

/// A name of this machine's hosts file that resolves to a loopback address and that the text rules
/// do not already refuse (`localhost` is refused by its name): `/etc/hosts` lists the machine's
/// own name (Debian's `127.0.1.1 host`, containers' `127.0.0.1 host`) or `ip6-localhost`.
pub fn loopback_alias() -> String {
    let hosts = std::fs::read_to_string("/etc/hosts").expect("/etc/hosts");
    hosts
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let ip: std::net::IpAddr = words.next()?.parse().ok()?;
            ip.is_loopback()
                .then(|| words.map(str::to_string).collect::<Vec<_>>())
        })
        .flatten()
        .find(|name| {
            let lower = name.to_ascii_lowercase();
            lower != "localhost" && !lower.ends_with(".localhost") && !lower.contains('.')
        })
        .expect("a loopback name other than localhost in /etc/hosts")
}

/// Reads a sharded (or any) v3 array at `dir` back into little-endian C-order bytes, decoding every
/// shard with zshard's `sharding_indexed` decoder. Returns the data and the parsed metadata document.
pub fn read_v3(dir: &Path) -> (Vec<u8>, Value) {
    let doc = std::fs::read(dir.join("zarr.json")).expect("zarr.json exists");
    let json: Value = serde_json::from_slice(&doc).expect("json");
    let NodeKind::Array(meta) = parse_v3_node("out", &doc).expect("valid zarr.json").kind else {
        panic!("expected an array")
    };
    let repr = meta.chunk_repr();
    let chain = build_chain(&meta.codecs, &repr).expect("output codecs");
    let size = meta.data_type.size();
    let mut out = meta.fill_value.repeat(product(&meta.shape) as usize);
    let origin = vec![0; meta.shape.len()];
    for coord in c_order(&grid_shape(&meta.shape, &meta.chunk_shape)) {
        let Ok(bytes) = std::fs::read(dir.join(meta.chunk_key_encoding.key(&coord))) else {
            continue;
        };
        let decoded = chain.decode(&bytes, &repr).expect("shard decodes");
        let region = Region::of_chunk(&coord, &meta.chunk_shape, &meta.shape);
        copy_region(
            &decoded,
            &meta.chunk_shape,
            &region.start,
            &mut out,
            &meta.shape,
            &origin,
            &region,
            size,
        );
    }
    (out, json)
}

pub fn shape_arg(shape: &[u64]) -> String {
    shape
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Every file below `dir` (relative path -> bytes), leaving out zshard's own state folder and the
/// records a finished conversion keeps in each array's folder (`.zshard-records`: they name the
/// versions of the objects, which differ from run to run).
pub fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p
                .strip_prefix(root)
                .expect("below root")
                .to_string_lossy()
                .into_owned();
            if e.file_name().to_string_lossy().starts_with(".zshard") {
                continue;
            }
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(rel, std::fs::read(&p).expect("read"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// A 96x80 uint16 Zarr v2 array at `dir/src` in 8x8 zstd chunks, the first 2000 elements equal to the
/// fill value: with [`SHARDS_OF_16`], 30 shards of which the first few hold only the fill value.
pub fn banded_source(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("src");
    let data = expected(DataType::UInt16, &[96, 80], 2000);
    write_v2(
        &src,
        DataType::UInt16,
        &[96, 80],
        &[8, 8],
        json!({"id": "zstd", "level": 1}),
        &data,
    );
    src
}

/// The layout the tests of [`banded_source`] convert into: 16x16 shards of 8x8 inner chunks.
pub const SHARDS_OF_16: [&str; 4] = ["--shard-shape", "16,16", "--chunk-shape", "8,8"];

/// A bare S3 endpoint on 127.0.0.1 (path style) holding no object: a listing of bucket `bucket` is
/// empty, a read of it is 404 NoSuchKey, and every request to any other bucket is 404 NoSuchBucket.
/// Enough for a `plan` to check a destination there. Returns the endpoint URL.
pub fn empty_s3() -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut request = String::new();
                if reader.read_line(&mut request).is_err() {
                    return;
                }
                let mut length = 0usize;
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':') {
                        if name.eq_ignore_ascii_case("content-length") {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                }
                let mut body = vec![0u8; length];
                let _ = std::io::Read::read_exact(&mut reader, &mut body);
                let target = request.split_whitespace().nth(1).unwrap_or("/");
                let bucket = target
                    .trim_start_matches('/')
                    .split(['/', '?'])
                    .next()
                    .unwrap_or("");
                let (status, body) = if bucket != "bucket" {
                    ("404 Not Found", "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>")
                } else if target.contains("list-type=2") {
                    ("200 OK", "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>bucket</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>")
                } else {
                    ("404 Not Found", "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>")
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}
