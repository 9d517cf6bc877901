//! Converting into an Icechunk repository: the conversion runs as usual into a staging folder inside
//! the repository's folder (so an interrupted run resumes, and workers share it). The staged shards
//! are then copied into the repository's chunk storage without passing through zshard (on the
//! server, or as hard links), by each worker for its own shards or by the commit; once every shard
//! and document is there, one commit references them and the staging folder is removed. Nothing is
//! visible on the branch before that commit.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use zshard_core::Setting;
use zshard_icechunk::OnBranch;

use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::run::conversion::{Conversion, Finalized};
use crate::run::report::{Report, Status};
use zshard_state::Partition;
use zshard_state::{Fingerprint, Observer};

/// Where and how a conversion into an Icechunk repository commits.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IcechunkOutput {
    /// The branch to commit to (created from `main`'s tip when missing).
    pub branch: String,
    /// The commit message; `None`: one naming zshard, the source and the options.
    pub message: Option<String>,
    /// The Icechunk spec version of a repository the conversion makes (`None`: 2). An existing
    /// repository is written in its own version; asking for another one is refused.
    pub spec: Option<SpecVersion>,
}

impl Default for IcechunkOutput {
    fn default() -> Self {
        IcechunkOutput {
            branch: "main".to_string(),
            message: None,
            spec: None,
        }
    }
}

pub use zshard_icechunk::{DestinationSpec, Published, SpecVersion};

impl Conversion {
    /// The same conversion, writing plain Zarr into the staging folder of the repository.
    fn staged(&self) -> Result<Conversion> {
        let mut staged = self.clone();
        staged.destination = zshard_icechunk::staging_location(&self.destination)?;
        staged.icechunk = None;
        // Icechunk keeps every node's document itself; a consolidated root would hide the
        // repository's other nodes from zarr-python.
        staged.consolidate = false;
        Ok(staged)
    }

    /// The commit message: the one given, or one naming zshard, the source and the options.
    fn commit_message(&self, output: &IcechunkOutput) -> String {
        output.message.clone().unwrap_or_else(|| {
            let layout = &self.layouts.default;
            let shape = |s: &Option<crate::ShapeSpec>| {
                s.as_ref().map_or("auto".to_string(), ToString::to_string)
            };
            format!(
                "zshard {} convert {}: shard shape {}, chunk shape {}, compressor {}",
                env!("CARGO_PKG_VERSION"),
                self.source,
                shape(&layout.shard_shape),
                shape(&layout.chunk_shape),
                layout.compressor,
            )
        })
    }

