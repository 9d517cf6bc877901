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
