//! Decoding streams zfpy 1.0.1 wrote (tests/fixtures/zfp, made by make_zfp_fixtures.py) bit
//! for bit as zfpy decodes them: every mode, type and dimensionality, with partial edge blocks.

use std::path::PathBuf;

use serde_json::{json, Value};
use zshard_core::{ArrayToBytesCodec, ChunkRepr, CodecSpec, DataType, FillValue};

use super::*;

pub(super) fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zfp")
}

fn read(name: &str) -> Vec<u8> {
    let path = fixtures().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn data_type(name: &str) -> DataType {
    match name {
        "float32" => DataType::Float32,
        "float64" => DataType::Float64,
        "int32" => DataType::Int32,
        _ => DataType::Int64,
    }
}

fn codec(repr: &ChunkRepr) -> Arc<dyn ArrayToBytesCodec> {
    let spec = CodecSpec::new(
        NAME,
        json!({"mode": 4, "tolerance": -1, "rate": -1, "precision": -1}),
    );
    match build(&spec, repr) {
        Ok(Codec::ArrayToBytes(c)) => c,
        other => panic!("not an array-to-bytes codec: {other:?}"),
    }
}

pub(super) fn cases() -> Vec<(String, ChunkRepr)> {
    let manifest: Value = serde_json::from_slice(&read("manifest.json")).expect("manifest");
    let cases: Vec<(String, ChunkRepr)> = manifest
        .as_array()
        .expect("list")
        .iter()
        .map(|case| {
            let data_type = data_type(case["dtype"].as_str().expect("dtype"));
            let shape = case["shape"]
                .as_array()
                .expect("shape")
                .iter()
                .map(|n| n.as_u64().expect("size"))
                .collect();
            let repr = ChunkRepr {
                shape,
                data_type,
                fill_value: FillValue::zero(data_type),
            };
            (case["name"].as_str().expect("name").to_string(), repr)
        })
        .collect();
    assert_eq!(cases.len(), 64, "4 types x 4 modes x 4 dimensionalities");
    cases
}

#[test]
fn decodes_every_fixture_bit_for_bit() {
    let mut failed = Vec::new();
    for (name, repr) in cases() {
        let decoded = codec(&repr).decode(read(&format!("{name}.zfp")), &repr);
        match decoded {
            Ok(bytes) if bytes == read(&format!("{name}.raw")) => {}
            Ok(_) => failed.push(format!("{name}: values differ")),
            Err(e) => failed.push(format!("{name}: {e}")),
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn refuses_streams_that_do_not_describe_the_chunk() {
    let (name, repr) = cases()
        .into_iter()
        .find(|(name, _)| name == "float32_rate_2d")
        .expect("case");
    let stream = read(&format!("{name}.zfp"));
    let c = codec(&repr);
    // Another element count: refused before decoding, naming both.
    let other = ChunkRepr {
        shape: vec![36],
        ..repr.clone()
    };
    let err = c.decode(stream.clone(), &other).expect_err("count");
    assert!(
        err.to_string()
            .contains("numcodecs.zfpy: the stream holds 35 float32 values (zfp sizes x, y, z, w: [7, 5]), the chunk 36 float32 values"),
        "{err}"
    );
    // Another type.
    let doubles = ChunkRepr {
        data_type: DataType::Float64,
        ..repr.clone()
    };
    let err = codec(&doubles)
        .decode(stream.clone(), &doubles)
        .expect_err("type");
    assert!(err.to_string().contains("35 float32 values"), "{err}");
    // Cut short, and not zfp at all.
    let err = c
        .decode(stream[..stream.len() / 2].to_vec(), &repr)
        .expect_err("short");
    assert!(
        err.to_string().contains("the stream ends inside block"),
        "{err}"
    );
    let err = c.decode(b"zfq\x05".to_vec(), &repr).expect_err("magic");
    assert!(err.to_string().contains("magic"), "{err}");
    let err = c.decode(Vec::new(), &repr).expect_err("empty");
    assert!(err.to_string().contains("magic"), "{err}");
    let mut version = stream.clone();
    version[3] = 4;
    let err = c.decode(version, &repr).expect_err("version");
    assert!(err.to_string().contains("codec version 4"), "{err}");
    // zshard does not encode zfp.
    let err = c.encode(vec![0; 140], &repr).expect_err("encode");
    assert!(err.to_string().contains("does not encode"), "{err}");
}

#[test]
fn refuses_types_zfp_does_not_store() {
    let repr = ChunkRepr {
        shape: vec![4],
        data_type: DataType::UInt16,
        fill_value: FillValue::zero(DataType::UInt16),
    };
    let err = build(&CodecSpec::new(NAME, json!({})), &repr).expect_err("uint16");
    assert!(
        err.to_string()
            .contains("zfp stores int32, int64, float32 and float64"),
        "{err}"
    );
}

#[test]
fn powers_of_two_round_like_ldexp() {
    assert_eq!(pow2_f32(-150), 0.0);
    assert_eq!(pow2_f32(-149), f32::from_bits(1));
    assert_eq!(pow2_f32(-126), f32::MIN_POSITIVE);
    assert_eq!(pow2_f32(0), 1.0);
    assert_eq!(pow2_f64(-1075), 0.0);
    assert_eq!(pow2_f64(-1074), f64::from_bits(1));
    assert_eq!(pow2_f64(10), 1024.0);
}
