//! Issue 18, points 2, 3 and 6: watching a long run (progress in log mode with its figures, the bar
//! on a terminal, none, `-v`), the memory default from SLURM's variables and the process's cgroup,
//! sizes as SLURM reads them, shell completions, the man page and `--version`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{binary, read_v3, small_source, write_v2};
use serde_json::Value;
use zshard_convert::parse_size;
use zshard_core::DataType;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the binary with `args` and the SLURM variables removed (the test may run inside a job).
fn zshard(args: &[&str]) -> Output {
    zshard_with(args, &[])
}

/// Runs the binary with `args` and `env` set, and no other SLURM variable.
fn zshard_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(binary());
    command.args(args);
    for var in [
        "SLURM_MEM_PER_NODE",
        "SLURM_MEM_PER_CPU",
        "SLURM_CPUS_ON_NODE",
        "RUST_LOG",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command.output().expect("run zshard")
}

/// `key=value` fields of a progress line after its `prefix`.
fn fields<'a>(line: &'a str, prefix: &str) -> Option<BTreeMap<&'a str, &'a str>> {
    let rest = line.strip_prefix(prefix)?;
    Some(
        rest.split(' ')
            .filter_map(|field| field.split_once('='))
            .collect(),
    )
}

/// `a/b` as two numbers read by `read`.
fn pair<T>(text: &str, read: impl Fn(&str) -> T) -> (T, T) {
    let (a, b) = text.split_once('/').expect("a/b");
    (read(a), read(b))
}

fn size(text: &str) -> u64 {
    parse_size(text).unwrap_or_else(|e| panic!("{text:?} is not a size: {e}"))
}

fn count(text: &str) -> u64 {
    text.parse()
        .unwrap_or_else(|e| panic!("{text:?} is not a count: {e}"))
}

/// Noise (pseudo-random uint16 below 4096, so gzip cannot squeeze it much and takes its time) as
/// little-endian bytes.
fn noise(elements: u64) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..elements)
        .flat_map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (((state >> 33) % 4096) as u16).to_le_bytes()
        })
        .collect()
}

/// A 4096 x 6144 uint16 array (48 MiB) of noise in 256 x 256 uncompressed chunks at `dir/src`.
fn noise_source(dir: &Path) -> (std::path::PathBuf, Vec<u8>) {
    let src = dir.join("src");
    let data = noise(4096 * 6144);
    write_v2(
        &src,
        DataType::UInt16,
        &[4096, 6144],
        &[256, 256],
        Value::Null,
        &data,
    );
    (src, data)
}

