//! Replays the inputs of `fuzz/regressions/<target>/` (each one crashed a fuzz target once) through
//! the same check functions the cargo-fuzz targets run, so plain `cargo test` keeps them fixed
//! without the fuzz toolchain. The check modules are the fuzz crate's own files; the allocation
//! probe, which needs a global allocator, is a no-op here. `kerchunk_json` is not replayed here
//! (this crate does not depend on zshard-kerchunk).
//!
//! Also home of the seed generator: `cargo test -p zshard-codecs --test fuzz_regressions --
//! --ignored generate_fuzz_seeds` writes `fuzz/corpus/`.

mod probe {
    pub(crate) fn arm() {}
    pub(crate) fn disarm() -> usize {
        0
    }
}

// The fuzz crate's modules are `pub` for its targets; inside this test they cannot be reached from
// outside, which `unreachable_pub` would report for every item of a file this crate does not own.
#[allow(unreachable_pub)]
#[path = "../../../fuzz/src/codecs.rs"]
mod codecs;
#[allow(unreachable_pub)]
#[path = "../../../fuzz/src/input.rs"]
mod input;
#[allow(unreachable_pub)]
#[path = "../../../fuzz/src/metadata.rs"]
mod metadata;
#[allow(unreachable_pub)]
#[path = "../../../fuzz/src/objects.rs"]
mod objects;
#[allow(unreachable_pub)]
#[path = "../../../fuzz/src/seeds.rs"]
mod seeds;
#[allow(unreachable_pub)]
#[path = "../../../fuzz/src/shard.rs"]
mod shard;

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// A fuzz target's check function, by the target's name.
type Target = (&'static str, fn(&[u8]));

#[test]
fn replay_fuzz_regressions() {
    let targets: [Target; 7] = [
        ("codec_decode", codecs::codec_decode),
        ("filter_decode", codecs::filter_decode),
        ("shard_index", shard::shard_index),
        ("v2_metadata", metadata::v2_metadata),
        ("v3_metadata", metadata::v3_metadata),
        ("draft_metadata", metadata::draft_metadata),
        ("object_decode", objects::object_decode),
    ];
    let mut replayed = 0;
    for (target, check) in targets {
        let Ok(entries) = std::fs::read_dir(fuzz_dir().join("regressions").join(target)) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        files.sort();
        for file in files {
            let data = std::fs::read(&file).expect("regression input");
            eprintln!("replaying {}", file.display());
            check(&data);
            replayed += 1;
        }
    }
    eprintln!("replayed {replayed} fuzz regression inputs");
}

#[test]
#[ignore = "writes fuzz/corpus; run by hand when the fuzz input formats change"]
fn generate_fuzz_seeds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    seeds::generate(
        &fuzz_dir().join("corpus"),
        &root.join("tests/golden/fixtures"),
    );
}
