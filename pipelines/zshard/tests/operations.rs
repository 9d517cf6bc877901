//! Operating at scale: partitioned workers + finalize, resume, refusal of other options, verify,
//! plan, job files, reports.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{
    banded_source as source, expected, files, read_v3, write_v2, zshard, SHARDS_OF_16 as SHAPES,
};
use serde_json::{json, Value};
use zshard_core::DataType;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn convert(src: &Path, dst: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["convert", s(src), s(dst), "--quiet", "--threads", "2"];
    args.extend(SHAPES);
    args.extend(extra);
    zshard(&args)
}

fn ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn partitioned_workers_and_finalize_equal_a_single_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let single = tmp.path().join("single");
    ok(&convert(&src, &single, &[]));
    let reference = files(&single);
    assert!(reference.contains_key("zarr.json"));
    assert!(
        !single.join(".zshard").exists(),
        "a finished output keeps no state folder"
    );
    for n in [1usize, 3, 7] {
        let dst = tmp.path().join(format!("parts{n}"));
        let mut seen = BTreeMap::new();
        for i in 0..n {
            let before = files(&dst);
            ok(&convert(&src, &dst, &["--worker", &format!("{i}/{n}")]));
            let after = files(&dst);
            for key in after.keys().filter(|k| !before.contains_key(*k)) {
                // Disjoint: no shard is written by two workers.
                assert!(
                    seen.insert(key.clone(), i).is_none(),
                    "N={n}: {key} written twice"
                );
            }
            if n > 1 && i + 1 < n {
                assert!(
                    !dst.join("zarr.json").exists(),
                    "N={n}: metadata before finalize"
                );
                let early = zshard(&[
                    "finalize",
                    s(&src),
                    s(&dst),
                    "--quiet",
                    SHAPES[0],
                    SHAPES[1],
                    SHAPES[2],
                    SHAPES[3],
                ]);
                assert!(
                    !early.status.success(),
                    "N={n}: finalize must refuse while workers are missing"
                );
                assert!(String::from_utf8_lossy(&early.stderr).contains("not done"));
            }
        }
        if n > 1 {
            ok(&zshard(&[
                "finalize",
                s(&src),
                s(&dst),
                "--quiet",
                SHAPES[0],
                SHAPES[1],
                SHAPES[2],
                SHAPES[3],
            ]));
        }
        // Union: exactly the single run's keys, byte for byte, and finalize removed the state.
        assert_eq!(files(&dst), reference, "N={n}");
        assert!(
            !dst.join(".zshard").exists(),
            "N={n}: state left after finalize"
        );
    }
}

#[test]
fn rerun_resumes_other_options_are_refused_overwrite_replaces() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let dst = tmp.path().join("dst");
    let report = tmp.path().join("report.json");
    ok(&convert(&src, &dst, &["--report", s(&report)]));
    let first: Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    assert_eq!(first["succeeded"], json!(true));
    assert_eq!(first["totals"]["shards_total"], json!(30));
    let (written, empty) = (
        first["totals"]["shards_written"].as_u64(),
        first["totals"]["shards_empty"].as_u64(),
    );
    assert_eq!(written.zip(empty).map(|(w, e)| w + e), Some(30));
    assert!(empty >= Some(1), "some shards hold only the fill value");
    let reference = files(&dst);

    ok(&convert(&src, &dst, &["--report", s(&report)]));
    let second: Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    assert_eq!(
        second["totals"]["shards_skipped"],
        json!(30),
        "everything was done already"
    );
    assert_eq!(second["totals"]["chunks_read"], json!(0));
    assert_eq!(files(&dst), reference);

    let other = convert(&src, &dst, &["--compressor", "gzip:1"]);
    assert!(!other.status.success());
    assert!(String::from_utf8_lossy(&other.stderr).contains("different options"));
    assert_eq!(files(&dst), reference, "a refused run changes nothing");

    ok(&convert(
        &src,
        &dst,
        &["--compressor", "gzip:1", "--overwrite"],
    ));
    let (values, doc) = read_v3(&dst);
    assert_eq!(values, expected(DataType::UInt16, &[96, 80], 2000));
    assert_eq!(
        doc["codecs"][0]["configuration"]["codecs"][1]["name"],
        json!("gzip")
    );
}

