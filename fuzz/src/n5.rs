//! `n5_block`: one N5 block (header + payload) decoded by `zshard_n5::BlockDecoder` for a dataset
//! whose data type, block size and compression come from the front of the input, then through the
//! array's chain (`transpose` + big-endian `bytes`) as the pipeline decodes it.
//!
//! Input: data type, rank (1-3), one byte per block extent (1-6), compression
//! (raw/gzip/zlib/bzip2/blosc/xz/lz4/zstd), then the stored block.
//!
//! Promises checked: no panic; the largest allocation within twice the full block plus twice the
//! input (+4 MiB working set); an accepted block has a header `parse_header` accepts with extents
//! within the block size, decodes to exactly the full block, every element outside its extents is
//! 0, and the array's chain decodes it to the chunk's size; for `raw`, the stored elements are the
//! payload (re-encoding the extents and elements gives the input back).

use zshard_codecs::build_chain;
use zshard_core::product;
use zshard_n5::{encode_raw_block, parse_attributes, parse_header, Attributes, BlockDecoder};

use crate::input::Input;

const DATA_TYPES: [&str; 10] = [
    "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float32", "float64",
];

const COMPRESSIONS: [&str; 8] = [
    r#"{"type":"raw"}"#,
    r#"{"type":"gzip","level":-1,"useZlib":false}"#,
    r#"{"type":"gzip","useZlib":true}"#,
    r#"{"type":"bzip2","blockSize":9}"#,
    r#"{"type":"blosc","cname":"lz4","clevel":5,"shuffle":1,"blocksize":0}"#,
    r#"{"type":"xz","preset":6}"#,
    r#"{"type":"lz4","blockSize":65536}"#,
    r#"{"type":"zstd","level":0}"#,
];

/// The dataset document and the block read from the input.
pub fn parse_case(inp: &mut Input) -> (String, Vec<u64>) {
    let data_type = inp.pick(&DATA_TYPES);
    let ndim = 1 + inp.byte() as usize % 3;
    let block: Vec<u64> = (0..ndim).map(|_| 1 + (inp.byte() % 6) as u64).collect();
    let compression = inp.pick(&COMPRESSIONS);
    let dims: Vec<u64> = block.iter().map(|b| b * 3 - 1).collect();
    let doc = format!(
        r#"{{"dimensions":{dims:?},"blockSize":{block:?},"dataType":"{data_type}","compression":{compression}}}"#
    );
    (doc, block)
}

pub fn n5_block(data: &[u8]) {
    let mut inp = Input::new(data);
    let (doc, block) = parse_case(&mut inp);
    let stored = inp.rest();
    let Ok(Attributes::Dataset(dataset)) = parse_attributes("attributes.json", doc.as_bytes())
    else {
        panic!("the fuzz target's own dataset document is refused: {doc}");
    };
    let decoder = BlockDecoder::new("attributes.json", &dataset).expect("decoder");
    let element_size = dataset.data_type.size();
    let full = product(&block) as usize * element_size;
    let allowed = 2 * full + 2 * stored.len() + (4 << 20);
    crate::probe::arm();
    let decoded = decoder.decode("0/0/0", stored);
    let peak = crate::probe::disarm();
    assert!(
        peak <= allowed,
        "decoding allocated {peak} bytes at once, more than {allowed} ({doc})"
    );
    let Ok(decoded) = decoded else { return };
    assert_eq!(decoded.len(), full, "full block size ({doc})");
    let header = parse_header(stored).expect("an accepted block has a valid header");
    assert!(header.shape.iter().zip(&block).all(|(h, b)| h <= b));
    let inside = check_padding(&decoded, &header.shape, &block, element_size);
    if doc.contains(r#""raw""#) && header.mode == 0 {
        let extents: Vec<u32> = header.shape.iter().map(|&e| e as u32).collect();
        assert_eq!(
            encode_raw_block(&extents, &inside),
            stored,
            "raw round trip ({doc})"
        );
    }
    let meta = dataset.array_meta();
    let chain = build_chain(&meta.codecs, &meta.chunk_repr()).expect("the array's chain");
    let chunk = chain
        .decode(&decoded, &meta.chunk_repr())
        .expect("a full block decodes through the array's chain");
    assert_eq!(chunk.len(), full);
}

/// Checks that every element of `full` (first axis fastest) outside `extents` is 0; returns the
/// elements inside, first axis fastest.
fn check_padding(full: &[u8], extents: &[u64], block: &[u64], element_size: usize) -> Vec<u8> {
    let mut inside = Vec::new();
    let count = product(block) as usize;
    for index in 0..count {
        // Coordinates of element `index`, first axis fastest.
        let mut rest = index as u64;
        let mut within = true;
        for (&b, &e) in block.iter().zip(extents) {
            within &= rest % b < e;
            rest /= b;
        }
        let element = &full[index * element_size..(index + 1) * element_size];
        if within {
            inside.extend_from_slice(element);
        } else {
            assert!(element.iter().all(|&x| x == 0), "padding is not 0");
        }
    }
    inside
}
