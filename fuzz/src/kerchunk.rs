//! `kerchunk_json`: a kerchunk JSON reference set (version 0 or 1, lenient JSON) opened from a file,
//! then, for each array it describes, its first chunks read (inline references; other targets
//! under the temporary folder do not exist) and decoded with the array's chain.
//!
//! Inputs whose `gen` entries would generate more than 4096 references are skipped (they are
//! slow by nature; `crates/kerchunk/src/gen.rs` tests the limits). Remote targets would mean
//! network requests: inputs naming a URL scheme are skipped, and
//! `fuzz/run.sh` runs this target in a network namespace of its own (`unshare -n`) so that no
//! request built any other way (templates, gen) can leave the machine.
//!
//! Promises checked: no panic; one result per requested chunk; the decode promises of
//! `codec_decode`.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use zshard_codecs::build_chain;
use zshard_core::{grid_shape, product, unravel_index, NodeKind};
use zshard_kerchunk::{Format, Options, ReferenceSet};
use zshard_store::IoRuntime;

use crate::codecs::{decode_and_check, largest_stage};

struct Env {
    file: PathBuf,
    runtime: Arc<IoRuntime>,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("zshard-fuzz-kerchunk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temporary folder");
        Env {
            file: dir.join("refs.json"),
            runtime: IoRuntime::new(1).expect("I/O runtime"),
        }
    })
}

fn names_a_scheme(data: &[u8]) -> bool {
    let lower = data.to_ascii_lowercase();
    [
        &b"://"[..],
        b":\\/",
        b"s3:",
        b"gs:",
        b"az:",
        b"http",
        b"abfs",
        b"gcs",
        b"file:",
    ]
    .iter()
    .any(|pat| lower.windows(pat.len()).any(|w| w == *pat))
}

/// The number of references the `gen` entries of `data` would generate, when `data` is plain JSON;
/// `None` when it is not (lenient JSON or compressed) but mentions `gen`.
fn generated(data: &[u8]) -> Option<u128> {
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(data) else {
        return (!data.windows(3).any(|w| w == b"gen")).then_some(0);
    };
    let mut total = 0u128;
    for entry in doc
        .get("gen")
        .and_then(|g| g.as_array())
        .into_iter()
        .flatten()
    {
        let mut product = 1u128;
        for spec in entry
            .get("dimensions")
            .and_then(|d| d.as_object())
            .into_iter()
            .flat_map(|d| d.values())
        {
            let count = match spec {
                serde_json::Value::Array(items) => items.len() as i128,
                serde_json::Value::Object(range) => {
                    let int = |k: &str, d: i64| range.get(k).and_then(|v| v.as_i64()).unwrap_or(d);
                    let (start, stop, step) = (int("start", 0), int("stop", 0), int("step", 1));
                    let (start, stop, step) = (start as i128, stop as i128, step as i128);
                    match step {
                        0 => 0,
                        s if s > 0 => (stop - start + s - 1) / s,
                        s => (start - stop - s - 1) / -s,
                    }
                }
                _ => 0,
            };
            product = product.saturating_mul(count.max(0) as u128);
        }
        total = total.saturating_add(product);
    }
    Some(total)
}

pub fn kerchunk_json(data: &[u8]) {
    // The Parquet probe reads the same lenient JSON (a remote folder's `.zmetadata`, issue 21).
    let _ = zshard_kerchunk::is_parquet_metadata(data);
    // Remote targets are not fuzzed (no network), nor reference sets that generate more references
    // than a fuzz run has time for (the library refuses more than 2^26, see gen.rs).
    if names_a_scheme(data) || generated(data).is_none_or(|n| n > 4096) {
        return;
    }
    let env = env();
    if std::fs::write(&env.file, data).is_err() {
        return;
    }
    let Some(location) = env.file.to_str() else {
        return;
    };
    let Ok(set) = ReferenceSet::open(
        location,
        Format::Json,
        &Options::default(),
        env.runtime.clone(),
    ) else {
        return;
    };
    for node in set.nodes() {
        let NodeKind::Array(meta) = &node.kind else {
            continue;
        };
        let reader = set.reader(&node.path, meta);
        let grid = grid_shape(&meta.shape, &meta.chunk_shape);
        let count = product(&grid).min(4);
        let mut coords: Vec<Vec<u64>> = (0..count).map(|i| unravel_index(i, &grid)).collect();
        // One coordinate past the grid, which has no chunk.
        coords.push(grid.clone());
        for coord in &coords {
            let _ = reader.chunk_key(coord);
        }
        let results = reader.read_chunks(&coords);
        assert_eq!(results.len(), coords.len());
        let repr = meta.chunk_repr();
        let Ok(chain) = build_chain(&meta.codecs, &repr) else {
            continue;
        };
        if repr.byte_len() > 1 << 20 || largest_stage(&chain, &repr) > 8 << 20 {
            continue;
        }
        for bytes in results.into_iter().flatten().flatten() {
            decode_and_check(&chain, &meta.codecs, &repr, &bytes);
        }
    }
}