#[test]
fn foreign_destination_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let dst = tmp.path().join("dst");
    std::fs::create_dir_all(&dst).expect("mkdir");
    std::fs::write(
        dst.join("zarr.json"),
        br#"{"zarr_format":3,"node_type":"group"}"#,
    )
    .expect("write");
    let out = convert(&src, &dst, &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("differs from this conversion"));
}

fn verify(src: &Path, dst: &Path) -> std::process::Output {
    zshard(&["verify", s(src), s(dst), "--quiet"])
}

/// A converted, uncompressed output (so a flipped byte decodes to a wrong value) and one of its shards.
fn verified_output(
    tmp: &Path,
) -> (
    std::path::PathBuf,
    std::path::PathBuf,
    std::path::PathBuf,
    Vec<u8>,
) {
    let src = source(tmp);
    let dst = tmp.join("dst");
    ok(&convert(&src, &dst, &["--compressor", "none"]));
    ok(&verify(&src, &dst));
    let shard = dst.join("c/5/4");
    let pristine = std::fs::read(&shard).expect("shard");
    (src, dst, shard, pristine)
}

fn failed_verify(src: &Path, dst: &Path) -> String {
    let out = verify(src, dst);
    assert!(!out.status.success(), "verify must fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn verify_catches_a_flipped_byte_in_an_inner_chunk() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, dst, shard, mut bytes) = verified_output(tmp.path());
    bytes[10] ^= 0x40;
    std::fs::write(&shard, &bytes).expect("write");
    let err = failed_verify(&src, &dst);
    assert!(
        err.contains("c/5/4") && err.contains("inner chunk 0") && err.contains("differ"),
        "{err}"
    );
}

#[test]
fn verify_catches_a_truncated_shard() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, dst, shard, bytes) = verified_output(tmp.path());
    std::fs::write(&shard, &bytes[..bytes.len() - 30]).expect("write");
    let err = failed_verify(&src, &dst);
    assert!(err.contains("c/5/4") && err.contains("index"), "{err}");
}

#[test]
fn verify_catches_a_corrupted_index_and_a_missing_shard() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, dst, shard, bytes) = verified_output(tmp.path());
    let mut bad_index = bytes.clone();
    let at = bad_index.len() - 4 - 16;
    bad_index[at] ^= 0x01;
    std::fs::write(&shard, &bad_index).expect("write");
    let err = failed_verify(&src, &dst);
    assert!(err.contains("c/5/4") && err.contains("crc32c"), "{err}");
    std::fs::remove_file(&shard).expect("remove");
    assert!(failed_verify(&src, &dst).contains("missing"));
    std::fs::write(&shard, &bytes).expect("restore");
    ok(&verify(&src, &dst));
}

#[test]
fn plan_reports_without_writing_and_rejects_what_convert_rejects() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let dst = tmp.path().join("never");
    let out = zshard(&[
        "plan",
        s(&src),
        s(&dst),
        "--json",
        "--threads",
        "2",
        SHAPES[0],
        SHAPES[1],
        SHAPES[2],
        SHAPES[3],
    ]);
    ok(&out);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    let a = &doc["arrays"][0];
    assert_eq!(a["shape"], json!([96, 80]));
    assert_eq!(a["shards"], json!(30));
    assert_eq!(a["source_chunks"], json!(120));
    assert_eq!(a["inner_chunks_per_shard"], json!(4));
    assert_eq!(a["estimated_bytes_in"], json!(96 * 80 * 2));
    assert!(a["estimated_peak_memory_per_worker"].as_u64() > Some(0));
    assert!(!dst.exists(), "plan writes nothing");
    let bad = zshard(&[
        "plan",
        s(&src),
        s(&dst),
        "--shard-shape",
        "16,12",
        "--chunk-shape",
        "8,8",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("does not divide"));
}

#[test]
fn job_file_runs_with_per_array_settings() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let job = tmp.path().join("job.toml");
    std::fs::write(
        &job,
        format!(
            "threads = 2\ncompressor = \"gzip:2\"\nreport = \"report-{{n}}.json\"\n[[conversions]]\nsource = \"{}\"\ndestination = \"out\"\n[conversions.arrays.\"\"]\nshard_shape = [32, 16]\nchunk_shape = [16, 8]\n",
            s(&src)
        ),
    )
    .expect("write job");
    ok(&zshard(&["run", s(&job), "--quiet"]));
    let (values, doc) = read_v3(&tmp.path().join("out"));
    assert_eq!(values, expected(DataType::UInt16, &[96, 80], 2000));
    assert_eq!(
        doc["chunk_grid"]["configuration"]["chunk_shape"],
        json!([32, 16])
    );
    assert_eq!(
        doc["codecs"][0]["configuration"]["chunk_shape"],
        json!([16, 8])
    );
    assert!(tmp.path().join("report-0.json").is_file());
    let limit = zshard(&[
        "convert",
        s(&src),
        s(&tmp.path().join("x")),
        "--memory-limit",
        "10KiB",
        "--quiet",
    ]);
    assert!(!limit.status.success());
    assert!(String::from_utf8_lossy(&limit.stderr).contains("memory limit"));
}

