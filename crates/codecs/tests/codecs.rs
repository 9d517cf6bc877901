//! The codec chain through the public API: every compressor and the numcodecs codecs round-trip,
//! byte order and Fortran order are honoured, and wrong sizes, garbage, corrupt input, lying size
//! headers and invalid configurations are errors rather than panics or huge allocations.

use serde_json::json;
use zshard_codecs::{build_chain, Error};
use zshard_core::{
    ChunkRepr, CodecSpec, DataType, FillValue, IndexEncoding, IndexLocation, ShardReader,
};

fn repr(shape: &[u64], dtype: DataType) -> ChunkRepr {
    ChunkRepr {
        shape: shape.to_vec(),
        data_type: dtype,
        fill_value: FillValue::zero(dtype),
    }
}

fn spec(v: serde_json::Value) -> Vec<CodecSpec> {
    serde_json::from_value(v).expect("codec list")
}

fn sample(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7) % 251) as u8 ^ ((i / 97) as u8))
        .collect()
}

#[test]
fn every_compressor_round_trips() {
    let r = repr(&[16, 33], DataType::UInt16);
    let data = sample(r.byte_len());
    let mut chains = vec![
        json!([{"name": "bytes", "configuration": {"endian": "little"}}]),
        json!([{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "zstd", "configuration": {"level": 3, "checksum": true}}]),
        json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 5}}]),
        json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "numcodecs.zlib", "configuration": {"level": 1}}]),
        json!([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes", "configuration": {"endian": "little"}}, "crc32c"]),
    ];
    for cname in ["blosclz", "lz4", "lz4hc", "zlib", "zstd"] {
        for shuffle in ["noshuffle", "shuffle", "bitshuffle"] {
            chains.push(json!([{"name": "bytes", "configuration": {"endian": "little"}},
                {"name": "blosc", "configuration": {"cname": cname, "clevel": 5, "shuffle": shuffle, "typesize": 2, "blocksize": 0}}]));
        }
    }
    for c in chains {
        let chain = build_chain(&spec(c.clone()), &r).expect("chain builds");
        let encoded = chain.encode(data.clone(), &r).expect("encodes");
        assert_eq!(chain.decode(&encoded, &r).expect("decodes"), data, "{c}");
        assert_eq!(
            serde_json::to_value(chain.specs()).expect("json")[0]["name"],
            c[0]["name"]
        );
    }
}

#[test]
fn big_endian_bytes_are_swapped() {
    let r = repr(&[2], DataType::UInt16);
    let chain = build_chain(
        &spec(json!([{"name": "bytes", "configuration": {"endian": "big"}}])),
        &r,
    )
    .expect("chain");
    assert_eq!(
        chain.decode(&[0x01, 0x02, 0x03, 0x04], &r).expect("decode"),
        vec![0x02, 0x01, 0x04, 0x03]
    );
}

/// The `bytes` codec on the registry's ML types as tensorstore writes them: 2-byte types (bfloat16 and
/// the halves of complex_bfloat16) swap for `big`, 1-byte floats take no `endian` and move as they are.
#[test]
fn bytes_codec_on_ml_types() {
    let dtype = |name: &str| DataType::from_v3_name(name).expect("registered data type");
    let big = spec(json!([{"name": "bytes", "configuration": {"endian": "big"}}]));
    let little = spec(json!([{"name": "bytes", "configuration": {"endian": "little"}}]));
    let plain = spec(json!([{"name": "bytes"}]));
    // bfloat16 [1.0, 2.0] big-endian on disk: 3f80 4000.
    let r = repr(&[2], dtype("bfloat16"));
    let chain = build_chain(&big, &r).expect("chain");
    let decoded = chain.decode(&[0x3f, 0x80, 0x40, 0x00], &r).expect("decode");
    assert_eq!(decoded, vec![0x80, 0x3f, 0x00, 0x40]);
    assert_eq!(
        chain.encode(decoded, &r).expect("encode"),
        vec![0x3f, 0x80, 0x40, 0x00]
    );
    assert!(build_chain(&plain, &r).is_err(), "bfloat16 needs an endian");
    let r = repr(&[1], dtype("complex_bfloat16"));
    let chain = build_chain(&big, &r).expect("chain");
    assert_eq!(
        chain.decode(&[1, 2, 3, 4], &r).expect("decode"),
        vec![2, 1, 4, 3]
    );
    for name in [
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e8m0fnu",
        "complex_float8_e4m3fn",
    ] {
        let r = repr(&[4], dtype(name));
        let data = sample(r.byte_len());
        for chain in [&plain, &big, &little] {
            let chain = build_chain(chain, &r).expect("chain");
            let encoded = chain.encode(data.clone(), &r).expect("encode");
            assert_eq!(encoded, data, "{name}");
            assert_eq!(chain.decode(&encoded, &r).expect("decode"), data, "{name}");
        }
    }
}

