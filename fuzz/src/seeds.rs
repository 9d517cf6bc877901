//! Seed corpora: real encodings made by the library's encoders (which the golden tests show to
//! match numcodecs bit for bit) behind configuration prefixes found by trying random ones, plus
//! the numcodecs-written arrays of `tests/golden/fixtures` for `v2_metadata`.
//!
//! Run through `cargo test -p zshard-codecs --test fuzz_regressions -- --ignored generate_fuzz_seeds`
//! (writes `fuzz/corpus/<target>/`); `fuzz/make_seeds.py` adds zarr-python v3 documents.

use std::collections::HashMap;
use std::path::Path;

use zshard_codecs::build_chain;
use zshard_core::ChunkRepr;

use crate::codecs::{any_codec, filter_spec, parse_chain};
use crate::input::Input;
use crate::shard::parse_shard;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Chunk contents that compress in different ways: ramps, constant runs, noise, sparse values.
fn sample(rng: &mut Rng, repr: &ChunkRepr) -> Vec<u8> {
    let n = repr.byte_len();
    match rng.next() % 4 {
        0 => (0..n)
            .map(|i| (i / repr.data_type.size().max(1)) as u8)
            .collect(),
        1 => vec![0; n],
        2 => rng.bytes(n),
        _ => (0..n)
            .map(|i| if i % 13 == 0 { rng.next() as u8 } else { 0 })
            .collect(),
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).expect("corpus folder");
    std::fs::write(dir.join(name), bytes).expect("seed file");
}

/// Seeds for a chain target: up to `per` inputs for each distinct list of codec names.
fn chain_seeds(dir: &Path, filters: bool, per: usize, seed: u64) {
    let mut rng = Rng(seed);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut written = 0;
    for _ in 0..200_000 {
        let prefix = rng.bytes(64);
        let mut inp = Input::new(&prefix);
        let (repr, specs) = if filters {
            parse_chain(&mut inp, true, filter_spec)
        } else {
            parse_chain(&mut inp, false, any_codec)
        };
        let used = prefix.len() - inp.rest().len();
        if repr.byte_len() > 1 << 16 {
            continue;
        }
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        let key = names.join(",");
        if seen.get(&key).copied().unwrap_or(0) >= per {
            continue;
        }
        let Ok(chain) = build_chain(&specs, &repr) else {
            continue;
        };
        let data = sample(&mut rng, &repr);
        let Ok(encoded) = chain.encode(data, &repr) else {
            continue;
        };
        if encoded.len() > 8 << 10 || chain.decode(&encoded, &repr).is_err() {
            continue;
        }
        let mut seed = prefix[..used].to_vec();
        seed.extend_from_slice(&encoded);
        write(
            dir,
            &format!("gen-{written:04}-{}", key.replace("numcodecs.", "")),
            &seed,
        );
        for (n, variant) in streamed_variants(&specs, &repr).into_iter().enumerate() {
            let mut seed = prefix[..used].to_vec();
            seed.extend_from_slice(&variant);
            write(dir, &format!("gen-{written:04}-streamed-{n}"), &seed);
        }
        *seen.entry(key).or_default() += 1;
        written += 1;
    }
}

/// For a chain whose last codec is a compressor whose decoders read concatenated streams (zstd,
/// gzip, bz2, xz), the same chunk as two concatenated streams; for zstd also as a frame without
/// content size (as streaming encoders write it), which the decoder must handle without
/// allocating the window the header names.
fn streamed_variants(specs: &[zshard_core::CodecSpec], repr: &ChunkRepr) -> Vec<Vec<u8>> {
    let Some((last, inner_specs)) = specs.split_last() else {
        return Vec::new();
    };
    let concatenates = matches!(
        last.name.as_str(),
        "zstd" | "gzip" | "numcodecs.bz2" | "numcodecs.zlib"
    ) || (last.name == "numcodecs.lzma"
        && last.get("format").and_then(serde_json::Value::as_i64) == Some(1));
    if !concatenates {
        return Vec::new();
    }
    let mut rng = Rng(0x57e4_4ed0);
    let (Ok(inner), Ok(zshard_codecs::Codec::BytesToBytes(codec))) = (
        build_chain(inner_specs, repr),
        zshard_codecs::build_codec(last, repr),
    ) else {
        return Vec::new();
    };
    let Ok(bytes) = inner.encode(sample(&mut rng, repr), repr) else {
        return Vec::new();
    };
    let half = bytes.len() / 2;
    let mut out = Vec::new();
    if last.name != "numcodecs.zlib" {
        if let (Ok(mut a), Ok(b)) = (codec.encode(&bytes[..half]), codec.encode(&bytes[half..])) {
            a.extend(b);
            out.push(a);
        }
    }
    if last.name == "zstd" {
        let mut streamed = Vec::new();
        if let Ok(mut e) = zstd::stream::write::Encoder::new(&mut streamed, 3) {
            let ok = e.include_contentsize(false).is_ok()
                && std::io::Write::write_all(&mut e, &bytes).is_ok()
                && e.finish().is_ok();
            if ok {
                out.push(streamed);
            }
        }
    }
    out
}

