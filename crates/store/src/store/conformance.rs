//! One set of tests of the public [`Store`] API, run against every backend: a local folder, an
//! object store (object_store's `InMemory`, taken for a remote one so that listings are split and
//! reads go through requests) and, for the reads, a zip file. A backend that differs from the
//! others in what the API promises fails here. (object_store's `LocalFileSystem` addressed as a
//! bucket is no backend: its listings are not sorted, which split listings of object stores rely
//! on, and they keep emptied folders.)

use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStore;

use super::{Backend, PutNew, Store};
use crate::error::Error;
use crate::location::Location;
use crate::runtime::IoRuntime;

/// Written by Python's `zipfile` (see `fuzz/corpus/zip_directory`): `zarr.json` (37 bytes),
/// `a/c/0` (the bytes 0..40) and a folder entry `dir/`.
const STORED_ZIP: &[u8] = include_bytes!("../../../../fuzz/corpus/zip_directory/stored.zip");

/// A store over an object store `inner` that passes for the remote `s3://bucket/out.zarr`.
pub(super) fn remote(inner: Arc<dyn ObjectStore>) -> Store {
    let runtime = IoRuntime::new(1).expect("runtime");
    Store {
        inner,
        multipart: None,
        records: None,
        root: Path::from("out.zarr"),
        s3_lister: None,
        location: Location::parse("s3://bucket/out.zarr").expect("location"),
        backend: Backend::Object,
        concurrency: 4,
        runtime,
        read_ahead: Default::default(),
        deferred_sync: false,
    }
}

/// A store over an in-memory object store that passes for a remote one (so listings are split).
pub(super) fn remote_in_memory() -> Store {
    remote(Arc::new(InMemory::new()))
}

/// Every writable backend, empty, by name (with the folder that holds it, if any).
fn writable() -> Vec<(&'static str, Store, Option<tempfile::TempDir>)> {
    let local = tempfile::tempdir().expect("tempdir");
    let local_store = Store::open(
        local.path().join("out.zarr").to_str().expect("utf-8"),
        IoRuntime::new(1).expect("runtime"),
        true,
    )
    .expect("open");
    vec![
        ("local folder", local_store, Some(local)),
        ("in-memory object store", remote_in_memory(), None),
    ]
}

/// The zip fixture opened as a store (from a file in `dir`).
fn zip_store(dir: &tempfile::TempDir) -> Store {
    let file = dir.path().join("fixture.zip");
    std::fs::write(&file, STORED_ZIP).expect("write");
    let store = Store::open(
        file.to_str().expect("utf-8"),
        IoRuntime::new(1).expect("runtime"),
        false,
    )
    .expect("open");
    assert!(store.is_zip());
    store
}

/// The zip fixture's members, written to a writable store.
fn write_fixture(store: &Store, zarr_json: &Bytes) {
    let data: Vec<u8> = (0..40).collect();
    store.put("zarr.json", zarr_json.clone()).expect("put");
    store.put("a/c/0", Bytes::from(data)).expect("put");
}

