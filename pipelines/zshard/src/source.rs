//! Where a conversion reads from. Every input kind yields the same two things: the hierarchy of groups
//! and arrays (as the source-independent model) and, per array, a reader of its encoded chunks by grid
//! position. Stages and writers never learn which kind it was.

use std::sync::Arc;

use zshard_core::{ArrayMeta, ChunkReader, Node};
use zshard_store::{IoRuntime, Store};
use zshard_zarr::{open_hierarchy, ZarrChunkReader};

/// Command-line options about the input.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SourceArgs {
    /// Input kind: zarr (a Zarr v2/v3 array or group). Detected when not given.
    #[arg(long, value_name = "KIND")]
    pub source_format: Option<String>,
}

/// An opened input.
#[derive(Debug)]
pub enum Input {
    /// A Zarr v2 or v3 array or group.
    Zarr(Store),
}

impl Input {
    /// Opens `location` as the kind `args` names, or the kind detected there.
    pub fn open(
        location: &str,
        args: &SourceArgs,
        runtime: Arc<IoRuntime>,
    ) -> anyhow::Result<Input> {
        match args.source_format.as_deref() {
            None | Some("zarr") => Ok(Input::Zarr(Store::open(location, runtime, false)?)),
            Some(other) => anyhow::bail!("--source-format {other:?} is not supported (zarr)"),
        }
    }

    /// The input's location, for messages.
    pub fn url(&self) -> String {
        match self {
            Input::Zarr(store) => store.url(""),
        }
    }

    /// Every group and array of the input.
    pub fn nodes(&self) -> anyhow::Result<Vec<Node>> {
        match self {
            Input::Zarr(store) => Ok(open_hierarchy(store)?),
        }
    }

    /// The reader of the encoded chunks of the array at `path`.
    pub fn reader(&self, path: &str, meta: &ArrayMeta) -> Arc<dyn ChunkReader> {
        match self {
            Input::Zarr(store) => Arc::new(ZarrChunkReader::new(
                store.child(path),
                meta.chunk_key_encoding,
            )),
        }
    }
}
