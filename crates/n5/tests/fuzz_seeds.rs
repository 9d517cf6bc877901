//! Replays the `n5_block` fuzz target's corpus (`fuzz/corpus/n5_block/`) and regressions through its
//! check function under plain `cargo test`, without the fuzz toolchain (the allocation probe, which
//! needs a global allocator, is a no-op here). The check module is the fuzz crate's own file.

mod probe {
    pub(crate) fn arm() {}
    pub(crate) fn disarm() -> usize {
        0
    }
}

#[allow(unreachable_pub, dead_code)]
#[path = "../../../fuzz/src/input.rs"]
mod input;
#[allow(unreachable_pub, dead_code)]
#[path = "../../../fuzz/src/n5.rs"]
mod n5;

use std::path::Path;

use zshard_n5::{parse_attributes, Attributes, BlockDecoder};

/// Whether a seed's block decodes (seeds are valid blocks: they must exercise the decoders, not
/// only their error paths).
fn decodes(data: &[u8]) -> bool {
    let mut inp = input::Input::new(data);
    let (doc, _) = n5::parse_case(&mut inp);
    let Ok(Attributes::Dataset(dataset)) = parse_attributes("a", doc.as_bytes()) else {
        return false;
    };
    let decoder = BlockDecoder::new("a", &dataset).expect("decoder");
    decoder.decode("k", inp.rest()).is_ok()
}

#[test]
fn every_seed_and_regression_passes_the_check() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut replayed = 0;
    let mut seeds_decoded = 0;
    for folder in ["corpus/n5_block", "regressions/n5_block"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(folder)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("entry").path();
            let data = std::fs::read(&path).expect("read");
            n5::n5_block(&data);
            replayed += 1;
            seeds_decoded += usize::from(folder.starts_with("corpus") && decodes(&data));
        }
    }
    assert!(replayed >= 32, "only {replayed} inputs replayed");
    assert_eq!(seeds_decoded, 32, "every seed is a valid block");
}