/// One 48 MiB shard, gzip level 9 on one thread, in parts of a few MiB (a small memory limit), with
/// stderr to a file: a line every 250 ms whose figures parse and grow while the one shard is not
/// done yet, then a last line with the totals. The interval is short because a fast machine (CI)
/// converts the 48 MiB in 2 s: with a 1 s interval only one line landed before the end.
#[test]
fn log_mode_prints_a_line_every_interval_with_growing_figures() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, data) = noise_source(tmp.path());
    let out = tmp.path().join("out");
    let log = tmp.path().join("stderr.log");
    let file = std::fs::File::create(&log).expect("log file");
    let status = Command::new(binary())
        .args([
            "convert",
            s(&src),
            s(&out),
            "--shard-shape",
            "4096,6144",
            "--compressor",
            "gzip:9",
            "--threads",
            "1",
            "--memory-limit",
            "64MiB",
            "--progress",
            "log",
            "--log-interval",
            "250ms",
        ])
        .stderr(Stdio::from(file))
        .status()
        .expect("run zshard");
    let text = std::fs::read_to_string(&log).expect("read log");
    assert!(status.success(), "{text}");
    let periodic: Vec<_> = text
        .lines()
        .filter_map(|l| fields(l, "zshard: progress "))
        .collect();
    assert!(
        periodic.len() >= 3,
        "fewer than 2 progress lines after the start:\n{text}"
    );
    let total = 4096 * 6144 * 2;
    let mut previous = (0, 0, 0);
    // The first line is the start (issue 44: where a resumed run starts), before any array's part.
    assert_eq!(periodic[0]["array"], "-", "{text}");
    assert_eq!(periodic[0]["done"], "0.0%", "{text}");
    for line in &periodic[1..] {
        assert_eq!(line["array"], s(&src), "{text}");
        let (done, all) = pair(line["bytes"], size);
        assert_eq!(all, total, "{text}");
        let (chunks, all_chunks) = pair(line["chunks"], count);
        assert_eq!(all_chunks, 16 * 24, "{text}");
        let written = size(line["written"]);
        let read = size(line["read"]);
        assert!(
            done >= previous.0 && chunks >= previous.1 && written >= previous.2,
            "figures went down:\n{text}"
        );
        previous = (done, chunks, written);
        // Uncompressed chunks: read equals the raw bytes done (to the printed precision).
        assert!(read.abs_diff(done) <= done / 100 + 1, "{text}");
        let rate = size(line["rate"].strip_suffix("/s").expect("rate in B/s"));
        let eta = line["eta"];
        if done > 0 {
            assert!(rate > 0, "{text}");
            let eta = humantime::parse_duration(eta).expect("eta is a duration");
            // The ETA is what remains at the rate so far.
            let expected = (total - done) as f64 / rate as f64;
            assert!(
                (eta.as_secs_f64() - expected).abs() <= expected * 0.1 + 2.0,
                "eta {eta:?}, expected about {expected} s:\n{text}"
            );
        } else {
            assert_eq!(eta, "unknown", "{text}");
        }
    }
    let first = pair(periodic[0]["bytes"], size).0;
    let last = pair(periodic[periodic.len() - 1]["bytes"], size).0;
    assert!(last > first, "no progress between lines:\n{text}");
    // The shard advances by parts: bytes are done while it is not complete.
    assert!(
        periodic.iter().any(|l| l["shards"] == "0/1"
            && pair(l["bytes"], size).0 > 0
            && pair(l["bytes"], size).0 < total),
        "no line inside the shard:\n{text}"
    );
    let last_line = text
        .lines()
        .find_map(|l| fields(l, "zshard: finished "))
        .expect("a final line");
    assert_eq!(last_line["status"], "ok");
    assert_eq!(last_line["done"], "100.0%");
    assert_eq!(last_line["bytes"], "48.00MiB/48.00MiB");
    assert_eq!(last_line["chunks"], "384/384");
    assert_eq!(last_line["shards"], "1/1");
    assert_eq!(last_line["eta"], "0s");
    assert!(
        text.contains("zshard: converted 1 array(s)"),
        "the summary follows: {text}"
    );
    assert!(
        read_v3(&out).0 == data,
        "the output differs from the source"
    );
}

/// Without a terminal, `auto` is log mode (here only the last line, as the run is short); `none`
/// prints only the summary, `--quiet` nothing.
#[test]
fn auto_logs_without_a_terminal_none_and_quiet_print_no_progress() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = small_source(tmp.path(), "small");
    let run = |name: &str, extra: &[&str]| {
        let out = tmp.path().join(name);
        let mut args = vec!["convert", s(&src), s(&out), "--shard-shape", "32,32"];
        args.extend_from_slice(extra);
        let output = zshard(&args);
        assert!(output.status.success(), "{}", stderr(&output));
        stderr(&output)
    };
    let auto = run("auto", &[]);
    let finished: Vec<_> = auto
        .lines()
        .filter_map(|l| fields(l, "zshard: finished "))
        .collect();
    assert_eq!(finished.len(), 1, "{auto}");
    assert_eq!(finished[0]["bytes"], "8.00KiB/8.00KiB", "{auto}");
    assert_eq!(finished[0]["chunks"], "16/16", "{auto}");
    assert_eq!(finished[0]["shards"], "4/4", "{auto}");
    assert_eq!(finished[0]["array"], s(&src), "{auto}");
    assert!(
        !auto.contains('\r'),
        "a bar was drawn into a file: {auto:?}"
    );
    let none = run("none", &["--progress", "none"]);
    assert_eq!(none.lines().count(), 1, "{none}");
    assert!(none.starts_with("zshard: converted 1 array(s)"), "{none}");
    let log_quiet = run("quiet", &["--progress", "log", "--quiet"]);
    assert_eq!(log_quiet, "");
    let bad = zshard(&["convert", s(&src), "x", "--log-interval", "soon"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("invalid value 'soon' for '--log-interval <DURATION>'"),
        "{}",
        stderr(&bad)
    );
}

