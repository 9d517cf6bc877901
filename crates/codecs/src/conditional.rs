//! `conditional` (zarr-extensions, bytes→bytes): a list of bytes→bytes codecs, each applied to a
//! chunk or not as a bit mask stored before the chunk's bytes says (bit `i`, little-endian bit
//! order, for the `i`-th codec; `header_bits / 8` bytes, by default the fewest that hold one bit per
//! codec).
//!
//! Decoding applies the codecs whose bits are set, last first. A set bit past the list (a codec
//! this metadata does not name) is refused: its data cannot be decoded. Encoding applies every
//! codec (all bits set): the writer's choice the registry leaves open, and the same bytes after
//! the header as the plain chain, so re-sharding changes nothing a reader sees.

use std::sync::Arc;

use serde_json::{json, Value};
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::bounded::check_input_len;
use crate::error::invalid;
use crate::registry::{build_codec, Codec};

const NAME: &str = "conditional";

#[derive(Debug)]
pub(crate) struct ConditionalCodec {
    codecs: Vec<Arc<dyn BytesToBytesCodec>>,
    /// The nested codecs as the metadata gave them (kept for the output's metadata).
    specs: Vec<CodecSpec>,
    /// Whether the metadata gave `header_bits` (written back only then).
    header_bits_given: bool,
    header_bytes: usize,
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let specs = crate::registry::nested_specs(
        spec,
        NAME,
        "missing codecs (a list of bytes-to-bytes codecs)",
    )?;
    let mut codecs = Vec::with_capacity(specs.len());
    for nested in &specs {
        match build_codec(nested, repr)? {
            Codec::BytesToBytes(c) => codecs.push(c),
            _ => {
                return Err(invalid(
                    NAME,
                    format!("{} is not a bytes-to-bytes codec", nested.name),
                ))
            }
        }
    }
    let (header_bits, header_bits_given) = match spec.get("header_bits") {
        None => (specs.len().div_ceil(8) * 8, false),
        Some(v) => {
            let bits = v
                .as_u64()
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| invalid(NAME, format!("header_bits {v} is not an integer")))?;
            (bits, true)
        }
    };
    if !header_bits.is_multiple_of(8) || header_bits < specs.len() {
        return Err(invalid(
            NAME,
            format!(
                "header_bits {header_bits} is not a multiple of 8 of at least the {} codecs",
                specs.len()
            ),
        ));
    }
    Ok(Codec::BytesToBytes(Arc::new(ConditionalCodec {
        codecs,
        specs,
        header_bits_given,
        header_bytes: header_bits / 8,
    })))
}

impl ConditionalCodec {
    /// Whether bit `i` of the little-endian bit mask `header` is set.
    fn bit(header: &[u8], i: usize) -> bool {
        header
            .get(i / 8)
            .is_some_and(|byte| byte >> (i % 8) & 1 == 1)
    }

    /// The largest input of each nested codec when encoding a chunk of at most `decoded_len` bytes,
    /// first codec first (the last is the largest stored data).
    fn bounds(&self, decoded_len: usize) -> Vec<usize> {
        let mut bounds = vec![decoded_len];
        for codec in &self.codecs {
            let last = bounds.last().copied().unwrap_or(0);
            // A skipped codec passes its input on: the bound is the larger of both.
            bounds.push(codec.max_encoded_len(last).max(last));
        }
        bounds
    }
}

