//! `zshard convert`: plan, run the pipeline, then write the metadata documents.

use anyhow::{bail, Context};
use zshard_core::IndexLocation;
use zshard_pipeline::{Options, ShardTask, Stats};
use zshard_store::{IoRuntime, Store};
use zshard_writer::{write_array_metadata, write_group_metadata};
use zshard_zarr::open_hierarchy;

use crate::plan::{Layout, Plan};
use crate::progress::Progress;

/// Parameters of one conversion.
#[derive(Debug, Clone)]
pub struct Conversion {
    pub source: String,
    pub destination: String,
    pub layout: Layout,
    pub threads: usize,
    pub quiet: bool,
}

/// Threads for storage requests; they mostly wait, so a few serve many CPU workers.
const IO_THREADS: usize = 2;

pub fn convert(c: &Conversion) -> anyhow::Result<Stats> {
    refuse_overlap(&c.source, &c.destination)?;
    let runtime = IoRuntime::new(IO_THREADS)?;
    let source = Store::open(&c.source, runtime.clone(), false)?;
    let nodes = open_hierarchy(&source)?;
    let plan = Plan::new(&nodes, &c.layout, &source.url(""))?;

    let destination = Store::open(&c.destination, runtime, true)?;
    let jobs = plan.jobs(&source, &destination);
    let progress = Progress::new(plan.shard_count(), c.quiet);
    let stats = zshard_pipeline::run(
        &jobs,
        ShardTask::all(&jobs),
        &Options::for_shard_size(c.threads, plan.max_shard_bytes()),
        &|outcome| progress.shard_done(outcome),
    );
    let stats = match stats {
        Ok(stats) => stats,
        Err(e) => {
            progress.abandon();
            return Err(e.into());
        }
    };
    // Metadata goes last: an output with zarr.json documents is an output whose data is complete.
    for array in &plan.arrays {
        write_array_metadata(&destination, &array.path, &array.output)?;
    }
    let mut groups: Vec<_> = plan.groups.iter().collect();
    groups.sort_by_key(|(path, _)| {
        std::cmp::Reverse(path.matches('/').count() + usize::from(!path.is_empty()))
    });
    for (path, attributes) in groups {
        write_group_metadata(&destination, path, attributes)?;
    }
    progress.finish(plan.arrays.len(), &stats, &destination.url(""));
    Ok(stats)
}

/// Converting into the source (or a folder inside it) would read our own output.
fn refuse_overlap(source: &str, destination: &str) -> anyhow::Result<()> {
    let local = |s: &str| (!s.contains("://")).then(|| std::path::PathBuf::from(s));
    if let (Some(src), Some(dst)) = (local(source), local(destination)) {
        let src = src
            .canonicalize()
            .with_context(|| format!("source {source} does not exist"))?;
        let dst_abs = std::path::absolute(&dst).unwrap_or(dst);
        if dst_abs.starts_with(&src) {
            bail!("destination {destination} is inside the source {source}");
        }
    }
    Ok(())
}

/// `--index-location` values.
pub fn parse_index_location(s: &str) -> Result<IndexLocation, String> {
    IndexLocation::parse(s).ok_or_else(|| format!("{s:?} is not start or end"))
}

/// A shape given on the command line as `a,b,c`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape(pub Vec<u64>);

/// Parses `a,b,c` into a shape.
pub fn parse_shape(s: &str) -> Result<Shape, String> {
    s.split(',')
        .map(|part| {
            part.trim()
                .parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    format!("{part:?} is not a positive integer (expected a,b,... e.g. 4096,4096)")
                })
        })
        .collect::<Result<Vec<u64>, String>>()
        .map(Shape)
}