    /// [`Conversion::convert`] into a repository: converts into the staging folder, then (when this
    /// run covers every shard) commits it. A rerun of a conversion that the branch already holds
    /// (see [`zshard_icechunk::on_branch`]) does nothing and reports it complete, as a rerun into
    /// a finished Zarr destination does; a branch holding zshard's output of another conversion at
    /// these arrays is refused unless `--overwrite`. What a run killed after its commit left in the
    /// staging folder is removed.
    ///
    /// Over a source that names its chunks' versions, a commit leaves the arrays' documents and
    /// kept records (what each shard was made from) in the staging folder, and a rerun brings the
    /// branch up to date as one over a Zarr destination does (issue 40): only the shards whose
    /// source changed are converted, and one commit replaces them (none when nothing changed).
    pub(crate) fn convert_into_icechunk(
        &self,
        output: &IcechunkOutput,
        observer: &dyn Observer,
    ) -> Result<Report> {
        let mut staged = self.staged()?;
        let runtime = zshard_store::IoRuntime::with_options(2, self.store_options.clone())?;
        zshard_icechunk::create_if_missing(&self.destination, output.spec, &runtime)?;
        let all = self.partition == Partition::ALL;
        if all {
            self.remove_committed_staging(&staged, output, &runtime)?;
        }
        // (An --overwrite worker is refused by the conversion itself.)
        if self.overwrite && all {
            // The message the workers of the conversion replaced were given is not this one's.
            forget_workers_message(&staged.destination, &runtime)?;
            // The staged shards are about to be replaced: copies stored ahead would be stale, and
            // an earlier run's commit token names another conversion.
            zshard_icechunk::forget_stored_shards(
                &staged.destination,
                &self.destination,
                &runtime,
            )?;
        }
        // What an earlier commit of this conversion kept in the staging folder (see
        // `clear_staging`): its shards are in the repository, its records beside the documents.
        // When the branch still holds that commit this run is an update. (Workers convert every
        // shard again: their commit replaces the arrays whole.)
        let after_commit =
            all && !self.overwrite && staging_holds_kept_after_commit(&staged, &runtime)?;
        let updating = Arc::new(AtomicBool::new(false));
        staged.kept_shards_elsewhere = updating.clone();
        let shards_committed = staged.shards_committed.clone();
        let fingerprint = Mutex::new(None);
        let on_branch = Mutex::new(None);
        let committed = |plan: &Plan, conversion: &Fingerprint, running: bool| {
            *fingerprint.lock().map_err(|_| Error::Poisoned {
                what: "the fingerprint",
            })? = Some(conversion.clone());
            // A node of the other kind on the branch would fail the commit: refused before any
            // shard is staged, in words.
            let arrays: Vec<String> = plan.arrays.iter().map(|a| a.path.clone()).collect();
            let groups: Vec<String> = plan.groups.iter().map(|(path, _)| path.clone()).collect();
            zshard_icechunk::check_nodes(
                &self.destination,
                &output.branch,
                &arrays,
                &groups,
                &runtime,
            )?;
            // A worker never ends a run it shares; a run in the staging folder is resumed there
            // (or refused by its own checks).
            if self.overwrite || !all || (running && !after_commit) {
                return Ok(false);
            }
            match self.branch_holds(output, plan, conversion, &runtime)? {
                // An update finds out in the staging folder what changed.
                Some((snapshot, kept, _)) if after_commit => {
                    // The staged records are those of that commit: its snapshot holds the shards
                    // they describe, and the inner chunks that did not change are copied from it.
                    let staged_records =
                        kept_for_commit(&staged_kept(&staged.destination, &runtime)?, conversion);
                    if staged_records.records == kept {
                        *shards_committed
                            .lock()
                            .map_err(|_| Error::Poisoned { what: "the commit" })? =
                            Some((self.destination.clone(), snapshot.clone()));
                    }
                    *on_branch
                        .lock()
                        .map_err(|_| Error::Poisoned { what: "the commit" })? =
                        Some((snapshot, kept));
                    updating.store(true, Ordering::SeqCst);
                    Ok(false)
                }
                // This very conversion is on the branch: nothing to do.
                Some((snapshot, kept, true)) => {
                    *on_branch
                        .lock()
                        .map_err(|_| Error::Poisoned { what: "the commit" })? =
                        Some((snapshot, kept));
                    Ok(true)
                }
                // An earlier version of it over a source whose shape or attributes changed, with
                // nothing kept to update it from: converted whole, and the arrays replaced.
                Some((_, _, false)) => Ok(false),
                None => {
                    if after_commit {
                        // The branch no longer holds what the staged records describe (its
                        // arrays were removed or replaced): converted whole.
                        forget_kept(&staged.destination, &runtime)?;
                    }
                    Ok(false)
                }
            }
        };
        // The workers of a conversion commit with one message (`finalize` uses it): a worker given
        // another one than an earlier worker is refused before it converts anything.
        if !all {
            let kept = workers_message_record(&staged.destination, &runtime)?;
            check_workers_message(&staged.destination, kept, output.message.as_deref())?;
        }
        let converted = staged.convert_checked(observer, Some(&committed));
        let mut report = converted.inspect_err(|_| remove_if_empty(&staged.destination))?;
        if !matches!(report.status, Status::Ok | Status::Complete) {
            return Ok(report);
        }
        let on_branch = on_branch
            .into_inner()
            .map_err(|_| Error::Poisoned { what: "the commit" })?;
        let fingerprint = fingerprint.into_inner().map_err(|_| Error::Poisoned {
            what: "the fingerprint",
        })?;
        if !all {
            // This worker's shards go into the repository's chunk storage now, side by side with
            // the other workers', so that `finalize` only references them.
            let keys = shard_keys(&report.shard_grids, self.partition);
            let writer = format!("w{}of{}", self.partition.index, self.partition.count);
            report.stored_in_repository = Some(zshard_icechunk::store_staged_shards(
                &staged.destination,
                &self.destination,
                &keys,
                &writer,
                &runtime,
            )?);
            // The commit is `finalize`'s, which is not given the workers' options again.
            record_workers_message(&staged.destination, output.message.as_deref(), &runtime)?;
            return Ok(report);
        }
        let fingerprint = fingerprint.ok_or(Error::Poisoned {
            what: "the fingerprint",
        })?;
        // Read once: their digests go into the commit, and an update's written shards come from them.
        let kept_files = staged_kept(&staged.destination, &runtime)?;
        let kept = kept_for_commit(&kept_files, &fingerprint);
        let updating = updating.load(Ordering::SeqCst);
        match on_branch {
            // Committed before, and nothing changed since: nothing to commit.
            Some((snapshot, branch_kept))
                if !updating
                    || (report.status == Status::Complete && branch_kept == kept.records) =>
            {
                clear_staging(&staged.destination, runtime)?;
                report.published = Some(already_committed(output, snapshot));
                report.destination = self.destination.clone();
                Ok(report)
            }
            Some(_) => {
                let written = written_shards(kept_files)?;
                report.published =
                    Some(self.publish(&staged, output, &fingerprint, kept.updating(written))?);
                Ok(report)
            }
            None => {
                report.published = Some(self.publish(&staged, output, &fingerprint, kept)?);
                Ok(report)
            }
        }
    }

