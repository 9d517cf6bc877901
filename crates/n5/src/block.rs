//! N5 blocks: the header (mode, number of axes, the block's extents, and for mode 1 the number of
//! elements), then the compressed elements, big endian, first axis fastest. Edge blocks are stored
//! with their actual extents; [`BlockDecoder::decode`] pads them into full blocks (with 0, N5's
//! value for what no block stores), so every chunk the pipeline sees has the dataset's `blockSize`.

use std::sync::Arc;

use zshard_codecs::{build_codec, Codec};
use zshard_core::{copy_region, product, BytesToBytesCodec, ChunkRepr, FillValue, Region};

use crate::error::{Error, Result};
use crate::lz4_block;
use crate::meta::{Compression, Dataset};

/// `mode` of a block holding the dataset's elements.
const MODE_DEFAULT: u16 = 0;
/// `mode` of a block that also states its number of elements.
const MODE_VARLENGTH: u16 = 1;
/// `mode` of a block of opaque bytes (n5-java's `writeSerializedBlock`), no array elements.
const MODE_OBJECT: u16 = 2;

/// A block header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockHeader {
    /// 0 (default) or 1 (varlength).
    pub mode: u16,
    /// The block's extent per axis (smaller than `blockSize` at the dataset's far edges).
    pub shape: Vec<u64>,
    /// The number of elements a varlength block states.
    pub elements: Option<u64>,
    /// The header's length in bytes (where the compressed payload starts).
    pub len: usize,
}

/// Parses a block header; `Err` holds a reason for people.
pub fn parse_header(bytes: &[u8]) -> std::result::Result<BlockHeader, String> {
    let mut at = 0usize;
    let mut take = |n: usize| -> std::result::Result<&[u8], String> {
        let field = bytes
            .get(at..at + n)
            .ok_or_else(|| format!("truncated header ({} bytes)", bytes.len()))?;
        at += n;
        Ok(field)
    };
    let u16_at = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
    let u32_at = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let mode = u16_at(take(2)?);
    match mode {
        MODE_DEFAULT | MODE_VARLENGTH => {}
        MODE_OBJECT => return Err("mode 2 (object) blocks hold no array elements".into()),
        other => return Err(format!("unknown block mode {other}")),
    }
    let ndim = usize::from(u16_at(take(2)?));
    let shape = (0..ndim)
        .map(|_| take(4).map(|b| u64::from(u32_at(b))))
        .collect::<std::result::Result<Vec<u64>, String>>()?;
    let elements = match mode {
        MODE_VARLENGTH => Some(u64::from(u32_at(take(4)?))),
        _ => None,
    };
    Ok(BlockHeader {
        mode,
        shape,
        elements,
        len: at,
    })
}

/// Decodes the blocks of one dataset into full chunks.
#[derive(Clone, Debug)]
pub struct BlockDecoder {
    block_size: Vec<u64>,
    element_size: usize,
    compression: Compression,
    codec: Option<Arc<dyn BytesToBytesCodec>>,
}

impl BlockDecoder {
    /// The decoder of `dataset`'s blocks (`key` names its `attributes.json` in messages).
    pub fn new(key: &str, dataset: &Dataset) -> Result<BlockDecoder> {
        let codec = match dataset.compression.codec_spec() {
            None => None,
            Some(spec) => {
                let repr = ChunkRepr {
                    shape: dataset.block_size.clone(),
                    data_type: dataset.data_type,
                    fill_value: FillValue::zero(dataset.data_type),
                };
                let built = build_codec(&spec, &repr).map_err(|source| Error::Codec {
                    key: key.to_string(),
                    compression: dataset.compression.name().to_string(),
                    source: Box::new(source),
                })?;
                match built {
                    Codec::BytesToBytes(codec) => Some(codec),
                    // Every compression maps to a bytes-to-bytes codec (see `Compression::codec_spec`).
                    _ => {
                        return Err(Error::Metadata {
                            key: key.to_string(),
                            reason: format!("compression {spec:?} is not a compressor"),
                        })
                    }
                }
            }
        };
        Ok(BlockDecoder {
            block_size: dataset.block_size.clone(),
            element_size: dataset.data_type.size(),
            compression: dataset.compression.clone(),
            codec,
        })
    }

