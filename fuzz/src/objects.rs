//! `object_decode`: the array→bytes codecs of object arrays, `numcodecs.json2` and
//! `numcodecs.msgpack2` (strings) and `vlen-bytes` / `vlen-utf8`, decoding the rest of the input.
//!
//! Input: one byte picks the codec, then a chunk shape (as `codec_decode` reads it), then 0 to 2
//! bytes-to-bytes codecs, then the encoded chunk. Promises checked: those of
//! `codecs::decode_and_check` (no panic, bounded allocation), and an `Ok` result is the
//! `vlen-utf8` layout of exactly the chunk's element count, valid UTF-8 for strings.

use serde_json::json;
use zshard_codecs::build_chain;
use zshard_core::{vlen_ranges, ChunkRepr, CodecSpec, DataType, FillValue};

use crate::codecs::{any_codec, decode_and_check, shape};
use crate::input::Input;

pub fn object_decode(data: &[u8]) {
    let mut inp = Input::new(data);
    let (serializer, data_type) = match inp.byte() % 4 {
        0 => (
            CodecSpec::new("numcodecs.json2", json!({"encoding": "utf-8"})),
            DataType::String,
        ),
        1 => (
            CodecSpec::new(
                "numcodecs.msgpack2",
                json!({"raw": false, "use_bin_type": true}),
            ),
            DataType::String,
        ),
        2 => (CodecSpec::new("vlen-bytes", json!({})), DataType::Bytes),
        _ => (CodecSpec::new("vlen-utf8", json!({})), DataType::String),
    };
    let shape = shape(&mut inp);
    let mut specs = vec![serializer];
    for _ in 0..inp.byte() % 3 {
        specs.push(any_codec(&mut inp, data_type));
    }
    let repr = ChunkRepr {
        shape,
        data_type,
        fill_value: FillValue::zero(data_type),
    };
    let Ok(chain) = build_chain(&specs, &repr) else {
        return;
    };
    let encoded = inp.rest();
    decode_and_check(&chain, &specs, &repr, encoded);
    if let Ok(decoded) = chain.decode(encoded, &repr) {
        let ranges = vlen_ranges(&decoded, repr.elements() as usize)
            .unwrap_or_else(|e| panic!("decoded chunk is not the vlen layout ({specs:?}): {e}"));
        if data_type == DataType::String {
            for range in ranges {
                assert!(
                    std::str::from_utf8(&decoded[range]).is_ok(),
                    "decoded string is not UTF-8 ({specs:?})"
                );
            }
        }
    }
}