/// On a terminal (a pseudo-terminal from `script`), `auto` and `bar` draw the bar with bytes, rate,
/// ETA and the other figures; `none` draws nothing. No log lines in either.
#[test]
fn the_bar_is_drawn_on_a_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        println!("SKIPPED: no `script` (util-linux) to run zshard on a pseudo-terminal");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, _) = noise_source(tmp.path());
    let on_terminal = |name: &str, mode: &str| {
        let out = tmp.path().join(name);
        let command = format!(
            "{} convert {} {} --shard-shape 1024,6144 --compressor gzip:1 --threads 1 --progress {mode}",
            binary().display(),
            s(&src),
            s(&out)
        );
        let output = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .output()
            .expect("run script");
        let text = stdout(&output);
        assert!(output.status.success(), "{text}");
        text
    };
    for mode in ["auto", "bar"] {
        let text = on_terminal(mode, mode);
        assert!(
            text.contains("48.00 MiB, ETA") || text.contains("/48.00 MiB "),
            "{mode}: no bar: {text:?}"
        );
        assert!(
            text.contains(&format!("{}: inner chunks ", s(&src))),
            "{mode}: {text:?}"
        );
        assert!(text.contains("shards "), "{mode}: {text:?}");
        assert!(!text.contains("zshard: finished"), "{mode}: {text:?}");
        assert!(
            text.contains("zshard: converted 1 array(s)"),
            "{mode}: {text:?}"
        );
    }
    let none = on_terminal("none", "none");
    assert!(
        !none.contains("ETA") && !none.contains("chunks "),
        "{none:?}"
    );
    assert!(none.contains("zshard: converted 1 array(s)"), "{none:?}");
}

/// `-v` prints zshard's decisions as tracing lines (here the passthrough decision of each array),
/// as does RUST_LOG; without either there are none.
#[test]
fn verbose_prints_tracing_lines() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = small_source(tmp.path(), "small");
    let decision = "DEBUG zshard_convert::plan: passthrough decision array=\"\" passthrough=true allowed=true source_chunks=[16, 16] inner_chunks=[16, 16] same_codecs=true";
    let plain = zshard(&["convert", s(&src), s(&tmp.path().join("a")), "--quiet"]);
    assert_eq!(stderr(&plain), "");
    let verbose = zshard(&[
        "convert",
        s(&src),
        s(&tmp.path().join("b")),
        "-v",
        "--quiet",
    ]);
    assert!(verbose.status.success(), "{}", stderr(&verbose));
    assert!(stderr(&verbose).contains(decision), "{}", stderr(&verbose));
    let env = zshard_with(
        &["plan", s(&src), s(&tmp.path().join("c"))],
        &[("RUST_LOG", "zshard_convert=debug")],
    );
    assert!(env.status.success(), "{}", stderr(&env));
    assert!(stderr(&env).contains(decision), "{}", stderr(&env));
}

/// What `plan --json` says about the memory limit.
fn planned_limit(src: &Path, extra: &[&str], env: &[(&str, &str)]) -> (u64, String) {
    let mut args = vec!["plan", s(src), "unused-dst", "--json"];
    args.extend_from_slice(extra);
    let out = zshard_with(&args, env);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("plan json");
    (
        doc["memory_limit"].as_u64().expect("a limit"),
        doc["memory_limit_source"]
            .as_str()
            .expect("a source")
            .to_string(),
    )
}