    /// Decodes a stored block (`key` names it in messages) into the full block: `blockSize`
    /// elements, first axis fastest, big endian, the part outside a smaller edge block 0.
    pub fn decode(&self, key: &str, block: &[u8]) -> Result<Vec<u8>> {
        let bad = |reason: String| Error::Block {
            key: key.to_string(),
            reason,
        };
        let header = parse_header(block).map_err(bad)?;
        if header.shape.len() != self.block_size.len() {
            return Err(bad(format!(
                "header has {} axes, the dataset {}",
                header.shape.len(),
                self.block_size.len()
            )));
        }
        if header
            .shape
            .iter()
            .zip(&self.block_size)
            .any(|(h, b)| h > b)
        {
            return Err(bad(format!(
                "header extents {:?} exceed blockSize {:?}",
                header.shape, self.block_size
            )));
        }
        // Bounded by blockSize, whose byte size the metadata check bounds.
        let elements = product(&header.shape);
        if let Some(stated) = header.elements.filter(|&n| n != elements) {
            return Err(bad(format!(
                "varlength block states {stated} elements, its extents {:?} hold {elements}",
                header.shape
            )));
        }
        let expected = elements as usize * self.element_size;
        let payload = self.decompress(key, &block[header.len..], expected)?;
        if payload.len() != expected {
            return Err(bad(format!(
                "payload decodes to {} bytes, extents {:?} need {expected}",
                payload.len(),
                header.shape
            )));
        }
        Ok(self.pad(&header.shape, payload))
    }

    /// The most bytes a stored block can take: the longest header (mode, axes, extents, element
    /// count) and the compression's worst case for a full block (the codec's bound; for N5's LZ4
    /// framing, whose 21-byte block headers and LZ4's expansion stay far below it, the margin of
    /// [`BytesToBytesCodec::max_encoded_len`]'s default). A longer block cannot decode: readers
    /// refuse it unread.
    pub fn max_block_len(&self) -> u64 {
        let raw = usize::try_from(product(&self.block_size))
            .unwrap_or(usize::MAX)
            .saturating_mul(self.element_size);
        let payload = match (&self.compression, &self.codec) {
            (_, None) => raw,
            (Compression::Lz4, _) => raw.saturating_add(raw / 8).saturating_add(1024),
            (_, Some(codec)) => codec.max_encoded_len(raw),
        };
        let header = 8 + 4 * self.block_size.len();
        u64::try_from(payload.saturating_add(header)).unwrap_or(u64::MAX)
    }

    fn decompress(&self, key: &str, payload: &[u8], expected: usize) -> Result<Vec<u8>> {
        let failed = |source| Error::Decompress {
            key: key.to_string(),
            compression: self.compression.name().to_string(),
            source: Box::new(source),
        };
        match (&self.compression, &self.codec) {
            (Compression::Lz4, _) => lz4_block::decode(payload, expected).map_err(|reason| {
                failed(zshard_core::Error::Codec {
                    codec: "lz4".into(),
                    reason,
                })
            }),
            (_, Some(codec)) => codec.decode(payload, expected).map_err(failed),
            (_, None) => Ok(payload.to_vec()),
        }
    }

    /// The full block holding `data` (a block of extents `shape`, first axis fastest) at its origin.
    fn pad(&self, shape: &[u64], data: Vec<u8>) -> Vec<u8> {
        if shape == self.block_size.as_slice() {
            return data;
        }
        let full = product(&self.block_size) as usize * self.element_size;
        let mut out = vec![0u8; full];
        // First axis fastest is C order over the reversed axes.
        let reversed = |s: &[u64]| s.iter().rev().copied().collect::<Vec<u64>>();
        let (src_shape, dst_shape) = (reversed(shape), reversed(&self.block_size));
        let origin = vec![0; shape.len()];
        let region = Region {
            start: origin.clone(),
            shape: src_shape.clone(),
        };
        if !data.is_empty() {
            copy_region(
                &data,
                &src_shape,
                &origin,
                &mut out,
                &dst_shape,
                &origin,
                &region,
                self.element_size,
            );
        }
        out
    }
}