    /// [`Conversion::finalize`] into a repository: finalizes the staging folder, then commits it.
    /// Finalizing again what the branch already holds (see [`Conversion::convert_into_icechunk`])
    /// does nothing and says so.
    pub(crate) fn finalize_into_icechunk(&self, output: &IcechunkOutput) -> Result<Finalized> {
        let staged = self.staged()?;
        // Only checks the spec version asked for: the repository was made by the conversion.
        let runtime = zshard_store::IoRuntime::with_options(2, self.store_options.clone())?;
        let output = &IcechunkOutput {
            message: match &output.message {
                Some(message) => Some(message.clone()),
                None => workers_message(&staged.destination, &runtime)?,
            },
            ..output.clone()
        };
        zshard_icechunk::create_if_missing(&self.destination, output.spec, &runtime)?;
        self.remove_committed_staging(&staged, output, &runtime)?;
        let opened = staged.open()?;
        let fingerprint = opened.tracked_fingerprint()?;
        let staging = zshard_store::Location::parse(&staged.destination)?;
        let folder = staging.local_path();
        let missing = folder.as_ref().is_some_and(|folder| !folder.is_dir());
        let running = !missing && {
            let store = zshard_store::Store::open_location(&staging, runtime.clone(), false)?;
            zshard_state::holds_a_run(&store)?
        };
        if !running {
            let held = self.branch_holds(output, &opened.plan, &fingerprint, &runtime)?;
            if let Some((snapshot, branch_kept, exact)) = held {
                let after_commit = !missing && staging_holds_kept_after_commit(&staged, &runtime)?;
                if after_commit {
                    // An update staged whole and killed before its commit is committed now (its
                    // kept records differ from the commit's); one that was committed is done.
                    let kept_files = staged_kept(&staged.destination, &runtime)?;
                    let kept = kept_for_commit(&kept_files, &fingerprint);
                    if kept.records != branch_kept {
                        let written = written_shards(kept_files)?;
                        let published =
                            self.publish(&staged, output, &fingerprint, kept.updating(written))?;
                        return Ok(Finalized {
                            destination: self.destination.clone(),
                            arrays: opened.plan.arrays.len(),
                            groups: opened.plan.groups.len(),
                            already_finalized: false,
                            published: Some(published),
                            warnings: Vec::new(),
                        });
                    }
                } else if !exact {
                    return Err(Error::Destination {
                        reason: format!(
                            "branch {:?} of {} holds an earlier version of this conversion (the source's shape or attributes changed since) and nothing staged to update it from: rerun the conversion",
                            output.branch, self.destination
                        ),
                    });
                }
                if !missing {
                    clear_staging(&staged.destination, runtime.clone())?;
                }
                return Ok(Finalized {
                    destination: self.destination.clone(),
                    arrays: opened.plan.arrays.len(),
                    groups: opened.plan.groups.len(),
                    already_finalized: true,
                    published: Some(already_committed(output, snapshot)),
                    warnings: Vec::new(),
                });
            }
            if missing {
                return Err(Error::Destination {
                    reason: format!(
                        "{} holds no zshard conversion with these options to finalize: neither its staging folder {} nor a commit of it on branch {:?}",
                        self.destination, staged.destination, output.branch
                    ),
                });
            }
        }
        let mut finalized = staged.finalize_opened(opened)?;
        let kept = kept_for_commit(&staged_kept(&staged.destination, &runtime)?, &fingerprint);
        finalized.published = Some(self.publish(&staged, output, &fingerprint, kept)?);
        Ok(finalized)
    }

