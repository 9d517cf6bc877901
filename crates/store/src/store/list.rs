use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::ObjectStore;

use super::{ListedObject, Store};
use crate::error::{Error, Result};

impl Store {
    /// The error of a failed listing of `prefix`: a name no key can hold is named as such.
    pub(super) fn list_error(&self, prefix: &str, source: object_store::Error) -> Error {
        match source {
            object_store::Error::InvalidPath {
                source:
                    object_store::path::Error::BadSegment { path, .. }
                    | object_store::path::Error::NonUnicode { path, .. },
            } => Error::UnusableName {
                location: self.url(prefix),
                name: path.trim_start_matches('/').to_string(),
            },
            source => Error::Request {
                operation: "cannot list",
                location: self.url(prefix),
                source: Box::new(source),
            },
        }
    }

    /// Names of the immediate "subdirectories" of `prefix` (common prefixes of keys below it).
    pub fn list_children(&self, prefix: &str) -> Result<Vec<String>> {
        let path = self.path(prefix)?;
        let listing = self
            .runtime
            .block_on(self.retrying(|| self.inner.list_with_delimiter(Some(&path))))
            .map_err(|source| self.list_error(prefix, source))?;
        let mut names: Vec<String> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Every key below `prefix`, relative to this store (used by tests and checks, never on the hot path).
    pub fn list_keys(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .list_sizes(prefix)?
            .into_iter()
            .map(|(key, _)| key)
            .collect())
    }

    /// Every key below `prefix` with its object's size in bytes, sorted by key: one listing, no
    /// request per object.
    pub fn list_sizes(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        self.list_sizes_split(prefix, &[])
    }

    /// [`Store::list_sizes`], the listing of an object store cut at `splits` (keys below `prefix`,
    /// in any order) into segments listed concurrently. An object store lists a page of keys per
    /// request and each page names the next, so one listing of many keys pays the latency once per
    /// page in series; segments that start after a known key (S3's `start-after`) are listed side
    /// by side. Splits only change how the listing is cut, never what it finds.
    pub fn list_sizes_split(&self, prefix: &str, splits: &[String]) -> Result<Vec<(String, u64)>> {
        self.runtime
            .block_on(self.list_sizes_split_async(prefix, splits))
    }

    /// [`Store::list_sizes`] as a future on the store's I/O runtime (see [`Store::block_on`]).
    pub async fn list_sizes_async(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        self.list_sizes_split_async(prefix, &[]).await
    }

    /// [`Store::list_sizes_split`] as a future on the store's I/O runtime (see [`Store::block_on`]).
    pub async fn list_sizes_split_async(
        &self,
        prefix: &str,
        splits: &[String],
    ) -> Result<Vec<(String, u64)>> {
        let objects = self.list_objects_split_async(prefix, splits).await?;
        Ok(objects.into_iter().map(|o| (o.key, o.size)).collect())
    }

    /// The objects below `prefix` with their sizes and versions, sorted by key; the listing cut at
    /// `splits` as [`Store::list_sizes_split`] cuts it.
    pub(super) async fn list_objects_split_async(
        &self,
        prefix: &str,
        splits: &[String],
    ) -> Result<Vec<ListedObject>> {
        let path = self.path(prefix)?;
        let mut bounds: Vec<Path> = Vec::new();
        if self.location.is_remote() {
            for key in splits {
                let split = self.path(key)?;
                if split.as_ref().starts_with(path.as_ref()) {
                    bounds.push(split);
                }
            }
        }
        bounds.sort_by(|a, b| a.as_ref().cmp(b.as_ref()));
        bounds.dedup();
        let listed = {
            // Segment i holds the keys in (bounds[i - 1], bounds[i]]: the first has no lower bound,
            // the last no upper one.
            let path = &path;
            let bounds = &bounds;
            let segments = (0..=bounds.len()).map(|i| {
                let after = i.checked_sub(1).map(|j| &bounds[j]);
                let until = bounds.get(i);
                self.retrying(move || self.list_segment(path, after, until))
            });
            futures::stream::iter(segments)
                .buffer_unordered(self.concurrency.max(1))
                .try_concat()
                .await
        };
        let metas = listed.map_err(|source| self.list_error(prefix, source))?;
        let mut objects: Vec<ListedObject> = metas
            .into_iter()
            .filter_map(|m| {
                Some(ListedObject {
                    key: self.key_of(&m.location)?,
                    size: m.size,
                    modified_ms: u64::try_from(m.last_modified.timestamp_millis()).unwrap_or(0),
                    version: m.e_tag.unwrap_or_else(|| {
                        m.last_modified
                            .timestamp_nanos_opt()
                            .unwrap_or(0)
                            .to_string()
                    }),
                })
            })
            .collect();
        // Segments do not overlap (offsets are exclusive); a key listed twice, rewritten while it was
        // being listed, is one object.
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        objects.dedup_by(|a, b| a.key == b.key);
        Ok(objects)
    }

