//! Job files everywhere (issue 18, point 5): `plan`, `finalize` and `verify` read a job file, its
//! source keys (`include`, `exclude`, `passthrough`) apply, relative paths resolve against the job
//! file's folder wherever zshard runs, and errors show normalized paths.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{expected, files, read_v3, write_v2};
use serde_json::{json, Value};
use zshard_core::DataType;

const SHAPE: [u64; 2] = [40, 30];
const CHUNKS: [u64; 2] = [10, 10];

/// Runs zshard in `cwd`.
fn zshard_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(common::binary())
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("run zshard")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn succeeds(out: &Output) {
    assert!(out.status.success(), "{}", stderr(out));
}

/// `root/data/src.zarr`: a v2 group `g` (with attributes) holding arrays `a` and `b`, and an array
/// `other` at the top, all zstd level 3 (so passthrough would apply); `root/jobs/` (empty) and
/// `root/elsewhere/` (where zshard runs). Returns the canonical root and `g/a`'s values.
fn layout() -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    let src = root.join("data/src.zarr");
    let data = expected(DataType::UInt8, &SHAPE, 0);
    let zstd = json!({"id": "zstd", "level": 3});
    for array in ["g/a", "g/b", "other"] {
        write_v2(
            &src.join(array),
            DataType::UInt8,
            &SHAPE,
            &CHUNKS,
            zstd.clone(),
            &data,
        );
    }
    for group in [src.clone(), src.join("g")] {
        std::fs::write(group.join(".zgroup"), r#"{"zarr_format": 2}"#).expect("zgroup");
    }
    std::fs::write(src.join("g/.zattrs"), r#"{"title": "g"}"#).expect("zattrs");
    for folder in ["jobs", "elsewhere"] {
        std::fs::create_dir(root.join(folder)).expect("mkdir");
    }
    (dir, root, data)
}

const JOB: &str = r#"
threads = 2
include = ["g/*"]
exclude = ["g/b"]
passthrough = false
[[conversions]]
source = "../data/./src.zarr"
destination = "../out/dst.zarr"
shard_shape = [20, 30]
"#;

#[test]
fn plan_finalize_and_verify_read_a_job_file_from_another_directory() {
    let (_dir, root, data) = layout();
    std::fs::write(root.join("jobs/job.toml"), JOB).expect("job");
    let elsewhere = root.join("elsewhere");
    let job = "../jobs/job.toml";

    let out = zshard_in(&elsewhere, &["plan", job, "--json"]);
    succeeds(&out);
    let plan: Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
    let source = root.join("data/src.zarr");
    assert_eq!(plan["source"], json!(source.to_string_lossy()));
    assert_eq!(
        plan["destination"],
        json!(root.join("out/dst.zarr").to_string_lossy())
    );
    let arrays: Vec<&Value> = plan["arrays"].as_array().expect("arrays").iter().collect();
    assert_eq!(arrays.len(), 1);
    assert_eq!(arrays[0]["path"], "g/a");
    assert_eq!(arrays[0]["shard_shape"], json!([20, 30]));
    // Same chunks and codecs as the output: only `passthrough = false` keeps it off.
    assert_eq!(arrays[0]["passthrough"], false);
    assert_eq!(plan["groups"], json!(["", "g"]));

    // A partitioned run, then finalize and verify, all from `elsewhere` through the job file.
    for worker in ["0/2", "1/2"] {
        succeeds(&zshard_in(
            &elsewhere,
            &["run", job, "--worker", worker, "--quiet"],
        ));
    }
    let dst = root.join("out/dst.zarr");
    assert!(!dst.join("zarr.json").exists(), "workers write no metadata");
    let out = zshard_in(&elsewhere, &["finalize", job]);
    succeeds(&out);
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "zshard: finalized {}: 1 array(s), 2 group(s)",
            dst.to_string_lossy()
        )
    );
    let written: Vec<String> = files(&dst).into_keys().collect();
    assert_eq!(
        written,
        [
            "g/a/c/0/0",
            "g/a/c/1/0",
            "g/a/zarr.json",
            "g/zarr.json",
            "zarr.json"
        ]
    );
    let (values, meta) = read_v3(&dst.join("g/a"));
    assert_eq!(values, data);
    assert_eq!(
        meta["codecs"][0]["configuration"]["chunk_shape"],
        json!(CHUNKS)
    );
    let group: Value =
        serde_json::from_slice(&std::fs::read(dst.join("g/zarr.json")).expect("g")).expect("json");
    assert_eq!(group["attributes"], json!({"title": "g"}));

    let out = zshard_in(&elsewhere, &["verify", job]);
    succeeds(&out);
    assert!(
        stderr(&out).contains(&format!(
            "zshard: verified 2 shard(s) in 1 array(s) of {}",
            dst.to_string_lossy()
        )),
        "{}",
        stderr(&out)
    );
}