impl BytesToBytesCodec for ConditionalCodec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        let mut header = vec![0u8; self.header_bytes];
        for i in 0..self.codecs.len() {
            header[i / 8] |= 1 << (i % 8);
        }
        let mut data = decoded.to_vec();
        for codec in &self.codecs {
            data = codec.encode(&data)?;
        }
        header.extend_from_slice(&data);
        Ok(header)
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        let (header, data) = encoded.split_at_checked(self.header_bytes).ok_or_else(|| {
            Error::codec(
                NAME,
                format!(
                    "{} bytes hold no header of {} bytes",
                    encoded.len(),
                    self.header_bytes
                ),
            )
        })?;
        if let Some(bit) =
            (self.codecs.len()..8 * self.header_bytes).find(|&i| Self::bit(header, i))
        {
            return Err(Error::codec(
                NAME,
                format!(
                    "bit {bit} of the header is set, but the metadata names {} codecs",
                    self.codecs.len()
                ),
            ));
        }
        let bounds = self.bounds(max_decoded_len);
        check_input_len(data, bounds.last().copied().unwrap_or(0), NAME)?;
        let mut out: Option<Vec<u8>> = None;
        for (i, codec) in self.codecs.iter().enumerate().rev() {
            if Self::bit(header, i) {
                let input = out.as_deref().unwrap_or(data);
                out = Some(codec.decode(input, bounds[i])?);
            }
        }
        let out = out.unwrap_or_else(|| data.to_vec());
        check_input_len(&out, max_decoded_len, NAME)?;
        Ok(out)
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        let stored = self.bounds(decoded_len).last().copied().unwrap_or(0);
        stored.saturating_add(self.header_bytes)
    }

    fn spec(&self) -> CodecSpec {
        let codecs: Vec<Value> = self.specs.iter().map(CodecSpec::to_json).collect();
        let mut configuration = json!({ "codecs": codecs });
        if self.header_bits_given {
            configuration["header_bits"] = json!(8 * self.header_bytes);
        }
        CodecSpec::new(NAME, configuration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_core::{DataType, FillValue};

    fn conditional(configuration: Value) -> crate::Result<Arc<dyn BytesToBytesCodec>> {
        let repr = ChunkRepr {
            shape: vec![64],
            data_type: DataType::UInt32,
            fill_value: FillValue::zero(DataType::UInt32),
        };
        match build(&CodecSpec::new(NAME, configuration), &repr)? {
            Codec::BytesToBytes(c) => Ok(c),
            other => panic!("not bytes to bytes: {other:?}"),
        }
    }

    fn nested(name: &str, configuration: Value) -> Arc<dyn BytesToBytesCodec> {
        let repr = ChunkRepr {
            shape: vec![64],
            data_type: DataType::UInt32,
            fill_value: FillValue::zero(DataType::UInt32),
        };
        match build_codec(&CodecSpec::new(name, configuration), &repr) {
            Ok(Codec::BytesToBytes(c)) => c,
            other => panic!("not built: {other:?}"),
        }
    }

    /// Chunks made as the registry's text says, with each mask: the header, then the codecs whose
    /// bits are set applied in list order.
    #[test]
    fn decodes_every_mask_of_the_registry_example() {
        let config = json!({"codecs": [
            {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
            {"name": "zstd", "configuration": {"level": 5}}
        ]});
        let c = conditional(config.clone()).expect("built");
        let shuffle = nested("numcodecs.shuffle", json!({"elementsize": 4}));
        let zstd = nested("zstd", json!({"level": 5}));
        let data: Vec<u8> = (0u32..64).flat_map(|v| (v * 7).to_le_bytes()).collect();
        for mask in 0u8..4 {
            let mut body = data.clone();
            if mask & 1 == 1 {
                body = shuffle.encode(&body).expect("shuffle");
            }
            if mask & 2 == 2 {
                body = zstd.encode(&body).expect("zstd");
            }
            let mut chunk = vec![mask];
            chunk.extend_from_slice(&body);
            assert_eq!(c.decode(&chunk, 256).expect("decode"), data, "mask {mask}");
        }
        // zshard writes every bit set.
        let encoded = c.encode(&data).expect("encode");
        assert_eq!(encoded[0], 0b11);
        assert_eq!(c.decode(&encoded, 256).expect("decode"), data);
        assert!(encoded.len() <= c.max_encoded_len(256));
        assert_eq!(
            c.spec().to_json(),
            json!({"name": "conditional", "configuration": config})
        );
        // A reserved bit set, no header, or more bytes than the chunk holds: refused.
        let mut reserved = vec![0b100u8];
        reserved.extend_from_slice(&data);
        let err = c.decode(&reserved, 256).expect_err("reserved bit");
        assert!(err.to_string().contains("bit 2"), "{err}");
        assert!(c.decode(&[], 256).is_err());
        let mut raw = vec![0u8];
        raw.extend_from_slice(&data);
        assert!(c.decode(&raw, 255).is_err());
    }

    #[test]
    fn header_bits_widen_the_header_and_are_checked() {
        let c = conditional(json!({"codecs": ["crc32c"], "header_bits": 16})).expect("built");
        let data = b"sixteen bits of header".to_vec();
        let mut chunk = vec![0u8, 0];
        chunk.extend_from_slice(&data);
        assert_eq!(c.decode(&chunk, data.len()).expect("decode"), data);
        let encoded = c.encode(&data).expect("encode");
        assert_eq!(encoded[..2], [1, 0]);
        assert_eq!(encoded.len(), 2 + data.len() + 4);
        assert_eq!(c.decode(&encoded, data.len()).expect("decode"), data);
        assert_eq!(c.spec().get("header_bits"), Some(&json!(16)));
        for bad in [
            json!({"codecs": ["crc32c"], "header_bits": 12}),
            json!({"codecs": ["crc32c", "crc32c"], "header_bits": 0}),
            json!({"codecs": [{"name": "bytes"}]}),
            json!({}),
        ] {
            assert!(conditional(bad.clone()).is_err(), "{bad}");
        }
    }
}
