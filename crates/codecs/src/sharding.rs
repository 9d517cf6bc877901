//! `sharding_indexed` as a codec: decodes whole shards of an already sharded source (and encodes them,
//! for tests and small arrays). The pipeline's writer builds shards itself, streaming inner chunks.

use std::sync::Arc;

use serde_json::json;
use zshard_core::{
    assemble_shard, copy_region, product, ArrayToBytesCodec, ChunkRepr, CodecChain, CodecSpec,
    Error, IndexEncoding, IndexLocation, Region, Result, ShardReader,
};

use crate::error::invalid;
use crate::registry::{build_chain, Codec};

#[derive(Debug)]
pub struct ShardingCodec {
    inner_shape: Vec<u64>,
    inner_chain: CodecChain,
    index_encoding: IndexEncoding,
    index_location: IndexLocation,
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let name = "sharding_indexed";
    let inner_shape: Vec<u64> = spec
        .get("chunk_shape")
        .and_then(|v| v.as_array())
        .and_then(|a| a.iter().map(|x| x.as_u64()).collect())
        .ok_or_else(|| invalid(name, "chunk_shape must be a list of integers"))?;
    if inner_shape.len() != repr.shape.len()
        || inner_shape.contains(&0)
        || repr.shape.iter().zip(&inner_shape).any(|(s, i)| s % i != 0)
    {
        return Err(invalid(
            name,
            format!(
                "chunk_shape {inner_shape:?} does not divide the shard shape {:?}",
                repr.shape
            ),
        ));
    }
    // The index holds 16 bytes per inner chunk and each inner chunk is a buffer: both must be sane.
    let per_shard: Vec<u64> = repr
        .shape
        .iter()
        .zip(&inner_shape)
        .map(|(s, i)| s / i)
        .collect();
    zshard_core::checked_byte_size("shard index of", &per_shard, 16)?;
    zshard_core::checked_byte_size("inner chunk shape", &inner_shape, repr.data_type.size())?;
    let parse_list = |key: &str| -> crate::Result<Vec<CodecSpec>> {
        let value = spec
            .get(key)
            .cloned()
            .ok_or_else(|| invalid(name, format!("missing {key}")))?;
        serde_json::from_value(value).map_err(|e| invalid(name, format!("{key}: {e}")))
    };
    let inner_repr = ChunkRepr {
        shape: inner_shape.clone(),
        ..repr.clone()
    };
    let inner_chain = build_chain(&parse_list("codecs")?, &inner_repr)?;
    let index_encoding = index_encoding(&parse_list("index_codecs")?)?;
    let index_location = match spec.get("index_location").and_then(|v| v.as_str()) {
        None => IndexLocation::End,
        Some(s) => IndexLocation::parse(s)
            .ok_or_else(|| invalid(name, format!("index_location {s:?} is not start or end")))?,
    };
    Ok(Codec::ArrayToBytes(Arc::new(ShardingCodec {
        inner_shape,
        inner_chain,
        index_encoding,
        index_location,
    })))
}

/// The index chains zshard reads: `bytes` (either byte order), optionally followed by `crc32c`.
pub fn index_encoding(specs: &[CodecSpec]) -> crate::Result<IndexEncoding> {
    let unsupported = || {
        invalid(
            "sharding_indexed",
            format!(
                "index_codecs {} are not supported (bytes, optionally followed by crc32c)",
                serde_json::to_string(specs).unwrap_or_default()
            ),
        )
    };
    IndexEncoding::from_codecs(specs).ok_or_else(unsupported)
}

impl ShardingCodec {
    fn chunks_per_shard(&self, repr: &ChunkRepr) -> Vec<u64> {
        repr.shape
            .iter()
            .zip(&self.inner_shape)
            .map(|(s, i)| s / i)
            .collect()
    }

    fn inner_repr(&self, repr: &ChunkRepr) -> ChunkRepr {
        ChunkRepr {
            shape: self.inner_shape.clone(),
            ..repr.clone()
        }
    }

    fn inner_region(&self, i: u64, cps: &[u64]) -> Region {
        let local = zshard_core::unravel_index(i, cps);
        Region {
            start: local
                .iter()
                .zip(&self.inner_shape)
                .map(|(l, s)| l * s)
                .collect(),
            shape: self.inner_shape.clone(),
        }
    }
}

impl ArrayToBytesCodec for ShardingCodec {
    fn encode(&self, data: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        let cps = self.chunks_per_shard(repr);
        let inner_repr = self.inner_repr(repr);
        let size = repr.data_type.size();
        let origin = vec![0; repr.shape.len()];
        let mut inner = Vec::with_capacity(product(&cps) as usize);
        for i in 0..product(&cps) {
            let region = self.inner_region(i, &cps);
            let mut buf = vec![0u8; inner_repr.byte_len()];
            copy_region(
                &data,
                &repr.shape,
                &origin,
                &mut buf,
                &self.inner_shape,
                &region.start,
                &region,
                size,
            );
            inner.push(if repr.fill_value.fills(&buf) {
                None
            } else {
                Some(self.inner_chain.encode(buf, &inner_repr)?)
            });
        }
        Ok(assemble_shard(
            &inner,
            self.index_location,
            self.index_encoding,
        ))
    }

    fn decode(&self, encoded: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        let cps = self.chunks_per_shard(repr);
        let n = product(&cps) as usize;
        let reader = ShardReader::new(&encoded, n, self.index_location, self.index_encoding)?;
        let inner_repr = self.inner_repr(repr);
        let size = repr.data_type.size();
        let origin = vec![0; repr.shape.len()];
        let mut out = repr.fill_value.repeat(repr.elements() as usize);
        for i in 0..n {
            let Some(bytes) = reader.chunk(i) else {
                continue;
            };
            let decoded =
                self.inner_chain
                    .decode(bytes, &inner_repr)
                    .map_err(|e| Error::Codec {
                        codec: "sharding_indexed".into(),
                        reason: format!("inner chunk {i}: {e}"),
                    })?;
            let region = self.inner_region(i as u64, &cps);
            copy_region(
                &decoded,
                &self.inner_shape,
                &region.start,
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
        let n = product(&self.chunks_per_shard(repr)) as usize;
        let inner = self.inner_repr(repr).byte_len();
        self.index_encoding.byte_len(n) + n * (inner + inner / 8 + 1024)
    }

    fn spec(&self) -> CodecSpec {
        let index_codecs = if self.index_encoding.crc32c {
            json!([{"name": "bytes", "configuration": {"endian": self.index_encoding.endian.as_str()}}, {"name": "crc32c"}])
        } else {
            json!([{"name": "bytes", "configuration": {"endian": self.index_encoding.endian.as_str()}}])
        };
        CodecSpec::new(
            "sharding_indexed",
            json!({
                "chunk_shape": self.inner_shape,
                "codecs": self.inner_chain.specs(),
                "index_codecs": index_codecs,
                "index_location": self.index_location.as_str(),
            }),
        )
    }
}
