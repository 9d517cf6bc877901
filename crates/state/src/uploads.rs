//! Multipart uploads in flight, recorded so that the next run or `finalize` aborts those a kill
//! left open.

use super::*;

/// Aborts the multipart uploads that earlier runs of `partition` left open (all of them for an
/// unpartitioned run, which owns every shard; a worker's own only, as other workers may be uploading
/// now), and returns `dst` recording the uploads of this run.
/// The records are those the survey listed (no request when there are none).
pub fn recording_uploads(dst: &Store, partition: Partition, survey: &Survey) -> Result<Store> {
    let own = format!("{UPLOADS_DIR}/{}", partition.tag());
    let earlier = if partition.is_all() {
        UPLOADS_DIR
    } else {
        &own
    };
    let recorded: Vec<String> = survey
        .state
        .iter()
        .filter(|key| in_dir(key, earlier))
        .cloned()
        .collect();
    if !recorded.is_empty() {
        dst.abort_uploads_recorded_in(&recorded)?;
    }
    Ok(dst.with_upload_records(&own))
}

/// Aborts every multipart upload recorded under the destination (before `finalize` writes the
/// metadata and removes the state folder, when no worker runs any more).
pub fn abort_recorded_uploads(dst: &Store) -> Result<()> {
    dst.abort_recorded_uploads(UPLOADS_DIR)?;
    Ok(())
}
