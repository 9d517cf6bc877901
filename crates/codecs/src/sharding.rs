//! `sharding_indexed` as a codec: decodes whole shards of an already sharded source that is not read
//! by inner chunk (most are: see `ArrayMeta::read_by_inner_chunk`; this covers the rest, such as a
//! chain with codecs after the sharding codec), and encodes them, for tests and small arrays. The
//! pipeline's writer builds shards itself, streaming inner chunks.

use std::sync::Arc;

use zshard_core::{
    assemble_shard, copy_region, product, ArrayToBytesCodec, ChunkRepr, CodecChain, CodecSpec,
    Error, IndexEncoding, IndexLocation, Region, Result, ShardReader, ShardingConfig,
    SHARDING_CODEC,
};

use crate::registry::{build_chain, Codec};

#[derive(Debug)]
pub(crate) struct ShardingCodec {
    inner_shape: Vec<u64>,
    inner_chain: CodecChain,
    index_encoding: IndexEncoding,
    index_location: IndexLocation,
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let config = ShardingConfig::from_codec(spec)?;
    let per_shard = config.chunks_per_shard(&repr.shape)?;
    // The index holds 16 bytes per inner chunk and each inner chunk is a buffer: both must be sane.
    zshard_core::checked_byte_size("shard index of", &per_shard, 16)?;
    zshard_core::checked_byte_size(
        "inner chunk shape",
        &config.chunk_shape,
        repr.data_type.size(),
    )?;
    let inner_repr = ChunkRepr {
        shape: config.chunk_shape.clone(),
        ..repr.clone()
    };
    let inner_chain = build_chain(&config.codecs, &inner_repr)?;
    let index_encoding = config.index_encoding()?;
    Ok(Codec::ArrayToBytes(Arc::new(ShardingCodec {
        inner_shape: config.chunk_shape,
        inner_chain,
        index_encoding,
        index_location: config.index_location,
    })))
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
                        codec: SHARDING_CODEC.into(),
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
        ShardingConfig::new(
            self.inner_shape.clone(),
            self.inner_chain.specs(),
            self.index_encoding,
            self.index_location,
        )
        .to_codec_spec()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};
    use zshard_core::{ChunkRepr, CodecSpec, DataType, Error, FillValue};

    use crate::registry::build_codec;

    fn repr() -> ChunkRepr {
        ChunkRepr {
            shape: vec![8, 4],
            data_type: DataType::UInt16,
            fill_value: FillValue::zero(DataType::UInt16),
        }
    }

    fn build(configuration: Value) -> crate::Result<crate::Codec> {
        build_codec(&CodecSpec::new("sharding_indexed", configuration), &repr())
    }

    /// The spec is written in full: the index location even when it was left out, the byte order
    /// of the index, the canonical inner chain.
    #[test]
    fn the_spec_of_a_built_codec_is_the_full_configuration() {
        let little = json!({"name": "bytes", "configuration": {"endian": "little"}});
        let codec = build(
            json!({"chunk_shape": [4, 2], "codecs": [little], "index_codecs": ["bytes", "crc32c"]}),
        )
        .expect("valid");
        let crate::Codec::ArrayToBytes(codec) = codec else {
            panic!("sharding is an array-to-bytes codec")
        };
        assert_eq!(
            serde_json::to_string(&codec.spec()).expect("json"),
            r#"{"name":"sharding_indexed","configuration":{"chunk_shape":[4,2],"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"end"}}"#
        );
    }

    #[test]
    fn invalid_configurations_are_build_errors_naming_the_member() {
        let little = json!({"name": "bytes", "configuration": {"endian": "little"}});
        let cases = [
            (
                json!({"chunk_shape": [3, 2], "codecs": [little], "index_codecs": ["bytes"]}),
                "chunk_shape",
            ),
            (
                json!({"chunk_shape": [4], "codecs": [little], "index_codecs": ["bytes"]}),
                "chunk_shape",
            ),
            (
                json!({"chunk_shape": [4, 0], "codecs": [little], "index_codecs": ["bytes"]}),
                "chunk_shape",
            ),
            (
                json!({"chunk_shape": [4, 2], "codecs": [little], "index_codecs": ["zstd"]}),
                "index_codecs",
            ),
            (
                json!({"chunk_shape": [4, 2], "codecs": [little], "index_codecs": ["bytes"], "index_location": "middle"}),
                "index_location",
            ),
            (
                json!({"chunk_shape": [4, 2], "index_codecs": ["bytes"]}),
                "configuration",
            ),
        ];
        for (configuration, member) in cases {
            match build(configuration.clone()) {
                Err(crate::Error::Core(Error::InvalidShardingConfig { field, .. })) => {
                    assert_eq!(field, member, "{configuration}")
                }
                other => panic!("{configuration}: expected an invalid {member}, got {other:?}"),
            }
        }
    }
}
