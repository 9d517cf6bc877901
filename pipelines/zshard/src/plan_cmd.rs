//! `zshard plan`: what a conversion would do, from metadata alone (no chunk is listed or read), so it
//! answers in milliseconds for arrays of millions of chunks.

use indicatif::HumanBytes;
use serde_json::{json, Value};
use zshard_core::{grid_shape, product, CodecSpec};

use crate::convert::open;
use crate::memory::Budget;
use crate::plan::{array_name, Layouts, PlannedArray};

fn codecs_text(codecs: &[CodecSpec]) -> String {
    codecs
        .iter()
        .map(|c| {
            let config: Vec<String> = c
                .configuration
                .iter()
                .flatten()
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        v.as_str().map_or_else(|| v.to_string(), str::to_string)
                    )
                })
                .collect();
            format!("{}({})", c.name, config.join(", "))
        })
        .collect::<Vec<_>>()
        .join(" -> ")
}

fn shape_text(shape: &[u64]) -> String {
    if shape.is_empty() {
        return "scalar".into();
    }
    shape
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(" x ")
}

fn describe(a: &PlannedArray, name: &str, budget: &Budget) -> Value {
    let size = a.output.data_type.size() as u64;
    let raw = product(&a.source.shape) * size;
    let layout = a.layout();
    json!({
        "path": a.path,
        "name": name,
        "shape": a.source.shape,
        "data_type": a.output.data_type.to_v3_json(),
        "fill_value": a.output.fill_value.to_v3_json(a.output.data_type),
        "source_chunk_shape": a.source.chunk_shape,
        // An already sharded source is read by inner chunk: these are its inner chunks.
        "source_shard_shape": a.source.sharded.as_ref().map(|s| s.shard_shape.clone()),
        "source_chunks": product(&grid_shape(&a.source.shape, &a.source.chunk_shape)),
        "source_codecs": a.source.codecs,
        "inner_chunk_shape": a.output.inner_shape,
        "shard_shape": a.output.shard_shape,
        "shards": a.geometry.shard_count(),
        "inner_chunks_per_shard": product(&a.geometry.chunks_per_shard()),
        "index_location": a.output.index_location.as_str(),
        "output_codecs": a.output.inner_codecs,
        "passthrough": a.passthrough,
        // Compressed sizes depend on the data, which plan never reads: these are raw sizes, an upper
        // bound on the data read and, for compressing codecs, on the data written.
        "estimated_bytes_in": raw,
        "estimated_bytes_out": raw,
        "parts_per_shard": budget.parts_per_shard(&layout),
        // Whether a source chunk under several parts of a shard is read once (kept between them).
        "source_chunks_kept_between_parts": budget.keeps_source_chunks(&layout),
        "estimated_peak_memory_per_worker": budget.array_peak(&layout),
    })
}

fn print_human(arrays: &[Value], budget: &Budget) {
    let threads = budget.threads;
    for a in arrays {
        let u = |k: &str| a[k].as_u64().unwrap_or(0);
        let shape = |k: &str| {
            shape_text(&serde_json::from_value::<Vec<u64>>(a[k].clone()).unwrap_or_default())
        };
        let codecs = |k: &str| {
            codecs_text(&serde_json::from_value::<Vec<CodecSpec>>(a[k].clone()).unwrap_or_default())
        };
        println!("array {}", a["name"].as_str().unwrap_or_default());
        println!(
            "  shape          {} {} (fill value {})",
            shape("shape"),
            a["data_type"]
                .as_str()
                .map_or_else(|| a["data_type"].to_string(), str::to_string),
            a["fill_value"]
        );
        println!(
            "  source chunks  {}, {} chunk(s){}: {}",
            shape("source_chunk_shape"),
            u("source_chunks"),
            if a["source_shard_shape"].is_array() {
                format!(
                    " (inner chunks of shards of {}, read one by one)",
                    shape("source_shard_shape")
                )
            } else {
                String::new()
            },
            codecs("source_codecs")
        );
        println!(
            "  output         {} shard(s) of {}, {} inner chunk(s) of {} per shard, index at the {}",
            u("shards"), shape("shard_shape"), u("inner_chunks_per_shard"), shape("inner_chunk_shape"),
            a["index_location"].as_str().unwrap_or_default()
        );
        println!("  output codecs  {}", codecs("output_codecs"));
        if a["passthrough"] == true {
            println!("  passthrough    source chunks are copied into the shards without decoding");
        }
        if a["data_type"] == "string" {
            // Only the 8-byte handles are known: string lengths are not in the metadata.
            println!("  bytes          unknown (variable-length strings)");
        } else {
            println!(
                "  bytes          {} raw in, at most {} raw out (compressed sizes depend on the data)",
                HumanBytes(u("estimated_bytes_in")),
                HumanBytes(u("estimated_bytes_out"))
            );
        }
        if u("parts_per_shard") > 1 {
            println!(
                "  parts          each shard is converted and written in {} parts (memory limit {}); a source chunk under several parts is read {}",
                u("parts_per_shard"),
                budget
                    .limit
                    .map_or_else(|| "none".to_string(), |l| HumanBytes(l).to_string()),
                if a["source_chunks_kept_between_parts"].as_bool() == Some(true) {
                    "once"
                } else {
                    "for each"
                }
            );
        }
        println!(
            "  peak memory    about {} per worker with {threads} thread(s)",
            HumanBytes(u("estimated_peak_memory_per_worker"))
        );
    }
}

pub fn plan(
    source: &str,
    destination: &str,
    layouts: &Layouts,
    args: &crate::source::SourceArgs,
    storage: &crate::storage::StorageArgs,
    (threads, memory_limit): (usize, Option<u64>),
    as_json: bool,
) -> anyhow::Result<()> {
    let opened = open(source, destination, layouts, args, storage)?;
    let uploads = crate::memory::upload_buffers(destination, storage.options().part_size);
    let io_threads = storage.io_threads(&[source, destination]);
    let budget = crate::memory::budget(&opened.plan, threads, memory_limit, uploads, io_threads)?;
    let threads = budget.threads;
    let source_name = opened.source.url();
    let arrays: Vec<Value> = opened
        .plan
        .arrays
        .iter()
        .map(|a| describe(a, &array_name(&source_name, &a.path), &budget))
        .collect();
    let total = |k: &str| {
        arrays
            .iter()
            .map(|a| a[k].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    let peak = arrays
        .iter()
        .map(|a| a["estimated_peak_memory_per_worker"].as_u64().unwrap_or(0))
        .max()
        .unwrap_or(0);
    if as_json {
        let doc = json!({
            "source": source_name,
            "destination": destination,
            "threads": threads,
            "memory_limit": budget.limit,
            "part_bytes": budget.part_bytes,
            "arrays": arrays,
            "groups": opened.plan.groups.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            "totals": {"arrays": arrays.len(), "shards": total("shards"), "source_chunks": total("source_chunks"),
                       "estimated_bytes_in": total("estimated_bytes_in"), "estimated_bytes_out": total("estimated_bytes_out"),
                       "estimated_peak_memory_per_worker": peak},
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_human(&arrays, &budget);
        println!(
            "total: {} array(s), {} group(s), {} source chunk(s) -> {} shard(s), {} raw; peak memory about {} per worker",
            arrays.len(), opened.plan.groups.len(), total("source_chunks"), total("shards"),
            HumanBytes(total("estimated_bytes_in")), HumanBytes(peak)
        );
    }
    Ok(())
}
