//! The end of a run: the metadata documents (after all data), the records a finished
//! conversion keeps, and the state's removal.

use super::*;

/// Ends a conversion whose every shard is done: writes the metadata (see [`write_metadata`], with
/// `records`, this run's last record files, alongside), then removes the state with the lease.
/// On an object store that is three round trips for a single array (the documents with the records
/// and a listing of the state folder; the removals; the claim), one more for a hierarchy's root.
/// With `keep_manifest`, the manifest records (those stored and this run's last, in `records`) are
/// first merged into the manifest that stays (a listing and a round of reads more): before the
/// metadata, so that a finished conversion never lacks it.
///
/// When every array's source names its chunks' versions (`digests`), what each shard was made from
/// is kept in its array's folder beside the metadata (see `state::made_from`), for a rerun to
/// bring the output up to date from.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    destination: &Store,
    plan: &Plan,
    consolidate: bool,
    cancel: &Cancel,
    records: &[(String, bytes::Bytes)],
    lease: Lease,
    keep_manifest: bool,
    made_from: MadeFrom<'_>,
) -> Result<()> {
    let MadeFrom {
        digests,
        fingerprint,
        survey,
        source_versions,
    } = made_from;
    let zshard_state::Kept {
        files: kept,
        beyond,
        manifest: kept_manifest,
    } = match digests.all_known() {
        true => {
            let outputs = plan.outputs();
            zshard_state::gather_kept(
                destination,
                &outputs,
                digests,
                (survey, records),
                fingerprint,
            )?
        }
        false => zshard_state::Kept::default(),
    };
    // An update keeps a manifest an earlier run kept up to date, with or without the flag: its
    // shards' records are merged over the old manifest, and only the shards the kept records name
    // as written stay in it.
    if keep_manifest || kept_manifest.is_some() {
        let mut files = zshard_state::read_records(destination, records)?;
        files.extend(kept_manifest.map(|old| (zshard_state::MANIFEST.to_string(), old)));
        let mut merged = zshard_state::merge(&files);
        if digests.all_known() {
            let written = zshard_state::kept_written(&kept);
            merged.retain(|shard, _| written.contains(shard));
        }
        for (key, size, crc) in document_checksums(plan, consolidate) {
            zshard_state::add_document(&mut merged, &key, size, crc);
        }
        destination.put(zshard_state::MANIFEST, zshard_state::to_text(&merged))?;
    }
    // Staged files of an interrupted write of the kept records go first, as the documents' do.
    // The source versions go only with the kept records (a conversion whose records are not kept
    // is never brought up to date).
    let source_versions = match kept.is_empty() {
        true => &[][..],
        false => source_versions,
    };
    for (key, _) in kept.iter().chain(source_versions) {
        destination.remove_staged_of(key)?;
    }
    let alongside = [records, &kept[..], source_versions].concat();
    let listed = write_metadata(destination, plan, consolidate, cancel, &alongside)?;
    // The array shrank: the shards zshard wrote beyond its extent now, once the metadata no longer
    // reaches them.
    destination.delete_many(&beyond)?;
    let mut also: Vec<String> = records.iter().map(|(key, _)| key.clone()).collect();
    also.push(lease.stop());
    clear_state(destination, Some(listed), &also)
}

/// What the shards of a run were made from, for the records a finished conversion keeps: the
/// digests, the conversion, and the survey that read the records of earlier runs.
#[derive(Clone, Copy)]
pub(crate) struct MadeFrom<'a> {
    pub(super) digests: &'a zshard_state::Digests,
    pub(super) fingerprint: &'a zshard_state::Fingerprint,
    pub(super) survey: &'a zshard_state::Survey,
    /// The source versions to keep for the next run (see `digests::Listed::keep`).
    pub(super) source_versions: &'a [(String, bytes::Bytes)],
}

/// Writes every array's and group's `zarr.json`, after all data: an output with metadata is complete.
/// Staged files that interrupted earlier writes of a document left are removed first, so the result
/// equals an uninterrupted run's file for file. Every document but the root group's goes out side by
/// side (with `alongside`, and a listing of the state folder, which is returned); the root group's
/// comes last, with every other document consolidated into it when `consolidate` (a reader trusts
/// consolidated metadata over the files, so it must describe the final ones). Stops before the
/// documents, and before the root's, once `cancel` is cancelled (a rerun writes them all again);
/// each document is written whole or not at all.
pub(super) fn write_metadata(
    destination: &Store,
    plan: &Plan,
    consolidate: bool,
    cancel: &Cancel,
    alongside: &[(String, bytes::Bytes)],
) -> Result<Vec<String>> {
    let stop_if_cancelled = || {
        if cancel.is_cancelled() {
            return Err(Error::Cancelled);
        }
        Ok(())
    };
    let (first, root) = documents(plan);
    stop_if_cancelled()?;
    for (key, _) in &first {
        destination.remove_staged_of(key)?;
    }
    let batch = destination.concurrency().saturating_mul(16).max(64);
    let write_first = async {
        for part in first.chunks(batch) {
            let docs: Vec<(String, bytes::Bytes)> =
                part.iter().map(|(key, doc)| (key.clone(), doc())).collect();
            destination.put_many_async(&docs).await?;
        }
        Ok::<(), zshard_store::Error>(())
    };
    // Joined, not chained: a document that fails to be written must not cancel the records' writes
    // (a rerun skips the shards they name).
    let (written, recorded, listed) = destination.block_on(async {
        futures::join!(
            write_first,
            destination.put_many_async(alongside),
            destination.list_sizes_async(zshard_state::STATE_DIR)
        )
    });
    recorded?;
    written?;
    drop(first);
    let listed = listed?.into_iter().map(|(key, _)| key).collect();
    if let Some(attributes) = root {
        stop_if_cancelled()?;
        // Made once the other documents are written and dropped.
        let doc = root_document(plan, attributes, consolidate);
        let key = metadata_key("");
        destination.remove_staged_of(&key)?;
        destination.put(&key, doc)?;
    }
    Ok(listed)
}

