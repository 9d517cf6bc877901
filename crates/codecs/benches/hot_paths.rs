//! The per-chunk work that bounds zshard's throughput, on W1's chunks (256x256 uint16, smooth data
//! plus noise): decoding the source (blosc zstd 5 + shuffle), encoding an inner chunk (zstd 3),
//! checking a chunk for passthrough, cutting inner chunks out of straddling source chunks (W3's
//! rechunk), and encoding a shard index. `cargo bench -p zshard-codecs`; the peer comparison of whole
//! conversions is `benches/run.sh`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::json;
use zshard_codecs::build_chain;
use zshard_core::{
    copy_region, shard_index_for, ChunkRepr, CodecSpec, DataType, FillValue, IndexEncoding,
    IndexLocation, Region,
};

fn w1_chunk() -> Vec<u8> {
    let mut state = 42u64;
    (0..256u64 * 256)
        .flat_map(|i| {
            let (row, col) = ((i / 256) as f64, (i % 256) as f64);
            let smooth = 20000.0 + 10000.0 * (row / 40.0).sin() * (col / 40.0).cos();
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let noise = (state >> 58) as f64;
            ((smooth + noise) as u16).to_le_bytes()
        })
        .collect()
}

fn repr(shape: &[u64]) -> ChunkRepr {
    ChunkRepr {
        shape: shape.to_vec(),
        data_type: DataType::UInt16,
        fill_value: FillValue::zero(DataType::UInt16),
    }
}

fn chain(codecs: serde_json::Value, repr: &ChunkRepr) -> zshard_core::CodecChain {
    let specs: Vec<CodecSpec> = serde_json::from_value(codecs).expect("codec specs");
    build_chain(&specs, repr).expect("chain")
}

fn codecs(c: &mut Criterion) {
    let raw = w1_chunk();
    let r = repr(&[256, 256]);
    let blosc = chain(
        json!([{"name": "bytes", "configuration": {"endian": "little"}},
               {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 5, "shuffle": "shuffle",
                                                   "typesize": 2, "blocksize": 0}}]),
        &r,
    );
    let zstd = chain(
        json!([{"name": "bytes", "configuration": {"endian": "little"}},
               {"name": "zstd", "configuration": {"level": 3, "checksum": false}}]),
        &r,
    );
    let blosc_encoded = blosc.encode(raw.clone(), &r).expect("encode");
    let zstd_encoded = zstd.encode(raw.clone(), &r).expect("encode");
    let mut group = c.benchmark_group("w1_chunk");
    group.throughput(Throughput::Bytes(raw.len() as u64));
    group.bench_function("decode blosc zstd5 shuffle", |b| {
        b.iter(|| blosc.decode(&blosc_encoded, &r).expect("decode"))
    });
    group.bench_function("encode zstd3", |b| {
        b.iter(|| zstd.encode(raw.clone(), &r).expect("encode"))
    });
    group.bench_function("decode zstd3", |b| {
        b.iter(|| zstd.decode(&zstd_encoded, &r).expect("decode"))
    });
    group.bench_function("passthrough check zstd3", |b| {
        b.iter(|| zstd.check(&zstd_encoded, &r).expect("check"))
    });
    group.finish();
}

fn reassembly(c: &mut Criterion) {
    // One 64^3 uint16 inner chunk cut out of the eight 100^3 source chunks it straddles.
    let source_shape = [100u64, 100, 100];
    let sources: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 100 * 100 * 100 * 2]).collect();
    let inner = Region {
        start: vec![64, 64, 64],
        shape: vec![64, 64, 64],
    };
    let mut group = c.benchmark_group("reassembly");
    group.throughput(Throughput::Bytes(64 * 64 * 64 * 2));
    group.bench_function("64^3 inner chunk from 100^3 source chunks", |b| {
        b.iter(|| {
            let mut out = vec![0u8; 64 * 64 * 64 * 2];
            for (i, coord) in inner.chunks_overlapping(&source_shape).iter().enumerate() {
                let origin: Vec<u64> = coord.iter().map(|c| c * 100).collect();
                let source = Region {
                    start: origin.clone(),
                    shape: source_shape.to_vec(),
                };
                if let Some(overlap) = inner.intersect(&source) {
                    copy_region(
                        &sources[i],
                        &source_shape,
                        &origin,
                        &mut out,
                        &inner.shape,
                        &inner.start,
                        &overlap,
                        2,
                    );
                }
            }
            out
        })
    });
    group.finish();
}

fn shard_index(c: &mut Criterion) {
    let mut group = c.benchmark_group("shard_index");
    for chunks in [256usize, 32768] {
        let inner: Vec<Option<Vec<u8>>> = (0..chunks)
            .map(|i| (i % 7 != 0).then(|| vec![0u8; 100 + i % 50]))
            .collect();
        group.bench_with_input(BenchmarkId::new("encode", chunks), &inner, |b, inner| {
            b.iter(|| shard_index_for(inner, IndexLocation::End, IndexEncoding::default()))
        });
    }
    group.finish();
}

criterion_group!(benches, codecs, reassembly, shard_index);
criterion_main!(benches);