    /// The snapshot in which `output`'s branch holds this conversion (planned as `plan`, with the
    /// fingerprint `conversion`), if it does, with the digests of the kept records it recorded;
    /// refuses when the branch holds zshard's output of another conversion at one of its arrays, as
    /// a Zarr destination holding other metadata is.
    fn branch_holds(
        &self,
        output: &IcechunkOutput,
        plan: &Plan,
        conversion: &Fingerprint,
        runtime: &Arc<zshard_store::IoRuntime>,
    ) -> Result<Option<Held>> {
        let arrays: Vec<String> = plan.arrays.iter().map(|a| a.path.clone()).collect();
        let groups: Vec<String> = plan.groups.iter().map(|(path, _)| path.clone()).collect();
        let update_id = conversion.update_id();
        let held = zshard_icechunk::on_branch(
            &self.destination,
            &output.branch,
            (&conversion.value(), update_id.as_deref()),
            &arrays,
            &groups,
            runtime,
        )?;
        match held {
            OnBranch::Same {
                snapshot,
                kept,
                exact,
            } => Ok(Some((snapshot, kept, exact))),
            OnBranch::Other { path, snapshot } => Err(Error::Destination {
                reason: format!(
                    "icechunk repository {}: branch {:?} holds array {} as zshard committed it in snapshot {snapshot} from a conversion with different options or another source; rerun with its options, or use {} to replace it",
                    self.destination,
                    output.branch,
                    if path.is_empty() { "/" } else { &path },
                    zshard_core::Setting::Overwrite
                ),
            }),
            _ => Ok(None),
        }
    }

    /// Removes the staging folder when what it holds was committed already (a run killed after its
    /// commit, while removing it): its commit record names a commit on the branch.
    fn remove_committed_staging(
        &self,
        staged: &Conversion,
        output: &IcechunkOutput,
        runtime: &Arc<zshard_store::IoRuntime>,
    ) -> Result<()> {
        let earlier = zshard_icechunk::earlier_commit(
            &staged.destination,
            &self.destination,
            &output.branch,
            runtime,
        )?;
        if earlier.is_some() {
            clear_staging(&staged.destination, runtime.clone())?;
        }
        Ok(())
    }

    /// Commits the staged output with what it keeps for an update (`kept`), then clears the
    /// staging folder (all of it written by zshard; see [`clear_staging`]).
    fn publish(
        &self,
        staged: &Conversion,
        output: &IcechunkOutput,
        fingerprint: &Fingerprint,
        kept: zshard_icechunk::Kept,
    ) -> Result<Published> {
        let runtime = zshard_store::IoRuntime::with_options(2, self.store_options.clone())?;
        let published = zshard_icechunk::publish(
            &staged.destination,
            &self.destination,
            &output.branch,
            &self.commit_message(output),
            &fingerprint.value(),
            &kept,
            &runtime,
        )?;
        clear_staging(&staged.destination, runtime)?;
        Ok(published)
    }
}

/// What a branch holds of a conversion (see [`Conversion::branch_holds`]): the snapshot, the
/// digests of the kept records it recorded by array path, and whether it is this very conversion
/// (`false`: only its update identity matches).
type Held = (String, HashMap<String, String>, bool);

