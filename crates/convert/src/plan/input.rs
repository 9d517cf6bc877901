//! Where a conversion reads from. Every input kind yields the same two things: the hierarchy of groups
//! and arrays (as the source-independent model) and, per array, a reader of its encoded chunks by grid
//! position. Stages and writers never learn which kind it was.

use std::sync::Arc;

use zshard_core::{ArrayMeta, ChunkReader, Node, NodeKind, Setting};
use zshard_kerchunk::{Format, ReadStats, ReferenceSet};
use zshard_store::{IoRuntime, Location, Store};
use zshard_zarr::{array_chunk_reader, open_hierarchy_skipping_within, open_hierarchy_within};

use crate::error::{Error, Result};
use crate::plan::selection::Selection;

/// What kind of input a source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceFormat {
    /// A Zarr v2 or v3 array or group.
    Zarr,
    /// A kerchunk JSON reference file (version 0 or 1, optionally `.zst`/`.gz` compressed).
    KerchunkJson,
    /// A kerchunk Parquet reference folder.
    KerchunkParquet,
    /// An Icechunk repository (at [`ReadOptions::reference`]).
    Icechunk,
    /// An N5 container (a dataset or a group of them).
    N5,
}

impl std::str::FromStr for SourceFormat {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "zarr" => Ok(SourceFormat::Zarr),
            "kerchunk-json" => Ok(SourceFormat::KerchunkJson),
            "kerchunk-parquet" => Ok(SourceFormat::KerchunkParquet),
            "icechunk" => Ok(SourceFormat::Icechunk),
            "n5" => Ok(SourceFormat::N5),
            other => Err(Error::Options {
                reason: format!(
                    "{} is not supported (zarr, kerchunk-json, kerchunk-parquet, icechunk, n5)",
                    Setting::SourceFormat.given(format_args!("{other:?}"))
                ),
            }),
        }
    }
}

/// What becomes of an array whose data type or codecs zshard does not read (`--on-unsupported`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnUnsupported {
    /// Refuse the conversion before anything is written, naming the array and the reason.
    #[default]
    Refuse,
    /// Convert everything else; the array is listed with its reason in the plan, the summary and
    /// the report, and `verify` passes over it.
    Skip,
}

impl std::str::FromStr for OnUnsupported {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "refuse" => Ok(OnUnsupported::Refuse),
            "skip" => Ok(OnUnsupported::Skip),
            other => Err(Error::Options {
                reason: format!(
                    "{} is not supported (refuse, skip)",
                    Setting::OnUnsupported.given(format_args!("{other:?}"))
                ),
            }),
        }
    }
}

impl OnUnsupported {
    /// The value of `--on-unsupported` (or of a job's `on_unsupported`), the default when it is not
    /// given: the one parse every front end uses.
    pub fn from_option(value: Option<&str>) -> Result<Self> {
        value
            .map(str::parse)
            .transpose()
            .map(Option::unwrap_or_default)
    }
}

/// An array left out of a conversion (`--on-unsupported skip`), and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct SkippedArray {
    /// The array's path in the hierarchy.
    pub path: String,
    /// What zshard does not read in it: the metadata document and the data type or codec.
    pub reason: String,
}

impl From<zshard_zarr::SkippedArray> for SkippedArray {
    fn from(s: zshard_zarr::SkippedArray) -> Self {
        SkippedArray {
            path: s.path,
            reason: s.reason,
        }
    }
}

/// How the input is read.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// The input's kind; detected when `None`.
    pub format: Option<SourceFormat>,
    /// Options of kerchunk reference sets; `None` for the defaults. Giving them for a Zarr source is
    /// refused: they would be ignored, which is rarely what was meant.
    pub references: Option<zshard_kerchunk::Options>,
    /// Which arrays are read (`--include` / `--exclude`); the groups above them come along.
    pub selection: Selection,
    /// The branch, tag or snapshot id of an Icechunk repository to read (default: the branch
    /// `main`); refused for other inputs.
    pub reference: Option<String>,
    /// Whether an array of a Zarr hierarchy or kerchunk reference set that zshard does not read stops
    /// the conversion.
    pub on_unsupported: OnUnsupported,
    /// The memory limit the input's own structures must fit while it is opened: a reference set's
    /// generated references are counted against it before they are made. A conversion sets its
    /// own limit here; `None` leaves only the inputs' fixed caps.
    pub memory_limit: Option<u64>,
}

/// The branch an Icechunk repository is read at when no reference is given.
pub const DEFAULT_SOURCE_REF: &str = "main";

