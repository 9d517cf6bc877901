//! `zshard status DST`: how far a conversion into DST has come, from DST alone (see
//! `zshard_convert::status`), as a table or as JSON.

use std::fmt::Write as _;
use std::io::IsTerminal as _;

use anyhow::Context as _;
use indicatif::HumanBytes;
use zshard_convert::options::StatusOptions;
use zshard_convert::status::{Phase, Status};

/// `zshard status --help`.
pub const HELP: &str = "\
Examples:
  # How far the workers of a partitioned run have come, and what finalize still waits for:
  zshard status /data/out.zarr

  # The same from a script (shards done and planned per array, each worker's leases):
  zshard status s3://bucket/out.zarr --json | jq '.totals.shards_done / .totals.shards_planned'

  # Every destination of a job file, redrawn every 5 s until all are finished:
  zshard status job.toml --watch 5

What it reads:
  One listing of DST/.zshard and the root zarr.json, then zshard's small state records (the claim,
  the workers' options, the records of shards written and all fill, the leases); never a shard.
  A shard counts as done when a record names it (finalize also checks its object). The rate counts
  the shards recorded in the last 120 s (workers store their records every 10 s), and the time
  left assumes it holds. A worker is live while its lease was renewed within its stale time (60 s
  by default), as --overwrite judges it.
  Exits 0 whatever the conversion's state; see `phase` in the JSON. A job file's statuses are a
  JSON list, in the order of its conversions. With --watch, a conversion is finished when it is
  complete, or every shard is recorded done and no worker is live (finalize is left); a watch
  begun before the run waits for it to start.";

/// Prints the status of each of `watched` (one destination, or each of a job file's when `job`)
/// as JSON or as tables; with a `watch` interval, again and again until every conversion is
/// finished ([`Status::is_finished`]): a terminal's table is redrawn, JSON is one line per reading.
pub fn watch(watched: &[StatusOptions], job: bool, json: bool) -> anyhow::Result<()> {
    let interval = watched.first().and_then(|o| o.watch);
    let redraw = interval.is_some() && !json && std::io::stdout().is_terminal();
    loop {
        let statuses = watched
            .iter()
            .map(|options| {
                options
                    .status_read(job)
                    .with_context(|| format!("status of {}", options.destination))
            })
            .collect::<anyhow::Result<Vec<Status>>>()?;
        let text = match (json, job, interval) {
            (true, false, None) => format!("{}\n", serde_json::to_string_pretty(&statuses[0])?),
            (true, true, None) => format!("{}\n", serde_json::to_string_pretty(&statuses)?),
            (true, false, Some(_)) => format!("{}\n", serde_json::to_string(&statuses[0])?),
            (true, true, Some(_)) => format!("{}\n", serde_json::to_string(&statuses)?),
            (false, _, _) => {
                let mut text = statuses.iter().map(table).collect::<Vec<_>>().join("\n");
                if let Some(interval) = interval {
                    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
                    let every = interval.duration().as_secs_f64();
                    let _ = writeln!(
                        text,
                        "\n(read at {now}, again every {every} s until finished; Ctrl-C stops)"
                    );
                }
                if redraw {
                    // Cursor home, clear the screen: the next reading replaces this one.
                    text.insert_str(0, "\x1b[H\x1b[2J");
                } else if interval.is_some() {
                    text.push('\n');
                }
                text
            }
        };
        crate::print::stdout(&text)?;
        let Some(interval) = interval else {
            return Ok(());
        };
        if statuses.iter().all(StatusOptions::watch_is_over) {
            return Ok(());
        }
        std::thread::sleep(interval.duration());
    }
}

fn percent(done: u64, planned: u64) -> String {
    if planned == 0 {
        return "-".into();
    }
    format!("{:.1}%", 100.0 * done as f64 / planned as f64)
}

/// `seconds` as `1h 02m 03s`, `2m 03s` or `3s`.
fn duration(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m {s:02}s"),
        _ => format!("{h}h {m:02}m {s:02}s"),
    }
}

