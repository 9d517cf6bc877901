//! The stages over in-memory sources and sinks: values, bounded work in flight, errors.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::json;
use zshard_codecs::build_chain;
use zshard_core::{
    c_order, grid_shape, ChunkReader, ChunkRepr, CodecSpec, DataType, Error as CoreError,
    FillValue, ShardGeometry, ShardSink,
};
use zshard_pipeline::{run, ArrayJob, ArrayLayout, Error, Options, ShardTask};

/// Chunks held in memory; counts chunks read so tests can see how far the fetcher ran ahead.
#[derive(Debug)]
struct MemoryReader {
    chunks: HashMap<Vec<u64>, Bytes>,
    fail_at: Option<Vec<u64>>,
    chunks_read: AtomicU64,
    /// A chunk whose first read takes 300 ms; how many chunks other reads got meanwhile.
    slow_at: Option<Vec<u64>>,
    slowed: AtomicBool,
    read_while_slow: AtomicU64,
}

impl ChunkReader for MemoryReader {
    fn chunk_key(&self, coord: &[u64]) -> String {
        format!("mem/{coord:?}")
    }

    fn read_chunks(
        &self,
        coords: &[Vec<u64>],
        _max_len: u64,
    ) -> Vec<zshard_core::Result<Option<Bytes>>> {
        let slow = self.slow_at.as_ref().is_some_and(|s| coords.contains(s));
        // Only the first read of it is slow.
        if slow && !self.slowed.swap(true, Ordering::SeqCst) {
            let before = self.chunks_read.load(Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(300));
            let after = self.chunks_read.load(Ordering::SeqCst);
            self.read_while_slow.store(after - before, Ordering::SeqCst);
        }
        self.chunks_read
            .fetch_add(coords.len() as u64, Ordering::SeqCst);
        coords
            .iter()
            .map(|c| {
                if self.fail_at.as_ref() == Some(c) {
                    return Err(CoreError::Read {
                        key: self.chunk_key(c),
                        source: "disk on fire".into(),
                    });
                }
                Ok(self.chunks.get(c).cloned())
            })
            .collect()
    }
}

#[derive(Debug, Default)]
struct MemorySink {
    shards: Mutex<HashMap<Vec<u64>, Vec<Option<Bytes>>>>,
}

impl ShardSink for MemorySink {
    fn shard_key(&self, shard: &[u64]) -> String {
        format!("out/{shard:?}")
    }

    fn write_shard(
        &self,
        shard: &[u64],
        inner: &[Option<Bytes>],
    ) -> zshard_core::Result<zshard_core::Stored> {
        let mut shards = self
            .shards
            .lock()
            .map_err(|_| CoreError::codec("sink", "poisoned"))?;
        shards.insert(shard.to_vec(), inner.to_vec());
        Ok(zshard_core::Stored::of_parts(
            inner.iter().flatten().map(|b| &b[..]),
        ))
    }
}

fn repr(shape: &[u64]) -> ChunkRepr {
    ChunkRepr {
        shape: shape.to_vec(),
        data_type: DataType::UInt16,
        fill_value: FillValue::zero(DataType::UInt16),
    }
}

fn value(row: u64, col: u64) -> u16 {
    (row * 1000 + col + 1) as u16
}

/// A `rows x 8` uint16 array in 4x8 source chunks holding `value(r, c)`, converted into shards of
/// 8x8 with 2x4 inner chunks (inner chunks smaller than source chunks and cut across them).
fn job(rows: u64, fail_at: Option<Vec<u64>>) -> (ArrayJob, Arc<MemoryReader>, Arc<MemorySink>) {
    job_with_source_chunks(rows, [4, 8], fail_at)
}

/// `job`, with source chunks of `chunk` (edge chunks are full size, as stored).
fn job_with_source_chunks(
    rows: u64,
    chunk: [u64; 2],
    fail_at: Option<Vec<u64>>,
) -> (ArrayJob, Arc<MemoryReader>, Arc<MemorySink>) {
    job_with_shape([rows, 8], chunk, fail_at)
}

