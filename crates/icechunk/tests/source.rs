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
use zshard_core::NodeKind;
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