/// What every backend holding the fixture reads alike.
fn reads(name: &str, store: &Store, zarr_json: &Bytes) {
    let data: Vec<u8> = (0..40).collect();
    assert_eq!(store.get("a/c/0").expect(name).as_deref(), Some(&data[..]));
    assert_eq!(store.get("a/c/1").expect(name), None, "{name}");
    assert_eq!(
        store.get("zarr.json").expect(name).as_ref(),
        Some(zarr_json)
    );
    assert_eq!(
        &store.get_range("a/c/0", 3..7).expect(name)[..],
        &data[3..7]
    );
    assert!(store.get_range("a/c/1", 0..1).is_err(), "{name}");
    let edge = |len, from_end| store.get_edge("a/c/0", len, from_end).expect(name);
    assert_eq!(edge(16, true).as_deref(), Some(&data[24..]), "{name}");
    assert_eq!(edge(16, false).as_deref(), Some(&data[..16]), "{name}");
    assert_eq!(edge(100, true).as_deref(), Some(&data[..]), "{name}");
    assert_eq!(store.get_edge("a/c/1", 4, true).expect(name), None);
    let ranges = store.get_ranges(&[("a/c/0".into(), 38..40), ("a/c/0".into(), 0..2)]);
    let ranges: Vec<Bytes> = ranges.into_iter().map(|r| r.expect(name)).collect();
    assert_eq!(
        ranges,
        [Bytes::from_static(&[38, 39]), Bytes::from_static(&[0, 1])],
        "{name}"
    );
    let keys = ["a/c/0".to_string(), "missing".to_string()];
    let many = store.get_many(&keys);
    assert!(
        matches!(&many[..], [Ok(Some(d)), Ok(None)] if d.len() == 40),
        "{name}: {many:?}"
    );
    let many = store.get_many_bounded(&keys, 40);
    assert!(matches!(&many[..], [Ok(Some(_)), Ok(None)]), "{name}");
    let many = store.get_many_bounded(&keys, 39);
    assert!(
        matches!(&many[..], [Err(Error::TooLarge { len: 40, .. }), Ok(None)]),
        "{name}: {many:?}"
    );
    let many = store.block_on(store.get_many_async(&keys));
    assert!(matches!(&many[..], [Ok(Some(_)), Ok(None)]), "{name}");
    assert_eq!(
        store.exist_many(&keys).expect(name),
        [true, false],
        "{name}"
    );

    let sizes = vec![("a/c/0".to_string(), 40), ("zarr.json".to_string(), 37)];
    assert_eq!(store.list_sizes("").expect(name), sizes, "{name}");
    assert_eq!(store.list_keys("").expect(name), ["a/c/0", "zarr.json"]);
    assert_eq!(store.list_sizes("a").expect(name), sizes[..1], "{name}");
    let splits = ["a/c/0".to_string(), "b".to_string(), "a".to_string()];
    assert_eq!(
        store.list_sizes_split("", &splits).expect(name),
        sizes,
        "{name}"
    );
    assert_eq!(store.list_sizes_without_links("").expect(name), sizes);
    let objects = store.list_objects("").expect(name);
    let listed: Vec<(String, u64)> = objects.iter().map(|o| (o.key.clone(), o.size)).collect();
    assert_eq!(listed, sizes, "{name}");
    assert_eq!(store.list_children("").expect(name), ["a"], "{name}");
    let child = store.child("a");
    assert_eq!(child.list_children("").expect(name), ["c"], "{name}");
    assert_eq!(child.list_keys("").expect(name), ["c/0"], "{name}");
    assert_eq!(child.get("c/0").expect(name).as_deref(), Some(&data[..]));
    assert_eq!(child.url("c/0"), store.url("a/c/0"), "{name}");

    // What is read ahead is what a `get` finds (kept for object stores, read again otherwise).
    store.read_ahead(&["zarr.json", "nothing"]);
    assert!(
        matches!(store.read_ahead_peek("zarr.json"), None | Some(Some(_))),
        "{name}"
    );
    assert_eq!(
        store.get("zarr.json").expect(name).as_ref(),
        Some(zarr_json)
    );
    assert_eq!(store.get("nothing").expect(name), None, "{name}");
    assert_eq!(store.staged_keys("").expect(name), Vec::<String>::new());
}

/// The zip fixture's members, by whole.
fn zarr_json() -> Bytes {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = zip_store(&dir)
        .get("zarr.json")
        .expect("get")
        .expect("found");
    assert_eq!(json.len(), 37);
    json
}

#[test]
fn every_backend_reads_the_same_objects_alike() {
    let json = zarr_json();
    let dir = tempfile::tempdir().expect("tempdir");
    reads("zip file", &zip_store(&dir), &json);
    for (name, store, _dir) in writable() {
        write_fixture(&store, &json);
        reads(name, &store, &json);
    }
}