/// `job_with_source_chunks` for an array of `shape` (`value(r, c)` at row r, column c).
fn job_with_shape(
    shape: [u64; 2],
    chunk: [u64; 2],
    fail_at: Option<Vec<u64>>,
) -> (ArrayJob, Arc<MemoryReader>, Arc<MemorySink>) {
    let codecs: Vec<CodecSpec> = serde_json::from_value(json!([
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 1}}
    ]))
    .expect("codecs");
    let source = repr(&chunk);
    let chain = build_chain(&codecs, &source).expect("chain");
    let mut chunks = HashMap::new();
    for coord in c_order(&grid_shape(&shape, &chunk)) {
        let raw: Vec<u8> = (0..chunk[0])
            .flat_map(|r| (0..chunk[1]).map(move |c| (r, c)))
            .flat_map(|(r, c)| {
                value(coord[0] * chunk[0] + r, coord[1] * chunk[1] + c).to_le_bytes()
            })
            .collect();
        chunks.insert(
            coord,
            Bytes::from(chain.encode(raw, &source).expect("encode")),
        );
    }
    let reader = Arc::new(MemoryReader {
        chunks,
        fail_at,
        chunks_read: AtomicU64::new(0),
        slow_at: None,
        slowed: AtomicBool::new(false),
        read_while_slow: AtomicU64::new(0),
    });
    let sink = Arc::new(MemorySink::default());
    let inner = repr(&[2, 4]);
    let job = ArrayJob {
        name: "mem".into(),
        source_chain: chain.clone(),
        inner_chain: Some(build_chain(&codecs, &inner).expect("chain")),
        layout: ArrayLayout {
            geometry: ShardGeometry::new(&shape, &[8, 8], &[2, 4]).expect("geometry"),
            source_repr: source,
            source_grid: None,
            inner_repr: inner,
            passthrough: false,
        },
        reader: reader.clone(),
        sink: sink.clone(),
        derived: None,
        previous: None,
        hash_copied: true,
    };
    (job, reader, sink)
}

#[test]
fn values_land_in_the_right_inner_chunks() {
    let (job, _, sink) = job(20, None);
    let jobs = [job];
    let stats = run(
        &jobs,
        ShardTask::all(&jobs),
        &Options::with_threads(3),
        &|_| {},
    )
    .expect("run");
    assert_eq!(stats.shards_written, 3);
    assert_eq!(stats.chunks_read, 5);
    let shards = sink.shards.lock().expect("lock");
    // Shard (2,0) covers rows 16..24 of a 20-row array: inner chunks of rows 20..24 are outside it.
    let last = &shards[&vec![2, 0]];
    assert!(last[4..].iter().all(Option::is_none));
    assert_values(&jobs[0], &shards, 20);
}

/// An update's copied inner chunks are decoded to hash their values only when the job asks
/// (`hash_copied`: a manifest will be kept). Without, a copy is never decoded (these bytes would
/// not decode) and lands as it stood, and its shard names no hashes; with, it is decoded, and
/// bytes that do not decode stop the run with the shard's key.
#[test]
fn copied_inner_chunks_are_decoded_only_to_hash_them() {
    let stood = Bytes::from_static(b"not zstd at all");
    for hash_copied in [false, true] {
        let (mut job, _, sink) = job(8, None);
        // Shard (0, 0) of 8x8 holds 4x2 inner chunks of 2x4: its inner chunk 1 is at (0, 1).
        job.previous = Some(Arc::new(MemoryReader {
            chunks: HashMap::from([(vec![0, 1], stood.clone())]),
            fail_at: None,
            chunks_read: AtomicU64::new(0),
            slow_at: None,
            slowed: AtomicBool::new(false),
            read_while_slow: AtomicU64::new(0),
        }));
        job.hash_copied = hash_copied;
        let jobs = [job];
        let mut task = ShardTask::new(0, vec![0, 0]);
        task.reuse = vec![1];
        let hashes = std::sync::Mutex::new(Vec::new());
        let result = run(
            &jobs,
            std::iter::once(task),
            &Options::with_threads(2),
            &|outcome| {
                if let Ok(mut hashes) = hashes.lock() {
                    hashes.push(outcome.chunk_hashes.clone());
                }
            },
        );
        let shards = sink.shards.lock().expect("lock");
        if hash_copied {
            let error = result.expect_err("a copy that does not decode").to_string();
            assert!(error.contains("inner chunk 1, as it stood"), "{error}");
            assert!(shards.is_empty());
            continue;
        }
        result.expect("run");
        let shard = &shards[&vec![0, 0]];
        assert_eq!(shard[1].as_ref(), Some(&stood));
        // The others were converted: they hold the source's values.
        let chain = jobs[0].inner_chain.as_ref().expect("encoding job");
        let first = chain
            .decode(shard[0].as_ref().expect("written"), &repr(&[2, 4]))
            .expect("decode");
        assert_eq!(&first[..2], &value(0, 0).to_le_bytes());
        assert_eq!(
            *hashes.lock().expect("lock"),
            vec![Vec::<Option<u32>>::new()]
        );
    }
}

