//! What the commands print: the plan, the summary after a run, verification results. Everything
//! here formats values that `zshard_convert` returns.

use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::bail;
use indicatif::{DecimalBytes, HumanBytes, HumanDuration};
use serde_json::Value;
use zshard_convert::{
    Conversion, Finalized, Listing, PlanReport, ReadStats, Report, SkippedArray, Verified,
};
use zshard_core::CodecSpec;

use crate::progress::Progress;

/// Environment variable: when set, the read requests made for a kerchunk reference set are printed
/// to stderr (one line).
const KERCHUNK_STATS_ENV: &str = "ZSHARD_KERCHUNK_STATS";

fn reference_reads(source: &str, reads: Option<&ReadStats>) {
    if let (Some(s), true) = (reads, std::env::var_os(KERCHUNK_STATS_ENV).is_some()) {
        eprintln!(
            "zshard: kerchunk {source}: {} chunk reference(s) read with {} request(s), {} byte(s)",
            s.references, s.requests, s.bytes
        );
    }
}

/// `zshard convert`: runs with a progress bar, then prints the summary.
pub fn convert(conversion: &Conversion, quiet: bool) -> anyhow::Result<()> {
    let progress = Progress::new(quiet);
    let report = conversion.convert(&progress);
    progress.finish(zshard_convert::Status::of_run(report.as_ref()));
    let report = report?;
    if let (Some(p), false) = (&report.published, quiet) {
        committed(p);
    }
    if quiet {
        reference_reads(&report.source, report.reference_reads.as_ref());
        return Ok(());
    }
    if report.already_complete {
        reference_reads(&report.source, report.reference_reads.as_ref());
        eprintln!(
            "zshard: {} is already complete with these options; nothing to do",
            report.destination
        );
        return Ok(());
    }
    eprintln!("{}", summary(&report));
    skipped_arrays(&report.skipped_arrays);
    reference_reads(&report.source, report.reference_reads.as_ref());
    if let Some(stored) = report.stored_in_repository {
        eprintln!(
            "zshard: stored {stored} shard(s) in the chunk storage of {} for its commit",
            conversion.destination
        );
    }
    if report.worker.count > 1 {
        // Into Icechunk the report names the staging folder, whose finalize would only finish the
        // staged Zarr: the repository's finalize commits it.
        let finalize = match report.stored_in_repository {
            Some(_) => &conversion.destination,
            None => &report.destination,
        };
        eprintln!(
            "zshard: worker {}/{} done; once every worker is done, run `zshard finalize {}` (it reads the options from there)",
            report.worker.index, report.worker.count, finalize
        );
    }
    Ok(())
}

/// One line per array left out by `--on-unsupported skip`, with why.
fn skipped_arrays(skipped: &[SkippedArray]) {
    for s in skipped {
        eprintln!("zshard: skipped array {}: {}", s.path, s.reason);
    }
}

/// One paragraph for people.
fn summary(report: &Report) -> String {
    let t = &report.totals;
    let skipped = if t.shards_skipped > 0 {
        format!(", {} already done and skipped", t.shards_skipped)
    } else {
        String::new()
    };
    let updated = match &report.update {
        Some(u) => format!(
            "; updated: {} shard(s) rewritten ({} inner chunk(s) copied as they stood), {} added, \
             {} removed",
            u.shards_rewritten, u.inner_chunks_copied, u.shards_added, u.shards_removed
        ),
        None => String::new(),
    };
    format!(
        "zshard: converted {} array(s) into {}: {} shard(s) written, {} held only the fill value{skipped}; \
         read {} in {} source chunk(s) ({} missing), wrote {}, in {:.1} s ({}/s read){updated}",
        report.arrays.len(),
        report.destination,
        t.stats.shards_written,
        t.stats.shards_empty,
        HumanBytes(t.stats.bytes_read),
        t.stats.chunks_read,
        t.stats.chunks_missing,
        HumanBytes(t.stats.bytes_written),
        report.duration_seconds,
        HumanBytes(report.read_bytes_per_second as u64),
    )
}

/// `zshard finalize`.
pub fn finalized(finalized: &Finalized, quiet: bool) {
    for warning in &finalized.warnings {
        eprintln!("zshard: warning: {warning}");
    }
    if quiet {
        return;
    }
    if let Some(p) = &finalized.published {
        committed(p);
    }
    if finalized.already_finalized {
        eprintln!("zshard: {} is already finalized", finalized.destination);
    } else {
        eprintln!(
            "zshard: finalized {}: {} array(s), {} group(s)",
            finalized.destination, finalized.arrays, finalized.groups
        );
    }
}