/// The default limit is half of SLURM's allocation on the node (MiB), per node or per CPU, when that
/// is the smallest limit; plan says so, in JSON and in text.
#[test]
fn the_memory_default_follows_the_slurm_allocation() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = small_source(tmp.path(), "small");
    assert_eq!(
        planned_limit(&src, &[], &[("SLURM_MEM_PER_NODE", "2048")]),
        (
            1 << 30,
            "default: half of 2147483648 bytes, from SLURM_MEM_PER_NODE".to_string()
        )
    );
    assert_eq!(
        planned_limit(
            &src,
            &[],
            &[("SLURM_MEM_PER_CPU", "512"), ("SLURM_CPUS_ON_NODE", "3")]
        ),
        (
            768 << 20,
            "default: half of 1610612736 bytes, from SLURM_MEM_PER_CPU x SLURM_CPUS_ON_NODE (3)"
                .to_string()
        )
    );
    let (_, unset) = planned_limit(&src, &[], &[]);
    assert!(!unset.contains("SLURM"), "{unset}");
    let text = zshard_with(
        &["plan", s(&src), "unused-dst"],
        &[("SLURM_MEM_PER_NODE", "2048")],
    );
    assert!(
        stdout(&text).contains(
            "memory limit: 1.00 GiB (default: half of 2147483648 bytes, from SLURM_MEM_PER_NODE)"
        ),
        "{}",
        stdout(&text)
    );
}

/// `--memory-limit` reads sizes as SLURM and people do: 8G and 8GiB are GiB, 8GB is 10^9.
#[test]
fn memory_sizes_read_as_slurm_reads_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = small_source(tmp.path(), "small");
    let given = "given (--memory-limit)".to_string();
    for (text, bytes) in [
        ("8G", 8u64 << 30),
        ("8GiB", 8 << 30),
        ("8GB", 8_000_000_000),
        ("512M", 512 << 20),
    ] {
        assert_eq!(
            planned_limit(&src, &["--memory-limit", text], &[]),
            (bytes, given.clone()),
            "{text}"
        );
    }
}

/// A memory cgroup of its own (v1 where the memory controller is mounted on its own, else v2),
/// removed when dropped; `None` where none can be made (not root, read-only cgroup file system).
struct MemoryCgroup {
    dir: std::path::PathBuf,
    file: &'static str,
}

impl MemoryCgroup {
    fn new(limit: u64) -> Option<MemoryCgroup> {
        let name = format!("zshard-ops-test-{}", std::process::id());
        let (dir, file) = if Path::new("/sys/fs/cgroup/memory").is_dir() {
            (
                Path::new("/sys/fs/cgroup/memory").join(name),
                "memory.limit_in_bytes",
            )
        } else {
            (Path::new("/sys/fs/cgroup").join(name), "memory.max")
        };
        std::fs::create_dir(&dir).ok()?;
        let group = MemoryCgroup { dir, file };
        std::fs::write(group.dir.join(file), limit.to_string()).ok()?;
        Some(group)
    }