/// Every inner chunk inside the `rows`-row array is written and holds `value` (the fill value, 0,
/// past the last row); chunks wholly outside it are not written.
fn assert_values(job: &ArrayJob, shards: &HashMap<Vec<u64>, Vec<Option<Bytes>>>, rows: u64) {
    let inner = repr(&[2, 4]);
    let chain = job.inner_chain.as_ref().expect("encoding job");
    for (shard, chunks) in shards.iter() {
        for (i, chunk) in chunks.iter().enumerate() {
            let (ir, ic) = (i as u64 / 2, i as u64 % 2);
            let first_row = shard[0] * 8 + ir * 2;
            let Some(bytes) = chunk else {
                assert!(first_row >= rows, "shard {shard:?} inner {i} is missing");
                continue;
            };
            let raw = chain.decode(bytes, &inner).expect("decode");
            for r in 0..2 {
                for c in 0..4 {
                    let at = (r * 4 + c) as usize * 2;
                    let got = u16::from_le_bytes([raw[at], raw[at + 1]]);
                    let row = first_row + r;
                    let expected = if row < rows {
                        value(row, shard[1] * 8 + ic * 4 + c)
                    } else {
                        0
                    };
                    assert_eq!(got, expected, "shard {shard:?} inner {i}");
                }
            }
        }
    }
}

#[test]
fn work_in_flight_is_bounded_by_the_channels_not_the_array() {
    // 4000 shards; after each write, check how far the fetcher has run ahead of the writer.
    let (job, reader, _) = job(4000 * 8, None);
    let jobs = [job];
    let written = AtomicU64::new(0);
    let max_ahead = AtomicU64::new(0);
    let options = Options {
        channel_capacity: 1,
        io_threads: 2,
        ..Options::with_threads(2)
    };
    run(&jobs, ShardTask::all(&jobs), &options, &|_| {
        let done = written.fetch_add(1, Ordering::SeqCst) + 1;
        let fetched_shards = reader.chunks_read.load(Ordering::SeqCst) / 2;
        max_ahead.fetch_max(fetched_shards.saturating_sub(done), Ordering::SeqCst);
    })
    .expect("run");
    // 4 channels of 1, up to 2 shards inside each rayon stage, 1 in assembly, 2 being fetched and 2
    // being written: never more than about a dozen shards between reader and sink, whatever the size.
    let ahead = max_ahead.load(Ordering::SeqCst);
    assert!(
        ahead <= 12,
        "fetcher ran {ahead} shards ahead of the writer"
    );
}

#[test]
fn a_read_error_names_the_chunk_stops_the_run_and_writes_no_shard_for_it() {
    let (job, reader, sink) = job(4000 * 8, Some(vec![9, 0]));
    let jobs = [job];
    let err = run(
        &jobs,
        ShardTask::all(&jobs),
        &Options::with_threads(2),
        &|_| {},
    )
    .expect_err("fails");
    assert!(matches!(err, Error::Read { .. }));
    let message = format!("{err}");
    assert!(
        message.contains("mem/[9, 0]") && message.contains("array mem"),
        "{message}"
    );
    // Chunk (9,0) is rows 36..40: shard (4,0). It is never written; the run stops early.
    assert!(!sink.shards.lock().expect("lock").contains_key(&vec![4, 0]));
    assert!(
        reader.chunks_read.load(Ordering::SeqCst) < 200,
        "the fetcher must stop after an error"
    );
}

#[test]
fn a_decode_error_is_reported_with_its_key() {
    let (mut job, _, sink) = job(16, None);
    let mut chunks = HashMap::new();
    chunks.insert(vec![1, 0], Bytes::from_static(b"not zstd"));
    job.reader = Arc::new(MemoryReader {
        chunks,
        fail_at: None,
        chunks_read: AtomicU64::new(0),
        slow_at: None,
        slowed: AtomicBool::new(false),
        read_while_slow: AtomicU64::new(0),
    });
    let jobs = [job];
    let err = run(
        &jobs,
        ShardTask::all(&jobs),
        &Options::with_threads(2),
        &|_| {},
    )
    .expect_err("fails");
    assert!(
        matches!(err, Error::Decode { ref key, .. } if key == "mem/[1, 0]"),
        "{err}"
    );
    assert!(!sink.shards.lock().expect("lock").contains_key(&vec![0, 0]));
}