/// Issue 44: after workers given non-default shapes, codecs and index location, `finalize DST`
/// alone and `finalize SRC DST` without options reuse what DST's claim records; options that are
/// given must still match; `status` and `verify --manifest` then need DST alone.
#[test]
fn finalize_status_and_verify_from_the_destination_alone() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let workers_options = [
        "--shard-shape",
        "32,16",
        "--chunk-shape",
        "8,16",
        "--compressor",
        "zstd:7",
        "--index-location",
        "start",
        "--keep-manifest",
    ];
    let reference = tmp.path().join("reference");
    let mut args = vec!["convert", s(&src), s(&reference), "--quiet"];
    args.extend(workers_options);
    ok(&zshard(&args));
    for (name, finalize) in [
        ("alone", vec!["finalize", "DST", "--quiet"]),
        ("with_src", vec!["finalize", "SRC", "DST", "--quiet"]),
    ] {
        let dst = tmp.path().join(name);
        for i in 0..2 {
            let worker = format!("{i}/2");
            let mut args = vec!["convert", s(&src), s(&dst), "--quiet", "--worker", &worker];
            args.extend(workers_options);
            ok(&zshard(&args));
        }
        let args = |extra: &[&'static str]| -> Vec<String> {
            finalize
                .iter()
                .chain(extra)
                .map(|a| match *a {
                    "DST" => s(&dst).to_string(),
                    "SRC" => s(&src).to_string(),
                    other => other.to_string(),
                })
                .collect()
        };
        // An option given that differs from the workers' is still refused.
        let other: Vec<String> = args(&["--shard-shape", "16,16"]);
        let refused = zshard(&other.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(!refused.status.success(), "{name}: other shapes finalized");
        let message = String::from_utf8_lossy(&refused.stderr);
        assert!(message.contains("different options"), "{name}: {message}");
        let given = args(&[]);
        ok(&zshard(
            &given.iter().map(String::as_str).collect::<Vec<_>>(),
        ));
        let status = zshard(&["status", s(&dst), "--json"]);
        ok(&status);
        let status: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
        assert_eq!(status["phase"], "complete", "{name}: {status}");
        ok(&zshard(&["verify", "--manifest", s(&dst), "--quiet"]));
        let (data, meta) = read_v3(&dst);
        let (reference_data, reference_meta) = read_v3(&reference);
        assert_eq!(data, reference_data, "{name}");
        assert_eq!(meta, reference_meta, "{name}");
        assert!(files(&dst)
            .keys()
            .all(|k| !k.starts_with(".zshard/") || k == ".zshard/manifest.tsv"));
    }
    // A destination that records no conversion says what to give.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let out = zshard(&["finalize", s(&empty)]);
    assert!(!out.status.success());
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(message.contains("records no conversion"), "{message}");
}

/// Issue 44: `plan` checks the destination as `convert` finds it: a DST claimed by a conversion
/// with other options is refused (the same options pass), and so are a bucket that does not exist
/// and an endpoint that does not answer; an empty bucket passes.
#[test]
fn plan_checks_the_destination() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let dst = tmp.path().join("dst");
    ok(&convert(&src, &dst, &["--worker", "0/2"]));
    let mut same = vec!["plan", s(&src), s(&dst)];
    same.extend(SHAPES);
    ok(&zshard(&same));
    let other = zshard(&["plan", s(&src), s(&dst), "--shard-shape", "32,32"]);
    assert!(!other.status.success(), "plan passed a claimed DST");
    let message = String::from_utf8_lossy(&other.stderr);
    assert!(
        message.contains("claimed by a conversion with different options")
            && message.contains("chunk_grid"),
        "{message}"
    );
    let endpoint = common::empty_s3();
    let plan_s3 = |dst: &str, endpoint: &str| {
        std::process::Command::new(common::binary())
            .args([
                "plan",
                s(&src),
                dst,
                "--s3-endpoint",
                endpoint,
                "--s3-path-style",
            ])
            .args(["--retries", "0"])
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .output()
            .expect("run zshard")
    };
    ok(&plan_s3("s3://bucket/out.zarr", &endpoint));
    let missing = plan_s3("s3://nobucket/out.zarr", &endpoint);
    assert!(!missing.status.success(), "plan passed a missing bucket");
    let message = String::from_utf8_lossy(&missing.stderr);
    assert!(
        message.contains("s3://nobucket/out.zarr") && message.contains("NoSuchBucket"),
        "{message}"
    );
    let unreachable = plan_s3("s3://bucket/out.zarr", "http://127.0.0.1:9");
    assert!(
        !unreachable.status.success(),
        "plan passed an unreachable endpoint"
    );
}

