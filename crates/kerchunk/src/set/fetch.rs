//! Fetching: resolving and checking the targets of references (cached by URL, one store per
//! scheme and authority), turning what a batch of chunks needs into requests (ranges of one target
//! coalesced by the store's coalescer, whole files read once), sending each store's requests
//! together, and counting reads. A range past the end of its target is the store's
//! `RangePastEnd` error.
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use zshard_store::{coalesce, IoRuntime, RangeRequest, Store};

use super::{Options, ReadStats};
use crate::error::{format, Error, Result};
use crate::refs::{Kind, Ref};
use crate::target::{self, Policy, Target};

/// A target ready to read.
#[derive(Debug)]
pub(super) struct Resolved {
    store: Store,
    /// Identifies the store (requests to one store are sent together).
    store_id: String,
    key: String,
    display: String,
    /// Known size (local files).
    len: Option<u64>,
}

impl Resolved {
    /// Whether the target is read over the network (local files have a known length).
    pub(super) fn is_remote(&self) -> bool {
        self.len.is_none()
    }
}

/// What one chunk of a batch needs.
pub(super) enum Want {
    Ready(Option<Bytes>),
    Failed(Error),
    Range {
        target: Arc<Resolved>,
        start: u64,
        end: u64,
    },
    Whole(Arc<Resolved>),
}

impl Want {
    /// What identifies the chunk this reference names, for telling a changed reference from the one
    /// recorded when its shard was written (see [`zshard_core::ChunkReader::chunk_versions`]): its
    /// inline bytes, or its target, offset and length and the target file's own version
    /// (`target_versions`, see [`target_versions`]: a file rewritten in place with the same ranges
    /// is seen too); `None` for a missing chunk.
    pub(super) fn version(&self, target_versions: &HashMap<String, Option<String>>) -> Option<u64> {
        let of = |target: &Resolved| {
            target_versions
                .get(&target.display)
                .cloned()
                .flatten()
                .unwrap_or_default()
        };
        let text = match self {
            Want::Ready(None) => return None,
            Want::Ready(Some(bytes)) => {
                return Some(zshard_core::stable_hash(bytes) ^ 0x696e_6c69_6e65)
            }
            Want::Failed(e) => format!("failed\t{e}"),
            Want::Range { target, start, end } => {
                format!("{}\t{start}\t{end}\t{}", target.display, of(target))
            }
            Want::Whole(target) => format!("{}\twhole\t{}", target.display, of(target)),
        };
        Some(zshard_core::stable_hash(text.as_bytes()))
    }

    /// The target this reference reads, if any.
    fn target(&self) -> Option<&Arc<Resolved>> {
        match self {
            Want::Range { target, .. } | Want::Whole(target) => Some(target),
            Want::Ready(_) | Want::Failed(_) => None,
        }
    }
}

/// Adds to `known` the version of every target `wants` read that it does not hold yet (by the
/// target's display name), one HEAD request (a `stat` locally) per target file, side by side per
/// store: once per file however many chunks it holds. Each request is retried as any other (see
/// `zshard_store`'s retries).
///
/// A target that is gone has no version (reading its chunks fails, naming it), and so has one
/// whose store refuses to tell (403 for a presigned URL signed for GET only, 401): it refuses on
/// every run alike, so its chunks are compared by their ranges alone.
/// Any other failure (the server unreachable, 5xx, after the retries) fails, naming the URL: the
/// version would be missing this time only, and every shard reading from that file would be
/// converted again (and its records would then name no version, so the next run would rewrite
/// them once more), which for a nightly update is a silent full re-conversion, not a fallback.
pub(super) fn target_versions(
    wants: &[Want],
    known: &mut HashMap<String, Option<String>>,
) -> zshard_core::Result<()> {
    let mut by_store: HashMap<&str, (&Store, Vec<&Resolved>)> = HashMap::new();
    for target in wants.iter().filter_map(Want::target) {
        if known.contains_key(&target.display) {
            continue;
        }
        let entry = by_store
            .entry(target.store_id.as_str())
            .or_insert_with(|| (&target.store, Vec::new()));
        if !entry.1.iter().any(|t| t.display == target.display) {
            entry.1.push(target);
        }
    }
    for (_, (store, targets)) in by_store {
        let keys: Vec<String> = targets.iter().map(|t| t.key.clone()).collect();
        for (target, version) in targets.iter().zip(store.versions_many(&keys)) {
            let version = match version {
                Ok(version) => version,
                Err(e) if e.is_refusal() => None,
                Err(e) => {
                    return Err(zshard_core::Error::Read {
                        key: format!(
                            "the version of {} (a HEAD request, which tells whether the chunks \
                             it holds changed)",
                            target.display
                        ),
                        source: Box::new(e),
                    })
                }
            };
            known.insert(target.display.clone(), version);
        }
    }
    Ok(())
}