/// An opened input.
#[derive(Debug)]
pub(crate) enum Input {
    /// A Zarr v2 or v3 array or group (also the pre-final v3 layout, see `zshard_zarr::draft`).
    Zarr(Store),
    /// A kerchunk reference set (JSON or Parquet).
    Kerchunk(ReferenceSet),
    /// An Icechunk repository at one version.
    Icechunk(zshard_icechunk::Source),
    /// An N5 container.
    N5(zshard_n5::Container),
}

impl Input {
    /// Opens `location` as the kind `options` names, or the kind detected there: a `.zip` or `.ozx`
    /// file is Zarr (its members read by range, see [`Store::open_location`]), a `.json`,
    /// `.json.zst` or `.json.gz` file (or any other local file) is a JSON reference set, a folder whose
    /// `.zmetadata` has a `record_size` a Parquet reference set, a folder whose `attributes.json`
    /// names an N5 version or dataset an N5 container, anything else Zarr.
    pub(crate) fn open(
        location: &Location,
        options: &ReadOptions,
        runtime: Arc<IoRuntime>,
    ) -> Result<Input> {
        let icechunk = match options.format {
            Some(format) => format == SourceFormat::Icechunk,
            None => zshard_icechunk::is_repository(location.as_str()),
        };
        if icechunk {
            // No manifest is read yet: a rerun whose source is at the snapshot it was converted
            // from reads none (see `ChunkReader::chunk_versions_since`).
            let source = zshard_icechunk::Source::open_unscanned(
                location.as_str(),
                options.reference.as_deref().unwrap_or(DEFAULT_SOURCE_REF),
                &options.references.clone().unwrap_or_default(),
                runtime,
            )?;
            return Ok(Input::Icechunk(source));
        }
        if options.reference.is_some() {
            return Err(Error::Options {
                reason: format!(
                    "{} applies to Icechunk repositories, but {location} is not one (see {})",
                    Setting::SourceRef,
                    Setting::SourceFormat
                ),
            });
        }
        // A remote folder's root documents, read side by side once for the probe and the reader.
        let mut read_ahead = None;
        let format = match options.format {
            Some(SourceFormat::Icechunk) => None,
            Some(SourceFormat::Zarr | SourceFormat::N5) => None,
            Some(SourceFormat::KerchunkJson) => Some(Format::Json),
            Some(SourceFormat::KerchunkParquet) => Some(Format::Parquet),
            // A zip file holds a Zarr hierarchy (zarr-python's `ZipStore`, an `.ozx`).
            None if location.is_zip() => None,
            None if location.is_remote() && !zshard_kerchunk::is_json_name(location.as_str()) => {
                let store = Self::store_read_ahead(location, runtime.clone())?;
                let zmetadata = store.read_ahead_peek(".zmetadata").flatten();
                read_ahead = Some(store);
                zmetadata
                    .filter(|bytes| zshard_kerchunk::is_parquet_metadata(bytes))
                    .map(|_| Format::Parquet)
            }
            None => zshard_kerchunk::detect(location.as_str(), &runtime)?,
        };
        match format {
            None if options.references.is_some() => Err(Error::Options {
                reason: format!(
                    "{}, {} and {} apply to kerchunk reference sets, but {location} is read as Zarr or N5 (see {})",
                    Setting::RefRoot,
                    Setting::AllowRefPrefix,
                    Setting::RefCoalesceGap,
                    Setting::SourceFormat
                ),
            }),
            None => {
                let store = match read_ahead {
                    Some(store) => store,
                    None => Self::store_read_ahead(location, runtime)?,
                };
                if options.format.is_none() && looks_like_remote_icechunk(&store) {
                    return Err(Error::Options {
                        reason: format!(
                            "{location} holds no Zarr metadata but the folders of an Icechunk repository (refs/, snapshots/); repositories on object stores are read with {}",
                            Setting::SourceFormat.given("icechunk")
                        ),
                    });
                }
                Self::open_store(store, options.format)
            }
            Some(format) => Ok(Input::Kerchunk(ReferenceSet::open(
                location.as_str(),
                format,
                &zshard_kerchunk::Options {
                    skip_unsupported: options.on_unsupported == OnUnsupported::Skip,
                    memory_limit: options.memory_limit,
                    ..options.references.clone().unwrap_or_default()
                },
                runtime,
            )?)),
        }
    }