/// The commit of an Icechunk output.
fn committed(p: &zshard_convert::Published) {
    if p.already_committed {
        eprintln!(
            "zshard: snapshot {} on branch {} was committed by an earlier run; nothing committed now",
            p.snapshot, p.branch
        );
        return;
    }
    let ahead = p.chunks.saturating_sub(p.stored_at_commit);
    let by_workers = if ahead > 0 {
        format!(", {ahead} of them stored by the workers")
    } else {
        String::new()
    };
    eprintln!(
        "zshard: committed snapshot {} to branch {} ({} node(s), {} chunk(s){by_workers})",
        p.snapshot, p.branch, p.nodes, p.chunks
    );
}

/// `zshard verify`: the mismatches, or one line saying that everything matches.
pub fn verified(source: &str, verified: &Verified, quiet: bool) -> anyhow::Result<()> {
    verified_as(
        source,
        verified,
        quiet,
        "every element equals the source, every index is valid",
    )
}

/// `zshard verify --manifest`: what was found, as [`verified`] prints it.
pub fn verified_manifest(verified: &Verified, quiet: bool) -> anyhow::Result<()> {
    verified_as(
        "",
        verified,
        quiet,
        "every shard has the size and crc32c its manifest records, and no object stands where the manifest names none",
    )
}

fn verified_as(source: &str, verified: &Verified, quiet: bool, ok: &str) -> anyhow::Result<()> {
    reference_reads(source, verified.reference_reads.as_ref());
    for s in &verified.skipped_arrays {
        eprintln!(
            "zshard: not verified (not read by zshard): array {}: {}",
            s.path, s.reason
        );
    }
    for warning in &verified.warnings {
        eprintln!("zshard: warning: {warning}");
    }
    let found = &verified.mismatches;
    for m in &found.first {
        eprintln!("zshard: mismatch: {m}");
    }
    if found.count > found.first.len() {
        eprintln!(
            "zshard: ... and {} more mismatch(es)",
            found.count - found.first.len()
        );
    }
    if found.count > 0 {
        bail!(
            "{} mismatch(es) in {} shard(s) checked of {}",
            found.count,
            verified.shards_checked,
            verified.destination
        );
    }
    if !quiet {
        eprintln!(
            "zshard: verified {} shard(s) in {} array(s) of {}: {ok}",
            verified.shards_checked, verified.arrays, verified.destination
        );
    }
    Ok(())
}

/// `zshard plan`: text for people or JSON; a job file's conversions one after the other (in JSON a
/// list of their plans).
pub fn plans(plans: &[PlanReport], as_json: bool) -> anyhow::Result<()> {
    for plan in plans {
        reference_reads(plan.source(), plan.reference_reads.as_ref());
        for warning in plan.warnings() {
            eprintln!("zshard: warning: {warning}");
        }
    }
    let mut text = String::new();
    match (as_json, plans) {
        (true, [one]) => writeln!(text, "{}", serde_json::to_string_pretty(&one.to_json())?)?,
        (true, _) => {
            let docs: Vec<Value> = plans.iter().map(PlanReport::to_json).collect();
            writeln!(text, "{}", serde_json::to_string_pretty(&docs)?)?;
        }
        (false, _) => {
            for plan in plans {
                plan_text(&mut text, plan)?;
            }
        }
    }
    stdout(&text)
}

/// Text written out once it is this long, so that a plan of many arrays is not held whole.
const FLUSH_AT: usize = 64 << 10;