/// The commit message the workers of a partitioned conversion staged at `location` were given
/// (see [`zshard_icechunk::MESSAGE_RECORD`]), if any.
fn workers_message(
    location: &str,
    runtime: &Arc<zshard_store::IoRuntime>,
) -> Result<Option<String>> {
    Ok(workers_message_record(location, runtime)?.and_then(|(_, message)| message))
}

/// What the first worker of a partitioned conversion staged at `location` recorded of its commit
/// message (see [`zshard_icechunk::MESSAGE_RECORD`]): the record's URL, and the message (`None`:
/// the worker was given none, an empty record); `None` when no worker recorded one yet.
fn workers_message_record(
    location: &str,
    runtime: &Arc<zshard_store::IoRuntime>,
) -> Result<Option<(String, Option<String>)>> {
    let parsed = zshard_store::Location::parse(location)?;
    if parsed.local_path().is_some_and(|folder| !folder.is_dir()) {
        return Ok(None);
    }
    let staging = zshard_store::Store::open_location(&parsed, runtime.clone(), false)?;
    let key = zshard_icechunk::MESSAGE_RECORD;
    Ok(staging
        .get(key)?
        .map(|bytes| (staging.url(key), message_of_record(&bytes))))
}

/// The message a record of [`zshard_icechunk::MESSAGE_RECORD`] holds (`None`: empty, none given).
fn message_of_record(bytes: &[u8]) -> Option<String> {
    (!bytes.is_empty()).then(|| String::from_utf8_lossy(bytes).into_owned())
}

/// Refuses a worker `given` another commit message than the one `kept` for the conversion staged at
/// `location` (see [`workers_message_record`]), naming both.
fn check_workers_message(
    location: &str,
    kept: Option<(String, Option<String>)>,
    given: Option<&str>,
) -> Result<()> {
    let Some((record, kept)) = kept else {
        return Ok(());
    };
    if kept.as_deref() == given {
        return Ok(());
    }
    let name = |message: Option<&str>| match message {
        Some(message) => format!("{} {message:?}", Setting::Message),
        None => format!("no {}", Setting::Message),
    };
    Err(Error::Destination {
        reason: format!(
            "the workers of the conversion staged at {location} were given {} (kept in {record}); \
             this worker was given {}: give every worker the same (finalize {} MESSAGE commits \
             with another)",
            name(kept.as_deref()),
            name(given),
            Setting::Message,
        ),
    })
}

/// Records the commit message this worker was `given` for the conversion staged at `location`
/// (`finalize` commits with it unless given one itself): the first worker's record stays, and a
/// worker given another one (one racing the first) is refused, naming both. An empty record says
/// that the workers were given none.
fn record_workers_message(
    location: &str,
    given: Option<&str>,
    runtime: &Arc<zshard_store::IoRuntime>,
) -> Result<()> {
    let staging = zshard_store::Store::open(location, runtime.clone(), false)?;
    let key = zshard_icechunk::MESSAGE_RECORD;
    let bytes = bytes::Bytes::from(given.unwrap_or_default().to_string());
    let kept = match staging.put_new(key, bytes.clone())? {
        zshard_store::PutNew::Created => return Ok(()),
        zshard_store::PutNew::Exists => staging.get(key)?,
        // A store without conditional writes: read, then written when missing.
        zshard_store::PutNew::Unsupported => match staging.get(key)? {
            Some(kept) => Some(kept),
            None => return Ok(staging.put(key, bytes)?),
        },
    };
    let kept = kept.map(|kept| (staging.url(key), message_of_record(&kept)));
    check_workers_message(location, kept, given)
}

/// Removes the commit message recorded by the workers of a conversion staged at `location` that an
/// `--overwrite` run replaces.
fn forget_workers_message(location: &str, runtime: &Arc<zshard_store::IoRuntime>) -> Result<()> {
    let parsed = zshard_store::Location::parse(location)?;
    if parsed.local_path().is_some_and(|folder| !folder.is_dir()) {
        return Ok(());
    }
    let staging = zshard_store::Store::open_location(&parsed, runtime.clone(), false)?;
    staging.remove_staged_of(zshard_icechunk::MESSAGE_RECORD)?;
    Ok(staging.delete(zshard_icechunk::MESSAGE_RECORD)?)
}

