use bytes::Bytes;
use object_store::path::Path;

use super::Store;

impl Store {
    /// Reads `keys` side by side (one round trip on an object store) and keeps what was found, or
    /// that nothing was, for the first [`Store::get`] of each (then forgotten): for the few small
    /// documents a reader looks for one after another, each depending on whether the one before
    /// exists (a format's detection, a hierarchy's root metadata). A key that fails to be read is
    /// not kept, so its `get` reads it again and reports the failure. Does nothing for local files.
    pub fn read_ahead(&self, keys: &[&str]) {
        if !self.location.is_remote() {
            return;
        }
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let read = self.get_many(&keys);
        let Ok(mut kept) = self.read_ahead.lock() else {
            return;
        };
        for (key, found) in keys.iter().zip(read) {
            if let (Ok(path), Ok(found)) = (self.path(key), found) {
                kept.insert(path.to_string(), found);
            }
        }
    }

    /// What [`Store::read_ahead`] kept for `key`, without taking it (the first [`Store::get`] still
    /// finds it there): `None` when nothing was kept, `Some(None)` when the key was found missing.
    /// For a probe that looks at a document before the reader that reads it.
    pub fn read_ahead_peek(&self, key: &str) -> Option<Option<Bytes>> {
        let path = self.path(key).ok()?;
        self.read_ahead.lock().ok()?.get(path.as_ref()).cloned()
    }

    /// What [`Store::read_ahead`] kept for `path`, if anything (taken: a second read goes to the
    /// store).
    pub(super) fn read_ahead_of(&self, path: &Path) -> Option<Option<Bytes>> {
        let mut kept = self.read_ahead.lock().ok()?;
        if kept.is_empty() {
            return None;
        }
        kept.remove(path.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::conformance::remote_in_memory;

    #[test]
    fn a_peek_at_what_was_read_ahead_leaves_it_for_the_first_get() {
        let store = remote_in_memory();
        store
            .put(".zmetadata", Bytes::from_static(b"{}"))
            .expect("put");
        store.read_ahead(&[".zmetadata", "zarr.json"]);
        for _ in 0..2 {
            assert_eq!(
                store.read_ahead_peek(".zmetadata"),
                Some(Some(Bytes::from_static(b"{}")))
            );
        }
        assert_eq!(store.read_ahead_peek("zarr.json"), Some(None));
        assert_eq!(store.read_ahead_peek(".zarray"), None);
        assert_eq!(
            store.get(".zmetadata").expect("get"),
            Some(Bytes::from_static(b"{}"))
        );
        // The first get took it.
        assert_eq!(store.read_ahead_peek(".zmetadata"), None);
    }
}
