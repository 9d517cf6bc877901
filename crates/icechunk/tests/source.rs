//! An Icechunk repository written with the `icechunk` crate itself (native, inline and virtual
//! chunks), read back through `Source`, and published into through `publish`.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use icechunk::config::ObjectStoreConfig;
use icechunk::format::format_constants::SpecVersionBin;
use icechunk::format::manifest::{VirtualChunkLocation, VirtualChunkRef};
use icechunk::virtual_chunks::VirtualChunkContainer;
use icechunk::{Repository, RepositoryConfig, Store};
use tokio::sync::RwLock;
use zshard_core::{ChunkReader, KnownVersions, NodeKind, VersionsFrom};
use zshard_icechunk::{ChunkCounts, Error, Source, SpecVersion};
use zshard_kerchunk::Options;
use zshard_store::IoRuntime;

const ARRAY: &str = r#"{"zarr_format": 3, "node_type": "array", "shape": [SHAPE], "data_type": "uint8",
  "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [CHUNK]}},
  "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
  "fill_value": 0, "codecs": [{"name": "bytes"}], "attributes": {}}"#;

fn array(shape: u64, chunk: u64) -> Bytes {
    Bytes::from(
        ARRAY
            .replace("SHAPE", &shape.to_string())
            .replace("CHUNK", &chunk.to_string()),
    )
}

/// How a test repository names its virtual chunk's target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// An absolute `file://` URL (both spec versions).
    Absolute,
    /// `vcc://files/data.bin`, relative to the container named `files` (spec 2).
    Relative,
}

/// The repositories every reading test runs on: both spec versions, and spec 2 with a relative
/// virtual target.
const KINDS: [(SpecVersionBin, Target); 3] = [
    (SpecVersionBin::V1, Target::Absolute),
    (SpecVersionBin::V2, Target::Absolute),
    (SpecVersionBin::V2, Target::Relative),
];

/// `root/repo` with array x (3 chunks of 1024: native, virtual into `root/files/data.bin` at 2,
/// missing) and array y (one 4-byte inline chunk). Returns the native chunk and the data file.
fn make_repository(
    root: &Path,
    runtime: &IoRuntime,
    spec: SpecVersionBin,
    target: Target,
) -> (Vec<u8>, Vec<u8>) {
    let files = root.join("files");
    std::fs::create_dir_all(&files).expect("mkdir");
    let data: Vec<u8> = (0..1100u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(files.join("data.bin"), &data).expect("write");
    let native: Vec<u8> = (0..1024u32).map(|i| (i % 13) as u8 + 1).collect();
    runtime.block_on(async {
        let mut config = RepositoryConfig::default();
        let prefix = format!("file://{}/", files.display());
        let store = ObjectStoreConfig::LocalFileSystem(files.clone());
        let container = match target {
            Target::Absolute => VirtualChunkContainer::new(prefix, store),
            Target::Relative => {
                VirtualChunkContainer::new_named("files".to_string(), prefix, store)
            }
        };
        config
            .set_virtual_chunk_container(container.expect("container"))
            .expect("set container");
        let storage = icechunk::new_local_filesystem_storage(&root.join("repo"))
            .await
            .expect("storage");
        let repo = Repository::create(storage)
            .config(config)
            .spec_version(spec)
            .execute()
            .await
            .expect("create");
        let session = repo.writable_session("main").await.expect("session");
        let store = Store::from_session(Arc::new(RwLock::new(session))).await;
        let group = r#"{"zarr_format": 3, "node_type": "group", "attributes": {"t": 1}}"#;
        store
            .set("zarr.json", Bytes::from(group))
            .await
            .expect("group");
        store
            .set("x/zarr.json", array(3072, 1024))
            .await
            .expect("x");
        store.set("y/zarr.json", array(4, 4)).await.expect("y");
        store
            .set("x/c/0", Bytes::from(native.clone()))
            .await
            .expect("native");
        store
            .set("y/c/0", Bytes::from_static(&[9, 8, 7, 6]))
            .await
            .expect("inline");
        let location = match target {
            Target::Absolute => VirtualChunkLocation::from_url(&format!(
                "file://{}",
                files.join("data.bin").display()
            )),
            Target::Relative => VirtualChunkLocation::from_vcc_path("files", "data.bin"),
        }
        .expect("location");
        let reference = VirtualChunkRef {
            location,
            offset: 2,
            length: 1024,
            checksum: None,
        };
        store
            .set_virtual_ref("x/c/1", reference, true)
            .await
            .expect("virtual");
        let session = store.session();
        let mut session = session.write().await;
        session.commit("set up").execute().await.expect("commit");
    });
    (native, data)
}

#[test]
fn native_inline_and_virtual_chunks_read_back() {
    for (spec, target) in KINDS {
        native_inline_and_virtual_chunks_read_back_from(spec, target);
    }
}

fn native_inline_and_virtual_chunks_read_back_from(spec: SpecVersionBin, target: Target) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let runtime = IoRuntime::new(2).expect("runtime");
    let (native, data) = make_repository(tmp.path(), &runtime, spec, target);
    let repo = tmp.path().join("repo");
    assert!(zshard_icechunk::is_repository(
        repo.to_str().expect("utf-8")
    ));
    let source = Source::open(
        repo.to_str().expect("utf-8"),
        "main",
        &Options::default(),
        runtime.clone(),
    )
    .expect("open");
    let version = match spec {
        SpecVersionBin::V1 => SpecVersion::V1,
        SpecVersionBin::V2 => SpecVersion::V2,
    };
    assert_eq!(source.spec_version(), version);
    assert!(
        source
            .url()
            .ends_with(&format!(", spec version {version})")),
        "{}",
        source.url()
    );
    assert_eq!(
        source.chunk_counts().expect("counted"),
        ChunkCounts {
            native: 1,
            inline: 1,
            virtual_: 1
        }
    );
    let nodes = source.nodes();
    let paths: Vec<&str> = nodes.iter().map(|n| n.path.as_str()).collect();
    assert_eq!(paths, ["", "x", "y"]);
    let NodeKind::Array(x) = &nodes[1].kind else {
        panic!("x is an array")
    };
    let chunks = source
        .reader("x", x)
        .read_chunks(&[vec![0], vec![1], vec![2]], u64::MAX);
    assert_eq!(
        chunks[0].as_ref().expect("native").as_deref(),
        Some(&native[..])
    );
    assert_eq!(
        chunks[1].as_ref().expect("virtual").as_deref(),
        Some(&data[2..1026])
    );
    assert!(chunks[2].as_ref().expect("missing").is_none());
    let NodeKind::Array(y) = &nodes[2].kind else {
        panic!("y is an array")
    };
    let chunks = source.reader("y", y).read_chunks(&[vec![0]], u64::MAX);
    assert_eq!(
        chunks[0].as_ref().expect("inline").as_deref(),
        Some(&[9u8, 8, 7, 6][..])
    );
    assert_eq!(source.virtual_reads().requests, 1);
}