impl Want {
    /// What reading reference `r` takes: its inline bytes, nothing (a missing chunk: the fill
    /// value), or a request for a range or the whole of its target. The one mapping from references
    /// to requests, for both layouts and for metadata documents stored in targets.
    pub(super) fn of(
        r: &Ref,
        inline: impl FnOnce() -> Bytes,
        target: impl FnOnce() -> Result<Arc<Resolved>>,
    ) -> Want {
        match r.kind {
            Kind::Inline => Want::Ready(Some(inline())),
            Kind::Missing => Want::Ready(None),
            Kind::Whole => target().map_or_else(Want::Failed, Want::Whole),
            Kind::Range => target().map_or_else(Want::Failed, |target| Want::Range {
                target,
                start: r.offset,
                end: r.offset.saturating_add(r.length),
            }),
        }
    }
}

/// A request for the target numbered `target` in a batch; its `members` index the batch's ranges.
#[derive(Debug, PartialEq)]
struct TargetRequest {
    target: usize,
    request: RangeRequest,
}

/// Coalesces the byte ranges of a batch, `(target, range)`, target by target with the store's
/// coalescer. Requests come out ordered by target and offset.
fn coalesce_per_target(
    ranges: &[(usize, Range<u64>)],
    max_gap: Option<u64>,
    max_request: u64,
) -> Vec<TargetRequest> {
    let mut by_target: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, (target, _)) in ranges.iter().enumerate() {
        by_target.entry(*target).or_default().push(i);
    }
    let mut out = Vec::new();
    for (target, members) in by_target {
        let wanted: Vec<Range<u64>> = members.iter().map(|&i| ranges[i].1.clone()).collect();
        for mut request in coalesce(&wanted, max_gap, max_request) {
            for m in &mut request.members {
                *m = members[*m];
            }
            out.push(TargetRequest { target, request });
        }
    }
    out
}

/// State shared by a reference set and its readers.
#[derive(Debug)]
pub(super) struct Shared {
    pub display: String,
    runtime: Arc<IoRuntime>,
    /// Also the guard of every HTTP(S) target's store.
    policy: Arc<Policy>,
    pub options: Options,
    stores: Mutex<HashMap<String, Store>>,
    resolved: Mutex<HashMap<String, Arc<Resolved>>>,
    references: AtomicU64,
    requests: AtomicU64,
    bytes: AtomicU64,
}

fn read_error(what: &str, source: impl Into<zshard_core::BoxError>) -> zshard_core::Error {
    zshard_core::Error::Read {
        key: what.to_string(),
        source: source.into(),
    }
}