fn shard_seeds(dir: &Path, count: usize) {
    let mut rng = Rng(0x5eed_5a4d);
    let mut written = 0;
    for _ in 0..100_000 {
        if written == count {
            break;
        }
        let prefix = rng.bytes(32);
        let mut inp = Input::new(&prefix);
        let case = parse_shard(&mut inp);
        let used = prefix.len() - inp.rest().len();
        let Ok(chain) = build_chain(&case.specs, &case.repr) else {
            continue;
        };
        let data = sample(&mut rng, &case.repr);
        let Ok(encoded) = chain.encode(data, &case.repr) else {
            continue;
        };
        let mut seed = prefix[..used].to_vec();
        seed.extend_from_slice(&encoded);
        write(dir, &format!("gen-{written:04}"), &seed);
        written += 1;
    }
}

/// Every array of `tests/golden/fixtures`: `.zarray`, 0xFF, `.zattrs`, 0xFF, its first chunk.
fn v2_seeds(dir: &Path, fixtures: &Path) {
    let Ok(entries) = std::fs::read_dir(fixtures) else {
        return;
    };
    let mut arrays: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join(".zarray").is_file())
        .collect();
    arrays.sort();
    for array in arrays {
        let read = |name: &str| std::fs::read(array.join(name)).unwrap_or_default();
        let mut chunks: Vec<_> = std::fs::read_dir(&array)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        chunks.sort();
        let mut seed = read(".zarray");
        seed.push(0xff);
        seed.extend(read(".zattrs"));
        seed.push(0xff);
        if let Some(first) = chunks.first() {
            seed.extend(read(first));
        }
        let name = array
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        write(dir, &format!("golden-{name}"), &seed);
    }
}

const KERCHUNK: [&str; 6] = [
    r#"{"version": 1, "templates": {"f": "data.bin"},
  "refs": {".zgroup": {"zarr_format": 2},
           "x/.zarray": {"zarr_format": 2, "shape": [12], "chunks": [4], "dtype": "|u1",
                         "compressor": null, "fill_value": 0, "order": "C", "filters": null},
           "x/0": ["{{f}}", 2, 4], "x/1": "base64:BQYHCA=="}}"#,
    r#"{".zgroup": "{\"zarr_format\": 2}",
 "a/.zarray": "{\"zarr_format\": 2, \"shape\": [2, 2], \"chunks\": [1, 2], \"dtype\": \"<i2\", \"compressor\": null, \"fill_value\": null, \"order\": \"C\", \"filters\": null}",
 "a/.zattrs": "{\"_ARRAY_DIMENSIONS\": [\"y\", \"x\"]}",
 "a/0.0": "base64:AQACAA==", "a/1.0": "\u0003\u0000\u0004\u0000"}"#,
    r#"{"version": 1,
 "refs": {".zgroup": {"zarr_format": 2},
   "t/.zarray": {"zarr_format": 2, "shape": [8], "chunks": [4], "dtype": "<f4", "compressor": {"id": "zlib", "level": 1},
                 "fill_value": "NaN", "order": "C", "filters": null},
   "t/0": "base64:eJxjYGBgYGBgYGBgAAAMIAAB", "t/1": "base64:eJxjYGBgYGBgYGBgAAAMIAAB"},
 "gen": [{"key": "g/{{i}}", "url": "part{{i}}.bin", "offset": "{{i * 10}}", "length": "10",
          "dimensions": {"i": {"start": 0, "stop": 3, "step": 1}}}]}"#,
    r#"{"version": 1,
 "refs": {"zarr.json": {"zarr_format": 3, "node_type": "group", "attributes": {}},
   "v/zarr.json": {"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8",
     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
     "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
     "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {}}]},
   "v/c/0": "base64:AQIDBA==",},
}"#,
    r#"{"version": 1, "templates": {"u": "sub/file_{{n}}.nc"},
 "refs": {".zgroup": {"zarr_format": 2},
   "z/.zarray": {"zarr_format": 2, "shape": [3, 5], "chunks": [2, 2], "dtype": ">u4", "compressor": null,
                 "fill_value": 7, "order": "F", "filters": [{"id": "delta", "dtype": ">u4"}], "dimension_separator": "/"},
   "z/0/0": ["{{u}}"], "z/0/1": ["../x.nc", 0, 16], "z/1/2": "base64:AAAAAQAAAAIAAAADAAAABA=="}}"#,
    r#"{"version": 1, "refs": {".zgroup": {"zarr_format": 2},
   "s/.zarray": {"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "|S4", "compressor": null,
                 "fill_value": "AAAAAA==", "order": "C", "filters": null},
   "s/0": "abcdefgh", "bad/.zarray": {"zarr_format": 2, "shape": [NaN]}, "x": Infinity}}"#,
];

/// Writes every seed corpus under `corpus` (the repository's `fuzz/corpus`).
pub fn generate(corpus: &Path, fixtures: &Path) {
    chain_seeds(&corpus.join("codec_decode"), false, 4, 0xc0de_c0de);
    chain_seeds(&corpus.join("filter_decode"), true, 4, 0xf117_e125);
    shard_seeds(&corpus.join("shard_index"), 120);
    v2_seeds(&corpus.join("v2_metadata"), fixtures);
    for (i, doc) in KERCHUNK.iter().enumerate() {
        write(
            &corpus.join("kerchunk_json"),
            &format!("seed-{i}.json"),
            doc.as_bytes(),
        );
    }
}
