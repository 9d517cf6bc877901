//! The conversion a destination records (issue 44): what its claim (else a worker's options
//! record) says was converted, so that `finalize`, `plan` and the front ends can reuse the options
//! the workers were given instead of asking for them again.

use serde_json::Value;
use zshard_store::Store;

use zshard_core::Setting;

use crate::error::{Error, Result};
use crate::{in_dir, Fingerprint, Outputs, CLAIM, OPTIONS_DIR};

/// One array of a recorded conversion: its path and the `zarr.json` the conversion writes for it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RecordedArray {
    /// Its path in the hierarchy (empty at the root).
    pub path: String,
    /// Its output metadata (shard grid, inner chunk shape, codecs, index location).
    pub metadata: Value,
}

/// The conversion recorded in a destination's state.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RecordedConversion {
    /// The record it was read from (its URL), for messages.
    pub record: String,
    /// The source as the conversion named it (its location).
    pub source: String,
    /// Every array it converts, in the order of the plan.
    pub arrays: Vec<RecordedArray>,
}

/// The conversion that `dst` records: its claim, else the first worker's options record (a claim
/// lost to a kill between the two writes); `None` when it records none (nothing started, or the
/// conversion finished and its state was removed). Two reads at most, and a listing.
pub fn recorded_conversion(dst: &Store) -> Result<Option<RecordedConversion>> {
    let mut key = CLAIM.to_string();
    let mut found = dst.get(&key)?;
    if found.is_none() {
        let mut options: Vec<String> = dst
            .list_keys(OPTIONS_DIR)?
            .into_iter()
            .filter(|k| in_dir(k, OPTIONS_DIR))
            .collect();
        options.sort();
        for candidate in options {
            if let Some(bytes) = dst.get(&candidate)? {
                key = candidate;
                found = Some(bytes);
                break;
            }
        }
    }
    let Some(bytes) = found else {
        return Ok(None);
    };
    let record = dst.url(&key);
    let body = crate::sealed::unseal(&bytes).ok_or_else(|| Error::Destination {
        reason: format!("{record}: checksum does not match"),
    })?;
    let recorded: Value = serde_json::from_slice(&body).map_err(|source| Error::State {
        key: record.clone(),
        source,
    })?;
    parse(record, &recorded).map(Some)
}

/// What `zshard plan` checks of a destination, writing nothing: that it can be listed and read (a
/// missing bucket, missing credentials or no access fail here rather than at `convert`), and that
/// `convert` would not refuse what it holds: a claim or options records of another conversion,
/// metadata that differs, Zarr v2 metadata, or shards without records. One round of listings and
/// reads, as a run's survey makes.
pub fn check_plannable(dst: &Store, plan: &Outputs, fingerprint: &Fingerprint) -> Result<()> {
    let survey = crate::survey(dst, plan, true, fingerprint)?;
    if let Some(bytes) = survey.claim() {
        let state_error = |source| Error::State {
            key: dst.url(CLAIM),
            source,
        };
        if !fingerprint.recorded_in(bytes).map_err(state_error)? {
            let claimed: Value = serde_json::from_slice(bytes).map_err(state_error)?;
            return Err(Error::Destination {
                reason: format!(
                    "{} was claimed by a conversion with different options ({}; see {}): convert would refuse it; give the options it records, or use {} to replace it",
                    dst.url(""),
                    crate::claim::differences(&claimed, &fingerprint.value()),
                    dst.url(CLAIM),
                    Setting::Overwrite
                ),
            });
        }
    }
    crate::claim::check_holdings(dst, plan, fingerprint, &survey, &|| None).map(|_| ())
}

/// A claim's document (`{"arrays": [{"path", "zarr.json"}], "source", ...}`) read.
fn parse(record: String, recorded: &Value) -> Result<RecordedConversion> {
    let garbled = |what: &str| Error::Destination {
        reason: format!("{record} is not a zshard state record: {what}"),
    };
    let source = recorded["source"]
        .as_str()
        .ok_or_else(|| garbled("no source"))?
        .to_string();
    let arrays = recorded["arrays"]
        .as_array()
        .ok_or_else(|| garbled("no list of arrays"))?
        .iter()
        .map(|array| {
            let path = array["path"]
                .as_str()
                .ok_or_else(|| garbled("an array without a path"))?;
            Ok(RecordedArray {
                path: path.to_string(),
                metadata: array["zarr.json"].clone(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordedConversion {
        record,
        source,
        arrays,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_claim_reads_as_its_source_and_arrays() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runtime = zshard_store::IoRuntime::new(1).expect("runtime");
        let dst = Store::open(dir.path().to_str().expect("utf-8"), runtime, true).expect("store");
        assert_eq!(recorded_conversion(&dst).expect("reads"), None);
        let metadata = json!({"shape": [4], "chunk_grid": {"configuration": {"chunk_shape": [2]}}});
        let claim = json!({"arrays": [{"path": "a", "zarr.json": metadata}], "source": "/s", "zshard_state": 1});
        dst.put(CLAIM, bytes::Bytes::from(claim.to_string()))
            .expect("put");
        let recorded = recorded_conversion(&dst).expect("reads").expect("recorded");
        assert_eq!(recorded.source, "/s");
        assert_eq!(recorded.arrays.len(), 1);
        assert_eq!(recorded.arrays[0].path, "a");
        assert_eq!(recorded.arrays[0].metadata, metadata);
        dst.put(CLAIM, bytes::Bytes::from_static(b"{\"arrays\": 1}"))
            .expect("put");
        let e = recorded_conversion(&dst).expect_err("garbled");
        assert!(e.to_string().contains("no source"), "{e}");
    }
}
