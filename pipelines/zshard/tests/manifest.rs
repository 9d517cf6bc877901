//! The checksum manifest (issue 34): `convert --keep-manifest` keeps `.zshard/manifest.tsv`, whose
//! per-chunk hashes are the crc32c of each inner chunk's values as the source holds them, and
//! `verify --manifest DST` reports a corrupted byte, a missing, truncated, swapped or stray shard
//! without reading the source.

mod common;

use std::path::{Path, PathBuf};

use common::{expected, write_v2, zshard};
use serde_json::json;
use zshard_core::DataType;

const SHAPE: [u64; 2] = [128, 96];
const SHARD: u64 = 32;
const CHUNK: u64 = 16;

/// The source (the first 40 rows hold only the fill value: its first shard row is all fill, so
/// never written) and its data.
fn source(dir: &Path) -> (PathBuf, Vec<u8>) {
    let src = dir.join("src");
    let data = expected(DataType::UInt16, &SHAPE, 32 * 96);
    write_v2(
        &src,
        DataType::UInt16,
        &SHAPE,
        &[16, 16],
        json!({"id": "zlib", "level": 1}),
        &data,
    );
    (src, data)
}

/// The layout every run of these tests uses (convert and finalize must agree on it).
const LAYOUT: [&str; 7] = [
    "--shard-shape",
    "32,32",
    "--chunk-shape",
    "16,16",
    "--compressor",
    "none",
    "--quiet",
];

/// `zshard COMMAND SRC DST` with [`LAYOUT`].
fn with_layout<'a>(command: &'a str, src: &'a Path, dst: &'a Path) -> Vec<&'a str> {
    let mut args = vec![
        command,
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(&LAYOUT);
    args
}