/// Removes the local staging folder `location` when it is empty (a run refused before it staged
/// anything leaves nothing behind); anything else stays.
fn remove_if_empty(location: &str) {
    if let Some(folder) = zshard_store::Location::parse(location)
        .ok()
        .and_then(|parsed| parsed.local_path().map(std::path::Path::to_path_buf))
    {
        // Fails, and so keeps the folder, unless it is empty.
        if std::fs::remove_dir(&folder).is_ok() {
            remove_empty_staging_parents(&folder);
        }
    }
}

/// After the staging folder of a node path (`.zshard-staging/PATH`, see
/// [`zshard_icechunk::staging_location`]) was removed: removes the folders above it that zshard
/// made for it and that are now empty, up to the repository's staging folder itself; the first
/// one that is not empty (another node path's staging, or anything else) ends it.
fn remove_empty_staging_parents(folder: &std::path::Path) {
    let staging = std::ffi::OsStr::new(zshard_icechunk::STAGING);
    let ancestors: Vec<&std::path::Path> = folder.ancestors().skip(1).collect();
    // Only inside a repository's staging folder: a folder without one above it is the root's.
    let Some(top) = ancestors
        .iter()
        .position(|a| a.file_name() == Some(staging))
    else {
        return;
    };
    for ancestor in &ancestors[..=top] {
        // Fails, and so keeps the folder and those above it, unless it is empty.
        if std::fs::remove_dir(ancestor).is_err() {
            return;
        }
    }
}

/// What a rerun reports of a commit made before: nothing committed now.
fn already_committed(output: &IcechunkOutput, snapshot: String) -> Published {
    Published {
        branch: output.branch.clone(),
        snapshot,
        nodes: 0,
        chunks: 0,
        stored_at_commit: 0,
        already_committed: true,
    }
}

/// The keys (relative to the destination) of every shard of `partition`, as the writer names them,
/// for arrays given by path and shard grid in hierarchy order (the order that assigns shards to
/// workers).
fn shard_keys(grids: &[(String, Vec<u64>)], partition: Partition) -> HashSet<String> {
    let mut global = 0u64;
    let mut keys = HashSet::new();
    for (path, grid) in grids {
        for index in 0..zshard_core::product(grid) {
            if partition.owns(global) {
                let shard = zshard_core::unravel_index(index, grid);
                keys.insert(zshard_writer::OUTPUT_KEY_ENCODING.key_under(path, &shard));
            }
            global += 1;
        }
    }
    keys
}

/// The kept records in the staging folder at `location` (sealed, as written), by array path (the
/// root's empty): left by a commit of a conversion whose source names its chunks' versions.
fn staged_kept(
    location: &str,
    runtime: &Arc<zshard_store::IoRuntime>,
) -> Result<HashMap<String, bytes::Bytes>> {
    let parsed = zshard_store::Location::parse(location)?;
    if parsed.local_path().is_some_and(|folder| !folder.is_dir()) {
        return Ok(HashMap::new());
    }
    let staging = zshard_store::Store::open_location(&parsed, runtime.clone(), false)?;
    let keys: Vec<String> = staging
        .list_keys("")?
        .into_iter()
        .filter(|key| zshard_state::is_kept_records(key))
        .collect();
    let mut kept = HashMap::new();
    for (key, read) in keys.iter().zip(staging.get_many(&keys)) {
        if let Some(body) = read? {
            let path = key.rsplit_once('/').map_or("", |(path, _)| path);
            kept.insert(path.to_string(), body);
        }
    }
    Ok(kept)
}