/// Issue 44, point 5: a worker's report counts as skipped only its own shards done before, never
/// the other workers'.
#[test]
fn a_worker_skips_only_its_own_shards() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let dst = tmp.path().join("dst");
    let report = tmp.path().join("report.json");
    ok(&convert(&src, &dst, &["--worker", "0/2"]));
    ok(&convert(
        &src,
        &dst,
        &["--worker", "1/2", "--report", s(&report)],
    ));
    let read: Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("JSON");
    assert_eq!(read["totals"]["shards_skipped"], 0, "{read:#}");
    // Its rerun skips its own 15.
    ok(&convert(
        &src,
        &dst,
        &["--worker", "1/2", "--report", s(&report)],
    ));
    let read: Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("JSON");
    assert_eq!(read["totals"]["shards_skipped"], 15, "{read:#}");
}

/// Issue 44, point 6: the plan states its cost beyond a request count: the bytes the source's
/// chunks are stored in (from a listing of them) next to their raw upper bound, every request by
/// kind on each side with the state's (claim, records, manifest), and a time estimate with what it
/// assumes; a price for the requests to an object store (S3 Standard's, so named). Both in
/// `--json` and in the text.
#[test]
fn plan_states_stored_bytes_every_request_a_time_and_a_price() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    // The chunk files the listing finds (`.zarray` and `.zattrs` are no chunks).
    let stored: u64 = files(&src)
        .iter()
        .filter(|(key, _)| !key.starts_with('.') && !key.contains("/."))
        .map(|(_, bytes)| bytes.len() as u64)
        .sum();
    let raw = 96 * 80 * 2;
    assert!(stored > 0 && stored < raw, "{stored}");
    let mut args = vec!["plan", s(&src), "placeholder", "--json"];
    args.extend(SHAPES);
    let dst = tmp.path().join("dst");
    args[2] = s(&dst);
    let out = zshard(&args);
    ok(&out);
    let plan: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let cost = &plan["cost"];
    assert_eq!(cost["stored_bytes_in"], stored, "{cost:#}");
    assert_eq!(cost["raw_bytes_in"], raw, "{cost:#}");
    // The source: one listing of its 120 chunks and a GET each.
    assert_eq!(
        cost["source_requests"],
        json!({"list": 1, "head": 0, "get": 120, "put": 0, "delete": 0}),
        "{cost:#}"
    );
    // The destination: 30 shards and the array's zarr.json, and the state of one short run: the
    // claim (GET; PUT of the claim, options record and lease; the lease's removal; a listing of
    // the state at the start and at the end; its bulk removal and the claim's), one batch of
    // records read at the end with the array's kept records written, one manifest file.
    assert_eq!(
        cost["state_requests"],
        json!({"claim": 9, "records": 3, "manifest": 1}),
        "{cost:#}"
    );
    assert_eq!(
        cost["destination_requests"],
        json!({"list": 2, "head": 0, "get": 2, "put": 31 + 3 + 2 + 1, "delete": 3}),
        "{cost:#}"
    );
    let estimate = &plan["estimate"];
    assert!(
        estimate["seconds"].as_f64().is_some_and(|s| s > 0.0),
        "{estimate:#}"
    );
    assert_eq!(
        estimate["request_price_usd"],
        Value::Null,
        "local: {estimate:#}"
    );
    assert_eq!(estimate["assumptions"]["workers"], 1);
    assert_eq!(
        estimate["assumptions"]["object_store_bytes_per_second"],
        100_000_000
    );
    assert_eq!(
        estimate["assumptions"]["prices"]["usd_per_1000_put_list"],
        0.005
    );
    assert!(
        estimate["note"]
            .as_str()
            .is_some_and(|n| n.contains("an estimate")),
        "{estimate:#}"
    );

    // To an object store: priced at S3 Standard's request prices, the destination's requests only
    // (the source is local).
    let endpoint = common::empty_s3();
    let plan_s3 = |json: bool| {
        let mut command = std::process::Command::new(common::binary());
        command
            .args(["plan", s(&src), "s3://bucket/out.zarr", "--s3-endpoint"])
            .args([endpoint.as_str(), "--s3-path-style", "--retries", "0"])
            .args(SHAPES)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1");
        if json {
            command.arg("--json");
        }
        command.output().expect("run zshard")
    };
    let out = plan_s3(true);
    ok(&out);
    let plan: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let requests = &plan["cost"]["destination_requests"];
    let n = |k: &str| requests[k].as_u64().expect("count") as f64;
    let price = plan["estimate"]["request_price_usd"]
        .as_f64()
        .expect("a price");
    let expected = ((n("put") + n("list")) * 0.005 + (n("get") + n("head")) * 0.0004) / 1000.0;
    assert!((price - expected).abs() < 1e-12, "{price} {expected}");
    assert!(price > 0.0, "{price}");
    let text = plan_s3(false);
    ok(&text);
    let text = String::from_utf8_lossy(&text.stdout);
    for wanted in [
        "source reads: ",
        " stored (listed), ",
        "source requests: 1 LIST, 0 HEAD, 120 GET",
        "of which the state: claim ",
        "estimate: ",
        "for 1 worker(s)",
        "request price about $",
        "S3 Standard request prices",
        "100.00 MB/s",
        "not a measurement",
    ] {
        assert!(text.contains(wanted), "{wanted:?} in:\n{text}");
    }
}