    /// Runs the binary with `args` inside the group, with `env` set.
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let procs = self.dir.join("cgroup.procs");
        let script = format!("echo $$ > {} && exec \"$0\" \"$@\"", procs.display());
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg(binary())
            .args(args)
            .env_remove("SLURM_MEM_PER_NODE")
            .env_remove("SLURM_MEM_PER_CPU")
            .envs(env.iter().copied())
            .output()
            .expect("run zshard in the cgroup")
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Inside a cgroup of 1 GiB (its own, not the file system's root), the default is half of that,
/// also when a larger SLURM allocation is set; a smaller allocation wins.
#[test]
fn the_memory_default_follows_the_process_cgroup() {
    let Some(group) = MemoryCgroup::new(1 << 30) else {
        println!("SKIPPED: cannot make a memory cgroup (needs root and a writable /sys/fs/cgroup)");
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = small_source(tmp.path(), "small");
    let plan = |env: &[(&str, &str)]| {
        let out = group.run(&["plan", s(&src), "unused-dst", "--json"], env);
        assert!(out.status.success(), "{}", stderr(&out));
        let doc: Value = serde_json::from_slice(&out.stdout).expect("plan json");
        (
            doc["memory_limit"].as_u64().expect("a limit"),
            doc["memory_limit_source"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    let version = if group.file == "memory.max" {
        "v2"
    } else {
        "v1"
    };
    let expected = format!(
        "default: half of 1073741824 bytes, from cgroup {version} limit ({})",
        group.dir.join(group.file).display()
    );
    assert_eq!(plan(&[]), (512 << 20, expected.clone()));
    assert_eq!(
        plan(&[("SLURM_MEM_PER_NODE", "4096")]),
        (512 << 20, expected)
    );
    assert_eq!(
        plan(&[("SLURM_MEM_PER_NODE", "512")]),
        (
            256 << 20,
            "default: half of 536870912 bytes, from SLURM_MEM_PER_NODE".to_string()
        )
    );
}

/// `zshard completions bash` is a script bash accepts; zsh and fish get theirs.
#[test]
fn completions_are_valid_scripts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let bash = zshard(&["completions", "bash"]);
    assert!(bash.status.success(), "{}", stderr(&bash));
    let script = tmp.path().join("zshard.bash");
    std::fs::write(&script, &bash.stdout).expect("write script");
    let check = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .expect("bash");
    assert!(check.status.success(), "{}", stderr(&check));
    let text = stdout(&bash);
    assert!(
        text.contains("_zshard()") && text.contains("complete -F _zshard"),
        "{text}"
    );
    assert!(text.contains("--log-interval") && text.contains("--memory-limit"));
    assert!(stdout(&zshard(&["completions", "zsh"])).starts_with("#compdef zshard"));
    assert!(stdout(&zshard(&["completions", "fish"])).contains("complete -c zshard"));
}

/// `zshard man` is a roff page (and renders where `man` is installed); each command has its own.
#[test]
fn the_man_page_renders() {
    let page = zshard(&["man"]);
    assert!(page.status.success(), "{}", stderr(&page));
    let text = stdout(&page);
    assert!(text.contains(".TH zshard 1 "), "{text}");
    assert!(
        text.contains("convert") && text.contains("finalize"),
        "{text}"
    );
    let convert = stdout(&zshard(&["man", "convert"]));
    assert!(convert.contains(".TH zshard-convert 1 "), "{convert}");
    assert!(convert.contains("memory\\-limit"), "{convert}");
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("zshard.1");
    std::fs::write(&file, &page.stdout).expect("write page");
    match Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
    {
        Ok(rendered) if rendered.status.success() => {
            let rendered = stdout(&rendered);
            assert!(
                rendered.contains("NAME") && rendered.contains("zshard - Convert chunked arrays"),
                "{rendered}"
            );
        }
        _ => println!("man is not installed: checked the .TH header only"),
    }
    let missing = zshard(&["man", "frobnicate"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains("no command \"frobnicate\""));
}

/// `--version` names the commit zshard was built from (HEAD of this checkout) and what it can read.
#[test]
fn version_names_the_commit_of_head() {
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    let Some(head) = head
        .ok()
        .filter(|o| o.status.success())
        .map(|o| stdout(&o).trim().to_string())
    else {
        println!("SKIPPED: not a git checkout");
        return;
    };
    let version = zshard(&["--version"]);
    assert!(version.status.success());
    let text = stdout(&version);
    assert!(
        text.starts_with(&format!(
            "zshard {} (commit {head})\n",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    assert!(
        text.contains("stores: file, s3, gcs, azure, http(s) (read)")
            && text.contains("kerchunk-parquet")
            && text.contains("codecs: bytes, "),
        "{text}"
    );
    // The zarr-extensions data types and codec of issue 42.
    assert!(
        text.contains("data types: bool, ")
            && text.contains("bfloat16, ")
            && text.contains("float8_e4m3fn, ")
            && text.contains("int4, ")
            && text.contains(", packbits, "),
        "{text}"
    );
    // The registered codecs of issue 42, under their registered names.
    for codec in [
        ", bitround, ",
        ", reshape, ",
        ", conditional, ",
        ", n5_default, ",
        ", zfp, ",
    ] {
        assert!(text.contains(codec), "{codec} not in {text}");
    }
}

/// Every command's --help shows examples.
#[test]
fn every_command_has_examples() {
    for command in [
        "convert",
        "plan",
        "finalize",
        "verify",
        "run",
        "demo",
        "completions",
        "man",
    ] {
        let help = zshard(&[command, "--help"]);
        assert!(help.status.success(), "{command}");
        let text = stdout(&help);
        assert!(
            text.contains("Examples:\n  ") && text.contains(&format!("zshard {command}")),
            "{command}: {text}"
        );
    }
}

/// `plan` names the fetch and write threads: 2 for local paths; for a remote destination 8, and up to 32
/// for shards small enough that twice that many in flight hold at most 64 MiB, where the memory limit
/// lets them in; `--io-threads` wins.
/// (Planning reads only the source's metadata and checks the destination: the endpoint below holds
/// nothing.)
#[test]
fn plan_names_the_io_threads_which_follow_the_shard_size_on_remote_stores() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("big.zarr");
    std::fs::create_dir_all(&src).expect("source folder");
    // 4096² uint16 without chunks (all fill): only its metadata is read.
    std::fs::write(
        src.join(".zarray"),
        r#"{"zarr_format": 2, "shape": [4096, 4096], "chunks": [512, 512], "dtype": "<u2",
            "compressor": null, "fill_value": 0, "order": "C", "filters": null}"#,
    )
    .expect("write .zarray");
    let endpoint: &'static str = common::empty_s3().leak();
    let remote = ["--s3-endpoint", endpoint, "--s3-path-style"];
    let env = [
        ("AWS_ACCESS_KEY_ID", "unused"),
        ("AWS_SECRET_ACCESS_KEY", "unused"),
        ("AWS_REGION", "us-east-1"),
    ];
    let planned = |dst: &str, extra: &[&str]| {
        let mut args = vec!["plan", s(&src), dst, "--json", "--chunk-shape", "512,512"];
        args.extend_from_slice(extra);
        let out = zshard_with(&args, &env);
        assert!(out.status.success(), "{}", stderr(&out));
        let doc: Value = serde_json::from_slice(&out.stdout).expect("plan json");
        doc["io_threads"].as_u64().expect("io_threads")
    };
    let local = tmp.path().join("out.zarr");
    let s3 = "s3://bucket/out.zarr";
    let with = |shard: &'static str, more: &[&'static str]| {
        let mut args = vec!["--shard-shape", shard];
        args.extend_from_slice(more);
        args
    };
    assert_eq!(planned(s(&local), &with("2048,2048", &[])), 2);
    // Shards of 8 MiB, 2 MiB and 512 KiB.
    assert_eq!(planned(s3, &with("2048,2048", &remote)), 8);
    assert_eq!(planned(s3, &with("1024,1024", &remote)), 16);
    assert_eq!(planned(s3, &with("512,512", &remote)), 32);
    let mut explicit = with("512,512", &remote);
    explicit.extend_from_slice(&["--io-threads", "5"]);
    assert_eq!(planned(s3, &explicit), 5);
    // Under a memory limit, the extra threads come only where they take neither a CPU thread nor part
    // size: at 96 MiB 32 fit beside 2 CPU threads; at 90 MiB 32 would leave 1 (as --io-threads 32 does);
    // at 84 MiB 32 would not fit at all. (The 512 KiB shards go up in one PUT each: no 32 MiB part
    // buffers are counted for them, issue 45 row 10; the limits were 224, 216 and 200 MiB.)
    let limited = |limit: &'static str, more: &[&'static str]| {
        let mut args = with("512,512", &remote);
        args.extend_from_slice(&["--threads", "2", "--memory-limit", limit]);
        args.extend_from_slice(more);
        args
    };
    assert_eq!(planned(s3, &limited("96MiB", &[])), 32);
    assert_eq!(planned(s3, &limited("90MiB", &[])), 8);
    assert_eq!(planned(s3, &limited("90MiB", &["--io-threads", "32"])), 32);
    assert_eq!(planned(s3, &limited("84MiB", &[])), 8);
    // The text says it too.
    let mut args = vec!["plan", s(&src), s3, "--chunk-shape", "512,512"];
    args.extend_from_slice(&with("1024,1024", &remote));
    let text = zshard_with(&args, &env);
    assert!(text.status.success(), "{}", stderr(&text));
    assert!(
        stdout(&text).contains("; 16 fetching and 16 writing"),
        "{}",
        stdout(&text)
    );
}

/// Issue 44, point 5: a resumed run's progress starts from what earlier runs did, not from 0 % of
/// what is left: its first log line counts the shards `zshard status` finds done of all 30, with
/// their chunks and bytes, and the last 30/30. A first run stops midway (a damaged chunk of the last
/// shard, converted on one thread, so that the shards before it are done and recorded).
#[test]
fn a_resumed_run_starts_its_progress_from_what_is_done() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = common::banded_source(tmp.path());
    let dst = tmp.path().join("dst");
    // The chunk at grid (11, 9): the last of the last 16x16 shard.
    let last = src.join("11.9");
    let good = std::fs::read(&last).expect("chunk 11.9");
    std::fs::write(&last, b"damaged").expect("damage");
    let mut convert = vec!["convert", s(&src), s(&dst), "--threads", "1"];
    convert.extend(common::SHARDS_OF_16);
    let mut first = convert.clone();
    first.push("--quiet");
    let failed = zshard(&first);
    assert_eq!(failed.status.code(), Some(1), "{}", stderr(&failed));
    assert!(stderr(&failed).contains("11.9"), "{}", stderr(&failed));
    let status = zshard(&["status", s(&dst), "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    let done = status["totals"]["shards_done"]
        .as_u64()
        .expect("shards_done");
    assert!(done > 0 && done < 30, "{status:#}");

    std::fs::write(&last, good).expect("mend");
    let mut resume = convert.clone();
    resume.extend(["--progress", "log", "--log-interval", "1h"]);
    let out = zshard(&resume);
    let text = stderr(&out);
    assert!(out.status.success(), "{text}");
    let start = text
        .lines()
        .find_map(|l| fields(l, "zshard: progress "))
        .expect("a first progress line");
    assert_eq!(pair(start["shards"], count), (done, 30), "{text}");
    // 8x8 inner chunks of 2 bytes each: the done shards' chunks and bytes, of the whole array's.
    let (chunks, all_chunks) = pair(start["chunks"], count);
    assert_eq!(all_chunks, 12 * 10, "{text}");
    assert!(chunks >= done && chunks < all_chunks, "{text}");
    let (bytes, all_bytes) = pair(start["bytes"], size);
    assert_eq!(all_bytes, 96 * 80 * 2, "{text}");
    // Printed to 2 decimals of KiB.
    assert!(
        bytes.abs_diff(chunks * 8 * 8 * 2) <= 10,
        "{bytes} {chunks}: {text}"
    );
    let percent: f64 = start["done"]
        .strip_suffix('%')
        .and_then(|p| p.parse().ok())
        .expect("a percentage");
    assert!(percent > 0.0 && percent < 100.0, "{text}");
    let end = text
        .lines()
        .find_map(|l| fields(l, "zshard: finished "))
        .expect("a final line");
    assert_eq!(end["shards"], "30/30", "{text}");
    assert_eq!(end["chunks"], "120/120", "{text}");
    assert_eq!(end["done"], "100.0%", "{text}");
}