/// Writes `text` to stdout. A reader that stops early (`| head -1`) ends the output quietly, as
/// ripgrep and fd do (exit status 0): Rust ignores SIGPIPE, so the write fails with EPIPE instead,
/// and `println!` would panic on it.
pub fn stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// One plan for people, its arrays described (and the text written out) one at a time.
fn plan_text(out: &mut String, plan: &PlanReport) -> anyhow::Result<()> {
    let destination = plan.destination();
    if let Some(c) = plan.icechunk_chunks {
        writeln!(
            out,
            "source: icechunk repository {}: {} native, {} inline, {} virtual chunk(s)",
            plan.source(),
            c.native,
            c.inline,
            c.virtual_
        )?;
    }
    if let Some((branch, spec)) = &plan.icechunk_output {
        writeln!(
            out,
            "destination: icechunk repository {} ({}), branch {branch}, spec version {}",
            destination,
            if spec.exists { "existing" } else { "new" },
            spec.version
        )?;
    }
    arrays_text(out, plan.array_docs(), plan.threads(), plan.memory_limit())?;
    if let Some(limit) = plan.memory_limit() {
        writeln!(
            out,
            "memory limit: {} ({})",
            HumanBytes(limit),
            plan.memory_limit_source()
        )?;
    }
    writeln!(
        out,
        "threads: {} per CPU stage; {io} fetching and {io} writing",
        plan.threads(),
        io = plan.io_threads()
    )?;
    let totals = plan.totals();
    let u = |k: &str| totals[k].as_u64().unwrap_or(0);
    writeln!(
        out,
        "total: {} array(s), {} group(s), {} source chunk(s) -> {} shard(s), {} raw; peak memory about {} per worker",
        u("arrays"), plan.plan.groups.len(), u("source_chunks"), u("shards"),
        HumanBytes(u("estimated_bytes_in")), HumanBytes(u("estimated_peak_memory_per_worker"))
    )?;
    if let Some(cost) = &plan.cost {
        writeln!(
            out,
            "requests: {} GET(s) of {} ({}), {} PUT(s) of {} at most",
            cost.get_requests,
            HumanBytes(cost.get_bytes),
            if cost.gets_from_references {
                "the references' byte ranges, coalesced"
            } else {
                "one per source chunk, raw: at most"
            },
            cost.put_requests,
            HumanBytes(cost.put_bytes)
        )?;
        cost_text(out, cost, plan.estimate.as_ref())?;
    }
    if let Some(update) = &plan.update {
        update_plan(out, update)?;
    }
    for s in &plan.plan.skipped {
        writeln!(
            out,
            "skipped (--on-unsupported skip): {}: {}",
            s.path, s.reason
        )?;
    }
    Ok(())
}

/// The rest of the plan's cost (issue 44): the source's stored bytes next to their raw upper
/// bound, every request by kind on each side with the state's share, and the time and price
/// estimate with what it assumes.
fn cost_text(
    out: &mut String,
    cost: &zshard_convert::Cost,
    estimate: Option<&zshard_convert::Estimate>,
) -> std::fmt::Result {
    let kinds = |r: &zshard_convert::Requests| {
        format!(
            "{} LIST, {} HEAD, {} GET, {} PUT, {} DELETE",
            r.list, r.head, r.get, r.put, r.delete
        )
    };
    match cost.stored_bytes_in {
        Some(stored) => writeln!(
            out,
            "source reads: {} stored (listed), {} raw at most",
            HumanBytes(stored),
            HumanBytes(cost.raw_bytes_in)
        )?,
        None => writeln!(
            out,
            "source reads: {} raw at most (stored size unknown: the source cannot be listed)",
            HumanBytes(cost.raw_bytes_in)
        )?,
    }
    writeln!(out, "source requests: {}", kinds(&cost.source_requests))?;
    writeln!(
        out,
        "destination requests: {} (of which the state: claim {}, records {}, manifest {})",
        kinds(&cost.destination_requests),
        cost.state_requests.claim,
        cost.state_requests.records,
        cost.state_requests.manifest
    )?;
    let Some(e) = estimate else { return Ok(()) };
    let a = &e.assumptions;
    let price = match e.request_price_usd {
        Some(usd) => format!("request price about ${usd:.4} ({})", a.prices.name),
        None => "no request price (neither side is an object store)".to_string(),
    };
    writeln!(
        out,
        "estimate: {} for {} worker(s), {}; {price}",
        match e.seconds < 1.0 {
            true => "under a second".to_string(),
            false => format!(
                "about {}",
                HumanDuration(std::time::Duration::from_secs_f64(e.seconds))
            ),
        },
        a.workers,
        HumanBytes(e.bytes)
    )?;
    writeln!(
        out,
        "  assuming per worker {}/s and {} ms per request to object stores, {}/s and {} ms locally, {} request(s) in flight: {}",
        DecimalBytes(a.object_store_bytes_per_second),
        a.object_store_latency_ms,
        DecimalBytes(a.local_bytes_per_second),
        a.local_latency_ms,
        a.requests_in_flight,
        e.note
    )
}