/// What a run wrote: its result, the shards the sink got, the outcomes reported.
type PartsRun = (
    Result<zshard_pipeline::Stats, Error>,
    HashMap<Vec<u64>, Vec<Option<Bytes>>>,
    Vec<zshard_pipeline::ShardOutcome>,
);

/// Runs `job(rows)` with shards cut into parts of at most `part_bytes` raw bytes (an inner chunk is 16).
fn run_in_parts(rows: u64, fail_at: Option<Vec<u64>>, threads: usize, part_bytes: u64) -> PartsRun {
    run_job_in_parts(job(rows, fail_at), threads, part_bytes, true)
}

fn run_job_in_parts(
    job: (ArrayJob, Arc<MemoryReader>, Arc<MemorySink>),
    threads: usize,
    part_bytes: u64,
    keep_source_chunks: bool,
) -> PartsRun {
    let options = Options {
        part_bytes,
        io_threads: 2,
        keep_source_chunks,
        ..Options::with_threads(threads)
    };
    run_job_with(job, &options)
}

fn run_job_with(
    (job, _, sink): (ArrayJob, Arc<MemoryReader>, Arc<MemorySink>),
    options: &Options,
) -> PartsRun {
    let jobs = [job];
    let outcomes = Mutex::new(Vec::new());
    let result = run(&jobs, ShardTask::all(&jobs), options, &|o| {
        outcomes.lock().expect("lock").push(o.clone())
    });
    let shards = sink.shards.lock().expect("lock").clone();
    (result, shards, outcomes.into_inner().expect("lock"))
}

#[test]
fn shards_cut_into_parts_equal_shards_converted_whole() {
    let (whole, expected, _) = run_in_parts(44, None, 2, 1 << 20);
    let whole = whole.expect("run");
    assert_eq!(expected.len(), 6);
    // 1, 2, 3 (cut into blocks of one row of two chunks) and 8 inner chunks per part.
    for part_bytes in [1, 16, 32, 48, 128] {
        for threads in [1, 3] {
            let (stats, shards, outcomes) = run_in_parts(44, None, threads, part_bytes);
            let stats = stats.expect("run");
            assert_eq!(
                shards, expected,
                "part_bytes {part_bytes}, {threads} threads"
            );
            let counts =
                |s: &zshard_pipeline::Stats| (s.shards_written, s.shards_empty, s.bytes_written);
            assert_eq!(
                counts(&stats),
                counts(&whole),
                "part_bytes {part_bytes}, {threads} threads"
            );
            // One outcome per shard, with the reads of all its parts: each source chunk once, as
            // for whole shards.
            assert_eq!(outcomes.len(), 6);
            let reads: u64 = outcomes.iter().map(|o| o.chunks_read).sum();
            assert_eq!(reads, stats.chunks_read);
            assert_eq!(reads, 11);
        }
    }
}

#[test]
fn straddling_source_chunks_are_read_once_per_shard_and_shared_by_its_parts() {
    // Source chunks of 3x3 straddle the 2x4 inner chunks, the parts and the 8x8 shards; a chunk can
    // be needed by parts that are not next to each other (parts of one inner chunk: it meets parts
    // 0 and 2 but not 1 when it spans two inner rows of one column).
    let rows = 21;
    let (whole, expected, _) =
        run_job_in_parts(job_with_source_chunks(rows, [3, 3], None), 2, 1 << 20, true);
    let whole = whole.expect("run");
    assert_eq!(expected.len(), 3);
    let (job, _, _) = job_with_source_chunks(rows, [3, 3], None);
    assert_values(&job, &expected, rows);
    for part_bytes in [16, 32, 48, 64] {
        for threads in [1, 3] {
            for keep in [true, false] {
                let job = job_with_source_chunks(rows, [3, 3], None);
                let (stats, shards, _) = run_job_in_parts(job, threads, part_bytes, keep);
                let stats = stats.expect("run");
                let case = format!("part_bytes {part_bytes}, {threads} threads, keep {keep}");
                assert_eq!(shards, expected, "{case}");
                if keep {
                    assert_eq!(stats.chunks_read, whole.chunks_read, "{case}: once per run");
                } else {
                    assert!(
                        stats.chunks_read > whole.chunks_read,
                        "{case}: once per part"
                    );
                }
            }
        }
    }
    // Shard rows 0..8, 8..16, 16..21 meet source chunk rows 0..3, 2..6, 5..7 (of 3 columns each);
    // chunk rows 2 and 5, which straddle two shards, are read for the first of them and handed to
    // the next (issue 43: they were read for each).
    assert_eq!(whole.chunks_read, (3 + 3 + 1) * 3);
}