/// The human form.
fn table(s: &Status) -> String {
    let mut out = String::new();
    let phase = match s.phase {
        Phase::NotStarted => "not started (no zshard state, no Zarr v3 metadata)",
        Phase::InProgress => "in progress",
        Phase::Complete => "complete (metadata written, state removed)",
        _ => "unknown",
    };
    let _ = writeln!(out, "{}: {phase}", s.destination);
    if let Some(note) = &s.note {
        let _ = writeln!(out, "note: {note}");
    }
    if s.phase == Phase::NotStarted {
        return out;
    }
    if !s.arrays.is_empty() {
        let width = s
            .arrays
            .iter()
            .map(|a| display_path(&a.path).len())
            .max()
            .unwrap_or(0)
            .max(5);
        let _ = writeln!(
            out,
            "\n{:<width$}  {:>12}  {:>12}  {:>7}  {:>10}  {:>12}",
            "array", "shards done", "planned", "", "all fill", "written"
        );
        // A finished conversion's counts come from its metadata: what was all fill and the bytes
        // written are not counted (that would list every shard).
        let counted = s.phase != Phase::Complete;
        let bytes = |n: u64| match counted {
            true => HumanBytes(n).to_string(),
            false => "-".to_string(),
        };
        for a in &s.arrays {
            let _ = writeln!(
                out,
                "{:<width$}  {:>12}  {:>12}  {:>7}  {:>10}  {:>12}",
                display_path(&a.path),
                a.shards_done,
                a.shards_planned,
                percent(a.shards_done, a.shards_planned),
                if counted {
                    a.shards_empty.to_string()
                } else {
                    "-".into()
                },
                bytes(a.bytes_written)
            );
        }
        let t = &s.totals;
        let _ = writeln!(
            out,
            "{:<width$}  {:>12}  {:>12}  {:>7}  {:>10}  {:>12}",
            "total",
            t.shards_done,
            t.shards_planned,
            percent(t.shards_done, t.shards_planned),
            "",
            bytes(t.bytes_written)
        );
    }
    if s.phase == Phase::Complete {
        // The bytes of a finished conversion are not counted (that would list every shard).
        return out;
    }
    let live = s.workers.iter().any(|w| w.live);
    // A rate is a run's pace: with no worker live there is none to show.
    if let Some(rate) = s.rate.as_ref().filter(|_| live) {
        let eta = rate.eta_s.map_or("-".to_string(), duration);
        let _ = writeln!(
            out,
            "\nrate (last {} s): {:.1} shards/s, {}/s; time left at this rate: {eta}",
            rate.window_s,
            rate.shards_per_s,
            HumanBytes(rate.bytes_per_s as u64)
        );
    }
    if !s.workers.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<12}  {:>12}  {:>12}  {:<8}  lease",
            "worker", "shards done", "planned", "state"
        );
        for w in &s.workers {
            let state = if w.live {
                "live"
            } else if w.shards_planned > 0 && w.shards_done == w.shards_planned {
                "done"
            } else if !w.leases.is_empty() {
                "stale"
            } else if w.started {
                "stopped"
            } else {
                "not seen"
            };
            let lease = w
                .leases
                .iter()
                .map(|l| {
                    format!(
                        "{} pid {} renewed {:.1} s ago ({})",
                        l.host,
                        l.pid,
                        l.age_ms as f64 / 1000.0,
                        if l.live {
                            "live"
                        } else if l.ended {
                            "dead: no such process on this host"
                        } else {
                            "stale"
                        }
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            let _ = writeln!(
                out,
                "{:<12}  {:>12}  {:>12}  {:<8}  {}",
                worker(w.index, w.count),
                w.shards_done,
                w.shards_planned,
                state,
                if lease.is_empty() { "-" } else { &lease }
            );
        }
    }
    let _ = writeln!(out);
    let mut left = s.totals.shards_planned.saturating_sub(s.totals.shards_done);
    if let Some(update) = &s.update {
        // The totals count every shard; an update writes only those made from what changed.
        left = update.shards_to_update.saturating_sub(update.shards_done);
        let _ = writeln!(
            out,
            "update: {} of {} shard(s) to rewrite or add done ({})",
            update.shards_done,
            update.shards_to_update,
            percent(update.shards_done, update.shards_to_update)
        );
    }
    // A partitioned pyramid's smallest levels are made by `finalize`, not by a worker.
    let finalize_makes = s.finalize_left().min(left);
    if s.finalize_waits_for.is_empty() && left > finalize_makes {
        // An unpartitioned run writes the metadata itself when it is done.
        let _ = if live {
            writeln!(out, "converting: {left} shard(s) left")
        } else {
            writeln!(
                out,
                "stopped with {left} shard(s) left: rerun the conversion to resume it"
            )
        };
    } else if s.finalize_waits_for.is_empty() && finalize_makes > 0 {
        let _ = writeln!(
            out,
            "every worker is done: run `zshard finalize {}`, which makes the {finalize_makes} \
             shard(s) of the pyramid level(s) no worker makes, then the metadata",
            s.destination
        );
    } else if s.finalize_waits_for.is_empty() {
        let _ = writeln!(out, "every shard is recorded done: run `zshard finalize`");
    } else {
        let waits: Vec<String> = s
            .workers
            .iter()
            .filter(|w| s.finalize_waits_for.contains(&w.worker))
            .map(|w| worker(w.index, w.count))
            .collect();
        let _ = writeln!(out, "finalize waits for worker(s): {}", waits.join(", "));
    }
    for line in &s.unreadable {
        let _ = writeln!(out, "warning: unreadable record, not counted: {line}");
    }
    out
}

/// A worker as `--worker` names it (`1/3`; the JSON's `worker` is the tag of its state keys,
/// `w1of3`).
fn worker(index: u64, count: u64) -> String {
    format!("{index}/{count}")
}

fn display_path(path: &str) -> &str {
    if path.is_empty() {
        "/"
    } else {
        path
    }
}
