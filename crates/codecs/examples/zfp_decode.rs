//! Decode speed of the zfp decoder: `zfp_decode STREAM ROWS COLS [ROUNDS]` decodes a zfpy stream
//! of a 2D float32 array ROUNDS times and prints MB/s of decoded values. `benches/zfp_decode.py`
//! makes the streams and compares with zfpy's own decode.

use std::time::Instant;

use serde_json::json;
use zshard_codecs::build_chain;
use zshard_core::{ChunkRepr, CodecSpec, DataType, FillValue};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, rows, cols, rest @ ..] = args.as_slice() else {
        return Err("usage: zfp_decode STREAM ROWS COLS [ROUNDS]".into());
    };
    let rounds: u32 = rest.first().map_or(Ok(5), |r| r.parse())?;
    let stream = std::fs::read(path)?;
    let repr = ChunkRepr {
        shape: vec![rows.parse()?, cols.parse()?],
        data_type: DataType::Float32,
        fill_value: FillValue::zero(DataType::Float32),
    };
    let chain = build_chain(&[CodecSpec::new("numcodecs.zfpy", json!({}))], &repr)?;
    let mut best = f64::INFINITY;
    for _ in 0..rounds {
        let start = Instant::now();
        let decoded = chain.decode(&stream, &repr)?;
        best = best.min(start.elapsed().as_secs_f64());
        assert_eq!(decoded.len(), repr.byte_len());
    }
    println!("{:.1}", repr.byte_len() as f64 / best / 1e6);
    Ok(())
}