#[test]
fn source_chunks_straddling_shards_are_read_once_and_handed_over() {
    // A 16x16 array of 3x3 source chunks (6x6 of them) in 8x8 shards: chunk row 2 and chunk column
    // 2 straddle the shard boundaries. Shards go in C order, (0,0) (0,1) (1,0) (1,1). Cut into
    // parts (slabs of rows), shard (0,0) needs chunk (0,2) in its first parts only: it must still
    // keep it for (0,1).
    let shape = [16, 16];
    let (whole, expected, outcomes) =
        run_job_in_parts(job_with_shape(shape, [3, 3], None), 2, 1 << 20, true);
    let whole = whole.expect("run");
    assert_eq!(expected.len(), 4);
    let (job, _, _) = job_with_shape(shape, [3, 3], None);
    assert_values(&job, &expected, 16);
    let reads = |outcomes: &[zshard_pipeline::ShardOutcome], shard: [u64; 2]| {
        outcomes
            .iter()
            .find(|o| o.task.shard == shard)
            .map(|o| o.chunks_read)
    };
    let per_shard = |outcomes: &[zshard_pipeline::ShardOutcome]| {
        [[0, 0], [0, 1], [1, 0], [1, 1]].map(|shard| reads(outcomes, shard))
    };
    // Every chunk is read once (issue 43): (0,0) reads its 3x3; (0,1) its 3x4 less column 2,
    // which (0,0) kept for it; (1,0) its 4x3 less row 2, which (0,0) kept for it across the
    // slab; (1,1) its 4x4 less row 2 (from (0,1)) and column 2 (from (1,0)).
    assert_eq!(per_shard(&outcomes), [Some(9), Some(9), Some(9), Some(9)]);
    assert_eq!(whole.chunks_read, 36);
    // Handing chunks only to the next shard, (1,0) reads row 2 again and (1,1) row 2 but chunk (2,2).
    let next_only = Options {
        part_bytes: 1 << 20,
        keep_across_slab: false,
        ..Options::with_threads(2)
    };
    let (result, shards, outcomes) = run_job_with(job_with_shape(shape, [3, 3], None), &next_only);
    result.expect("run");
    assert_eq!(shards, expected);
    assert_eq!(per_shard(&outcomes), [Some(9), Some(9), Some(11), Some(12)]);
    for part_bytes in [16, 32, 48, 64] {
        for threads in [1, 3] {
            for keep in [true, false] {
                let job = job_with_shape(shape, [3, 3], None);
                let (stats, shards, _) = run_job_in_parts(job, threads, part_bytes, keep);
                let stats = stats.expect("run");
                let case = format!("part_bytes {part_bytes}, {threads} threads, keep {keep}");
                assert_eq!(shards, expected, "{case}");
                // Without keeping, each shard reads every chunk it meets: 9 + 12 + 12 + 16 at
                // least (more when parts share chunks).
                if keep {
                    assert_eq!(stats.chunks_read, 36, "{case}");
                } else {
                    assert!(stats.chunks_read >= 49, "{case}");
                }
            }
        }
    }
}

/// One 8x8x4 uint16 shard (`value3(z, y, x)`) of 2x2x2 inner chunks, from 4x4x4 source chunks.
fn job_3d() -> (ArrayJob, Arc<MemoryReader>, Arc<MemorySink>) {
    job_3d_with([8, 8, 4], [8, 8, 4], [4, 4, 4], [2, 2, 2])
}

/// A uint16 array of `shape` (`value3(z, y, x)`) in shards of `shard` and inner chunks of `inner`,
/// from source chunks of `chunk`.
fn job_3d_with(
    shape: [u64; 3],
    shard: [u64; 3],
    chunk: [u64; 3],
    inner: [u64; 3],
) -> (ArrayJob, Arc<MemoryReader>, Arc<MemorySink>) {
    let codecs: Vec<CodecSpec> = serde_json::from_value(json!([
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 1}}
    ]))
    .expect("codecs");
    let source = repr(&chunk);
    let chain = build_chain(&codecs, &source).expect("chain");
    let mut chunks = HashMap::new();
    for coord in c_order(&grid_shape(&shape, &chunk)) {
        let raw: Vec<u8> = c_order(&chunk)
            .flat_map(|at| {
                let [z, y, x] = [0, 1, 2].map(|d| coord[d] * chunk[d] + at[d]);
                value3(z, y, x).to_le_bytes()
            })
            .collect();
        let encoded = chain.encode(raw, &source).expect("encode");
        chunks.insert(coord, Bytes::from(encoded));
    }
    let reader = Arc::new(MemoryReader {
        chunks,
        fail_at: None,
        chunks_read: AtomicU64::new(0),
        slow_at: None,
        slowed: AtomicBool::new(false),
        read_while_slow: AtomicU64::new(0),
    });
    let sink = Arc::new(MemorySink::default());
    let inner_repr = repr(&inner);
    let job = ArrayJob {
        name: "mem3".into(),
        source_chain: chain,
        inner_chain: Some(build_chain(&codecs, &inner_repr).expect("chain")),
        layout: ArrayLayout {
            geometry: ShardGeometry::new(&shape, &shard, &inner).expect("geometry"),
            source_repr: source,
            source_grid: None,
            inner_repr,
            passthrough: false,
        },
        reader: reader.clone(),
        sink: sink.clone(),
        derived: None,
        previous: None,
        hash_copied: true,
    };
    (job, reader, sink)
}