/// Encodes a block as N5 writes it (mode 0, uncompressed): for tests and fuzz seeds.
pub fn encode_raw_block(shape: &[u32], data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 4 * shape.len() + data.len());
    out.extend_from_slice(&MODE_DEFAULT.to_be_bytes());
    out.extend_from_slice(&(shape.len() as u16).to_be_bytes());
    for extent in shape {
        out.extend_from_slice(&extent.to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::{parse_attributes, Attributes};

    fn decoder(doc: &str) -> BlockDecoder {
        let Attributes::Dataset(ds) =
            parse_attributes("attributes.json", doc.as_bytes()).expect("ok")
        else {
            panic!("a dataset")
        };
        BlockDecoder::new("attributes.json", &ds).expect("ok")
    }

    #[test]
    fn a_block_written_by_tensorstore_and_an_edge_block() {
        // tensorstore n5, uint16 [5,7] in [2,3] blocks, raw: block 0/0 holds t[0..2,0..3], the
        // first axis fastest (0,7,1,8,2,9); block 2/2 is the 1x1 edge block t[4,6] = 34.
        let d = decoder(
            r#"{"blockSize":[2,3],"compression":{"type":"raw"},"dataType":"uint16","dimensions":[5,7]}"#,
        );
        let block = hex("000000020000000200000003000000070001000800020009");
        assert_eq!(
            d.decode("0/0", &block).expect("ok"),
            hex("000000070001000800020009")
        );
        let edge = hex("0000000200000001000000010022");
        // Padded to 2x3 elements: only the first (origin) element is stored.
        assert_eq!(
            d.decode("2/2", &edge).expect("ok"),
            hex("002200000000000000000000")
        );
    }

    #[test]
    fn a_3d_edge_block_is_padded_in_fortran_order() {
        let d = decoder(r#"{"blockSize":[3,2,2],"dataType":"uint8","dimensions":[4,4,4]}"#);
        // A 1x2x1 edge block: elements (0,0,0)=5 and (0,1,0)=6.
        let block = encode_raw_block(&[1, 2, 1], &[5, 6]);
        let mut expected = vec![0u8; 12];
        expected[0] = 5; // (0,0,0)
        expected[3] = 6; // (0,1,0): stride of axis 1 is 3
        assert_eq!(d.decode("k", &block).expect("ok"), expected);
    }

    #[test]
    fn compressed_and_varlength_blocks() {
        let d = decoder(
            r#"{"blockSize":[4],"dataType":"int16","dimensions":[4],"compression":{"type":"lz4","blockSize":65536}}"#,
        );
        let data = hex("0001000200030004");
        let mut block = vec![0, 1, 0, 1, 0, 0, 0, 4, 0, 0, 0, 4]; // varlength, 4 elements
        block.extend(lz4_block::encode(&data, 65536));
        assert_eq!(d.decode("0", &block).expect("ok"), data);
        block[11] = 3;
        assert_eq!(
            d.decode("0", &block).expect_err("an error").to_string(),
            "block 0: varlength block states 3 elements, its extents [4] hold 4"
        );
    }

    #[test]
    fn malformed_blocks_name_the_block() {
        let d = decoder(r#"{"blockSize":[2,2],"dataType":"uint8","dimensions":[4,4]}"#);
        let err = |b: &[u8]| d.decode("arr/1/0", b).expect_err("an error").to_string();
        assert_eq!(err(&[0, 0, 0]), "block arr/1/0: truncated header (3 bytes)");
        assert_eq!(
            err(&encode_raw_block(&[2], &[1, 2])),
            "block arr/1/0: header has 1 axes, the dataset 2"
        );
        assert_eq!(
            err(&encode_raw_block(&[3, 2], &[0; 6])),
            "block arr/1/0: header extents [3, 2] exceed blockSize [2, 2]"
        );
        assert_eq!(
            err(&encode_raw_block(&[2, 2], &[0; 3])),
            "block arr/1/0: payload decodes to 3 bytes, extents [2, 2] need 4"
        );
        assert_eq!(
            err(&[0, 2, 0, 0]),
            "block arr/1/0: mode 2 (object) blocks hold no array elements"
        );
        assert_eq!(err(&[0, 9, 0, 0]), "block arr/1/0: unknown block mode 9");
        let gz = decoder(
            r#"{"blockSize":[2],"dataType":"uint8","dimensions":[4],"compression":{"type":"gzip"}}"#,
        );
        let e = gz
            .decode("g/0", &encode_raw_block(&[2], &[1, 2]))
            .expect_err("an error");
        assert_eq!(e.to_string(), "block g/0: cannot decompress (gzip)");
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("ok"))
            .collect()
    }
}