    /// The store at `location`, its root documents read ahead: the reference-set probe (which looks
    /// at `.zmetadata`), N5 detection and the Zarr root look for them one after another, each
    /// depending on the one before, so they are read side by side first (one round trip on an object
    /// store, not six).
    fn store_read_ahead(location: &Location, runtime: Arc<IoRuntime>) -> Result<Store> {
        let store = Store::open_location(location, runtime, false)?;
        store.read_ahead(&[
            zshard_n5::ATTRIBUTES,
            "zarr.json",
            ".zarray",
            ".zattrs",
            ".zgroup",
            ".zmetadata",
        ]);
        Ok(store)
    }

    /// A store-backed input: N5 when asked for or detected, else Zarr.
    fn open_store(store: Store, format: Option<SourceFormat>) -> Result<Input> {
        let n5 = match format {
            Some(SourceFormat::N5) => true,
            Some(_) => false,
            None => zshard_n5::detect(&store).map_err(|e| source_unreadable(&store, e))?,
        };
        Ok(match n5 {
            true => Input::N5(zshard_n5::Container::open(store)?),
            false => Input::Zarr(store),
        })
    }

    /// The input's location, for messages.
    pub(crate) fn url(&self) -> String {
        match self {
            Input::Zarr(store) => store.url(""),
            Input::Kerchunk(refs) => refs.url(),
            Input::Icechunk(repo) => repo.url(),
            Input::N5(container) => container.url(),
        }
    }

    /// Whether source chunks are read over the network (a remote Zarr store, or a reference set
    /// with remote targets, wherever the reference file itself is).
    pub(crate) fn reads_remote(&self) -> bool {
        match self {
            Input::Zarr(store) => store.location().is_remote(),
            Input::Kerchunk(refs) => refs.reads_remote_targets(),
            Input::N5(container) => container.is_remote(),
            // Virtual chunks may point anywhere: read with the remote I/O threads.
            Input::Icechunk(_) => true,
        }
    }

    /// Read requests made for a kerchunk reference set so far.
    pub(crate) fn reference_reads(&self) -> Option<ReadStats> {
        match self {
            Input::Zarr(_) | Input::N5(_) => None,
            Input::Kerchunk(refs) => Some(refs.stats()),
            Input::Icechunk(repo) => Some(repo.virtual_reads()),
        }
    }

    /// Bytes the input holds in memory for the whole conversion (a kerchunk set's references).
    pub(crate) fn memory_bytes(&self) -> u64 {
        match self {
            Input::Zarr(_) | Input::N5(_) => 0,
            Input::Kerchunk(refs) => refs.memory_bytes(),
            Input::Icechunk(_) => 0,
        }
    }

    /// The arrays of the input that the options' selection takes, the groups above them, and
    /// (with [`OnUnsupported::Skip`]) the selected arrays left out because zshard does not read them.
    pub(crate) fn nodes_skipping(
        &self,
        options: &ReadOptions,
    ) -> Result<(Vec<Node>, Vec<SkippedArray>)> {
        let (nodes, skipped) = self.all_nodes(options.on_unsupported, options.memory_limit)?;
        let skipped = options.selection.retain_selected(skipped, |s| &s.path)?;
        Ok((options.selection.apply(nodes, &self.url())?, skipped))
    }

    /// Every group and array of the input, and the arrays skipped as unsupported.
    fn all_nodes(
        &self,
        on_unsupported: OnUnsupported,
        memory_limit: Option<u64>,
    ) -> Result<(Vec<Node>, Vec<SkippedArray>)> {
        match self {
            Input::Zarr(store) => {
                let (nodes, skipped) = match on_unsupported {
                    OnUnsupported::Refuse => {
                        (open_hierarchy_within(store, memory_limit)?, Vec::new())
                    }
                    OnUnsupported::Skip => open_hierarchy_skipping_within(store, memory_limit)?,
                };
                let skipped = skipped.into_iter().map(SkippedArray::from).collect();
                // Already sharded arrays are read by inner chunk (`ArrayMeta::read_by_inner_chunk`).
                let nodes = nodes
                    .into_iter()
                    .map(|mut node| {
                        if let NodeKind::Array(meta) = node.kind {
                            node.kind = NodeKind::Array(Box::new(meta.read_by_inner_chunk()));
                        }
                        node
                    })
                    .collect();
                Ok((nodes, skipped))
            }
            Input::Kerchunk(refs) => Ok((
                refs.nodes(),
                refs.skipped()
                    .iter()
                    .cloned()
                    .map(SkippedArray::from)
                    .collect(),
            )),
            Input::N5(container) => Ok((container.nodes()?, Vec::new())),
            Input::Icechunk(repo) => Ok((repo.nodes(), Vec::new())),
        }
    }