fn value3(z: u64, y: u64, x: u64) -> u16 {
    (z * 100 + y * 10 + x + 1) as u16
}

#[test]
fn source_chunks_cut_down_to_what_later_parts_need_give_the_same_shards() {
    // Kept chunks cut down after each part (issue 43, W6 under its limit) must give the shards of
    // a run that keeps nothing, and read each chunk as often as keeping them whole does: with
    // source chunks larger than inner chunks (W6), smaller, straddling shards (handed whole to
    // the next shard) and not, for parts of one inner chunk up to several rows.
    let cases = [
        ([8, 8, 4], [8, 8, 4], [4, 4, 4], [2, 2, 2]),
        ([9, 10, 7], [6, 8, 6], [4, 3, 5], [2, 2, 3]),
        ([12, 12, 8], [12, 12, 8], [3, 3, 3], [4, 4, 4]),
        ([10, 12, 12], [10, 12, 12], [6, 5, 12], [2, 3, 4]),
    ];
    for (shape, shard, chunk, inner) in cases {
        let inner_bytes = inner.iter().product::<u64>() * 2;
        for parts_of in [1, 2, 3, 5, 8] {
            let run_with = |keep_source_chunks, trim_kept| {
                let options = Options {
                    part_bytes: inner_bytes * parts_of,
                    keep_source_chunks,
                    keep_across_slab: false,
                    trim_kept,
                    ..Options::with_threads(2)
                };
                let (result, shards, _) =
                    run_job_with(job_3d_with(shape, shard, chunk, inner), &options);
                (result.expect("run").chunks_read, shards)
            };
            let case = format!("{shape:?} {shard:?} {chunk:?} {inner:?}, {parts_of} per part");
            let (_, expected) = run_with(false, false);
            let (whole, shards_whole) = run_with(true, false);
            let (cut, shards_cut) = run_with(true, true);
            assert!(shards_whole == expected, "{case}: kept whole");
            assert!(shards_cut == expected, "{case}: cut down");
            assert_eq!(cut, whole, "{case}");
        }
    }
}