#[test]
fn every_writable_backend_writes_copies_and_deletes_alike() {
    for (name, store, _dir) in writable() {
        let parts = vec![Bytes::from_static(b"sh"), Bytes::from_static(b"ard")];
        store.put_parts("a/c/0/0", parts).expect(name);
        assert_eq!(
            store.get("a/c/0/0").expect(name).as_deref(),
            Some(&b"shard"[..])
        );
        store
            .put("a/c/0/0", Bytes::from_static(b"again"))
            .expect(name);
        assert_eq!(
            store.get("a/c/0/0").expect(name).as_deref(),
            Some(&b"again"[..])
        );

        let small = [
            ("m/1".to_string(), Bytes::from_static(b"one")),
            ("m/2".to_string(), Bytes::from_static(b"two")),
        ];
        store.block_on(store.put_many_async(&small)).expect(name);
        store
            .block_on(store.put_small_async("m/3", Bytes::from_static(b"three")))
            .expect(name);
        assert_eq!(store.list_keys("m").expect(name), ["m/1", "m/2", "m/3"]);

        assert_eq!(
            store.put_new("lock", Bytes::from_static(b"a")).expect(name),
            PutNew::Created,
            "{name}"
        );
        assert_eq!(
            store.put_new("lock", Bytes::from_static(b"b")).expect(name),
            PutNew::Exists,
            "{name}"
        );
        assert_eq!(store.get("lock").expect(name).as_deref(), Some(&b"a"[..]));

        let pairs = [("a/c/0/0".to_string(), "copy/0".to_string())];
        store.copy_many(&pairs).expect(name);
        assert_eq!(
            store.get("copy/0").expect(name).as_deref(),
            Some(&b"again"[..])
        );
        let missing = [("a/c/9".to_string(), "copy/9".to_string())];
        assert!(store.copy_many(&missing).is_err(), "{name}");

        let mut upload = store.upload("big/0", 4).expect(name);
        upload.append(&Bytes::from_static(b"body")).expect(name);
        upload
            .append_all(&[Bytes::from_static(b"-"), Bytes::from_static(b"end")])
            .expect(name);
        assert_eq!(upload.finish(&Bytes::from_static(b"head")).expect(name), 12);
        assert_eq!(
            store.get("big/0").expect(name).as_deref(),
            Some(&b"headbody-end"[..])
        );

        let deferring = store.deferring_sync().expect(name);
        deferring.put("d/0", Bytes::from_static(b"d")).expect(name);
        store.checkpoint().expect(name);
        assert_eq!(store.get("d/0").expect(name).as_deref(), Some(&b"d"[..]));

        store.delete("copy/0").expect(name);
        store
            .delete("copy/0")
            .expect("a missing key is deleted too");
        store
            .delete_many(&["m/1".to_string(), "m/2".to_string(), "m/9".to_string()])
            .expect(name);
        store
            .block_on(store.delete_many_async(&["m/3".to_string()]))
            .expect(name);
        assert_eq!(
            store.list_keys("").expect(name),
            ["a/c/0/0", "big/0", "d/0", "lock"],
            "{name}"
        );
        assert_eq!(
            store.list_children("").expect(name),
            ["a", "big", "d"],
            "{name}"
        );
        assert_eq!(store.staged_keys("").expect(name), Vec::<String>::new());
        store.remove_staged_below("").expect(name);
        store.remove_empty_folders("a").expect(name);
        assert_eq!(store.list_keys("a").expect(name), ["a/c/0/0"], "{name}");
        assert!(!store.is_zip(), "{name}");
    }
}

#[test]
fn a_zip_file_is_read_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = zip_store(&dir);
    let data = Bytes::from_static(b"x");
    assert!(store.put("x", data.clone()).is_err());
    assert!(store.put_parts("x", vec![data.clone()]).is_err());
    assert!(store.put_new("x", data.clone()).is_err());
    assert!(store.delete("zarr.json").is_err());
    assert!(store
        .copy_many(&[("zarr.json".into(), "x".into())])
        .is_err());
    assert_eq!(store.local_path("zarr.json"), None);
    assert_eq!(store.list_keys("").expect("list"), ["a/c/0", "zarr.json"]);
}
