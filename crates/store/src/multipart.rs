//! Multipart uploads that a later run can find again. An upload that is never completed or aborted
//! (the process was killed, the machine lost) stays open on the object store, invisible but billed,
//! until someone aborts it by its id. So a store [`with_upload_records`](Store::with_upload_records)
//! writes a small record (the object's path and the upload id) before it sends the first part, and
//! removes it once the upload is completed or aborted; [`Store::abort_recorded_uploads`] aborts what
//! earlier runs left recorded, and only those: an upload zshard did not record is not zshard's.
//!
//! An upload is recorded right after it is created: a kill between the two leaves one upload that
//! nothing records (a window of one request).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    MultipartId, MultipartUpload, ObjectStoreExt, PutPayload, PutResult, UploadPart,
};
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::store::Store;

/// Where a store records the multipart uploads it starts.
#[derive(Debug)]
pub(crate) struct UploadRecords {
    /// The store the records are written to (the destination's root; it records nothing itself).
    store: Store,
    /// The folder of the records, a key of `store`.
    prefix: String,
    /// Distinguishes this process's records from those of earlier runs.
    run: String,
    seq: AtomicU64,
}

impl UploadRecords {
    /// Writes the record of upload `id` of `path`; returns its key.
    async fn write(&self, path: &Path, id: &MultipartId) -> object_store::Result<String> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let key = format!("{}/{}-{seq:06}.json", self.prefix, self.run);
        let record = json!({"path": path.as_ref(), "upload_id": id});
        let bytes = Bytes::from(record.to_string());
        self.store.put_async(&key, bytes).await?;
        Ok(key)
    }

    /// Removes a record. Best effort: a record left behind is harmless (aborting an upload that was
    /// completed is refused as unknown, which counts as done, and finalizing removes `.zshard/`).
    async fn remove(&self, key: &str) {
        let _ = self.store.delete_async(key).await;
    }
}

/// The path and upload id a record holds, if it is one.
fn parse_record(bytes: &[u8]) -> Option<(Path, MultipartId)> {
    let value: Value = serde_json::from_slice(bytes).ok()?;
    let path = value.get("path")?.as_str()?;
    let id = value.get("upload_id")?.as_str()?;
    Some((Path::from(path), id.to_string()))
}

impl Store {
    /// The same store, recording every multipart upload it (or a [`child`](Store::child) of it)
    /// starts under `prefix` (a key of this store, e.g. `.zshard/uploads/w0of4`) until the upload
    /// is completed or aborted.
    pub fn with_upload_records(&self, prefix: &str) -> Store {
        let run = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let records = UploadRecords {
            store: self.clone(),
            prefix: prefix.trim_end_matches('/').to_string(),
            run: format!("{}-{run}", std::process::id()),
            seq: AtomicU64::new(0),
        };
        let mut store = self.clone();
        store.records = Some(Arc::new(records));
        store
    }

    /// Aborts the multipart uploads recorded under `prefix` (by earlier runs that did not finish
    /// them) and removes their records; returns how many there were. Uploads whose record names an
    /// object outside this store are left alone (they are not this destination's).
    pub fn abort_recorded_uploads(&self, prefix: &str) -> Result<usize> {
        self.abort_uploads_recorded_in(&self.list_keys(prefix)?)
    }

    /// [`Store::abort_recorded_uploads`] for record keys already listed (the caller listed the
    /// records' folder with others in one request).
    pub fn abort_uploads_recorded_in(&self, keys: &[String]) -> Result<usize> {
        let mut aborted = 0;
        for key in keys {
            let Some(bytes) = self.get(key)? else {
                continue;
            };
            let (path, id) = parse_record(&bytes)
                .filter(|(path, _)| path.prefix_match(&self.root).is_some())
                .ok_or_else(|| Error::UploadRecord {
                    location: self.url(key),
                    reason: "not a record of a multipart upload below this destination".into(),
                })?;
            if let Some(multipart) = &self.multipart {
                let abort = self
                    .runtime
                    .block_on(self.retrying(|| multipart.abort_multipart(&path, &id)));
                match abort {
                    // Already completed or aborted (or expired): nothing left to do.
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(source) => {
                        return Err(Error::Request {
                            operation: "cannot abort the multipart upload recorded in",
                            location: self.url(key),
                            source: Box::new(source),
                        })
                    }
                }
            }
            self.delete(key)?;
            aborted += 1;
        }
        Ok(aborted)
    }