    /// The key (relative to this store) of an object path of the inner store; `None` outside it.
    pub(super) fn key_of(&self, location: &Path) -> Option<String> {
        location.prefix_match(&self.root).map(|parts| {
            parts
                .map(|p| p.as_ref().to_string())
                .collect::<Vec<_>>()
                .join("/")
        })
    }

    /// [`Store::list_objects`] as a future on the store's I/O runtime (see [`Store::block_on`]).
    pub async fn list_objects_async(&self, prefix: &str) -> Result<Vec<ListedObject>> {
        self.list_objects_split_async(prefix, &[]).await
    }

    /// The objects below `prefix` with their sizes and versions, sorted by key.
    pub fn list_objects(&self, prefix: &str) -> Result<Vec<ListedObject>> {
        self.list_objects_split(prefix, &[])
    }

    /// [`Store::list_objects`], the listing cut at `splits` as [`Store::list_sizes_split`] cuts it.
    pub fn list_objects_split(&self, prefix: &str, splits: &[String]) -> Result<Vec<ListedObject>> {
        self.runtime
            .block_on(self.list_objects_split_async(prefix, splits))
    }

    /// The objects below `path` after the key `after` (if any) up to and including `until` (if
    /// any); the listing stops at the first page past `until`.
    pub(super) async fn list_segment(
        &self,
        path: &Path,
        after: Option<&Path>,
        until: Option<&Path>,
    ) -> object_store::Result<Vec<object_store::ObjectMeta>> {
        let mut stream = match after {
            Some(after) => self.inner.list_with_offset(Some(path), after),
            None => self.inner.list(Some(path)),
        };
        let mut out = Vec::new();
        while let Some(meta) = stream.try_next().await? {
            if until.is_some_and(|u| meta.location.as_ref() > u.as_ref()) {
                break;
            }
            out.push(meta);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod split_listing_tests {
    use bytes::Bytes;

    use super::super::conformance::remote_in_memory;

    #[test]
    fn a_listing_cut_into_segments_finds_every_key_once() {
        let store = remote_in_memory();
        let mut keys = Vec::new();
        for i in 0..37u64 {
            for j in 0..29u64 {
                let key = format!("c/{i}/{j}");
                store
                    .put(&key, Bytes::from(vec![0u8; (i + j) as usize]))
                    .expect("put");
                keys.push(key);
            }
        }
        store
            .put("zarr.json", Bytes::from_static(b"{}"))
            .expect("put");
        let whole = store.list_sizes("c").expect("list");
        assert_eq!(whole.len(), 37 * 29);
        // Splits at existing keys, at keys that do not exist, outside the prefix, unsorted, repeated.
        let splits: Vec<String> = [
            "c/9/3",
            "c/1/0",
            "c/10/28",
            "c/36/28",
            "c/5/x",
            "zarr.json",
            "c/1/0",
            "c/0/0",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(store.list_sizes_split("c", &splits).expect("list"), whole);
        let every_100th: Vec<String> = keys.iter().step_by(100).cloned().collect();
        assert_eq!(
            store.list_sizes_split("c", &every_100th).expect("list"),
            whole
        );
        assert_eq!(
            whole.iter().find(|(k, _)| k == "c/10/28"),
            Some(&("c/10/28".to_string(), 38))
        );
    }
}