/// The zarr-extensions `packbits` codec, on vectors built from its spec: values in lexicographic order,
/// bit `i` of the sequence is bit `i % 8` of byte `i / 8` (least significant first), `padding_encoding`
/// a byte before or after, `first_bit`/`last_bit` keep a range of each component, signed integers
/// sign-extended when decoded. Sub-byte types decode into the low bits of a byte, as `bytes` stores them.
#[test]
fn packbits_codec_from_the_spec() {
    let dtype = |name: &str| DataType::from_v3_name(name).expect("registered data type");
    let check = |name: &str, config: serde_json::Value, decoded: &[u8], encoded: &[u8]| {
        let r = repr(
            &[decoded.len() as u64 / dtype(name).size() as u64],
            dtype(name),
        );
        let chain = build_chain(
            &spec(json!([{"name": "packbits", "configuration": config}])),
            &r,
        )
        .expect("chain");
        assert_eq!(
            chain.encode(decoded.to_vec(), &r).expect("encode"),
            encoded,
            "{name} {config}"
        );
        assert_eq!(
            chain.decode(encoded, &r).expect("decode"),
            decoded,
            "{name} {config}"
        );
    };
    // int4 [-1, 2, -8, 7, 3]: nibbles f 2 8 7 3, the first in the low half of byte 0.
    let int4 = [0x0f, 0x02, 0x08, 0x07, 0x03];
    check("int4", json!({}), &int4, &[0x2f, 0x78, 0x03]);
    check(
        "int4",
        json!({"padding_encoding": "first_byte"}),
        &int4,
        &[0x04, 0x2f, 0x78, 0x03],
    );
    check(
        "int4",
        json!({"padding_encoding": "last_byte"}),
        &int4,
        &[0x2f, 0x78, 0x03, 0x04],
    );
    check(
        "uint2",
        json!({}),
        &[3, 0, 1, 2, 3],
        &[0b1001_0011, 0b0000_0011],
    );
    check(
        "bool",
        json!({"padding_encoding": "first_byte"}),
        &[1, 0, 1, 1, 0, 0, 0, 0, 1],
        &[7, 0x0d, 0x01],
    );
    check(
        "float6_e2m3fn",
        json!({}),
        &[0x3f, 0x01, 0x20, 0x15],
        &[0x7f, 0x00, 0x56],
    );
    check(
        "complex_float4_e2m1fn",
        json!({}),
        &[0x01, 0x0f, 0x03, 0x04],
        &[0xf1, 0x43],
    );
    // Whole-byte types are their little-endian bytes.
    check(
        "uint16",
        json!({}),
        &[0x34, 0x12, 0xcd, 0xab],
        &[0x34, 0x12, 0xcd, 0xab],
    );
    // first_bit/last_bit: bits 4..=11 of each uint16, zero-extended back.
    check(
        "uint16",
        json!({"first_bit": 4, "last_bit": 11}),
        &[0x30, 0x02, 0xc0, 0x0b],
        &[0x23, 0xbc],
    );
    // Signed: the top kept bit is the sign. int16 -2 with bits 0..=3 is 0xe, decoded as -2 again.
    check(
        "int16",
        json!({"first_bit": 0, "last_bit": 3}),
        &[0xfe, 0xff, 0x03, 0x00],
        &[0x3e],
    );
    // Sign extension stops at the type's width: int4 -1 decodes to 0x0f, not 0xff.
    let r = repr(&[2], dtype("int4"));
    let chain = build_chain(&spec(json!([{"name": "packbits"}])), &r).expect("chain");
    assert_eq!(chain.decode(&[0x8f], &r).expect("decode"), vec![0x0f, 0x08]);
    assert!(
        chain.decode(&[0x8f, 0x00], &r).is_err(),
        "one byte too many"
    );
    let first = build_chain(
        &spec(json!([{"name": "packbits", "configuration": {"padding_encoding": "first_byte"}}])),
        &r,
    )
    .expect("chain");
    assert!(
        first.decode(&[0x01, 0x8f], &r).is_err(),
        "wrong padding count"
    );
    for bad in [
        json!({"padding_encoding": "middle"}),
        json!({"first_bit": 2, "last_bit": 1}),
        json!({"last_bit": 4}),
    ] {
        assert!(
            build_chain(
                &spec(json!([{"name": "packbits", "configuration": bad}])),
                &r
            )
            .is_err(),
            "{bad}"
        );
    }
    let strings = repr(&[2], DataType::String);
    assert!(build_chain(&spec(json!([{"name": "packbits"}])), &strings).is_err());
}

