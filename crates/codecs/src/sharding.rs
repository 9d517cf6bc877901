//! `sharding_indexed` as a codec: decodes whole shards of an already sharded source (and encodes them,
//! for tests and small arrays). The pipeline's writer builds shards itself, streaming inner chunks.

use std::sync::Arc;

use zshard_core::{
    assemble_shard, copy_region, product, ArrayToBytesCodec, ChunkRepr, CodecChain, CodecSpec,
    Error, IndexEncoding, IndexLocation, Region, Result, ShardReader, ShardingConfig,
    SHARDING_CODEC,
};

use crate::registry::{build_chain, Codec};

#[derive(Debug)]
pub struct ShardingCodec {
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