/// What rerunning a finished conversion would bring up to date: per array that changed, how many
/// shards and why, then what it would request.
fn update_plan(out: &mut String, update: &zshard_convert::UpdatePlan) -> std::fmt::Result {
    if update.is_empty() {
        return writeln!(
            out,
            "update: the destination is up to date with the source; a run writes nothing"
        );
    }
    for a in &update.arrays {
        let mut why = Vec::new();
        if a.shards_to_rewrite > 0 {
            why.push(format!("{} shard(s) to rewrite (their source chunks changed, appeared or disappeared, or their extent did)", a.shards_to_rewrite));
        }
        if a.shards_to_add > 0 {
            why.push(format!("{} shard(s) to add", a.shards_to_add));
        }
        if a.shards_to_remove > 0 {
            why.push(format!(
                "{} shard(s) beyond the new extent to remove",
                a.shards_to_remove
            ));
        }
        if a.shape_changed {
            why.push("new shape".to_string());
        }
        if a.attributes_changed {
            why.push("new attributes".to_string());
        }
        if a.inner_chunks_to_convert + a.inner_chunks_to_copy > 0 {
            why.push(format!(
                "{} inner chunk(s) to convert (made from changed, new or deleted source chunks), \
                 {} to copy as they stand",
                a.inner_chunks_to_convert, a.inner_chunks_to_copy
            ));
        }
        if !why.is_empty() {
            let name = if a.path.is_empty() { "/" } else { &a.path };
            writeln!(out, "update: {name}: {}", why.join("; "))?;
        }
    }
    writeln!(
        out,
        "update requests: {} GET(s) of {} at most, {} PUT(s) of {} at most",
        update.cost.get_requests,
        HumanBytes(update.cost.get_bytes),
        update.cost.put_requests,
        HumanBytes(update.cost.put_bytes)
    )
}

/// `zshard ls`: one line per array (aligned columns), or JSON. A reader that stops early (`| head`)
/// ends the listing quietly.
pub fn listing(listing: &Listing, as_json: bool) -> anyhow::Result<()> {
    skipped_arrays(&listing.skipped_arrays);
    let text = if as_json {
        serde_json::to_string_pretty(listing)? + "\n"
    } else {
        listing_text(listing)
    };
    stdout(&text)
}

fn listing_text(listing: &Listing) -> String {
    let compact = |shape: &[u64]| {
        shape
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("x")
    };
    let mut rows = vec![["PATH", "DTYPE", "SHAPE", "CHUNKS", "SHARDS", "CODECS"].map(String::from)];
    for a in &listing.arrays {
        rows.push([
            if a.path.is_empty() {
                ".".to_string()
            } else {
                a.path.clone()
            },
            a.data_type
                .as_str()
                .map_or_else(|| a.data_type.to_string(), str::to_string),
            compact(&a.shape),
            compact(&a.chunk_shape),
            a.shard_shape
                .as_deref()
                .map_or_else(|| "-".to_string(), compact),
            codecs_text(&a.codecs),
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in &rows {
        for (cell, width) in row.iter().zip(&widths) {
            text.push_str(&format!("{cell:<width$}  "));
        }
        text.push_str(&row[5]);
        text.push('\n');
    }
    text
}

fn codecs_text(codecs: &[CodecSpec]) -> String {
    codecs
        .iter()
        .map(|c| {
            let config: Vec<String> = c
                .configuration
                .iter()
                .flatten()
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        v.as_str().map_or_else(|| v.to_string(), str::to_string)
                    )
                })
                .collect();
            format!("{}({})", c.name, config.join(", "))
        })
        .collect::<Vec<_>>()
        .join(" -> ")
}

fn shape_text(shape: &[u64]) -> String {
    if shape.is_empty() {
        return "scalar".into();
    }
    shape
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(" x ")
}

