//! What a conversion tells its `Observer` as it goes (issue 18, point 2): the work ahead, then every
//! part of every shard as it is written (so a shard cut into parts advances part by part), before
//! its shard; the parts add up to the work and the shards' outcomes. Before the work, the listing of
//! the source, whose objects it counts as they are listed.

use std::sync::Mutex;

use serde_json::json;
use zshard_convert::{Conversion, Layout, ListedCount, Observer, PartOutcome, ShardOutcome, Work};

/// An uncompressed 2048 x 4096 uint16 Zarr v2 array (16 MiB) of 256 x 256 chunks (all present).
fn write_source(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).expect("create source");
    let zarray = json!({"zarr_format": 2, "shape": [2048, 4096], "chunks": [256, 256], "dtype": "<u2",
        "compressor": null, "fill_value": 0, "order": "C", "filters": null});
    std::fs::write(dir.join(".zarray"), zarray.to_string()).expect("write .zarray");
    for i in 0..8u16 {
        for j in 0..16u16 {
            let bytes: Vec<u8> = (0..256 * 256u32)
                .flat_map(|n| (n as u16 ^ (i * 16 + j + 1)).to_le_bytes())
                .collect();
            std::fs::write(dir.join(format!("{i}.{j}")), bytes).expect("chunk");
        }
    }
}

/// Every event in the order it came, and the objects listed when the work was told.
#[derive(Default)]
struct Events(Mutex<Vec<Event>>, Mutex<Option<u64>>);

#[derive(Debug, Clone)]
enum Event {
    Listing(ListedCount),
    Work(Work),
    Part(String, PartOutcome),
    Shard(ShardOutcome),
}

impl Observer for Events {
    fn listing(&self, listed: &ListedCount) {
        let event = Event::Listing(listed.clone());
        self.0.lock().expect("lock").push(event);
    }
    fn work(&self, work: &Work) {
        let mut events = self.0.lock().expect("lock");
        if let Some(Event::Listing(listed)) = events.first() {
            *self.1.lock().expect("lock") = Some(listed.get());
        }
        events.push(Event::Work(work.clone()));
    }
    fn part_done(&self, array: &str, part: &PartOutcome) {
        let event = Event::Part(array.to_string(), part.clone());
        self.0.lock().expect("lock").push(event);
    }
    fn shard_done(&self, outcome: &ShardOutcome) {
        let event = Event::Shard(outcome.clone());
        self.0.lock().expect("lock").push(event);
    }
}

/// A one-thread conversion of the source of [`write_source`] in shards of `shard_shape` under
/// 256 MiB, with the plan's parts per shard, every event in order, the report and the source's path.
fn convert_observed(shard_shape: Vec<u64>) -> (u64, Vec<Event>, zshard_convert::Report, String) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, dst) = (tmp.path().join("src.zarr"), tmp.path().join("dst.zarr"));
    write_source(&src);
    let mut conversion = Conversion::new(src.to_string_lossy(), dst.to_string_lossy());
    conversion.layouts.default = Layout {
        shard_shape: Some(shard_shape.into()),
        ..Layout::default()
    };
    conversion.threads = 1;
    conversion.memory_limit = Some(256 << 20);
    let plan = conversion.plan().expect("plan");
    let parts_per_shard = plan.to_json()["arrays"][0]["parts_per_shard"]
        .as_u64()
        .expect("parts");
    let events = Events::default();
    let report = conversion.convert(&events).expect("convert");
    let listed_at_work = events.1.into_inner().expect("count");
    let mut events = events.0.into_inner().expect("events");
    // The listing comes first, and is told once; by the time the work is known it has counted every
    // object of the source's array folder (the 128 chunks and `.zarray`) and those of the
    // destination's state that its survey listed (the lease, the claim and, when it has landed, the
    // options record).
    let Some(Event::Listing(_)) = events.first() else {
        panic!("the listing comes first: {events:?}");
    };
    events.remove(0);
    let listed = listed_at_work.expect("a count when the work was told");
    assert!(
        (8 * 16 + 1..=8 * 16 + 1 + 3).contains(&listed),
        "{listed} listed"
    );
    assert!(!events.iter().any(|e| matches!(e, Event::Listing(_))));
    (
        parts_per_shard,
        events,
        report,
        src.to_string_lossy().into_owned(),
    )
}

#[test]
fn parts_are_reported_before_their_shard_and_add_up_to_the_work() {
    // Two shards of 1024 x 4096 (8 MiB raw each), bigger than a part.
    let (parts_per_shard, events, report, src) = convert_observed(vec![1024, 4096]);
    assert!(parts_per_shard > 1, "shards must be cut into parts");

    let Some(Event::Work(work)) = events.first() else {
        panic!("the work comes first: {events:?}");
    };
    assert_eq!(
        (work.shards, work.inner_chunks, work.raw_bytes),
        (2, 128, 2048 * 4096 * 2)
    );

    let mut parts_seen = std::collections::HashMap::<Vec<u64>, Vec<u64>>::new();
    let (mut raw, mut chunks, mut read, mut parts) = (0, 0, 0, 0);
    for event in &events[1..] {
        match event {
            Event::Part(array, part) => {
                assert_eq!(array, &src);
                assert_eq!(part.count, parts_per_shard);
                assert_eq!(part.raw_bytes, part.inner_chunks * 256 * 256 * 2);
                parts_seen
                    .entry(part.task.shard.clone())
                    .or_default()
                    .push(part.index);
                raw += part.raw_bytes;
                chunks += part.inner_chunks;
                read += part.bytes_read;
                parts += 1;
            }
            Event::Shard(outcome) => {
                // Every part of the shard came before it, in order.
                let seen = &parts_seen[&outcome.task.shard];
                assert_eq!(seen, &(0..parts_per_shard).collect::<Vec<_>>());
            }
            Event::Work(_) | Event::Listing(_) => {
                panic!("the work is told once, after the listing")
            }
        }
    }
    assert_eq!(parts, 2 * parts_per_shard);
    assert_eq!((raw, chunks), (work.raw_bytes, work.inner_chunks));
    assert_eq!(read, report.totals.stats.bytes_read);
    assert_eq!(read, 2048 * 4096 * 2);
}

/// Issue 31, row 18: the progress total counts the inner chunks a shard stores, not the padding of
/// the last shard past the array's end (shards of 1536 rows over 2048: the second holds 512 rows).
#[test]
fn the_padding_past_the_array_end_is_no_work() {
    let (_, events, _, _) = convert_observed(vec![1536, 4096]);
    let Some(Event::Work(work)) = events.first() else {
        panic!("the work comes first: {events:?}");
    };
    // The array's 8 x 16 chunks of 256 x 256, not 2 shards x 6 x 16.
    assert_eq!(
        (work.shards, work.inner_chunks, work.raw_bytes),
        (2, 128, 2048 * 4096 * 2)
    );
    let (raw, chunks) = events
        .iter()
        .fold((0, 0), |(raw, chunks), event| match event {
            Event::Part(_, part) => (raw + part.raw_bytes, chunks + part.inner_chunks),
            _ => (raw, chunks),
        });
    assert_eq!((raw, chunks), (work.raw_bytes, work.inner_chunks));
}