/// What a commit of the staged output keeps for a later update (see [`zshard_icechunk::Kept`]):
/// the conversion's update identity and the digest of each array's kept records (`kept`, as
/// [`staged_kept`] read them).
fn kept_for_commit(
    kept: &HashMap<String, bytes::Bytes>,
    fingerprint: &Fingerprint,
) -> zshard_icechunk::Kept {
    let records = kept
        .iter()
        .map(|(path, body)| {
            let digest = format!("{:016x}", zshard_core::stable_hash(body));
            (path.clone(), digest)
        })
        .collect();
    zshard_icechunk::Kept::new(fingerprint.update_id(), records)
}

/// Per array path, the chunk coordinates of the shards that the kept records (`kept`, as
/// [`staged_kept`] read them) name as written: what the arrays hold once an update is committed
/// (every other chunk of theirs is removed, so a damaged file is an error, never an empty set).
fn written_shards(
    kept: HashMap<String, bytes::Bytes>,
) -> Result<HashMap<String, HashSet<Vec<u32>>>> {
    if let Some((path, _)) = kept
        .iter()
        .find(|(_, body)| !zshard_state::kept_records_intact(body))
    {
        return Err(Error::Destination {
            reason: format!(
                "the kept records of array {:?} in the staging folder are damaged (checksum); rerun with {} to convert it again",
                path,
                zshard_core::Setting::Overwrite
            ),
        });
    }
    let files: Vec<(String, bytes::Bytes)> = kept.into_iter().collect();
    let mut written: HashMap<String, HashSet<Vec<u32>>> = files
        .iter()
        .map(|(path, _)| (path.clone(), HashSet::new()))
        .collect();
    for (path, coord) in zshard_state::kept_written(&files) {
        let coord: Option<Vec<u32>> = coord.split(',').map(|c| c.parse().ok()).collect();
        if let Some(coord) = coord {
            written.entry(path).or_default().insert(coord);
        }
    }
    Ok(written)
}

/// Removes what a commit kept in the staging folder at `location` (the marker, the kept records
/// and the documents, see [`clear_staging`]) and nothing else: the run's lease and state there
/// stay.
fn forget_kept(location: &str, runtime: &Arc<zshard_store::IoRuntime>) -> Result<()> {
    let staging = zshard_store::Store::open(location, runtime.clone(), false)?;
    // The marker first: a run killed meanwhile no longer takes the rest for a commit's.
    staging.delete(KEPT_AFTER_COMMIT)?;
    let keys: Vec<String> = staging
        .list_keys("")?
        .into_iter()
        .filter(|key| {
            zshard_state::is_kept_records(key)
                || zshard_state::is_source_versions(key)
                || key == "zarr.json"
                || key.ends_with("/zarr.json")
        })
        .collect();
    staging.delete_many(&keys)?;
    Ok(())
}

/// The marker of a staging folder that holds only what a commit kept (see [`clear_staging`]).
const KEPT_AFTER_COMMIT: &str = ".zshard-kept-after-commit";

/// Whether the staging folder of `staged` holds what a commit kept (see [`clear_staging`]).
fn staging_holds_kept_after_commit(
    staged: &Conversion,
    runtime: &Arc<zshard_store::IoRuntime>,
) -> Result<bool> {
    let parsed = zshard_store::Location::parse(&staged.destination)?;
    if parsed.local_path().is_some_and(|folder| !folder.is_dir()) {
        return Ok(false);
    }
    let staging = zshard_store::Store::open_location(&parsed, runtime.clone(), false)?;
    holds_kept_after_commit(&staging)
}

/// Whether the staging folder `staging` holds what a commit kept (see [`clear_staging`]).
pub(crate) fn holds_kept_after_commit(staging: &zshard_store::Store) -> Result<bool> {
    Ok(staging.get(KEPT_AFTER_COMMIT)?.is_some())
}

