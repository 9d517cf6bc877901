//! Claiming a destination for a conversion, and checking what it holds against it (see the
//! state folder's documentation in `mod.rs`).

use super::*;

/// The marker [`KEEP_MANIFEST`] as a record to write (key and contents).
pub fn keep_manifest_marker() -> (String, Bytes) {
    let text =
        "a worker of this conversion was given --keep-manifest: finalize keeps the manifest\n";
    (KEEP_MANIFEST.to_string(), Bytes::from(text))
}

/// What a destination holds for this conversion.
#[derive(Debug)]
pub enum Prepared {
    /// Nothing yet, or an interrupted run with the same options: convert what is not done (what
    /// is done is in the survey).
    Run(Box<Survey>),
    /// The metadata this conversion writes is already there: it completed before.
    Complete,
}

/// Claims the destination for this conversion, checks what it holds against this run and records
/// its options. With `overwrite` (this run's lease key), what an earlier conversion or Zarr hierarchy
/// left there is removed first (single-process runs only: a worker must never delete what another one
/// wrote), unless another run holds a fresh lease on it.
///
/// Round trips on an object store: the claim (with the reads of an interrupted `--overwrite`'s
/// marker and of an existing claim beside it), then one round of listings and metadata reads (see
/// [`survey`]) and the record files in one more when there are any. The options record, only when
/// this worker has not recorded them before, is returned in flight: the run fetches meanwhile, and
/// its shard writes wait for it.
///
/// A finished conversion that kept what each shard was made from is `Complete` only while every
/// shard was made from what its source holds now: `digests` waits for the source's listing (made
/// meanwhile, beside the claim and the survey), `None` when it failed (the run reports why).
#[allow(clippy::too_many_arguments)]
pub fn prepare<'d>(
    dst: &Store,
    plan: &Outputs,
    fingerprint: &Fingerprint,
    partition: Partition,
    overwrite: Option<&str>,
    observer: &dyn Observer,
    digests: &dyn Fn() -> Option<&'d Digests>,
) -> Result<(Prepared, Option<Arc<WriteAhead>>)> {
    let marker = match overwrite {
        Some(own_lease) => remove_owned(dst, plan, partition, own_lease)?,
        None => Marker::Check,
    };
    // The claim comes before every check of what the destination holds: a run that finishes in
    // between (metadata written, state removed) is then seen by the checks, and a run that starts in
    // between finds this claim.
    let claim = claim(dst, fingerprint, marker, observer)?;
    let surveyed = survey(dst, plan, false, fingerprint).and_then(|survey| {
        let checked = check_holdings(dst, plan, fingerprint, &survey, digests)?;
        Ok((checked, survey))
    });
    if claim == Claim::Created && !matches!(surveyed, Ok((Prepared::Run(_), _))) {
        // Nothing of this run is needed there: a complete conversion, or one we must not touch.
        dst.delete(CLAIM)?;
    }
    let (checked, survey) = surveyed?;
    if let Prepared::Complete = checked {
        return Ok((Prepared::Complete, None));
    }
    let own = join(OPTIONS_DIR, &format!("{}.json", partition.tag()));
    // An earlier run of this worker recorded the same options (every record was just checked to
    // equal them): writing them again would change nothing.
    let mut options = None;
    if !survey.records.contains_key(&own) {
        options = Some(Arc::new(WriteAhead::start(dst, &own, fingerprint.text())?));
    }
    Ok((Prepared::Run(Box::new(survey)), options))
}

impl Survey {
    /// Whether a worker asked to keep the manifest (see [`keep_manifest_marker`]).
    pub fn asks_to_keep_the_manifest(&self) -> bool {
        self.state.iter().any(|key| key == KEEP_MANIFEST)
    }

    /// Whether an earlier run kept a manifest ([`crate::MANIFEST`]), which this one brings up to
    /// date when it finishes.
    pub fn holds_a_kept_manifest(&self) -> bool {
        self.state.iter().any(|key| key == crate::MANIFEST)
    }
}

/// Whether the destination holds the recorded options of a conversion (one running, interrupted,
/// or a partitioned one waiting for `finalize`): one listing.
pub fn holds_a_run(dst: &Store) -> Result<bool> {
    Ok(!dst.list_keys(OPTIONS_DIR)?.is_empty())
}

/// How this run holds the destination's claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Claim {
    /// This run created it.
    Created,
    /// A run with the same options (a live one, or a killed one being resumed) holds it.
    Joined,
}

