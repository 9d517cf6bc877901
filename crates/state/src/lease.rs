//! Leases of live runs on a destination, so that `--overwrite` never removes a destination while
//! another run converts into it or finalizes it.
//!
//! Every `convert` and `finalize` holds a lease while it runs: an object
//! `.zshard/leases/<worker>-<host>-<pid>-<nanos>.json` saying who holds it, since when, when it was
//! last renewed and after how long without renewal it is to be considered stale (a run killed with
//! `kill -9` or lost with its machine cannot remove it). A thread of its own renews it (never a CPU
//! worker, so a busy run still renews), and the holder removes it when it ends. `--overwrite` refuses
//! while any lease of another run is fresh, naming its holder, and takes stale ones over (they are
//! state, removed with the rest of `.zshard/`).
//!
//! Freshness compares the renewal time written by the holder with the overwriting run's clock, so
//! the hosts' clocks must agree to well within the staleness bound (NTP does). What remains open: a
//! run that starts after `--overwrite` has looked at the leases but before it has finished removing
//! can lose its first records; the claim (create-only) then makes one of them fail rather than mix.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use chrono::{SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use zshard_store::Store;

use crate::error::{Error, Result};
use crate::partition::Partition;

/// Where the leases of live runs are kept.
pub(crate) const LEASES_DIR: &str = ".zshard/leases";

/// How long a lease lives without renewal, unless [`crate::Conversion::lease_stale_after`] says
/// otherwise. Renewals come four times as often, so a slow store request or two do not matter.
pub const DEFAULT_LEASE_STALE_AFTER: Duration = Duration::from_secs(60);

/// What a lease object holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    host: String,
    pid: u32,
    worker: String,
    /// When the run started (RFC 3339).
    started: String,
    /// When the lease was last renewed, in milliseconds since the Unix epoch.
    renewed_ms: u64,
    /// After how long without renewal the lease is stale, in milliseconds.
    stale_after_ms: u64,
}

/// A lease held by this run; renewed until [`Lease::release`] (or drop) removes it.
#[derive(Debug)]
pub struct Lease {
    store: Store,
    key: String,
    stop: Option<Sender<()>>,
    renewer: Option<JoinHandle<()>>,
}

impl Lease {
    /// Writes this run's lease and starts renewing it every quarter of `stale_after`.
    pub fn acquire(store: &Store, partition: Partition, stale_after: Duration) -> Result<Lease> {
        let started = Utc::now();
        let host = host_name();
        let pid = std::process::id();
        let key = format!(
            "{LEASES_DIR}/{}-{}-{pid}-{}.json",
            partition.tag(),
            sanitize(&host),
            started.timestamp_nanos_opt().unwrap_or_default()
        );
        let record = Record {
            host,
            pid,
            worker: partition.tag(),
            started: started.to_rfc3339_opts(SecondsFormat::Secs, true),
            renewed_ms: 0,
            stale_after_ms: u64::try_from(stale_after.as_millis()).unwrap_or(u64::MAX),
        };
        write(store, &key, &record)?;
        let (stop, stopped) = mpsc::channel::<()>();
        let (renewal_store, renewal_key) = (store.clone(), key.clone());
        let period = (stale_after / 4).max(Duration::from_millis(50));
        let renewer = std::thread::Builder::new()
            .name("zshard-lease".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    // A renewal that fails is tried again at the next period; if they keep failing
                    // the lease goes stale, which only lets an explicit --overwrite proceed.
                    let _ = write(&renewal_store, &renewal_key, &record);
                }
            })
            .map_err(|source| Error::Thread {
                what: "the lease renewal",
                source,
            })?;
        Ok(Lease {
            store: store.clone(),
            key,
            stop: Some(stop),
            renewer: Some(renewer),
        })
    }

    /// The lease object's key (relative to the destination).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Stops renewing and removes the lease (before the state folder is removed: a renewal after
    /// that would leave it behind).
    pub fn release(mut self) -> Result<()> {
        self.stop_renewing();
        self.store.delete(&self.key)?;
        Ok(())
    }

    /// Stops renewing and hands the lease object's key over to the caller, who removes it with the
    /// rest of the state (one request for all of them).
    pub fn stop(mut self) -> String {
        self.stop_renewing();
        std::mem::take(&mut self.key)
    }

    fn stop_renewing(&mut self) {
        drop(self.stop.take());
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.renewer.is_some() {
            self.stop_renewing();
            // The run failed or was cancelled: no live run holds the destination any more.
            let _ = self.store.delete(&self.key);
        }
    }
}

