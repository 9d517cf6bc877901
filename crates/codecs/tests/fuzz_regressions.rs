//! Replays the inputs of `fuzz/regressions/<target>/` (each one crashed a fuzz target once) through
//! the same check functions the cargo-fuzz targets run, so plain `cargo test` keeps them fixed
//! without the fuzz toolchain. The check modules are the fuzz crate's own files, the allocation
//! probe (this binary's global allocator) included, so an over-allocation of Rust memory fails here
//! as it does under libFuzzer. C libraries (liblzma, blosc) allocate outside it: libFuzzer's
//! `-malloc_limit_mb` catches those, and here the growth of the process's peak virtual size does
//! (Linux only). `kerchunk_json` is not replayed here (this crate does not depend on zshard-kerchunk).
//!
//! Also home of the seed generator: `cargo test -p zshard-codecs --test fuzz_regressions --
//! --ignored generate_fuzz_seeds` writes `fuzz/corpus/`.

#[allow(unreachable_pub)]
#[path = "../../../fuzz/src/probe.rs"]
mod probe;

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

/// libFuzzer's `-malloc_limit_mb` in `fuzz/run.sh`: no single allocation may be larger.
const MALLOC_LIMIT: u64 = 128 << 20;

/// The peak virtual size of this process (`VmPeak`), on Linux; a C allocation larger than
/// [`MALLOC_LIMIT`] raises it by at least that much even when its pages are never touched.
fn peak_virtual_size() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmPeak:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

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
            let before = peak_virtual_size();
            check(&data);
            if let (Some(before), Some(after)) = (before, peak_virtual_size()) {
                assert!(
                    after - before <= MALLOC_LIMIT,
                    "{} raised the peak virtual size by {} bytes: a single C allocation above \
                     libFuzzer's {MALLOC_LIMIT}-byte limit",
                    file.display(),
                    after - before
                );
            }
            replayed += 1;
        }
    }
    eprintln!("replayed {replayed} fuzz regression inputs");
}

/// The zfpy seeds (`fuzz/make_zfp_seeds.py`) reach the zfp decoder through `codec_decode`'s
/// input format and decode there, so the target fuzzes zfp from valid streams.
#[test]
fn zfpy_seeds_reach_the_zfp_decoder() {
    let dir = fuzz_dir().join("corpus/codec_decode");
    let mut seeds: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("corpus")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains("seed-zfpy-"))
        .collect();
    seeds.sort();
    assert_eq!(seeds.len(), 48, "4 types x 3 shapes x 4 modes");
    for seed in seeds {
        let data = std::fs::read(&seed).expect("seed");
        let mut inp = input::Input::new(&data);
        let (repr, specs) = codecs::parse_chain(&mut inp, false, codecs::any_codec);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["numcodecs.zfpy"], "{}", seed.display());
        let chain = zshard_codecs::build_chain(&specs, &repr).expect("chain");
        let decoded = chain.decode(inp.rest(), &repr);
        assert!(decoded.is_ok(), "{}: {:?}", seed.display(), decoded.err());
        codecs::codec_decode(&data);
    }
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