#[test]
fn transpose_reads_fortran_order() {
    // numpy: np.arange(6, dtype=u1).reshape(2,3) stored in F order is [0,3,1,4,2,5].
    let r = repr(&[2, 3], DataType::UInt8);
    let chain = build_chain(
        &spec(
            json!([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes"}]),
        ),
        &r,
    )
    .expect("chain");
    assert_eq!(
        chain.decode(&[0, 3, 1, 4, 2, 5], &r).expect("decode"),
        vec![0, 1, 2, 3, 4, 5]
    );
}

#[test]
fn wrong_sizes_and_garbage_are_errors() {
    let r = repr(&[64], DataType::UInt32);
    let big = repr(&[1024], DataType::UInt32);
    for c in [
        json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]),
        json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4}}]),
        json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}]),
        json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "numcodecs.zlib", "configuration": {"level": 1}}]),
    ] {
        let specs = spec(c.clone());
        // A chunk encoding 16x more data than expected is refused, not allocated.
        let encoded = build_chain(&specs, &big)
            .expect("chain")
            .encode(sample(big.byte_len()), &big)
            .expect("encode");
        assert!(
            build_chain(&specs, &r)
                .expect("chain")
                .decode(&encoded, &r)
                .is_err(),
            "{c}"
        );
        // Garbage is an error, never a panic.
        assert!(
            build_chain(&specs, &r)
                .expect("chain")
                .decode(&sample(100), &r)
                .is_err(),
            "{c}"
        );
        assert!(
            build_chain(&specs, &r)
                .expect("chain")
                .decode(&[], &r)
                .is_err(),
            "{c}"
        );
    }
}

#[test]
fn crc32c_mismatch_is_detected() {
    let r = repr(&[8], DataType::UInt8);
    let chain =
        build_chain(&spec(json!([{"name": "bytes"}, {"name": "crc32c"}])), &r).expect("chain");
    let mut encoded = chain.encode(sample(8), &r).expect("encode");
    encoded[3] ^= 0x10;
    assert!(chain.decode(&encoded, &r).is_err());
}