impl Shared {
    pub(super) fn new(
        display: String,
        runtime: Arc<IoRuntime>,
        policy: Policy,
        options: &Options,
    ) -> Shared {
        Shared {
            display,
            runtime,
            policy: Arc::new(policy),
            options: options.clone(),
            stores: Mutex::new(HashMap::new()),
            resolved: Mutex::new(HashMap::new()),
            references: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    fn store(&self, id: &str, location: &str) -> Result<Store> {
        let mut stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = stores.get(id) {
            return Ok(s.clone());
        }
        // Targets are untrusted: their connections and redirects obey the policy too.
        let store = Store::open_guarded(location, self.runtime.clone(), self.policy.clone())
            .map_err(|source| Error::Store {
                file: location.to_string(),
                source,
            })?;
        stores.insert(id.to_string(), store.clone());
        Ok(store)
    }

    /// Resolves and checks the target `url` of reference `key` (cached by URL).
    pub(super) fn resolve(&self, key: &str, url: &str) -> Result<Arc<Resolved>> {
        self.resolve_with(url, || key.to_string())
    }

    /// As [`Shared::resolve`], with the key (for messages) computed only when needed.
    pub(super) fn resolve_with(
        &self,
        url: &str,
        key: impl FnOnce() -> String,
    ) -> Result<Arc<Resolved>> {
        if let Some(r) = self
            .resolved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(url)
        {
            return Ok(r.clone());
        }
        let key = key();
        let key = key.as_str();
        let refused = |reason: String| Error::Refused {
            key: key.to_string(),
            target: url.to_string(),
            reason,
        };
        let resolved = match target::resolve(url, &self.policy).map_err(refused)? {
            Target::Local(path) => {
                let missing = |source| Error::MissingTarget {
                    key: key.to_string(),
                    target: path.display().to_string(),
                    source,
                };
                let real = std::fs::canonicalize(&path).map_err(missing)?;
                target::local_allowed(&real, &self.policy).map_err(|reason| {
                    refused(format!("it leads to {} ({reason})", real.display()))
                })?;
                let info = std::fs::metadata(&real).map_err(missing)?;
                if !info.is_file() {
                    return Err(refused("it is not a regular file".into()));
                }
                let text = real.to_string_lossy().into_owned();
                Resolved {
                    store: self.store("/", "/")?,
                    store_id: "/".into(),
                    key: text.trim_start_matches('/').to_string(),
                    display: text,
                    len: Some(info.len()),
                }
            }
            Target::Remote { base, key: object } => Resolved {
                store: self.store(&base, &base)?,
                display: format!("{base}/{object}"),
                store_id: base,
                key: object,
                len: None,
            },
        };
        let resolved = Arc::new(resolved);
        self.resolved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(url.to_string(), resolved.clone());
        Ok(resolved)
    }

    /// Reads what every chunk of a batch needs: ranges coalesced per target, requests to one store
    /// sent together with the store's bound on concurrent requests. A chunk cannot be longer than
    /// `max_len` bytes (see [`zshard_core::ChunkReader::read_chunks`]): a longer range is refused
    /// unread, a whole target read with that cap.
    pub(super) fn fetch(
        &self,
        wants: Vec<Want>,
        max_len: u64,
    ) -> Vec<zshard_core::Result<Option<Bytes>>> {
        self.references
            .fetch_add(wants.len() as u64, Ordering::Relaxed);
        let mut out: Vec<Option<zshard_core::Result<Option<Bytes>>>> =
            (0..wants.len()).map(|_| None).collect();
        // Targets of this batch; URLs that resolve to the same file share one.
        let mut targets: Vec<Arc<Resolved>> = Vec::new();
        let mut by_pointer: HashMap<*const Resolved, usize> = HashMap::new();
        let mut by_display: HashMap<String, usize> = HashMap::new();
        let mut target_id = |t: &Arc<Resolved>| {
            *by_pointer.entry(Arc::as_ptr(t)).or_insert_with(|| {
                *by_display.entry(t.display.clone()).or_insert_with(|| {
                    targets.push(t.clone());
                    targets.len() - 1
                })
            })
        };
        let mut ranges: Vec<(usize, Range<u64>)> = Vec::new();
        let mut range_of: Vec<usize> = Vec::new();
        let mut wholes: Vec<(usize, usize)> = Vec::new();
        for (i, want) in wants.into_iter().enumerate() {
            match want {
                Want::Ready(b) => out[i] = Some(Ok(b)),
                Want::Failed(e) => out[i] = Some(Err(read_error("references", e))),
                Want::Range { target, start, end } => {
                    if end - start > max_len {
                        let location = format!("the range {start}..{end}");
                        out[i] = Some(Err(read_error(
                            &target.display,
                            zshard_store::Error::TooLarge {
                                location,
                                len: end - start,
                                at_least: false,
                                max: max_len,
                            },
                        )));
                        continue;
                    }
                    if let Some(len) = target.len.filter(|&len| end > len) {
                        out[i] = Some(Err(read_error(
                            &target.display,
                            zshard_store::Error::RangePastEnd {
                                location: target.display.clone(),
                                start,
                                end,
                                len,
                            },
                        )));
                        continue;
                    }
                    ranges.push((target_id(&target), start..end));
                    range_of.push(i);
                }
                Want::Whole(target) => wholes.push((i, target_id(&target))),
            }
        }
        let requests =
            coalesce_per_target(&ranges, self.options.coalesce_gap, self.options.max_request);
        // Requests grouped by store, so that each store's requests run concurrently.
        let mut by_store: HashMap<&str, Vec<usize>> = HashMap::new();
        for (r, request) in requests.iter().enumerate() {
            by_store
                .entry(targets[request.target].store_id.as_str())
                .or_default()
                .push(r);
        }
        for group in by_store.values() {
            let store = &targets[requests[group[0]].target].store;
            let batch: Vec<(String, std::ops::Range<u64>)> = group
                .iter()
                .map(|&r| {
                    let q = &requests[r];
                    (targets[q.target].key.clone(), q.request.range.clone())
                })
                .collect();
            self.requests
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            for (&r, result) in group.iter().zip(store.get_ranges(&batch)) {
                let q = &requests[r];
                let t = &targets[q.target];
                match result {
                    Ok(bytes) => {
                        self.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        for &m in &q.request.members {
                            out[range_of[m]] = Some(
                                q.request
                                    .slice(&bytes, &ranges[m].1, &t.display)
                                    .map(Some)
                                    .map_err(|e| read_error(&t.display, e)),
                            );
                        }
                    }
                    Err(e) => {
                        let text = zshard_core::chain_text(&e);
                        for &m in &q.request.members {
                            out[range_of[m]] = Some(Err(read_error(&t.display, text.clone())));
                        }
                    }
                }
            }
        }
        // Whole files, each read once.
        let mut files: Vec<usize> = wholes.iter().map(|&(_, t)| t).collect();
        files.sort_unstable();
        files.dedup();
        let mut contents: HashMap<usize, Result<Bytes, String>> = HashMap::new();
        let mut by_store: HashMap<&str, Vec<usize>> = HashMap::new();
        for &t in &files {
            by_store
                .entry(targets[t].store_id.as_str())
                .or_default()
                .push(t);
        }
        for group in by_store.values() {
            let store = &targets[group[0]].store;
            let keys: Vec<String> = group.iter().map(|&t| targets[t].key.clone()).collect();
            self.requests
                .fetch_add(keys.len() as u64, Ordering::Relaxed);
            for (&t, result) in group.iter().zip(store.get_many_bounded(&keys, max_len)) {
                let content = match result {
                    Ok(Some(bytes)) => {
                        self.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        Ok(bytes)
                    }
                    Ok(None) => Err("the target does not exist".to_string()),
                    Err(e) => Err(zshard_core::chain_text(&e)),
                };
                contents.insert(t, content);
            }
        }
        for (i, t) in wholes {
            out[i] = Some(match contents.get(&t) {
                Some(Ok(bytes)) => Ok(Some(bytes.clone())),
                Some(Err(text)) => Err(read_error(&targets[t].display, text.clone())),
                None => Err(read_error(&targets[t].display, "not read")),
            });
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(read_error("references", "not read"))))
            .collect()
    }

    /// The requests and bytes that [`Shared::fetch`] of `wants` would take (ranges coalesced per
    /// target as it does, whole targets once each), without reading: for a plan's cost estimate.
    /// Ranges it would refuse unread (too long, past a local file's end) take nothing; a whole
    /// remote target counts its request but not its bytes (its size is not known unread).
    pub(super) fn planned(&self, wants: Vec<Want>, max_len: u64) -> zshard_core::PlannedReads {
        let mut planned = zshard_core::PlannedReads::default();
        let mut ids: HashMap<String, usize> = HashMap::new();
        let mut id = |t: &Resolved| {
            let next = ids.len();
            *ids.entry(t.display.clone()).or_insert(next)
        };
        let mut ranges: Vec<(usize, Range<u64>)> = Vec::new();
        let mut wholes: HashMap<usize, u64> = HashMap::new();
        for want in wants {
            match want {
                Want::Range { target, start, end } => {
                    let past_end = target.len.is_some_and(|len| end > len);
                    if end - start <= max_len && !past_end {
                        ranges.push((id(&target), start..end));
                    }
                }
                Want::Whole(target) => {
                    wholes.insert(id(&target), target.len.unwrap_or(0).min(max_len));
                }
                Want::Ready(_) | Want::Failed(_) => {}
            }
        }
        for request in
            coalesce_per_target(&ranges, self.options.coalesce_gap, self.options.max_request)
        {
            planned.requests += 1;
            planned.bytes += request.request.range.end - request.request.range.start;
        }
        planned.requests += wholes.len() as u64;
        planned.bytes += wholes.values().sum::<u64>();
        planned
    }

    /// Reads one whole reference (a metadata document stored in a target).
    pub(super) fn read_one(&self, key: &str, url: &str, r: &Ref) -> Result<Vec<u8>> {
        let want = Want::of(r, Bytes::new, || self.resolve(key, url));
        match self.fetch(vec![want], u64::MAX).pop() {
            Some(Ok(Some(bytes))) => Ok(bytes.to_vec()),
            Some(Err(e)) => Err(format(key, zshard_core::chain_text(&e))),
            _ => Err(format(key, "no data")),
        }
    }

    pub(super) fn stats(&self) -> ReadStats {
        ReadStats {
            references: self.references.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_near_ranges_per_target() {
        let wanted = [
            (0, 100..200),
            (1, 0..10),
            (0, 0..100),
            (0, 250..300),
            (0, 10_000..10_100),
            (1, 5..8),
        ];
        let got = coalesce_per_target(&wanted, Some(64), 1 << 20);
        let request = |target, range, members| TargetRequest {
            target,
            request: RangeRequest { range, members },
        };
        assert_eq!(
            got,
            vec![
                request(0, 0..300, vec![2, 0, 3]),
                request(0, 10_000..10_100, vec![4]),
                request(1, 0..10, vec![1, 5]),
            ]
        );
        // Ranges of different targets never share a request, however close.
        assert_eq!(
            coalesce_per_target(&[(0, 0..10), (1, 10..20)], Some(64), 1 << 20).len(),
            2
        );
    }
}