fn arrays_text(
    out: &mut String,
    arrays: impl Iterator<Item = Value>,
    threads: usize,
    memory_limit: Option<u64>,
) -> anyhow::Result<()> {
    let memory_limit =
        memory_limit.map_or_else(|| "none".to_string(), |l| HumanBytes(l).to_string());
    for a in arrays {
        if out.len() >= FLUSH_AT {
            stdout(out)?;
            out.clear();
        }
        let u = |k: &str| a[k].as_u64().unwrap_or(0);
        let shape = |k: &str| {
            shape_text(&serde_json::from_value::<Vec<u64>>(a[k].clone()).unwrap_or_default())
        };
        let codecs = |k: &str| {
            codecs_text(&serde_json::from_value::<Vec<CodecSpec>>(a[k].clone()).unwrap_or_default())
        };
        writeln!(out, "array {}", a["name"].as_str().unwrap_or_default())?;
        writeln!(
            out,
            "  shape          {} {} (fill value {})",
            shape("shape"),
            a["data_type"]
                .as_str()
                .map_or_else(|| a["data_type"].to_string(), str::to_string),
            a["fill_value"]
        )?;
        if let Some(names) = a["dimension_names"].as_array() {
            let names: Vec<&str> = names.iter().map(|n| n.as_str().unwrap_or("-")).collect();
            writeln!(out, "  dimensions     {}", names.join(" x "))?;
        }
        let grid = &a["source_chunk_grid"];
        let chunks = if grid.is_object() {
            // A rectilinear grid has no one chunk shape: its edges' range per dimension.
            let dims =
                |k: &str| serde_json::from_value::<Vec<u64>>(grid[k].clone()).unwrap_or_default();
            let (small, large) = (dims("smallest_chunk"), dims("largest_chunk"));
            let ranges: Vec<String> = small
                .iter()
                .zip(&large)
                .map(|(s, l)| {
                    if s == l {
                        s.to_string()
                    } else {
                        format!("{s}..{l}")
                    }
                })
                .collect();
            format!(
                "rectilinear grid of {} = {} chunk(s), edges {} (largest chunk {})",
                shape_text(&dims("chunks")),
                u("source_chunks"),
                ranges.join(" x "),
                shape_text(&large)
            )
        } else {
            format!(
                "{}, {} chunk(s)",
                shape("source_chunk_shape"),
                u("source_chunks")
            )
        };
        if let Some(above) = a["made_from"]["path"].as_str() {
            let how = a["made_from"]["downsample"].as_str().unwrap_or_default();
            writeln!(
                out,
                "  made from      level {above:?}: the {how} of each block of 2 along the spatial axes (no source chunk read)"
            )?;
        } else {
            writeln!(
                out,
                "  source chunks  {chunks}{}: {}",
                if a["source_shard_shape"].is_array() {
                    format!(
                        " (inner chunks of shards of {}, read one by one)",
                        shape("source_shard_shape")
                    )
                } else {
                    String::new()
                },
                codecs("source_codecs")
            )?;
        }
        writeln!(
            out,
            "  output         {} shard(s) of {}, {} inner chunk(s) of {} per shard, index at the {}",
            u("shards"), shape("shard_shape"), u("inner_chunks_per_shard"), shape("inner_chunk_shape"),
            a["index_location"].as_str().unwrap_or_default()
        )?;
        writeln!(out, "  output codecs  {}", codecs("output_codecs"))?;
        if let Some(why) = a["compressor_fallback"].as_str() {
            writeln!(out, "  compressor     {why}")?;
        }
        if let Some(level) = a["pyramid"]["level"].as_u64() {
            let group = a["pyramid"]["group"].as_str().unwrap_or_default();
            writeln!(
                out,
                "  pyramid        level {level} of the multiscale image {}",
                if group.is_empty() {
                    "at the root".to_string()
                } else {
                    format!("{group:?}")
                }
            )?;
        }
        if a["passthrough"] == true {
            writeln!(
                out,
                "  passthrough    source chunks are copied into the shards without decoding"
            )?;
        }
        if a["data_type"] == "string" {
            // Only the 8-byte handles are known: string lengths are not in the metadata.
            writeln!(out, "  bytes          unknown (variable-length strings)")?;
        } else {
            writeln!(
            out,
                "  bytes          {} raw in, at most {} raw out (compressed sizes depend on the data)",
                HumanBytes(u("estimated_bytes_in")),
                HumanBytes(u("estimated_bytes_out"))
            )?;
        }
        if u("parts_per_shard") > 1 {
            writeln!(
            out,
                "  parts          each shard is converted and written in {} parts (memory limit {}); a source chunk under several parts is read {}",
                u("parts_per_shard"),
                memory_limit,
                if a["source_chunks_kept_between_parts"].as_bool() == Some(true) {
                    "once"
                } else if a["source_chunks_kept_within_rows"].as_bool() == Some(true) {
                    // Kept within a row of parts: read again for the next band of rows it meets.
                    "again for parts more than a row of parts apart"
                } else {
                    "for each"
                }
            )?;
        }
        writeln!(
            out,
            "  peak memory    about {} per worker with {threads} thread(s)",
            HumanBytes(u("estimated_peak_memory_per_worker"))
        )?;
    }
    Ok(())
}