/// A metadata document to write: its key and what makes its bytes.
pub(super) type Document<'a> = (String, Box<dyn Fn() -> bytes::Bytes + 'a>);

/// Every document of `plan` but the root group's (each made when called: 30,000 arrays' made at
/// once held 60 MB, issue 31), and the root group's attributes when the plan has one.
pub(super) fn documents(
    plan: &Plan,
) -> (
    Vec<Document<'_>>,
    Option<&serde_json::Map<String, serde_json::Value>>,
) {
    let mut root = None;
    let mut first: Vec<Document<'_>> = Vec::new();
    for (key, bytes) in &plan.files {
        first.push((key.clone(), Box::new(move || bytes.clone())));
    }
    for array in &plan.arrays {
        let doc = move || document_bytes(&array.output.to_json());
        first.push((metadata_key(&array.path), Box::new(doc)));
    }
    for (path, attributes) in &plan.groups {
        if !path.is_empty() {
            let doc = move || document_bytes(&group_json(attributes));
            first.push((metadata_key(path), Box::new(doc)));
        } else {
            root = Some(attributes);
        }
    }
    (first, root)
}

/// The root group's document, consolidated when `consolidate`: each member's document is made only
/// while it is serialized (30,000 arrays held whole as JSON values took 300 MB).
pub(super) fn root_document(
    plan: &Plan,
    attributes: &serde_json::Map<String, serde_json::Value>,
    consolidate: bool,
) -> bytes::Bytes {
    if consolidate {
        let members = members(plan);
        let paths: Vec<String> = members.iter().map(|(path, _)| path.clone()).collect();
        consolidated_group_bytes(attributes, &paths, |i| (members[i].1)())
    } else {
        document_bytes(&group_json(attributes))
    }
}

/// The size and crc32c of every metadata document the conversion writes, by key, for the kept
/// manifest (so that `verify --manifest` sees a changed `fill_value` or attribute too).
pub(super) fn document_checksums(plan: &Plan, consolidate: bool) -> Vec<(String, u64, u32)> {
    let (first, root) = documents(plan);
    let mut sums: Vec<(String, u64, u32)> = first
        .iter()
        .map(|(key, doc)| {
            let bytes = doc();
            (key.clone(), bytes.len() as u64, zshard_core::crc32c(&bytes))
        })
        .collect();
    if let Some(attributes) = root {
        let bytes = root_document(plan, attributes, consolidate);
        sums.push((
            metadata_key(""),
            bytes.len() as u64,
            zshard_core::crc32c(&bytes),
        ));
    }
    sums
}

/// The key of the `zarr.json` of the node at `path`.
pub(super) fn metadata_key(path: &str) -> String {
    if path.is_empty() {
        "zarr.json".to_string()
    } else {
        format!("{path}/zarr.json")
    }
}

/// Removes the state of a finished conversion, with the staged files of its interrupted writes
/// (`.zshard/options/w0of1.json#1` of a run killed at that rename), which listings do not show.
pub(super) fn clear_state(
    destination: &Store,
    listed: Option<Vec<String>>,
    also: &[String],
) -> Result<()> {
    zshard_state::clear(destination, listed, also)?;
    destination.remove_staged_below(zshard_state::STATE_DIR)?;
    // A run killed while deleting the state can leave its folders empty.
    destination.remove_empty_folders(zshard_state::STATE_DIR)?;
    Ok(())
}

/// Every node below the root with the maker of its `zarr.json` document.
#[allow(clippy::type_complexity)]
pub(super) fn members(plan: &Plan) -> Vec<(String, Box<dyn Fn() -> serde_json::Value + '_>)> {
    let arrays = plan.arrays.iter().map(|array| {
        let doc: Box<dyn Fn() -> serde_json::Value + '_> = Box::new(move || array.output.to_json());
        (array.path.clone(), doc)
    });
    let groups = plan.groups.iter().map(|(path, attributes)| {
        let doc: Box<dyn Fn() -> serde_json::Value + '_> = Box::new(move || group_json(attributes));
        (path.clone(), doc)
    });
    arrays
        .chain(groups)
        .filter(|(path, _)| !path.is_empty())
        .collect()
}
