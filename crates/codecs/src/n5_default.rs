//! `n5_default` (zarr-extensions, array→bytes): N5 blocks in "default" mode read as Zarr chunks.
//!
//! A block is a header (mode `0x0000` and the number of dimensions as big-endian u16, then each
//! dimension's size as big-endian u32, in the Zarr array's dimension order) and the block's
//! elements through the configuration's nested chain: a full `transpose` (N5 stores dimension 0
//! fastest), `bytes` (big-endian), and at most one bytes→bytes codec. A block may be smaller than
//! the chunk (java N5 truncates edge blocks): it is padded with the fill value. A block larger
//! than the chunk is refused, so a header cannot make a read allocate more than the chunk.
//!
//! zshard reads this codec and does not write it: an output chunk of a sharded array has no use
//! for N5's header, and `--compressor source` writes such arrays with the default chain.

use std::sync::Arc;

use serde_json::{json, Value};
use zshard_core::{
    copy_region, ArrayToBytesCodec, ChunkRepr, CodecChain, CodecSpec, Error, Region, Result,
};

use crate::error::invalid;
use crate::registry::{build_chain, Codec};

const NAME: &str = "n5_default";

#[derive(Debug)]
pub(crate) struct N5DefaultCodec {
    /// The nested chain as the metadata gave it.
    specs: Vec<CodecSpec>,
    /// The nested chain built for whole chunks (most blocks).
    chain: CodecChain,
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let specs = crate::registry::nested_specs(spec, NAME, "missing codecs")?;
    let ndim = repr.shape.len();
    let reversed: Vec<usize> = (0..ndim).rev().collect();
    match specs.first() {
        Some(t)
            if t.name == "transpose"
                && t.get("order")
                    .and_then(Value::as_array)
                    .is_some_and(|order| {
                        order.iter().map(Value::as_u64).collect::<Vec<_>>()
                            == reversed.iter().map(|&d| Some(d as u64)).collect::<Vec<_>>()
                    }) => {}
        _ => {
            return Err(invalid(
                NAME,
                format!("the first nested codec must be transpose with order {reversed:?}"),
            ))
        }
    }
    let big = |c: &CodecSpec| match c.get("endian") {
        Some(endian) => endian == "big",
        None => repr.data_type.size() == 1,
    };
    if !specs.get(1).is_some_and(|c| c.name == "bytes" && big(c)) {
        return Err(invalid(
            NAME,
            "the second nested codec must be bytes with endian big (omitted for 1-byte types)",
        ));
    }
    if specs.len() > 3 {
        return Err(invalid(
            NAME,
            format!(
                "{} nested codecs: transpose, bytes and at most one bytes-to-bytes codec",
                specs.len()
            ),
        ));
    }
    // build_chain checks that a third codec is bytes to bytes.
    let chain = build_chain(&specs, repr)?;
    Ok(Codec::ArrayToBytes(Arc::new(N5DefaultCodec {
        specs,
        chain,
    })))
}

fn error(reason: impl Into<String>) -> Error {
    Error::codec(NAME, reason)
}