    /// Starts a multipart upload of `path`, recorded when this store records uploads (see the
    /// module's documentation). Stores without [`MultipartStore`] ids use object_store's own uploads.
    pub(crate) async fn start_multipart(
        &self,
        path: &Path,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let Some(multipart) = &self.multipart else {
            return self.inner.put_multipart(path).await;
        };
        let id = multipart.create_multipart(path).await?;
        let record = match &self.records {
            Some(records) => match records.write(path, &id).await {
                Ok(key) => Some((records.clone(), key)),
                Err(e) => {
                    let _ = multipart.abort_multipart(path, &id).await;
                    return Err(e);
                }
            },
            None => None,
        };
        Ok(Box::new(RecordedUpload {
            state: Arc::new(UploadState {
                store: multipart.clone(),
                path: path.clone(),
                id,
                parts: Mutex::new(Vec::new()),
                record,
            }),
            next_part: 0,
        }))
    }
}

/// A multipart upload driven through [`MultipartStore`], so that its id is known.
#[derive(Debug)]
struct RecordedUpload {
    state: Arc<UploadState>,
    next_part: usize,
}

struct UploadState {
    store: Arc<dyn MultipartStore>,
    path: Path,
    id: MultipartId,
    /// Parts uploaded so far, by index (they finish in any order).
    parts: Mutex<Vec<(usize, PartId)>>,
    /// The record to remove once the upload is completed or aborted.
    record: Option<(Arc<UploadRecords>, String)>,
}

impl std::fmt::Debug for UploadState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UploadState")
            .field("path", &self.path)
            .field("id", &self.id)
            .field("record", &self.record.as_ref().map(|(_, key)| key))
            .finish()
    }
}

impl UploadState {
    async fn remove_record(&self) {
        if let Some((records, key)) = &self.record {
            records.remove(key).await;
        }
    }
}

#[async_trait]
impl MultipartUpload for RecordedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let index = self.next_part;
        self.next_part += 1;
        let state = self.state.clone();
        Box::pin(async move {
            let part = state
                .store
                .put_part(&state.path, &state.id, index, data)
                .await?;
            // A poisoned lock only means another part's task panicked; the list itself is whole.
            let mut parts = state.parts.lock().unwrap_or_else(|p| p.into_inner());
            parts.push((index, part));
            Ok(())
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let mut parts =
            std::mem::take(&mut *self.state.parts.lock().unwrap_or_else(|p| p.into_inner()));
        parts.sort_by_key(|(index, _)| *index);
        if parts.len() != self.next_part {
            return Err(object_store::Error::Generic {
                store: "zshard",
                source: format!(
                    "{} of {} parts of {} were uploaded",
                    parts.len(),
                    self.next_part,
                    self.state.path
                )
                .into(),
            });
        }
        let parts = parts.into_iter().map(|(_, part)| part).collect();
        let state = &self.state;
        let result = state
            .store
            .complete_multipart(&state.path, &state.id, parts)
            .await?;
        state.remove_record().await;
        Ok(result)
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        let state = &self.state;
        state.store.abort_multipart(&state.path, &state.id).await?;
        state.remove_record().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_junk_is_no_record() {
        let record = json!({"path": "bucket/out.zarr/c/0/0", "upload_id": "abc=="}).to_string();
        assert_eq!(
            parse_record(record.as_bytes()),
            Some((Path::from("bucket/out.zarr/c/0/0"), "abc==".to_string()))
        );
        assert_eq!(parse_record(b"{\"path\": 3}"), None);
        assert_eq!(parse_record(b"junk"), None);
    }
}