/// The create-only write of `key` with the read of what it may find there, side by side. The read
/// only matters when the write finds an object, so it is abandoned (with any retry it is waiting for)
/// once the write has created one: a read racing the write can fail on some servers (s3s-fs answers
/// 500), and its retry would hold up the run for a backoff.
pub(super) async fn create_beside_read(
    dst: &Store,
    key: &str,
    data: Bytes,
) -> (
    zshard_store::Result<PutNew>,
    zshard_store::Result<Option<Bytes>>,
) {
    use futures::future::{select, Either};
    let (write, read) = (dst.put_new_async(key, data), dst.get_async(key));
    futures::pin_mut!(write, read);
    match select(write, read).await {
        Either::Left((Ok(PutNew::Created), _)) => (Ok(PutNew::Created), Ok(None)),
        Either::Left((created, read)) => (created, read.await),
        Either::Right((existing, write)) => (write.await, existing),
    }
}

/// Makes this conversion the destination's owner, or joins the owner with the same options; refuses
/// when a conversion with other options holds it, and (with `check_overwriting`) when an
/// `--overwrite` was interrupted there. The create-only write goes out with the reads of the
/// existing claim and of the `--overwrite` marker beside it (or the marker's removal, see [`Marker`]),
/// so a resume costs one round trip here, not three: the reads are only used when the write finds a
/// claim, and a claim found then is the one read or a later one (the loop reads again when it
/// vanished).
pub(super) fn claim(
    dst: &Store,
    fingerprint: &Fingerprint,
    marker: Marker,
    observer: &dyn Observer,
) -> Result<Claim> {
    let text = fingerprint.text();
    let ((created, existing), overwriting) = dst.block_on(async {
        futures::join!(create_beside_read(dst, CLAIM, text.clone()), async {
            match marker {
                Marker::Check => dst.get_async(OVERWRITING).await,
                Marker::Remove => dst.delete_async(OVERWRITING).await.map(|()| None),
                Marker::Ignore => Ok(None),
            }
        })
    });
    let overwriting = overwriting.inspect_err(|_| {
        if matches!(created, Ok(PutNew::Created)) {
            // Best effort: the error to report is the marker's.
            let _ = dst.delete(CLAIM);
        }
    })?;
    if overwriting.is_some() {
        if matches!(created, Ok(PutNew::Created)) {
            dst.delete(CLAIM)?;
        }
        return Err(Error::Destination {
            reason: format!(
                "an {o} of {} was interrupted; rerun with {o} to finish clearing it",
                dst.url(""),
                o = Setting::Overwrite
            ),
        });
    }
    // A claim removed between our write and our read (its run finished) is claimed again.
    let mut first = Some((created, existing));
    for _ in 0..3 {
        let (created, existing) = first
            .take()
            .unwrap_or_else(|| (dst.put_new(CLAIM, text.clone()), Ok(None)));
        match created? {
            PutNew::Created => return Ok(Claim::Created),
            PutNew::Exists => {}
            PutNew::Unsupported => {
                observer.warning(&format!(
                    "{} cannot write conditionally, so a concurrent run with other options into it would not be detected",
                    dst.url("")
                ));
                if dst.get(CLAIM)?.is_none() {
                    dst.put(CLAIM, text)?;
                    return Ok(Claim::Created);
                }
            }
        }
        // The claim read beside the write, or (when it was missing then) read again now.
        let bytes = match existing? {
            Some(bytes) => Some(bytes),
            None => dst.get(CLAIM)?,
        };
        let Some(bytes) = bytes else {
            continue;
        };
        let state_error = |source| Error::State {
            key: dst.url(CLAIM),
            source,
        };
        if fingerprint.recorded_in(&bytes).map_err(state_error)? {
            return Ok(Claim::Joined);
        }
        let claimed: Value = serde_json::from_slice(&bytes).map_err(state_error)?;
        return Err(Error::Destination {
            reason: format!(
                "{} is claimed by a conversion with different options ({}; see {}), running now or interrupted; rerun with its options to resume it, or use {} to replace it once no run writes into it",
                dst.url(""),
                differences(&claimed, &fingerprint.value()),
                dst.url(CLAIM),
                Setting::Overwrite
            ),
        });
    }
    Err(Error::Destination {
        reason: format!(
            "{} could not be claimed: its claim {} kept appearing and disappearing",
            dst.url(""),
            dst.url(CLAIM)
        ),
    })
}