#[test]
fn sharding_codec_round_trips_with_empty_inner_chunks() {
    let r = ChunkRepr {
        shape: vec![8, 6],
        data_type: DataType::Int16,
        fill_value: FillValue::from_v3_json(&json!(-1), DataType::Int16).expect("fill"),
    };
    let mut data = r.fill_value.repeat(48);
    data[0] = 5; // only the first inner chunk differs from the fill value
    for location in ["start", "end"] {
        let specs = spec(json!([{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [4, 3],
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": location}}]));
        let chain = build_chain(&specs, &r).expect("chain");
        let shard = chain.encode(data.clone(), &r).expect("encode");
        assert_eq!(chain.decode(&shard, &r).expect("decode"), data);
        // 3 of 4 inner chunks are empty: the index marks exactly those with 2^64-1.
        let loc = IndexLocation::parse(location).expect("location");
        let reader =
            ShardReader::new(&shard, 4, loc, IndexEncoding::default()).expect("valid shard");
        let empty: Vec<bool> = reader
            .index()
            .entries()
            .iter()
            .map(Option::is_none)
            .collect();
        assert_eq!(empty, vec![false, true, true, true]);
    }
}

#[test]
fn unknown_codec_lists_supported() {
    let r = repr(&[8], DataType::UInt8);
    let err =
        build_chain(&spec(json!([{"name": "bytes"}, {"name": "lzma"}])), &r).expect_err("unknown");
    assert!(matches!(err, Error::UnknownCodec { .. }));
    assert!(err.to_string().contains("zstd"));
    assert!(build_chain(&spec(json!([{"name": "zstd"}])), &r).is_err());
}

/// The numcodecs compressors and filters (v2 `compressor` and `filters`, v3 `numcodecs.*`), as
/// chains over `repr`'s elements.
fn numcodecs_chains() -> Vec<serde_json::Value> {
    let le = json!({"name": "bytes", "configuration": {"endian": "little"}});
    let mut chains = Vec::new();
    for tail in [
        json!([{"name": "numcodecs.bz2", "configuration": {"level": 1}}]),
        json!([{"name": "numcodecs.lzma", "configuration": {"format": 1, "check": -1, "preset": 1, "filters": null}}]),
        json!([{"name": "numcodecs.lzma", "configuration": {"format": 1, "check": 10, "preset": 0}}]),
        json!([{"name": "numcodecs.lzma", "configuration": {"format": 2, "preset": 1}}]),
        json!([{"name": "numcodecs.lzma", "configuration": {"format": 3, "filters": [{"id": 3, "dist": 4}, {"id": 33, "preset": 1}]}}]),
        json!([{"name": "numcodecs.lz4", "configuration": {"acceleration": 1}}]),
        json!([{"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}}]),
        json!([{"name": "numcodecs.delta", "configuration": {"dtype": "<u4", "astype": "<u4"}}]),
        json!([{"name": "numcodecs.delta", "configuration": {"dtype": "<u4", "astype": "<i8"}}]),
        json!([{"name": "numcodecs.fixedscaleoffset", "configuration": {"offset": 0, "scale": 1, "dtype": "<u4", "astype": "<f8"}}]),
        json!([{"name": "numcodecs.astype", "configuration": {"encode_dtype": "<u8", "decode_dtype": "<u4"}}]),
        json!([{"name": "numcodecs.quantize", "configuration": {"digits": 3, "dtype": "<f4", "astype": "<f8"}}]),
        json!([{"name": "numcodecs.crc32", "configuration": {"location": "start"}}]),
        json!([{"name": "numcodecs.adler32", "configuration": {"location": "end"}}]),
        json!([{"name": "numcodecs.crc32c"}]),
        json!([{"name": "numcodecs.fletcher32"}]),
        json!([{"name": "numcodecs.delta", "configuration": {"dtype": "<u4"}},
               {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
               {"name": "numcodecs.crc32"},
               {"name": "numcodecs.lz4"}]),
    ] {
        let mut chain = vec![le.clone()];
        chain.extend(tail.as_array().cloned().unwrap_or_default());
        chains.push(serde_json::Value::Array(chain));
    }
    chains
}

/// Whether a chain ends in something that can tell garbage from data (a compressor or checksum).
fn detects_garbage(chain: &serde_json::Value) -> bool {
    let last = chain
        .as_array()
        .and_then(|c| c.last())
        .and_then(|c| c["name"].as_str())
        .unwrap_or_default()
        .to_string();
    [
        "bz2",
        "lzma",
        "lz4",
        "crc32",
        "adler32",
        "crc32c",
        "fletcher32",
    ]
    .iter()
    .any(|n| last == format!("numcodecs.{n}"))
}

#[test]
fn numcodecs_codecs_round_trip() {
    let r = repr(&[16, 33], DataType::UInt32);
    // Whole float32 numbers: as float32 they survive quantize exactly, and as uint32 every other
    // filter.
    let data: Vec<u8> = (0..r.elements())
        .flat_map(|i| ((i % 1000) as f32).to_le_bytes())
        .collect();
    for c in numcodecs_chains() {
        let chain = build_chain(&spec(c.clone()), &r).expect("chain builds");
        let encoded = chain.encode(data.clone(), &r).expect("encodes");
        assert_eq!(chain.decode(&encoded, &r).expect("decodes"), data, "{c}");
        // The chain describes itself with the same codecs.
        let names: Vec<String> = chain.specs().iter().map(|s| s.name.clone()).collect();
        let expected: Vec<String> = c
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(names, expected);
        // Rebuilding from the specs it reports gives the same encoding.
        let again = build_chain(&chain.specs(), &r).expect("rebuilds");
        assert_eq!(again.decode(&encoded, &r).expect("decodes"), data, "{c}");
    }
}

#[test]
fn numcodecs_codecs_refuse_oversized_garbage_and_empty_input() {
    let r = repr(&[64], DataType::UInt32);
    let big = repr(&[1024], DataType::UInt32);
    for c in numcodecs_chains() {
        let specs = spec(c.clone());
        let small = build_chain(&specs, &r).expect("chain");
        // A chunk encoding 16x more data than expected is refused, not allocated.
        let encoded = build_chain(&specs, &big)
            .expect("chain")
            .encode(sample(big.byte_len()), &big)
            .expect("encode");
        assert!(small.decode(&encoded, &r).is_err(), "oversized: {c}");
        assert!(small.decode(&[], &r).is_err(), "empty: {c}");
        // Wrong-sized garbage is always an error; right-sized garbage only where a compressor or
        // checksum can tell (a bare filter decodes any bytes of the right size).
        assert!(small.decode(&sample(100), &r).is_err(), "garbage: {c}");
        if detects_garbage(&c) {
            assert!(
                small.decode(&sample(r.byte_len() + 4), &r).is_err(),
                "garbage: {c}"
            );
        }
    }
}

/// A deterministic stream of pseudo-random bytes.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        })
        .collect()
}

#[test]
fn numcodecs_codecs_never_panic_on_corrupt_input() {
    let r = repr(&[7, 9], DataType::UInt32);
    for c in numcodecs_chains() {
        let chain = build_chain(&spec(c.clone()), &r).expect("chain");
        let valid = chain.encode(sample(r.byte_len()), &r).expect("encode");
        let mut inputs: Vec<Vec<u8>> = (0..200u64)
            .map(|i| noise(i, (i as usize * 7) % 300))
            .collect();
        for i in 0..valid.len() {
            // Every truncation and a bit flip at every position of a valid chunk.
            inputs.push(valid[..i].to_vec());
            let mut flipped = valid.clone();
            flipped[i] ^= 1 << (i % 8);
            inputs.push(flipped);
        }
        for input in inputs {
            if let Ok(decoded) = chain.decode(&input, &r) {
                assert_eq!(decoded.len(), r.byte_len(), "{c}");
            }
        }
        // A flipped bit in a checksummed chunk is always caught.
        if c.to_string().contains("crc32")
            || c.to_string().contains("adler32")
            || c.to_string().contains("fletcher32")
        {
            for i in 0..valid.len() {
                let mut flipped = valid.clone();
                flipped[i] ^= 0x10;
                assert!(chain.decode(&flipped, &r).is_err(), "{c} flip at {i}");
            }
        }
    }
}

#[test]
fn numcodecs_size_headers_cannot_force_allocations() {
    let r = repr(&[16], DataType::UInt8);
    // lz4: a header claiming 2 GiB is refused before anything is allocated; so is a negative size.
    let lz4 = build_chain(
        &spec(json!([{"name": "bytes"}, {"name": "numcodecs.lz4"}])),
        &r,
    )
    .expect("chain");
    let mut claim = 0x7fff_ffffu32.to_le_bytes().to_vec();
    claim.extend_from_slice(&[0x10, 0]);
    assert!(lz4.decode(&claim, &r).is_err());
    let mut negative = 0xffff_ffffu32.to_le_bytes().to_vec();
    negative.extend_from_slice(&[0x10, 0]);
    assert!(lz4.decode(&negative, &r).is_err());
    // For a variable-length chunk (1 GiB expected at most) the block's own size bounds the claim:
    // 1 MiB of zeros (LZ4's best ratio) decodes, a 2-byte block claiming 1 MiB is refused.
    let vlen = repr(&[1], DataType::Bytes);
    let lz4 = build_chain(
        &spec(json!([{"name": "vlen-bytes"}, {"name": "numcodecs.lz4"}])),
        &vlen,
    )
    .expect("chain");
    let mut chunk = 1u32.to_le_bytes().to_vec();
    chunk.extend_from_slice(&(1u32 << 20).to_le_bytes());
    chunk.resize(8 + (1 << 20), 0);
    let encoded = lz4.encode(chunk.clone(), &vlen).expect("encode");
    assert_eq!(lz4.decode(&encoded, &vlen).expect("decode"), chunk);
    let mut claim = (1u32 << 20).to_le_bytes().to_vec();
    claim.extend_from_slice(&[0x10, 0]);
    let err = lz4.decode(&claim, &vlen).expect_err("refused");
    assert!(
        err.to_string()
            .contains("more than a 2-byte block can hold"),
        "{err}"
    );
    // .lzma ("alone"): a header asking for a 4 GiB dictionary exceeds the decoder's memory limit.
    let alone = build_chain(
        &spec(
            json!([{"name": "bytes"}, {"name": "numcodecs.lzma", "configuration": {"format": 2}}]),
        ),
        &r,
    )
    .expect("chain");
    let mut header = vec![0x5d];
    header.extend_from_slice(&u32::MAX.to_le_bytes());
    header.extend_from_slice(&u64::MAX.to_le_bytes());
    header.extend_from_slice(&[0; 16]);
    let err = alone.decode(&header, &r).expect_err("refused");
    assert!(err.to_string().contains("lzma"), "{err}");
    // Raw LZMA2 with a huge configured dictionary still decodes: the decoder's dictionary is capped
    // at the chunk size.
    let raw = |dict: u64| {
        build_chain(
            &spec(
                json!([{"name": "bytes"}, {"name": "numcodecs.lzma", "configuration": {"format": 3,
                "filters": [{"id": 33, "preset": 1, "dict_size": dict}]}}]),
            ),
            &r,
        )
        .expect("chain")
    };
    let data = sample(16);
    let encoded = raw(1 << 16).encode(data.clone(), &r).expect("encode");
    assert_eq!(raw(1 << 30).decode(&encoded, &r).expect("decode"), data);
}

#[test]
fn raw_lzma_of_a_variable_length_chunk_decodes_at_the_highest_ratio() {
    // A variable-length chunk has no size to cap the raw decoder's dictionary by (its bound is
    // 1 GiB), so the cap is what the encoded bytes can decode to. 4 MiB of zeros is LZMA's best
    // case (about 5,500 : 1 here): it must still decode when the configuration asks for 1 GiB.
    let r = repr(&[1], DataType::Bytes);
    let chain = |dict: u64| {
        build_chain(
            &spec(json!([{"name": "vlen-bytes"}, {"name": "numcodecs.lzma", "configuration": {
                "format": 3, "filters": [{"id": 0x4000_0000_0000_0001_u64, "preset": 9, "dict_size": dict}]}}])),
            &r,
        )
        .expect("chain")
    };
    let value = vec![0u8; 4 << 20];
    let mut chunk = 1u32.to_le_bytes().to_vec();
    chunk.extend_from_slice(&(value.len() as u32).to_le_bytes());
    chunk.extend_from_slice(&value);
    let encoded = chain(4 << 20).encode(chunk.clone(), &r).expect("encode");
    assert!(encoded.len() < 1024, "{} bytes", encoded.len());
    assert_eq!(chain(1 << 30).decode(&encoded, &r).expect("decode"), chunk);
}

#[test]
fn length_preserving_codecs_refuse_inputs_longer_than_the_chunk() {
    // 8 float32 = 32 bytes expected; each codec gets 36 bytes of data (plus its checksum).
    let r = repr(&[8], DataType::Float32);
    for (codec, checksum) in [
        (
            json!({"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}}),
            0,
        ),
        (
            json!({"name": "numcodecs.bitround", "configuration": {"keepbits": 3}}),
            0,
        ),
        (json!({"name": "crc32c"}), 4),
        (json!({"name": "numcodecs.crc32"}), 4),
    ] {
        let chain = build_chain(
            &spec(json!([{"name": "bytes", "configuration": {"endian": "little"}}, codec.clone()])),
            &r,
        )
        .expect("chain");
        let err = chain
            .decode(&vec![0u8; 36 + checksum], &r)
            .expect_err("refused");
        assert!(
            err.to_string()
                .contains("input of 36 bytes is longer than the expected 32"),
            "{codec}: {err}"
        );
    }
}

#[test]
fn numcodecs_invalid_configurations_are_build_errors() {
    let r = repr(&[8], DataType::UInt16);
    for c in [
        json!({"name": "numcodecs.bz2", "configuration": {"level": 0}}),
        json!({"name": "numcodecs.lzma", "configuration": {"format": 7}}),
        json!({"name": "numcodecs.lzma", "configuration": {"format": 3}}),
        json!({"name": "numcodecs.lzma", "configuration": {"format": 3, "filters": [{"id": 99}]}}),
        json!({"name": "numcodecs.lzma", "configuration": {"check": 3}}),
        json!({"name": "numcodecs.delta", "configuration": {}}),
        json!({"name": "numcodecs.delta", "configuration": {"dtype": "<U4"}}),
        json!({"name": "numcodecs.delta", "configuration": {"dtype": "|b1"}}),
        json!({"name": "numcodecs.delta", "configuration": {"dtype": "<c8"}}),
        json!({"name": "numcodecs.fixedscaleoffset", "configuration": {"dtype": "<f8", "scale": 10}}),
        json!({"name": "numcodecs.fixedscaleoffset", "configuration": {"dtype": "<f8", "scale": "x", "offset": 0}}),
        json!({"name": "numcodecs.quantize", "configuration": {"digits": 2, "dtype": "<i4"}}),
        json!({"name": "numcodecs.astype", "configuration": {"encode_dtype": "<f4"}}),
        json!({"name": "numcodecs.crc32", "configuration": {"location": "middle"}}),
        json!({"name": "numcodecs.fletcher32", "configuration": {"location": "start"}}),
    ] {
        let specs =
            spec(json!([{"name": "bytes", "configuration": {"endian": "little"}}, c.clone()]));
        assert!(
            matches!(
                build_chain(&specs, &r),
                Err(Error::InvalidConfiguration { .. })
            ),
            "{c}"
        );
    }
}