#[test]
fn source_chunks_kept_within_rows_of_parts_are_read_again_only_past_a_row() {
    // Parts of one inner chunk: rows (z, y) of the 4x4 grid of 2x2x2 inner chunks, two parts (x)
    // each. Source chunk (a, b, 0) meets inner chunks z in 2a..2a+2, y in 2b..2b+2, x in 0..2:
    // parts p..p+4 and p+8..p+12 (p = 16a + 4b). Kept until its last part, each chunk is read once;
    // kept for a part within one row ahead only (issue 43, W6 under its limit), twice (part p+8 is
    // more than a row after part p+3); not kept, once per part (eight times).
    let run_with = |keep_source_chunks, keep_within_rows, trim_kept| {
        let options = Options {
            part_bytes: 16,
            keep_source_chunks,
            keep_within_rows,
            trim_kept,
            ..Options::with_threads(2)
        };
        let (result, shards, _) = run_job_with(job_3d(), &options);
        (result.expect("run").chunks_read, shards)
    };
    let (once, expected) = run_with(true, false, false);
    let (rows, shards_rows) = run_with(true, true, false);
    let (each, shards_each) = run_with(false, false, false);
    // Cut down after each part to what later parts need (the mode that replaces rows under W6's
    // limit), each chunk is read once again.
    let (cut, shards_cut) = run_with(true, false, true);
    assert_eq!((once, rows, each, cut), (4, 8, 32, 4));
    assert_eq!(shards_rows, expected);
    assert_eq!(shards_each, expected);
    assert_eq!(shards_cut, expected);
    let (job, _, _) = job_3d();
    let chain = job.inner_chain.as_ref().expect("chain");
    let inner = repr(&[2, 2, 2]);
    let chunks = &expected[&vec![0, 0, 0]];
    assert_eq!(chunks.len(), 32);
    let grid = [4, 4, 2];
    for (i, chunk) in c_order(&grid).zip(chunks) {
        let bytes = chunk.as_ref().expect("every inner chunk holds values");
        let raw = chain.decode(bytes, &inner).expect("decode");
        let values: Vec<u16> = raw
            .chunks(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        let want: Vec<u16> = c_order(&[2, 2, 2])
            .map(|at| value3(i[0] * 2 + at[0], i[1] * 2 + at[1], i[2] * 2 + at[2]))
            .collect();
        assert_eq!(values, want, "inner chunk {i:?}");
    }
}

#[test]
fn a_failing_part_stops_the_run_and_its_shard_is_not_written() {
    // Source chunk 5 holds rows 20..24: shard 2, its parts 2 and 3.
    let (result, shards, _) = run_in_parts(44, Some(vec![5, 0]), 2, 16);
    match result {
        Err(Error::Read { key, .. }) => assert_eq!(key, "mem/[5, 0]"),
        other => panic!("expected a read error, got {other:?}"),
    }
    assert!(!shards.contains_key(&vec![2, 0]));
}

#[test]
fn a_slow_part_does_not_let_the_fetchers_run_ahead() {
    // One shard of 4000 one-chunk parts. The first part's read stalls: the writer must wait for it
    // before writing the rest of the shard, and the fetchers must not read on meanwhile (the parts
    // would pile up at the writer).
    let (ahead, options) = read_while_the_first_part_stalls(None);
    // The window is 4 channels + 2 per worker of each pool + 2 per I/O thread + 1 = 17 messages of
    // one source chunk each (the crate's `messages_in_flight`, whose unit test pins it for these
    // options).
    let window =
        (4 * options.channel_capacity + 4 * options.threads + 2 * options.io_threads + 1) as u64;
    assert_eq!(window, 17);
    assert!(
        ahead <= window,
        "{ahead} chunks read while one part stalled (window {window})"
    );
}

/// Issue 43: a narrowed window (`Options::max_in_flight`, what a budget sets for cut-down keeping
/// under a tight limit) holds the fetchers closer: while the first part stalls, the other fetcher
/// reads no more than the narrowed window's other places, where the full window lets it read on.
#[test]
fn a_narrowed_window_lets_fewer_parts_run_ahead() {
    let (full, _) = read_while_the_first_part_stalls(None);
    let (narrowed, _) = read_while_the_first_part_stalls(Some(9));
    assert!(
        narrowed <= 8,
        "{narrowed} chunks read ahead in a window of 9"
    );
    assert!(
        full > 9,
        "{full} chunks read ahead in the full window of 17: the stall did not fill it"
    );
}

/// Runs one shard of 4000 one-chunk parts whose first read stalls for 300 ms, with the window
/// narrowed to `max_in_flight`; returns how many chunks the other reads got meanwhile, and the
/// options.
fn read_while_the_first_part_stalls(max_in_flight: Option<usize>) -> (u64, Options) {
    // Source chunks of one inner chunk each: every part reads one.
    let (mut job, fast, _) = job_with_source_chunks(4000, [2, 4], None);
    job.layout.geometry = ShardGeometry::new(&[4000, 8], &[4000, 8], &[2, 4]).expect("geometry");
    let reader = Arc::new(MemoryReader {
        chunks: fast.chunks.clone(),
        fail_at: None,
        chunks_read: AtomicU64::new(0),
        slow_at: Some(vec![0, 0]),
        slowed: AtomicBool::new(false),
        read_while_slow: AtomicU64::new(0),
    });
    job.reader = reader.clone();
    let jobs = [job];
    let options = Options {
        channel_capacity: 1,
        io_threads: 2,
        part_bytes: 16,
        max_in_flight,
        ..Options::with_threads(2)
    };
    run(&jobs, ShardTask::all(&jobs), &options, &|_| {}).expect("run");
    (reader.read_while_slow.load(Ordering::SeqCst), options)
}

/// Issue 15, point 9: a run cancelled from outside (here from the progress callback, as a signal
/// handler would from another thread) stops taking parts, returns `Error::Cancelled`, and every shard
/// the sink got is complete: shards being streamed in parts are abandoned, not published.
#[test]
fn a_cancelled_run_stops_and_publishes_only_complete_shards() {
    let (whole, expected, _) = run_in_parts(800, None, 2, 1 << 20);
    whole.expect("uncancelled run");
    assert_eq!(expected.len(), 100);
    let (job, _, sink) = job(800, None);
    let jobs = [job];
    let options = Options {
        part_bytes: 16,
        io_threads: 2,
        ..Options::with_threads(2)
    };
    let cancel = options.cancel.clone();
    let reported = AtomicU64::new(0);
    let result = run(&jobs, ShardTask::all(&jobs), &options, &|_| {
        if reported.fetch_add(1, Ordering::SeqCst) + 1 == 3 {
            cancel.cancel();
        }
    });
    assert!(matches!(result, Err(Error::Cancelled)), "{result:?}");
    assert_eq!(Error::Cancelled.kind(), "cancelled");
    let shards = sink.shards.lock().expect("lock").clone();
    assert!(
        (3..100).contains(&shards.len()),
        "{} of 100 shards written",
        shards.len()
    );
    assert_eq!(shards.len() as u64, reported.load(Ordering::SeqCst));
    for (coord, inner) in &shards {
        assert_eq!(
            Some(inner),
            expected.get(coord),
            "shard {coord:?} is complete"
        );
    }
}

/// `job`, with source chunks on a rectilinear grid: rows in edges of 3, 1, 5, 7 and 6 (the last
/// overhangs a 20-row array by 2 rows, stored whole), columns in 3, 3 and 2. Each chunk is encoded at
/// its own shape.
fn rectilinear_job() -> (ArrayJob, Arc<MemoryReader>, Arc<MemorySink>) {
    let rows = 20;
    let grid = zshard_core::RectilinearGrid::from_configuration(
        &json!({"kind": "inline", "chunk_shapes": [[3, 1, 5, 7, 6], [[3, 2], 2]]}),
        &[rows, 8],
    )
    .expect("grid");
    // The codecs and output of `job`, with this grid's chunks, reader and sink.
    let (mut job, _, _) = job_with_source_chunks(rows, [7, 3], None);
    let source = repr(&grid.largest_chunk());
    let mut chunks = HashMap::new();
    for coord in c_order(&grid.grid_shape()) {
        let bounds = grid.chunk_bounds(&coord).expect("in the grid");
        let shape = bounds.shape.clone();
        let raw: Vec<u8> = (0..shape[0])
            .flat_map(|r| (0..shape[1]).map(move |c| (r, c)))
            .flat_map(|(r, c)| value(bounds.start[0] + r, bounds.start[1] + c).to_le_bytes())
            .collect();
        let encoded = job.source_chain.encode(raw, &repr(&shape)).expect("encode");
        chunks.insert(coord, Bytes::from(encoded));
    }
    let reader = Arc::new(MemoryReader {
        chunks,
        fail_at: None,
        chunks_read: AtomicU64::new(0),
        slow_at: None,
        slowed: AtomicBool::new(false),
        read_while_slow: AtomicU64::new(0),
    });
    job.reader = reader.clone();
    job.layout.source_repr = source;
    job.layout.source_grid = Some(Arc::new(grid));
    let sink = Arc::new(MemorySink::default());
    job.sink = sink.clone();
    (job, reader, sink)
}

#[test]
fn rectilinear_source_chunks_land_in_the_right_inner_chunks() {
    let rows = 20;
    let (whole, expected, _) = run_job_in_parts(rectilinear_job(), 2, 1 << 20, true);
    let whole = whole.expect("run");
    assert_eq!(expected.len(), 3);
    let (job, _, _) = rectilinear_job();
    assert_values(&job, &expected, rows);
    // Source chunk rows span 0..3, 3..4, 4..9, 9..16 and 16..22: shard rows 0..8, 8..16 and 16..20
    // meet chunk rows 0 to 2, 2 to 3 and 4, of 3 columns each; chunk row 2 is read for the first
    // shard and handed to the second.
    assert_eq!(whole.chunks_read, (3 + 1 + 1) * 3);
    for part_bytes in [16, 32, 48] {
        for keep in [true, false] {
            let (stats, shards, _) = run_job_in_parts(rectilinear_job(), 3, part_bytes, keep);
            let stats = stats.expect("run");
            assert_eq!(shards, expected, "part_bytes {part_bytes}, keep {keep}");
            if keep {
                assert_eq!(stats.chunks_read, whole.chunks_read);
            }
        }
    }
}