#[test]
fn virtual_target_outside_the_root_is_refused_when_opening() {
    for (spec, target) in KINDS {
        virtual_target_outside_the_root_is_refused_when_opening_in(spec, target);
    }
}

fn virtual_target_outside_the_root_is_refused_when_opening_in(
    spec: SpecVersionBin,
    target: Target,
) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let runtime = IoRuntime::new(2).expect("runtime");
    make_repository(tmp.path(), &runtime, spec, target);
    let repo = tmp.path().join("repo");
    let options = Options {
        ref_root: Some(repo.to_string_lossy().into_owned()),
        ..Options::default()
    };
    let err = Source::open(repo.to_str().expect("utf-8"), "main", &options, runtime)
        .expect_err("refused");
    assert!(matches!(err, Error::Virtual { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("virtual chunk x/c/1"), "{text}");
    assert!(text.contains("data.bin"), "{text}");
}

#[test]
fn unknown_reference_names_branches_and_tags() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let runtime = IoRuntime::new(2).expect("runtime");
    make_repository(tmp.path(), &runtime, SpecVersionBin::V2, Target::Absolute);
    let repo = tmp.path().join("repo");
    let err = Source::open(
        repo.to_str().expect("utf-8"),
        "nope",
        &Options::default(),
        runtime,
    )
    .expect_err("no such reference");
    assert_eq!(
        err.to_string(),
        format!(
            "icechunk repository {}: \"nope\" is not a branch, tag or snapshot id: branches: main; tags: ",
            repo.display()
        )
    );
}

/// The reader of array `path` of the repository at `repo` on main.
fn reader_of(repo: &Path, runtime: &Arc<IoRuntime>, path: &str) -> (Source, Arc<dyn ChunkReader>) {
    let source = Source::open_unscanned(
        repo.to_str().expect("utf-8"),
        "main",
        &Options::default(),
        runtime.clone(),
    )
    .expect("open");
    let node = source
        .nodes()
        .into_iter()
        .find(|n| n.path == path)
        .expect("array");
    let NodeKind::Array(meta) = &node.kind else {
        panic!("{path} is an array")
    };
    let reader = source.reader(path, meta);
    (source, reader)
}