/// Issue 44, point 6: the estimate's figures (bandwidth, latency, workers, request prices) can be
/// given; the plan states the ones it used, and a figure that does not read is refused by name.
#[test]
fn plan_estimates_with_the_figures_given() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    let data = expected(DataType::UInt16, &[64, 64], 0);
    write_v2(
        &src,
        DataType::UInt16,
        &[64, 64],
        &[8, 8],
        json!(null),
        &data,
    );
    let endpoint = common::empty_s3();
    let plan = |extra: &[&str]| {
        std::process::Command::new(common::binary())
            .args(["plan", s(&src), "s3://bucket/out.zarr", "--s3-endpoint"])
            .args([endpoint.as_str(), "--s3-path-style", "--retries", "0"])
            .args(["--shard-shape", "32,32", "--json"])
            .args(extra)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .output()
            .expect("run zshard")
    };
    let read = |out: std::process::Output| -> Value {
        ok(&out);
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let default = read(plan(&[]));
    let given = read(plan(&[
        "--estimate-with",
        "bandwidth=1GB,latency=300ms,workers=4,put=1,get=0.5",
    ]));
    let assumed = &given["estimate"]["assumptions"];
    assert_eq!(assumed["workers"], 4, "{given:#}");
    assert_eq!(assumed["object_store_bytes_per_second"], 1_000_000_000);
    assert_eq!(assumed["object_store_latency_ms"], 300.0);
    assert_eq!(assumed["prices"]["usd_per_1000_put_list"], 1.0);
    assert_eq!(
        assumed["prices"]["usd_per_1000_delete"], 0.0,
        "not given: S3 Standard's"
    );
    let requests = &given["cost"]["destination_requests"];
    let n = |k: &str| requests[k].as_u64().expect("count") as f64;
    let price = given["estimate"]["request_price_usd"]
        .as_f64()
        .expect("price");
    let expected = ((n("put") + n("list")) * 1.0 + (n("get") + n("head")) * 0.5) / 1000.0;
    assert!((price - expected).abs() < 1e-12, "{price} {expected}");
    // Ten times the latency, four workers: requests dominate this small job.
    let seconds = |p: &Value| p["estimate"]["seconds"].as_f64().expect("seconds");
    assert!(
        seconds(&given) > 2.0 * seconds(&default),
        "{given:#} {default:#}"
    );
    let refused = plan(&["--estimate-with", "speed=1"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--estimate-with") && stderr.contains("speed"),
        "{stderr}"
    );
}