    /// Files beside the Zarr nodes that belong to the hierarchy and are copied as they are: the
    /// OME-XML of a bioformats2raw layout (`OME/METADATA.ome.xml`, when `nodes` has an `OME` group).
    pub(crate) fn ome_files(&self, nodes: &[Node]) -> Result<Vec<(String, bytes::Bytes)>> {
        use zshard_zarr::ome::{OME_GROUP, OME_XML_KEY};
        let Input::Zarr(store) = self else {
            return Ok(Vec::new());
        };
        let ome_group = nodes
            .iter()
            .any(|n| n.path == OME_GROUP && matches!(n.kind, NodeKind::Group { .. }));
        if !ome_group {
            return Ok(Vec::new());
        }
        Ok(store
            .get(OME_XML_KEY)?
            .map(|xml| vec![(OME_XML_KEY.to_string(), xml)])
            .unwrap_or_default())
    }

    /// The reader of the encoded chunks of the array at `path`.
    pub(crate) fn reader(&self, path: &str, meta: &ArrayMeta) -> Arc<dyn ChunkReader> {
        match self {
            Input::Zarr(store) => array_chunk_reader(store, path, meta),
            Input::Kerchunk(refs) => refs.reader(path, meta),
            Input::N5(container) => container.reader(path, meta),
            Input::Icechunk(repo) => repo.reader(path, meta),
        }
    }

    /// The chunk counts by kind of an Icechunk repository (none for other inputs).
    /// Reads every manifest of the repository the first time (and checks every virtual chunk's
    /// target).
    pub(crate) fn icechunk_chunks(&self) -> Result<Option<zshard_icechunk::ChunkCounts>> {
        match self {
            Input::Icechunk(repo) => Ok(Some(repo.chunk_counts()?)),
            _ => Ok(None),
        }
    }
}

/// Whether a remote folder that has none of the root documents of Zarr or N5 (as read ahead) holds
/// an Icechunk repository's folders: Icechunk is detected only in local folders (one listing more
/// for every remote source otherwise), so a repository on an object store given without
/// `--source-format icechunk` would fail as "not a Zarr array or group". Only that path lists.
fn looks_like_remote_icechunk(store: &Store) -> bool {
    let absent = |key: &str| matches!(store.read_ahead_peek(key), Some(None));
    let no_documents = ["zarr.json", ".zarray", ".zgroup", zshard_n5::ATTRIBUTES]
        .iter()
        .all(|key| absent(key));
    if !store.location().is_remote() || !no_documents {
        return false;
    }
    store.list_children("").is_ok_and(|children| {
        zshard_icechunk::has_repository_folders(|name| children.iter().any(|c| c == name))
    })
}

/// The error of reading a source's root documents while finding out what it is: a request that
/// failed (no access, no credentials, no such bucket, an endpoint that does not answer) names the
/// source itself, not the first document probed for (N5's `attributes.json`).
fn source_unreadable(store: &Store, error: zshard_n5::Error) -> Error {
    match error {
        zshard_n5::Error::Store(boxed) => match *boxed {
            zshard_store::Error::Request { source, .. } => {
                Error::Store(zshard_store::Error::Request {
                    operation: "cannot read the source",
                    location: store.url(""),
                    source,
                })
            }
            other => Error::N5(zshard_n5::Error::Store(Box::new(other))),
        },
        other => Error::N5(other),
    }
}

#[cfg(test)]
mod tests {
    use super::{OnUnsupported, SourceFormat};
    use zshard_core::setting::{spelled, Spelling};

    #[test]
    fn on_unsupported_values() {
        let of = |v| {
            spelled(Spelling::Flag, || {
                OnUnsupported::from_option(v).map_err(|e| e.to_string())
            })
        };
        assert_eq!(of(None), Ok(OnUnsupported::Refuse));
        assert_eq!(of(Some("refuse")), Ok(OnUnsupported::Refuse));
        assert_eq!(of(Some("skip")), Ok(OnUnsupported::Skip));
        let err = of(Some("maybe")).expect_err("refused");
        assert!(
            err.contains(r#"--on-unsupported "maybe" is not supported (refuse, skip)"#),
            "{err}"
        );
    }

    #[test]
    fn source_formats() {
        assert_eq!(
            "zarr".parse::<SourceFormat>().ok(),
            Some(SourceFormat::Zarr)
        );
        assert_eq!(
            "kerchunk-parquet".parse::<SourceFormat>().ok(),
            Some(SourceFormat::KerchunkParquet)
        );
        assert_eq!("n5".parse::<SourceFormat>().ok(), Some(SourceFormat::N5));
        assert!("hdf5".parse::<SourceFormat>().is_err());
    }
}