/// The block shape a default-mode N5 header gives, and the header's length.
fn read_header(encoded: &[u8], ndim: usize) -> Result<(Vec<u64>, usize)> {
    let u16_at = |at: usize| {
        encoded
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let mode = u16_at(0).ok_or_else(|| error("the block is shorter than its header"))?;
    if mode != 0 {
        return Err(error(format!(
            "block mode {mode} is not 0 (default); varlength (1) and object (2) blocks are not n5_default"
        )));
    }
    let dims = u16_at(2).ok_or_else(|| error("the block is shorter than its header"))?;
    if usize::from(dims) != ndim {
        return Err(error(format!(
            "the block has {dims} dimensions, the array {ndim}"
        )));
    }
    let len = 4 + 4 * ndim;
    let header = encoded
        .get(4..len)
        .ok_or_else(|| error("the block is shorter than its header"))?;
    let shape = header
        .chunks_exact(4)
        .map(|b| u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
        .collect();
    Ok((shape, len))
}

impl ArrayToBytesCodec for N5DefaultCodec {
    fn encode(&self, _data: Vec<u8>, _repr: &ChunkRepr) -> Result<Vec<u8>> {
        Err(error(
            "is read but not written by zshard (write the array with another chain)",
        ))
    }

    fn decode(&self, encoded: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        let (block_shape, header_len) = read_header(&encoded, repr.shape.len())?;
        let body = &encoded[header_len..];
        if block_shape == repr.shape {
            return self.chain.decode(body, repr);
        }
        if block_shape.iter().zip(&repr.shape).any(|(b, c)| b > c) {
            return Err(error(format!(
                "the block's shape {block_shape:?} is larger than the chunk's {:?}",
                repr.shape
            )));
        }
        // A truncated edge block: decode it at its own shape, then place it in a chunk of fill values.
        let block_repr = ChunkRepr {
            shape: block_shape.clone(),
            ..repr.clone()
        };
        let chain = build_chain(&self.specs, &block_repr)
            .map_err(|e| error(format!("a block of shape {block_shape:?}: {e}")))?;
        let block = chain.decode(body, &block_repr)?;
        let size = repr.data_type.size();
        let mut out = repr.fill_value.repeat(repr.elements() as usize);
        let origin = vec![0; repr.shape.len()];
        if !block_shape.contains(&0) {
            let region = Region {
                start: origin.clone(),
                shape: block_shape.clone(),
            };
            copy_region(
                &block,
                &block_shape,
                &origin,
                &mut out,
                &repr.shape,
                &origin,
                &region,
                size,
            );
        }
        Ok(out)
    }

    fn max_encoded_len(&self, repr: &ChunkRepr) -> usize {
        let header = 4 + 4 * repr.shape.len();
        self.chain
            .max_encoded_len(repr)
            .ok()
            .and_then(|len| usize::try_from(len).ok())
            .unwrap_or(usize::MAX)
            .saturating_add(header)
    }

    fn spec(&self) -> CodecSpec {
        let codecs: Vec<Value> = self.specs.iter().map(CodecSpec::to_json).collect();
        CodecSpec::new(NAME, json!({ "codecs": codecs }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_core::{DataType, FillValue};

    fn repr(shape: &[u64]) -> ChunkRepr {
        ChunkRepr {
            shape: shape.to_vec(),
            data_type: DataType::UInt16,
            fill_value: FillValue::from_bytes(7u16.to_le_bytes().to_vec()),
        }
    }

    fn codec(third: Option<Value>, shape: &[u64]) -> crate::Result<Arc<dyn ArrayToBytesCodec>> {
        let mut codecs = vec![
            json!({"name": "transpose", "configuration": {"order": [1, 0]}}),
            json!({"name": "bytes", "configuration": {"endian": "big"}}),
        ];
        codecs.extend(third);
        match build(
            &CodecSpec::new(NAME, json!({ "codecs": codecs })),
            &repr(shape),
        )? {
            Codec::ArrayToBytes(c) => Ok(c),
            other => panic!("not array to bytes: {other:?}"),
        }
    }

    /// A block as the N5 spec lays it out: header, then the elements big-endian with dimension 0
    /// fastest.
    fn block(shape: [u32; 2], value: impl Fn(u32, u32) -> u16) -> Vec<u8> {
        let mut out = vec![0, 0, 0, 2];
        out.extend(shape[0].to_be_bytes());
        out.extend(shape[1].to_be_bytes());
        for j in 0..shape[1] {
            for i in 0..shape[0] {
                out.extend(value(i, j).to_be_bytes());
            }
        }
        out
    }

    fn elements(data: &[u8]) -> Vec<u16> {
        data.chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect()
    }

    #[test]
    fn reads_whole_and_truncated_blocks() {
        let c = codec(None, &[3, 4]).expect("built");
        let value = |i: u32, j: u32| (10 * i + j) as u16;
        let whole = c
            .decode(block([3, 4], value), &repr(&[3, 4]))
            .expect("whole");
        assert_eq!(
            elements(&whole),
            [0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23]
        );
        // java N5's truncated edge block: the rest is the fill value.
        let edge = c
            .decode(block([2, 3], value), &repr(&[3, 4]))
            .expect("edge");
        assert_eq!(elements(&edge), [0, 1, 2, 7, 10, 11, 12, 7, 7, 7, 7, 7]);
        // Refused: other modes, dimension counts, larger blocks, short blocks.
        let mut varlength = block([3, 4], value);
        varlength[1] = 1;
        assert!(c.decode(varlength, &repr(&[3, 4])).is_err());
        let larger = c
            .decode(block([4, 4], value), &repr(&[3, 4]))
            .expect_err("larger");
        assert!(
            larger.to_string().contains("larger than the chunk"),
            "{larger}"
        );
        let mut three_dims = block([3, 4], value);
        three_dims[3] = 3;
        assert!(c.decode(three_dims, &repr(&[3, 4])).is_err());
        let mut short = block([3, 4], value);
        short.truncate(20);
        assert!(c.decode(short, &repr(&[3, 4])).is_err());
        assert!(c.decode(vec![0, 0, 0], &repr(&[3, 4])).is_err());
        // Not written.
        assert!(c.encode(vec![0; 24], &repr(&[3, 4])).is_err());
    }

    #[test]
    fn reads_a_compressed_block_and_checks_the_configuration() {
        let c = codec(
            Some(json!({"name": "gzip", "configuration": {"level": 1}})),
            &[2, 2],
        )
        .expect("built");
        let raw = block([2, 2], |i, j| (i + 2 * j) as u16);
        let gzip = match crate::registry::build_codec(
            &CodecSpec::new("gzip", json!({"level": 1})),
            &repr(&[2, 2]),
        ) {
            Ok(Codec::BytesToBytes(g)) => g,
            other => panic!("gzip: {other:?}"),
        };
        let mut encoded = raw[..12].to_vec();
        encoded.extend(gzip.encode(&raw[12..]).expect("gzip"));
        assert_eq!(
            elements(&c.decode(encoded, &repr(&[2, 2])).expect("decode")),
            [0, 2, 1, 3]
        );
        assert!(c.spec().to_json()["configuration"]["codecs"][2]["name"] == "gzip");
        // Not N5's layout: no transpose, little-endian, two compressors.
        let bad = |codecs: Value| {
            build(
                &CodecSpec::new(NAME, json!({ "codecs": codecs })),
                &repr(&[2, 2]),
            )
            .is_err()
        };
        assert!(bad(
            json!([{"name": "bytes", "configuration": {"endian": "big"}}])
        ));
        assert!(bad(
            json!([{"name": "transpose", "configuration": {"order": [0, 1]}},
                           {"name": "bytes", "configuration": {"endian": "big"}}])
        ));
        assert!(bad(
            json!([{"name": "transpose", "configuration": {"order": [1, 0]}},
                           {"name": "bytes", "configuration": {"endian": "little"}}])
        ));
        assert!(bad(
            json!([{"name": "transpose", "configuration": {"order": [1, 0]}},
                           {"name": "bytes", "configuration": {"endian": "big"}}, "crc32c", "crc32c"])
        ));
        assert!(bad(
            json!([{"name": "transpose", "configuration": {"order": [1, 0]}},
                           {"name": "bytes", "configuration": {"endian": "big"}},
                           {"name": "transpose", "configuration": {"order": [1, 0]}}])
        ));
    }
}