#[test]
fn job_errors_show_normalized_paths_and_flags_beside_a_job_are_refused() {
    let (_dir, root, _) = layout();
    let job = root.join("jobs/missing.toml");
    std::fs::write(
        &job,
        "[[conversions]]\nsource = \"../data/./nothing.zarr\"\ndestination = \"../out/x.zarr\"\n",
    )
    .expect("job");
    let elsewhere = root.join("elsewhere");
    let out = zshard_in(&elsewhere, &["plan", "../jobs/./missing.toml"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let message = stderr(&out);
    let missing = root.join("data/nothing.zarr");
    assert!(
        message.starts_with(&format!(
            "zshard: error: job file {}: conversion {} -> {}: ",
            job.to_string_lossy(),
            missing.to_string_lossy(),
            root.join("out/x.zarr").to_string_lossy()
        )),
        "{message}"
    );
    assert!(!message.contains(".."), "{message}");

    std::fs::write(root.join("jobs/job.toml"), JOB).expect("job");
    let out = zshard_in(
        &elsewhere,
        &["finalize", "../jobs/job.toml", "--shard-shape", "1,1"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "zshard: error: job file {}: give the conversion's options in the job file, not as flags beside it (only storage flags apply)",
            root.join("jobs/job.toml").to_string_lossy()
        )
    );
    let out = zshard_in(&elsewhere, &["plan", "../data/src.zarr"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim(),
        "zshard: error: DST is missing: give SRC DST, or a job file (JOB.toml) alone"
    );
}

#[test]
fn the_demo_job_runs_from_any_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    std::fs::create_dir(root.join("a")).expect("mkdir");
    std::fs::create_dir(root.join("b")).expect("mkdir");
    succeeds(&zshard_in(
        &root.join("a"),
        &["demo", "--dir", "demo", "--quiet", "--threads", "2"],
    ));
    let out = zshard_in(
        &root.join("b"),
        &["run", "../a/demo/demo-job.toml", "--quiet"],
    );
    succeeds(&out);
    let output = root.join("a/demo/job-output.zarr");
    assert!(output.join("climate/temperature/zarr.json").exists());
    assert!(root.join("a/demo/job-report-0.json").exists());
    succeeds(&zshard_in(
        &root.join("b"),
        &["verify", "../a/demo/demo-job.toml", "--quiet"],
    ));
}

/// Issue 32: a job file's `ome = "keep"` holds for `verify JOB.toml` too (it verified the output
/// against the source's 0.5 form, 7 mismatches), and `--ome` beside a job file is refused rather than
/// silently ignored.
#[test]
fn verify_of_a_job_compares_as_the_job_converted() {
    let (_dir, root, _) = layout();
    let image = root.join("data/image.zarr");
    write_v2(
        &image.join("0"),
        DataType::UInt8,
        &SHAPE,
        &CHUNKS,
        json!({"id": "zstd", "level": 3}),
        &expected(DataType::UInt8, &SHAPE, 0),
    );
    std::fs::write(image.join(".zgroup"), r#"{"zarr_format": 2}"#).expect("zgroup");
    let multiscales = json!({"multiscales": [{"version": "0.4", "name": "image",
        "axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
        "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0, 1.0]}]}]}]});
    std::fs::write(image.join(".zattrs"), multiscales.to_string()).expect("zattrs");
    let job = r#"
threads = 2
ome = "keep"
[[conversions]]
source = "../data/image.zarr"
destination = "../out/image.zarr"
"#;
    std::fs::write(root.join("jobs/ome.toml"), job).expect("job");
    let jobs = root.join("jobs");
    succeeds(&zshard_in(&jobs, &["run", "ome.toml", "--quiet"]));
    let attributes: Value = serde_json::from_slice(
        &std::fs::read(root.join("out/image.zarr/zarr.json")).expect("zarr.json"),
    )
    .expect("json");
    assert_eq!(
        attributes["attributes"]["multiscales"][0]["version"], "0.4",
        "kept as 0.4"
    );
    succeeds(&zshard_in(&jobs, &["verify", "ome.toml", "--quiet"]));
    let beside = zshard_in(&jobs, &["verify", "ome.toml", "--ome", "keep"]);
    assert_eq!(beside.status.code(), Some(1), "{}", stderr(&beside));
    assert!(stderr(&beside).contains("`ome` key"), "{}", stderr(&beside));
}

/// Issue 45, row 1: an entry without a `destination` (or `source`), or with an empty one, is
/// refused naming the entry. Before the fix it converted into the job file's own folder and, with
/// `overwrite = true`, deleted the Zarr v2 group stored there. Every command that reads a job file
/// refuses it, and the folder's files stay as they were.
#[test]
fn a_conversion_without_source_or_destination_is_refused_and_deletes_nothing() {
    let (_dir, root, _data) = layout();
    // The job file sits inside the source group, as a job kept beside its data would.
    let folder = root.join("data/src.zarr");
    let before = files(&folder);
    let entries = [
        ("source = \"../src.zarr\"\n", "has no destination"),
        (
            "source = \"../src.zarr\"\ndestination = \"\"\n",
            "has no destination",
        ),
        ("destination = \"../out.zarr\"\n", "has no source"),
        (
            "source = \"../src.zarr\"\ndestination = \"../out.zarr\"\nreport = \"\"\n",
            "report",
        ),
    ];
    for (entry, wanted) in entries {
        let job = format!("overwrite = true\n[[conversions]]\nsource = \"g/a\"\ndestination = \"{}\"\n[[conversions]]\n{entry}", root.join("out/first.zarr").display());
        std::fs::write(folder.join("job.toml"), &job).expect("job");
        for command in ["run", "plan", "finalize", "verify", "status"] {
            let out = zshard_in(&root, &[command, "data/src.zarr/job.toml"]);
            let message = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{command} {entry}: {message}");
            assert!(
                message.contains("[[conversions]] 2") && message.contains(wanted),
                "{command} {entry}: the entry and what it lacks are named: {message}"
            );
        }
        std::fs::remove_file(folder.join("job.toml")).expect("rm job");
        assert_eq!(files(&folder), before, "{entry}: the folder is untouched");
        assert!(
            !root.join("out/first.zarr").exists(),
            "no conversion started"
        );
    }
}

/// Issue 44, point 5: a folder given where a job file may go is named as a folder, with what to
/// give instead (it said "cannot read job file ...: Is a directory").
#[test]
fn a_folder_given_alone_is_not_taken_for_a_job_file() {
    let (_dir, root, _data) = layout();
    let folder = root.join("data/src.zarr");
    let folder = folder.to_str().expect("utf-8");
    let out = zshard_in(&root, &["verify", folder]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("{folder} is a folder, not a job file"))
            && stderr(&out).contains(&format!("zshard verify --manifest {folder}")),
        "{}",
        stderr(&out)
    );
    let out = zshard_in(&root, &["run", folder]);
    assert!(
        stderr(&out).contains("is a folder, not a job file: give SRC and DST"),
        "run: {}",
        stderr(&out)
    );
}