fn convert(src: &Path, dst: &Path, extra: &[&str]) {
    let mut args = with_layout("convert", src, dst);
    args.extend_from_slice(extra);
    let out = zshard(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `verify --manifest DST`: success and the mismatch lines.
fn verify_manifest(dst: &Path) -> (bool, Vec<String>) {
    let out = zshard(&["verify", "--manifest", dst.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mismatches = stderr
        .lines()
        .filter(|l| l.starts_with("zshard: mismatch: "))
        .map(str::to_string)
        .collect();
    (out.status.success(), mismatches)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The values of inner chunk (ci, cj) of shard (si, sj), little-endian C order.
fn inner_values(data: &[u8], shard: [u64; 2], inner: [u64; 2]) -> Vec<u8> {
    let mut out = Vec::new();
    let row0 = shard[0] * SHARD + inner[0] * CHUNK;
    let col0 = shard[1] * SHARD + inner[1] * CHUNK;
    for r in row0..row0 + CHUNK {
        let start = ((r * SHAPE[1] + col0) * 2) as usize;
        out.extend_from_slice(&data[start..start + (CHUNK * 2) as usize]);
    }
    out
}

#[test]
fn the_kept_manifest_records_every_shard_with_the_sources_values_and_verifies_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, data) = source(tmp.path());
    let dst = tmp.path().join("out");
    convert(&src, &dst, &["--keep-manifest"]);
    let text = std::fs::read_to_string(dst.join(".zshard/manifest.tsv")).expect("manifest kept");
    // Nothing else of the state stays.
    let state: Vec<_> = std::fs::read_dir(dst.join(".zshard"))
        .expect("state")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(state, ["manifest.tsv"]);
    // The metadata document as written (issue 45, row 12), then the shards.
    let document = std::fs::read(dst.join("zarr.json")).expect("zarr.json");
    let (documents, lines): (Vec<&str>, Vec<&str>) = text
        .lines()
        .partition(|line| line.split('\t').nth(1) == Some("-"));
    assert_eq!(
        documents,
        [format!(
            "zarr.json\t-\t{}\t{:08x}\tm:",
            document.len(),
            zshard_core::crc32c(&document)
        )]
    );
    // 4x3 shards, the first row of 3 all fill.
    assert_eq!(lines.len(), 9, "{text}");
    for line in lines {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 5, "{line}");
        assert_eq!(fields[0], "");
        let coord: Vec<u64> = fields[1]
            .split(',')
            .map(|c| c.parse().expect("n"))
            .collect();
        let object =
            std::fs::read(dst.join(format!("c/{}/{}", coord[0], coord[1]))).expect("shard");
        assert_eq!(fields[2], object.len().to_string(), "{line}");
        assert_eq!(
            fields[3],
            format!("{:08x}", zshard_core::crc32c(&object)),
            "{line}"
        );
        let hashes = fields[4].strip_prefix("d:").expect("decoded hashes");
        let hashes: Vec<&str> = hashes.split(',').collect();
        assert_eq!(hashes.len(), 4);
        for (i, hash) in hashes.iter().enumerate() {
            let inner = [i as u64 / 2, i as u64 % 2];
            let values = inner_values(&data, [coord[0], coord[1]], inner);
            assert_eq!(
                *hash,
                format!("{:08x}", zshard_core::crc32c(&values)),
                "shard {coord:?} inner chunk {i}"
            );
        }
    }
    let (ok, mismatches) = verify_manifest(&dst);
    assert!(ok && mismatches.is_empty(), "{mismatches:?}");
    // Verifying against the source still passes: the kept manifest is no stray.
    let out = zshard(&[
        "verify",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A rerun finds the conversion complete and keeps the manifest.
    convert(&src, &dst, &[]);
    assert!(dst.join(".zshard/manifest.tsv").exists());
}

#[test]
fn without_keep_manifest_nothing_stays_and_verify_manifest_says_so() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, _) = source(tmp.path());
    let dst = tmp.path().join("out");
    convert(&src, &dst, &[]);
    assert!(!dst.join(".zshard").exists());
    let out = zshard(&["verify", "--manifest", dst.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("holds no manifest"), "{stderr}");
}

#[test]
fn verify_manifest_reports_each_kind_of_damage() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, _) = source(tmp.path());
    let clean = tmp.path().join("clean");
    convert(&src, &clean, &["--keep-manifest"]);
    let damaged = |name: &str, damage: &dyn Fn(&Path)| -> Vec<String> {
        let dst = tmp.path().join(name);
        copy_dir(&clean, &dst);
        damage(&dst);
        let (ok, mismatches) = verify_manifest(&dst);
        assert!(!ok, "{name}: verify --manifest passed");
        mismatches
    };

    // One byte of inner chunk 3's values (uncompressed: the chunks lie in order, 512 bytes each).
    let flipped = damaged("flipped", &|dst| {
        let path = dst.join("c/2/1");
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[3 * 512 + 100] ^= 0x01;
        std::fs::write(&path, bytes).expect("write");
    });
    assert_eq!(flipped.len(), 1, "{flipped:?}");
    assert!(
        flipped[0].contains("c/2/1") && flipped[0].contains("inner chunk 3 holds other values"),
        "{flipped:?}"
    );

    let missing = damaged("missing", &|dst| {
        std::fs::remove_file(dst.join("c/1/0")).expect("remove");
    });
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(
        missing[0].contains("c/1/0") && missing[0].contains("missing"),
        "{missing:?}"
    );

    let truncated = damaged("truncated", &|dst| {
        let path = dst.join("c/3/2");
        let bytes = std::fs::read(&path).expect("read");
        std::fs::write(&path, &bytes[..bytes.len() - 7]).expect("write");
    });
    assert_eq!(truncated.len(), 1, "{truncated:?}");
    assert!(
        truncated[0].contains("c/3/2") && truncated[0].contains("truncated"),
        "{truncated:?}"
    );

    // Two full shards of one size, exchanged.
    let swapped = damaged("swapped", &|dst| {
        let (a, b) = (dst.join("c/1/1"), dst.join("c/2/2"));
        let (x, y) = (std::fs::read(&a).expect("a"), std::fs::read(&b).expect("b"));
        assert_eq!(x.len(), y.len());
        std::fs::write(&a, y).expect("write");
        std::fs::write(&b, x).expect("write");
    });
    assert_eq!(swapped.len(), 2, "{swapped:?}");
    assert!(
        swapped
            .iter()
            .any(|m| m.contains("c/1/1") && m.contains("swapped"))
            && swapped
                .iter()
                .any(|m| m.contains("c/2/2") && m.contains("swapped")),
        "{swapped:?}"
    );

    // A shard where the conversion wrote none (its row is all fill).
    let stray = damaged("stray", &|dst| {
        std::fs::create_dir_all(dst.join("c/0")).expect("mkdir");
        std::fs::copy(dst.join("c/1/1"), dst.join("c/0/1")).expect("copy");
    });
    assert_eq!(stray.len(), 1, "{stray:?}");
    assert!(
        stray[0].contains("c/0/1") && stray[0].contains("stray"),
        "{stray:?}"
    );
}

/// The shards (`i,j` coordinate texts) that the manifest records of worker `tag` name.
fn manifest_shards(dst: &Path, tag: &str) -> Vec<String> {
    let mut shards = Vec::new();
    for entry in std::fs::read_dir(dst.join(".zshard/manifest"))
        .expect("manifest records")
        .flatten()
    {
        if !entry.file_name().to_string_lossy().starts_with(tag) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).expect("read");
        shards.extend(
            text.lines()
                // The file's checksum line (see `sealed.rs`) names no shard.
                .filter(|l| !l.starts_with("#crc32c\t"))
                .map(|l| l.split('\t').nth(1).expect("coord").to_string()),
        );
    }
    shards.sort();
    shards
}

fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).expect("metadata").ino()
}

/// Group commit (issue 34): shards are published without an fsync each, and a `done` record is
/// written only after the checkpoint that makes them durable. A power loss after the last
/// checkpoint can leave the shards written since empty, short or zeroed, with only their manifest
/// records stored: simulated here by removing a worker's `done` records and damaging two of its
/// shards. The resume reads the shards its manifest names but no checkpoint covers, keeps those
/// whose crc32c matches (not rewritten: same inode) and converts the others again; the finished
/// output equals the source.
#[test]
fn shards_lost_after_the_last_checkpoint_are_found_by_the_manifest_and_rewritten() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, data) = source(tmp.path());
    let dst = tmp.path().join("out");
    convert(&src, &dst, &["--worker", "0/2"]);
    let shards = manifest_shards(&dst, "w0of2-");
    assert!(shards.len() >= 3, "{shards:?}");
    for entry in std::fs::read_dir(dst.join(".zshard/done"))
        .expect("done")
        .flatten()
    {
        if entry.file_name().to_string_lossy().starts_with("w0of2-") {
            std::fs::remove_file(entry.path()).expect("remove");
        }
    }
    let path = |coord: &str| dst.join(format!("c/{}", coord.replace(',', "/")));
    let (truncated, zeroed, kept) = (path(&shards[0]), path(&shards[1]), &shards[2..]);
    let bytes = std::fs::read(&truncated).expect("read");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("truncate");
    let bytes = std::fs::read(&zeroed).expect("read");
    std::fs::write(&zeroed, vec![0u8; bytes.len()]).expect("zero");
    let inodes: Vec<u64> = kept.iter().map(|c| inode(&path(c))).collect();
    let damaged = [inode(&truncated), inode(&zeroed)];

    convert(&src, &dst, &["--worker", "0/2"]);
    let after: Vec<u64> = kept.iter().map(|c| inode(&path(c))).collect();
    assert_eq!(after, inodes, "intact shards were converted again");
    assert_ne!([inode(&truncated), inode(&zeroed)], damaged);
    convert(&src, &dst, &["--worker", "1/2"]);
    let out = zshard(&with_layout("finalize", &src, &dst));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(common::read_v3(&dst).0, data);
    let out = zshard(&[
        "verify",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 45, row 12: an output of the fill value alone has a kept manifest that names no shard,
/// which verifies clean (it was refused: "holds no manifest"); and the kept manifest records the
/// metadata documents too, so a changed `fill_value` no longer verifies clean.
#[test]
fn an_all_fill_output_verifies_and_a_changed_document_is_reported() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("fill");
    write_v2(
        &src,
        DataType::UInt16,
        &SHAPE,
        &[16, 16],
        json!({"id": "zlib", "level": 1}),
        &vec![0u8; (SHAPE[0] * SHAPE[1] * 2) as usize],
    );
    let dst = tmp.path().join("out");
    convert(&src, &dst, &["--keep-manifest"]);
    assert!(!dst.join("c").exists(), "no shard written");
    let (ok, mismatches) = verify_manifest(&dst);
    assert!(ok, "{mismatches:?}");

    let doc = dst.join("zarr.json");
    let text = std::fs::read_to_string(&doc).expect("zarr.json");
    assert!(text.contains("\"fill_value\": 0"), "{text}");
    std::fs::write(&doc, text.replace("\"fill_value\": 0", "\"fill_value\": 7")).expect("edit");
    let (ok, mismatches) = verify_manifest(&dst);
    assert!(!ok);
    assert_eq!(mismatches.len(), 1, "{mismatches:?}");
    assert!(
        mismatches[0].contains("zarr.json") && mismatches[0].contains("metadata document differs"),
        "{mismatches:?}"
    );
}

/// Issue 45, row 12: workers given `--keep-manifest` and a `finalize` without it kept no manifest,
/// silently. The workers' wish is recorded in the state, and `finalize` keeps the manifest.
#[test]
fn finalize_keeps_the_manifest_the_workers_were_asked_to_keep() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, _) = source(tmp.path());
    let dst = tmp.path().join("out");
    for worker in ["0/2", "1/2"] {
        convert(&src, &dst, &["--worker", worker, "--keep-manifest"]);
    }
    let out = zshard(&with_layout("finalize", &src, &dst));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dst.join(".zshard/manifest.tsv").exists(),
        "the manifest is kept"
    );
    assert!(
        !dst.join(".zshard/keep-manifest").exists(),
        "the marker goes with the state"
    );
    let (ok, mismatches) = verify_manifest(&dst);
    assert!(ok, "{mismatches:?}");
}