/// Commits `chunks` (key, bytes; `None` deletes) on main of the repository at `repo`.
fn commit(repo: &Path, runtime: &IoRuntime, chunks: &[(&str, Option<&'static [u8]>)]) {
    runtime.block_on(async {
        let storage = icechunk::new_local_filesystem_storage(repo)
            .await
            .expect("storage");
        let repo = Repository::open(storage).execute().await.expect("open");
        let session = repo.writable_session("main").await.expect("session");
        let store = Store::from_session(Arc::new(RwLock::new(session))).await;
        for (key, bytes) in chunks {
            match bytes {
                Some(bytes) => store
                    .set(key, Bytes::from_static(bytes))
                    .await
                    .expect("set"),
                None => store.delete(key).await.expect("delete"),
            }
        }
        let session = store.session();
        let mut session = session.write().await;
        session.commit("change").execute().await.expect("commit");
    });
}

#[test]
fn versions_since_a_known_snapshot_equal_a_listing() {
    for spec in [SpecVersionBin::V1, SpecVersionBin::V2] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let runtime = Arc::new(IoRuntime::new(2).expect("runtime"));
        make_repository(tmp.path(), &runtime, spec, Target::Absolute);
        let repo = tmp.path().join("repo");
        let (_source, x) = reader_of(&repo, &runtime, "x");
        let (_source_y, y) = reader_of(&repo, &runtime, "y");
        let grid = [3u64];
        let listed = x.chunk_versions(&grid).expect("listed").expect("versions");
        let y_listed = y.chunk_versions(&[1]).expect("listed").expect("versions");
        let known = KnownVersions {
            location: "repo".to_string(),
            array: "x".to_string(),
            source_version: x.source_version().expect("a snapshot"),
            versions: listed.clone(),
        };
        // The same snapshot: the known versions, nothing read.
        let (same, how) = x.chunk_versions_since(&grid, Some(&known)).expect("since");
        assert_eq!(how, VersionsFrom::Unchanged);
        assert_eq!(same.expect("versions").len(), listed.len());

        // Chunk 2 written, chunk 0 deleted, array y untouched: two chunks looked up for x, none
        // for y, and the versions are a listing's.
        commit(
            &repo,
            &runtime,
            &[("x/c/2", Some(&[5u8; 1024])), ("x/c/0", None)],
        );
        let (_source, x) = reader_of(&repo, &runtime, "x");
        let (since, how) = x.chunk_versions_since(&grid, Some(&known)).expect("since");
        assert_eq!(how, VersionsFrom::Changed { chunks: 2 });
        let since = since.expect("versions");
        let now = x.chunk_versions(&grid).expect("listed").expect("versions");
        for c in 0..3u64 {
            assert_eq!(since.of(&[c]), now.of(&[c]), "chunk {c}");
        }
        assert_eq!(since.len(), 2);
        assert_ne!(since.of(&[2]), listed.of(&[2]));
        assert_eq!(since.of(&[0]), None);
        let (_source, y) = reader_of(&repo, &runtime, "y");
        let y_known = KnownVersions {
            location: "repo".to_string(),
            array: "y".to_string(),
            source_version: known.source_version.clone(),
            versions: y_listed,
        };
        let (_, how) = y.chunk_versions_since(&[1], Some(&y_known)).expect("since");
        assert_eq!(how, VersionsFrom::Changed { chunks: 0 });

        // A snapshot that is no ancestor of main (another repository's): listed whole, saying why.
        let other = tempfile::tempdir().expect("tempdir");
        make_repository(other.path(), &runtime, spec, Target::Absolute);
        let (_other, other_x) = reader_of(&other.path().join("repo"), &runtime, "x");
        let stranger = KnownVersions {
            location: "repo".to_string(),
            array: "x".to_string(),
            source_version: other_x.source_version().expect("a snapshot"),
            versions: listed.clone(),
        };
        let (again, how) = x
            .chunk_versions_since(&grid, Some(&stranger))
            .expect("since");
        match how {
            VersionsFrom::Listed { why: Some(why) } => {
                assert!(why.contains("no longer an ancestor"), "{why}")
            }
            other => panic!("listed whole, saying why: {other:?}"),
        }
        assert_eq!(again.expect("versions").of(&[2]), now.of(&[2]));
    }
}