/// What differs between two conversions' fingerprints, in a few words for a message.
pub(super) fn differences(recorded: &Value, ours: &Value) -> String {
    if recorded.get("source") != ours.get("source") {
        return format!(
            "source {} instead of {}",
            recorded.get("source").unwrap_or(&Value::Null),
            ours.get("source").unwrap_or(&Value::Null)
        );
    }
    let arrays = |v: &Value| -> Vec<(String, Value)> {
        v.get("arrays")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .map(|a| {
                        let path = a.get("path").and_then(Value::as_str).unwrap_or("");
                        (path.to_string(), a["zarr.json"].clone())
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (theirs, mine) = (arrays(recorded), arrays(ours));
    for (path, doc) in &mine {
        let name = if path.is_empty() { "/" } else { path };
        let Some((_, other)) = theirs.iter().find(|(p, _)| p == path) else {
            return format!("array {name} is not part of it");
        };
        let fields: Vec<&str> = doc
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(field, value)| other.get(field.as_str()) != Some(value))
            .map(|(field, _)| field.as_str())
            .collect();
        if !fields.is_empty() {
            let settings = settings_differing(other, doc);
            let given = match settings.is_empty() {
                true => String::new(),
                false => format!(" ({}: not the conversion's)", settings.join(", ")),
            };
            return format!("array {name}: {} differ{given}", fields.join(", "));
        }
    }
    "other arrays".to_string()
}

/// The layout settings that make two output `zarr.json` documents of an array differ (the shard
/// shape, and in the `sharding_indexed` codec the inner chunk shape, inner codecs and index
/// location), named as the front end in use spells them.
fn settings_differing(recorded: &Value, ours: &Value) -> Vec<String> {
    let sharding = |doc: &Value| -> Value {
        doc["codecs"]
            .as_array()
            .and_then(|codecs| codecs.iter().find(|c| c["name"] == "sharding_indexed"))
            .map_or(Value::Null, |codec| codec["configuration"].clone())
    };
    let (theirs, mine) = (sharding(recorded), sharding(ours));
    [
        (
            Setting::ShardShape,
            recorded["chunk_grid"] != ours["chunk_grid"],
        ),
        (
            Setting::ChunkShape,
            theirs["chunk_shape"] != mine["chunk_shape"],
        ),
        (Setting::Compressor, theirs["codecs"] != mine["codecs"]),
        (
            Setting::IndexLocation,
            theirs["index_location"] != mine["index_location"],
        ),
    ]
    .into_iter()
    .filter(|(_, differs)| *differs)
    .map(|(setting, _)| setting.to_string())
    .collect()
}

/// Checks what the destination holds (`survey`, read after claiming it) against this conversion.
pub(super) fn check_holdings<'d>(
    dst: &Store,
    plan: &Outputs,
    fingerprint: &Fingerprint,
    survey: &Survey,
    digests: &dyn Fn() -> Option<&'d Digests>,
) -> Result<Prepared> {
    if let Some(key) = survey.first_v2_metadata() {
        return Err(Error::Destination {
            reason: format!(
                "{} holds Zarr v2 metadata ({}); use {} to replace it",
                dst.url(""),
                dst.url(key),
                Setting::Overwrite
            ),
        });
    }
    let recorded = survey.options_records().next().is_some();
    // A conversion finished by a zshard that keeps what each shard was made from is brought up to
    // date: its shards are checked against the source as a resume checks them (see
    // `made_from.rs`), and its metadata may differ in shape and attributes (the source grew or
    // shrank, or its attributes changed).
    let kept = has_kept_records(survey, plan) && fingerprint.1 .0;
    if !recorded && survey.has_metadata(plan) {
        if kept && survey.metadata_matches(plan) {
            if let Some(digests) = digests() {
                if up_to_date(survey, plan, digests) {
                    return Ok(Prepared::Complete);
                }
            }
        }
        if kept && survey.metadata_updatable(plan) {
            return Ok(Prepared::Run(Box::default()));
        }
        if survey.metadata_matches(plan) {
            return Ok(Prepared::Complete);
        }
        return Err(Error::Destination {
            reason: format!(
                "{} already holds Zarr metadata that differs from this conversion (different options, or not written by zshard); use {} to replace it",
                dst.url(""),
                Setting::Overwrite
            ),
        });
    }
    if !recorded && !kept {
        // Every run records its options before it writes a shard, so a shard without a record was
        // not written by a run of this conversion (a finished one whose metadata was removed, or data
        // from elsewhere): resuming would take it for done.
        let first = survey.shards.iter().enumerate().find_map(|(i, shards)| {
            let array = plan.arrays.get(i)?;
            Some(shard_key(
                array.path,
                shards.first()?.index,
                &array.geometry.shard_grid(),
            ))
        });
        if let Some(key) = first {
            return Err(Error::Destination {
                reason: format!(
                    "{} holds {} but no record of the zshard conversion that wrote it, so its shards cannot be trusted; use {} to replace it",
                    dst.url(""),
                    dst.url(&key),
                    Setting::Overwrite
                ),
            });
        }
    } else if let Some(key) = survey.conflicting_record(dst, fingerprint)? {
        return Err(Error::Destination {
            reason: format!(
                "{} holds a conversion with different options (see {}); rerun with the same options to resume it, or use {} to replace it",
                dst.url(""),
                dst.url(key),
                Setting::Overwrite
            ),
        });
    }
    Ok(Prepared::Run(Box::default()))
}

impl Survey {
    /// The first Zarr v2 `.zarray` or `.zgroup` at the root or at a node this conversion writes.
    pub(super) fn first_v2_metadata(&self) -> Option<&str> {
        let mut found: Vec<&str> = self
            .documents
            .iter()
            .filter(|(key, doc)| {
                doc.is_some() && (key.ends_with(".zarray") || key.ends_with(".zgroup"))
            })
            .map(|(key, _)| key.as_str())
            .collect();
        found.sort_unstable();
        found.first().copied()
    }

    /// The `zarr.json` at `path`, if there is one.
    pub fn zarr_json(&self, path: &str) -> Option<&Bytes> {
        self.documents.get(&join(path, "zarr.json"))?.as_ref()
    }

    /// Whether any node of the plan already has a `zarr.json` in the destination.
    pub(super) fn has_metadata(&self, plan: &Outputs) -> bool {
        let mut paths = plan
            .arrays
            .iter()
            .map(|a| a.path.as_str())
            .chain(plan.groups.iter().map(|p| p.as_str()));
        paths.any(|path| self.zarr_json(path).is_some())
    }

    /// Whether every array's `zarr.json` in the destination is exactly the one this conversion
    /// writes and every group has one.
    pub(super) fn metadata_matches(&self, plan: &Outputs) -> bool {
        let arrays = plan.arrays.iter().all(|array| {
            self.zarr_json(array.path).is_some_and(|bytes| {
                serde_json::from_slice::<Value>(bytes).unwrap_or(Value::Null)
                    == array.output.to_json()
            })
        });
        arrays
            && plan
                .groups
                .iter()
                .all(|path| self.zarr_json(path).is_some())
    }

    /// Whether every array's `zarr.json` in the destination, where there is one, is the one this
    /// conversion writes but for its shape and attributes (what an update changes).
    pub(super) fn metadata_updatable(&self, plan: &Outputs) -> bool {
        plan.arrays.iter().all(|array| {
            self.zarr_json(array.path).is_none_or(|bytes| {
                let found = serde_json::from_slice::<Value>(bytes).unwrap_or(Value::Null);
                without_shape_and_attributes(found)
                    == without_shape_and_attributes(array.output.to_json())
            })
        })
    }

    /// The keys of the per-worker options records, in listing order.
    pub(super) fn options_records(&self) -> impl Iterator<Item = &String> {
        self.state.iter().filter(|key| in_dir(key, OPTIONS_DIR))
    }

    /// The key of a recorded conversion whose options differ from `fingerprint`, if any.
    pub(super) fn conflicting_record(
        &self,
        dst: &Store,
        fingerprint: &Fingerprint,
    ) -> Result<Option<&str>> {
        for key in self.options_records() {
            let Some(bytes) = self.records.get(key) else {
                continue; // removed meanwhile
            };
            let same = fingerprint
                .recorded_in(bytes)
                .map_err(|source| Error::State {
                    key: dst.url(key),
                    source,
                })?;
            if !same {
                return Ok(Some(key));
            }
        }
        Ok(None)
    }

    /// The contents of the claim, if it was listed and read.
    pub(super) fn claim(&self) -> Option<&Bytes> {
        self.records.get(CLAIM)
    }
}

/// Checks, without recording anything, that the destination's recorded options (`survey`) equal
/// `fingerprint`; `Complete` when it was finalized before with the same options.
pub fn check_recorded(
    dst: &Store,
    plan: &Outputs,
    fingerprint: &Fingerprint,
    survey: &Survey,
) -> Result<Prepared> {
    if survey.options_records().next().is_none() {
        if survey.has_metadata(plan) && survey.metadata_matches(plan) {
            return Ok(Prepared::Complete);
        }
        return Err(Error::Destination {
            reason: format!(
                "{} holds no zshard conversion with these options (no {OPTIONS_DIR})",
                dst.url("")
            ),
        });
    }
    let state_error = |source| Error::State {
        key: dst.url(CLAIM),
        source,
    };
    let other_claim = match survey.claim() {
        Some(bytes) if !fingerprint.recorded_in(bytes).map_err(state_error)? => {
            Some(serde_json::from_slice::<Value>(bytes).map_err(state_error)?)
        }
        _ => None,
    };
    if let Some(claimed) = other_claim {
        return Err(Error::Destination {
            reason: format!(
                "{} was claimed by a conversion with different options ({}; see {})",
                dst.url(""),
                differences(&claimed, &fingerprint.value()),
                dst.url(CLAIM)
            ),
        });
    }
    if let Some(key) = survey.conflicting_record(dst, fingerprint)? {
        return Err(Error::Destination {
            reason: format!(
                "{} was converted with different options (see {})",
                dst.url(""),
                dst.url(key)
            ),
        });
    }
    Ok(Prepared::Run(Box::default()))
}