/// Writes `record` at `key`, renewed now.
fn write(store: &Store, key: &str, record: &Record) -> Result<()> {
    let record = Record {
        renewed_ms: now_ms(),
        ..record.clone()
    };
    let text = serde_json::to_vec_pretty(&record).map_err(|source| Error::Serialize {
        what: "the lease",
        source,
    })?;
    store.put(key, Bytes::from(text))?;
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A host name as part of a key: letters, digits, `.` and `-` only.
fn sanitize(host: &str) -> String {
    host.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Refuses (for `--overwrite`; the conversion reads the leases with the rest, see
/// [`refuse_live_leases`]) while a lease other than `own` is fresh, naming its holder and when
/// it will be stale. Stale leases are left to the removal of the state folder.
/// The machine's host name (empty when it cannot be read): a lease's holder, and a report's.
pub fn host_name() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

#[cfg(test)]
pub(crate) fn refuse_live_runs(store: &Store, own: Option<&str>) -> Result<()> {
    refuse_live(store, live_leases(store, own)?)
}

/// [`refuse_live_runs`] for leases already read (`(key, bytes)` of objects below [`LEASES_DIR`]).
pub(crate) fn refuse_live_leases<'a>(
    store: &Store,
    own: Option<&str>,
    leases: impl Iterator<Item = (&'a String, &'a Bytes)>,
) -> Result<()> {
    let now = now_ms();
    let mut live = Vec::new();
    for (key, bytes) in leases {
        if Some(key.as_str()) != own {
            live.extend(fresh(store, key, bytes, now)?);
        }
    }
    refuse_live(store, live)
}

/// Refuses when `live` holds a lease, naming the first.
fn refuse_live(store: &Store, live: Vec<Live>) -> Result<()> {
    let Some(Live { key, record, age }) = live.into_iter().next() else {
        return Ok(());
    };
    Err(Error::Destination {
        reason: format!(
            "{} refused: a live run holds {} (host {}, pid {}, worker {}, started {}; lease renewed {:.1} s ago, considered stale {:.1} s after its last renewal, so in {:.1} s if that run was killed; see {})",
            zshard_core::Setting::Overwrite,
            store.url(""),
            record.host,
            record.pid,
            record.worker,
            record.started,
            seconds(age),
            seconds(record.stale_after_ms),
            seconds(record.stale_after_ms - age),
            store.url(&key),
        ),
    })
}

/// Whether a run other than the one holding the lease `own` holds a fresh lease: it may be writing
/// into the destination right now (with the same options, which the claim admits), so staged files
/// of its writes in progress are not leftovers. A lease of a process of this host that has ended
/// (killed: it could not remove it) does not count, so a rerun cleans up at once.
pub(crate) fn another_run_is_live(store: &Store, own: &str) -> Result<bool> {
    let leases = live_leases(store, Some(own))?;
    Ok(leases.iter().any(|live| !holder_ended(&live.record)))
}

/// Whether the holder of `record` is known to have ended: a process of this host that no longer
/// runs, as Linux's `/proc` tells (elsewhere nothing is known, and the lease counts until stale).
fn holder_ended(record: &Record) -> bool {
    let proc = std::path::Path::new("/proc");
    record.host == host_name()
        && proc.join("self").exists()
        && !proc.join(record.pid.to_string()).exists()
}

/// A fresh lease: its key, what it holds, and milliseconds since its last renewal.
struct Live {
    key: String,
    record: Record,
    age: u64,
}

/// The fresh leases other than `own`: one listing, then the leases read side by side.
fn live_leases(store: &Store, own: Option<&str>) -> Result<Vec<Live>> {
    let now = now_ms();
    let keys: Vec<String> = store
        .list_keys(LEASES_DIR)?
        .into_iter()
        .filter(|key| Some(key.as_str()) != own)
        .collect();
    let mut live = Vec::new();
    for (key, read) in keys.iter().zip(store.get_many(&keys)) {
        let Some(bytes) = read? else {
            continue; // released meanwhile
        };
        live.extend(fresh(store, key, &bytes, now)?);
    }
    Ok(live)
}

/// The lease at `key` holding `bytes`, if it is fresh at `now`.
fn fresh(store: &Store, key: &str, bytes: &[u8], now: u64) -> Result<Option<Live>> {
    // Leases are written whole (staged and renamed, or one PUT), so one that does not parse was
    // damaged, not caught mid-write: no run renews it, and it must not block a resume or an
    // --overwrite (which removes it with the rest of the state).
    let record: Record = match serde_json::from_slice(bytes) {
        Ok(record) => record,
        Err(error) => {
            tracing::warn!(
                "{}: not a lease ({error}); taken for no live run",
                store.url(key)
            );
            return Ok(None);
        }
    };
    let age = now.saturating_sub(record.renewed_ms);
    Ok((age < record.stale_after_ms).then(|| Live {
        key: key.to_string(),
        record,
        age,
    }))
}

/// A lease as `zshard status` shows it: what its holder wrote, and whether it is fresh at `now` by
/// the rule `--overwrite` applies ([`fresh`]).
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) worker: String,
    pub(crate) started: String,
    pub(crate) renewed_ms: u64,
    pub(crate) stale_after_ms: u64,
    /// Milliseconds since its last renewal.
    pub(crate) age_ms: u64,
    pub(crate) fresh: bool,
    /// Its holder is a process of this host that no longer runs (killed: it could not remove
    /// the lease), so however fresh, no run holds it.
    pub(crate) ended: bool,
}