/// Clears the staging folder at `location` after a commit. When the conversion kept records
/// (its source names its chunks' versions), the arrays' documents and kept records stay, with a
/// marker saying so: a rerun compares the source with them and, while the branch holds that
/// commit, updates it (see [`Conversion::convert_into_icechunk`]). Everything else goes, the
/// commit record last.
fn clear_staging(location: &str, runtime: Arc<zshard_store::IoRuntime>) -> Result<()> {
    let parsed = zshard_store::Location::parse(location)?;
    if parsed.local_path().is_some_and(|folder| !folder.is_dir()) {
        return Ok(());
    }
    let staging = zshard_store::Store::open_location(&parsed, runtime.clone(), false)?;
    let listed = staging.list_keys("")?;
    if !listed.iter().any(|key| zshard_state::is_kept_records(key)) {
        return remove_staging(location, runtime);
    }
    let record = zshard_icechunk::COMMIT_RECORD;
    let kept = |key: &str| {
        zshard_state::is_kept_records(key)
            || zshard_state::is_source_versions(key)
            || key == "zarr.json"
            || key.ends_with("/zarr.json")
            || key == KEPT_AFTER_COMMIT
    };
    match staging.local_path("") {
        // Walked rather than listed: a listing leaves out the temporary files (`NAME#N`) of writes
        // a kill interrupted.
        Some(folder) => clear_folder(&folder, &folder, &|key| key == record || kept(key))?,
        None => {
            let keys: Vec<String> = listed
                .into_iter()
                .filter(|key| key != record && !kept(key))
                .collect();
            staging.delete_many(&keys)?;
        }
    }
    staging.put(
        KEPT_AFTER_COMMIT,
        bytes::Bytes::from_static(b"the documents and kept records of zshard's last commit\n"),
    )?;
    staging.delete(record)?;
    Ok(())
}

/// Removes every file under `folder` (inside the staging folder `root`) whose key `keep` does not
/// keep, then the folders left empty, deepest first.
fn clear_folder(
    root: &std::path::Path,
    folder: &std::path::Path,
    keep: &dyn Fn(&str) -> bool,
) -> Result<()> {
    let failed = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| Error::File {
            action: "clear the staging folder",
            path,
            source,
        }
    };
    for entry in std::fs::read_dir(folder).map_err(failed(folder))? {
        let path = entry.map_err(failed(folder))?.path();
        if path.is_dir() {
            clear_folder(root, &path, keep)?;
            // Fails, and so keeps the folder, unless it is empty.
            let _ = std::fs::remove_dir(&path);
            continue;
        }
        let key = path.strip_prefix(root).unwrap_or(&path).to_string_lossy();
        if !keep(&key) {
            std::fs::remove_file(&path).map_err(failed(&path))?;
        }
    }
    Ok(())
}

/// Removes the staging folder, or every object under the staging prefix of a remote repository.
/// The commit record goes last: a run killed while removing finds it, and its commit on the branch,
/// and does not commit again.
fn remove_staging(location: &str, runtime: Arc<zshard_store::IoRuntime>) -> Result<()> {
    let staging = zshard_store::Store::open(location, runtime, false)?;
    let record = zshard_icechunk::COMMIT_RECORD;
    let Some(folder) = staging.local_path("") else {
        let keys: Vec<String> = staging
            .list_keys("")?
            .into_iter()
            .filter(|key| key != record)
            .collect();
        staging.delete_many(&keys)?;
        staging.delete(record)?;
        return Ok(());
    };
    let remove_error = |path: std::path::PathBuf| {
        move |source| crate::error::Error::File {
            action: "remove the staging folder",
            path,
            source,
        }
    };
    let entries = std::fs::read_dir(&folder).map_err(remove_error(folder.clone()))?;
    for entry in entries {
        let path = entry.map_err(remove_error(folder.clone()))?.path();
        if path.file_name().is_some_and(|name| name == record) {
            continue;
        }
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(remove_error(path))?;
    }
    std::fs::remove_dir_all(&folder).map_err(remove_error(folder.clone()))?;
    remove_empty_staging_parents(&folder);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workers_shard_keys_follow_the_global_order_across_arrays() {
        let grids = [("a".to_string(), vec![2, 2]), (String::new(), vec![3])];
        let mut keys: Vec<String> = shard_keys(&grids, Partition::new(1, 2).expect("partition"))
            .into_iter()
            .collect();
        keys.sort();
        // Global shards 1, 3 and 5: a's (0, 1) and (1, 1), then the root array's 1.
        assert_eq!(keys, ["a/c/0/1", "a/c/1/1", "c/1"]);
        assert_eq!(shard_keys(&grids, Partition::ALL).len(), 7);
    }
}
