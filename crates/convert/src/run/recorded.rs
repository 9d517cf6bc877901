//! Options completed from what a destination records (issue 44): `finalize DST` needs nothing but
//! DST, and `finalize SRC DST` without shape options reuses the workers' shapes, because the claim
//! records the source and every array's output `zarr.json` (its shard shape, inner chunk shape,
//! inner codecs and index location). Options that are given win, and still have to match the
//! claim: the conversion's own check refuses them otherwise.

use serde_json::Value;
use zshard_core::IndexLocation;
use zshard_store::{IoRuntime, Location, Store};

use crate::error::{Error, Result};
use crate::options::{LayoutOptions, Options, OutputFormat};
use crate::Compressor;

impl Options {
    /// These options with what is not given taken from the conversion the destination records: the
    /// source when none is given, and each recorded array's layout under the layout given (so given
    /// options win). Level shapes, when given, decide the shapes themselves; source options
    /// (`include`, `exclude`, reference and format options, `ome`) are not recorded and must be
    /// given again. For a pyramid made while converting, shapes given are level 0's, as `convert`
    /// takes them. A destination that records no conversion leaves the options as they are, but
    /// without a source there is nothing to finalize: that is an error saying what to give.
    pub fn with_recorded(&self) -> Result<Options> {
        let recorded = self.recorded_conversion()?;
        let Some(recorded) = recorded else {
            if self.source.is_empty() {
                return Err(Error::Options {
                    reason: format!(
                        "{} records no conversion in progress (no .zshard/claim.json): give SRC DST and the conversion's options, or, when it finished already, there is nothing to finalize",
                        self.destination
                    ),
                });
            }
            return Ok(self.clone());
        };
        let mut options = self.clone();
        // A pyramid's source is recorded as `SRC (pyramid, REDUCTION)` (another reduction is
        // another conversion); its levels are the arrays recorded.
        let pyramid = recorded
            .source
            .strip_suffix(')')
            .and_then(|s| s.rsplit_once(" (pyramid, "))
            .and_then(|(source, reduction)| Some((source, reduction.parse().ok()?)));
        let source = pyramid.map_or(recorded.source.as_str(), |(source, _)| source);
        if options.source.is_empty() {
            options.source = source.to_string();
        }
        if let (Some((_, reduction)), None) = (pyramid, options.pyramid) {
            let levels = u32::try_from(recorded.arrays.len()).unwrap_or(u32::MAX);
            options.pyramid = Some(crate::PyramidLevels::Count(levels));
            options.downsample = options.downsample.or(Some(reduction));
        }
        let shapes_given = options.layout.shard_shape.is_some()
            || options.layout.chunk_shape.is_some()
            || !options.level_shapes.is_empty();
        if pyramid.is_some() && shapes_given {
            // As `convert` applies them: given shapes are level 0's, and the levels below follow
            // `--level-shapes` or level 0's (`zshard_core::level_shapes`). So level 0's recorded
            // layout fills in what is not given, and no level gets recorded shapes that the given
            // ones would override: shapes given otherwise than the workers' then make level 0
            // differ from the claim, which names the option.
            let level0 = recorded
                .arrays
                .iter()
                .filter_map(|a| Some((elements(&a.metadata)?, recorded_layout(&a.metadata)?)))
                .max_by_key(|(elements, _)| *elements);
            if let Some((_, layout)) = level0 {
                options.layout = options.layout.over(&layout);
            }
            return Ok(options);
        }
        for array in &recorded.arrays {
            let Some(mut layout) = recorded_layout(&array.metadata) else {
                continue;
            };
            if !options.level_shapes.is_empty() {
                layout.shard_shape = None;
                layout.chunk_shape = None;
            }
            let own = options.arrays.get(&array.path).cloned().unwrap_or_default();
            // Shapes given for the whole conversion are a pyramid's first level's, as `convert`
            // applies them: a lower level of an OME-Zarr pyramid in the source (which only the plan
            // tells) derives its own from them, and keeps only the rest of its recorded layout.
            if shapes_given && own.shard_shape.is_none() && own.chunk_shape.is_none() {
                options.shapes_given_to_all.insert(array.path.clone());
            }
            let given = own.over(&options.layout);
            options
                .arrays
                .insert(array.path.clone(), given.over(&layout));
        }
        Ok(options)
    }

    /// The conversion recorded in the destination's state (for an Icechunk output, in its staging
    /// folder); `None` when there is none, or the destination does not exist.
    fn recorded_conversion(&self) -> Result<Option<zshard_state::RecordedConversion>> {
        let icechunk = self.output.output_format == Some(OutputFormat::Icechunk)
            || zshard_icechunk::is_repository(&self.destination);
        let state = match icechunk {
            true => zshard_icechunk::staging_location(&self.destination)?,
            false => self.destination.clone(),
        };
        let location = Location::parse(&state)?;
        if location.local_path().is_some_and(|folder| !folder.is_dir()) {
            return Ok(None);
        }
        let runtime = IoRuntime::with_options(2, self.storage.store_options())?;
        let store = Store::open_location(&location, runtime, false)?;
        Ok(zshard_state::recorded_conversion(&store)?)
    }
}

/// The number of elements of the array an output `zarr.json` describes.
fn elements(metadata: &Value) -> Option<u64> {
    metadata["shape"]
        .as_array()?
        .iter()
        .try_fold(1u64, |n, e| n.checked_mul(e.as_u64()?))
}

/// The layout an output `zarr.json` of zshard's records: its shard shape, and from its
/// `sharding_indexed` codec the inner chunk shape, inner codecs and index location. `None` for
/// metadata that is not such an output.
fn recorded_layout(metadata: &Value) -> Option<LayoutOptions> {
    let numbers = |value: &Value| -> Option<Vec<u64>> {
        value.as_array()?.iter().map(Value::as_u64).collect()
    };
    let shard_shape = numbers(&metadata["chunk_grid"]["configuration"]["chunk_shape"])?;
    let sharding = metadata["codecs"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "sharding_indexed")?;
    let config = &sharding["configuration"];
    let chunk_shape = numbers(&config["chunk_shape"])?;
    let compressor: Compressor = config["codecs"].to_string().parse().ok()?;
    let index_location = config["index_location"]
        .as_str()
        .map_or(Some(IndexLocation::End), IndexLocation::parse)?;
    Some(LayoutOptions {
        shard_shape: Some(shard_shape.into()),
        chunk_shape: Some(chunk_shape.into()),
        compressor: Some(compressor),
        index_location: Some(index_location),
        passthrough: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_output_zarr_json_gives_its_layout() {
        let metadata = json!({
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [512, 256]}},
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [64, 32],
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                           {"name": "zstd", "configuration": {"level": 5, "checksum": false}}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": "start"}}]
        });
        let layout = recorded_layout(&metadata).expect("a layout");
        assert_eq!(layout.shard_shape, Some(vec![512, 256].into()));
        assert_eq!(layout.chunk_shape, Some(vec![64, 32].into()));
        assert_eq!(layout.index_location, Some(IndexLocation::Start));
        assert!(layout.compressor.is_some());
        assert_eq!(recorded_layout(&json!({"codecs": []})), None);
    }
}