/// The lease at `key` holding `bytes`, as seen at `now` (milliseconds since the Unix epoch).
pub(crate) fn seen(store: &Store, key: &str, bytes: &[u8], now: u64) -> Result<Seen> {
    let fresh = fresh(store, key, bytes, now)?.is_some();
    let record: Record = serde_json::from_slice(bytes).map_err(|source| Error::State {
        key: store.url(key),
        source,
    })?;
    let ended = holder_ended(&record);
    Ok(Seen {
        age_ms: now.saturating_sub(record.renewed_ms),
        host: record.host,
        pid: record.pid,
        worker: record.worker,
        started: record.started,
        renewed_ms: record.renewed_ms,
        stale_after_ms: record.stale_after_ms,
        fresh,
        ended,
    })
}

/// Milliseconds since the Unix epoch, by this host's clock (the clock leases are renewed by).
pub(crate) fn now_millis() -> u64 {
    now_ms()
}

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// Parses an RFC 3339 time (for tests of the record).
#[cfg(test)]
fn parse_time(text: &str) -> Option<chrono::DateTime<Utc>> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_store::IoRuntime;

    fn store(dir: &std::path::Path) -> Store {
        let runtime = IoRuntime::new(1).expect("runtime");
        Store::open(dir.to_str().expect("utf-8"), runtime, true).expect("open")
    }

    #[test]
    fn a_fresh_lease_refuses_and_a_released_one_does_not() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = store(tmp.path());
        let lease =
            Lease::acquire(&store, Partition::ALL, Duration::from_secs(30)).expect("acquire");
        let bytes = store.get(lease.key()).expect("get").expect("lease written");
        let record: Record = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(record.pid, std::process::id());
        assert_eq!(record.stale_after_ms, 30_000);
        assert!(parse_time(&record.started).is_some());
        let refused = refuse_live_runs(&store, None).expect_err("a live run");
        let message = refused.to_string();
        assert!(
            message.contains(&format!("pid {}", std::process::id())),
            "{message}"
        );
        assert!(message.contains("considered stale 30.0 s"), "{message}");
        refuse_live_runs(&store, Some(lease.key())).expect("our own lease");
        assert!(!another_run_is_live(&store, lease.key()).expect("alone"));
        let other =
            Lease::acquire(&store, Partition::ALL, Duration::from_secs(30)).expect("acquire");
        assert!(another_run_is_live(&store, lease.key()).expect("another run"));
        assert!(another_run_is_live(&store, other.key()).expect("the first run"));
        other.release().expect("release");
        assert!(!another_run_is_live(&store, lease.key()).expect("alone again"));
        lease.release().expect("release");
        assert_eq!(
            store.list_keys(LEASES_DIR).expect("list"),
            Vec::<String>::new()
        );
        refuse_live_runs(&store, None).expect("no lease left");
    }

    #[test]
    fn a_lease_of_an_ended_process_of_this_host_is_not_a_live_run() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = store(tmp.path());
        let mut ended = std::process::Command::new("true").spawn().expect("spawn");
        ended.wait().expect("reap");
        let record = |host: String, pid: u32| Record {
            host,
            pid,
            worker: "w0of1".into(),
            started: "2026-11-24T00:00:00Z".into(),
            renewed_ms: 0,
            stale_after_ms: 60_000,
        };
        let here = host_name();
        write(
            &store,
            ".zshard/leases/a.json",
            &record(here.clone(), ended.id()),
        )
        .expect("write");
        assert!(!another_run_is_live(&store, "own").expect("ended"));
        write(
            &store,
            ".zshard/leases/b.json",
            &record("elsewhere".into(), ended.id()),
        )
        .expect("write");
        assert!(another_run_is_live(&store, "own").expect("another host's run counts"));
        store.delete(".zshard/leases/b.json").expect("delete");
        write(
            &store,
            ".zshard/leases/c.json",
            &record(here, std::process::id()),
        )
        .expect("write");
        assert!(another_run_is_live(&store, "own").expect("a running process"));
    }

    #[test]
    fn a_lease_not_renewed_goes_stale() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = store(tmp.path());
        let record = Record {
            host: "elsewhere".into(),
            pid: 1,
            worker: "w0of1".into(),
            started: "2026-11-24T00:00:00Z".into(),
            renewed_ms: 0,
            stale_after_ms: 200,
        };
        write(&store, ".zshard/leases/w0of1-elsewhere-1-0.json", &record).expect("write");
        assert!(refuse_live_runs(&store, None).is_err());
        std::thread::sleep(Duration::from_millis(300));
        refuse_live_runs(&store, None).expect("stale");
    }
}