/// Issue 45, row 13: two shards of different sizes, exchanged, are named as holding each other's
/// bytes, not as truncated: `verify --manifest` checksums
/// every listed shard before it looks at sizes (a stream, no shard held whole).
#[test]
fn shards_of_different_sizes_swapped_are_named_as_swapped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, _) = source(tmp.path());
    let dst = tmp.path().join("dst");
    let out = zshard(&[
        "convert",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
        "--shard-shape",
        "32,32",
        "--chunk-shape",
        "16,16",
        "--compressor",
        "zstd:3",
        "--keep-manifest",
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Two shards whose compressed sizes differ.
    let mut sized: Vec<(u64, PathBuf)> = ["c/1/0", "c/1/1", "c/1/2", "c/2/0", "c/2/1", "c/3/2"]
        .iter()
        .map(|k| {
            let path = dst.join(k);
            (std::fs::metadata(&path).expect("shard").len(), path)
        })
        .collect();
    sized.sort();
    let ((small, a), (large, b)) = (sized[0].clone(), sized[sized.len() - 1].clone());
    assert!(small < large, "{sized:?}");
    let (x, y) = (std::fs::read(&a).expect("a"), std::fs::read(&b).expect("b"));
    std::fs::write(&a, y).expect("write");
    std::fs::write(&b, x).expect("write");
    let (ok, mismatches) = verify_manifest(&dst);
    assert!(!ok);
    assert_eq!(mismatches.len(), 2, "{mismatches:?}");
    for m in &mismatches {
        assert!(
            m.contains("shards swapped or copied") && !m.contains("truncated"),
            "{mismatches:?}"
        );
    }
}
