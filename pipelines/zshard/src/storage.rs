//! Command-line options about reaching storage (both the source and the destination).

use std::time::Duration;

use zshard_store::StoreOptions;

use crate::job::{parse_size, Size};

#[derive(clap::Args, Debug, Clone)]
pub struct StorageArgs {
    /// Endpoint of an S3-compatible store (MinIO, Ceph, ...), e.g. http://127.0.0.1:9000.
    /// Credentials and region otherwise come from AWS_* variables.
    #[arg(long, value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// S3 region (default: AWS_REGION / AWS_DEFAULT_REGION).
    #[arg(long, value_name = "REGION")]
    pub s3_region: Option<String>,
    /// Path-style S3 requests (endpoint/bucket/key), as most S3-compatible servers want.
    #[arg(long)]
    pub s3_path_style: bool,
    /// Unsigned requests, for public buckets and containers.
    #[arg(long)]
    pub anonymous: bool,
    /// Retries of transient storage failures (5xx, 429, timeouts, reset connections), with backoff
    /// and jitter; permanent ones (403, 404, missing bucket) fail at once.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub retries: usize,
    /// No retry starts later than this after a request's first attempt.
    #[arg(long, default_value_t = 120, value_name = "SECONDS")]
    pub retry_timeout: u64,
    /// Storage requests in flight per batch (the chunks of one shard, the parts of one upload).
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub max_requests: usize,
    /// Shards larger than this are uploaded to object stores in parts of this size (min 5MiB).
    #[arg(long, default_value = "32MiB", value_parser = parse_size, value_name = "SIZE")]
    pub part_size: Size,
    /// Threads fetching chunks and threads writing shards, each (default: 2 for local paths, 8
    /// when the source or destination is a remote store).
    #[arg(long, value_name = "N")]
    pub io_threads: Option<usize>,
}

impl Default for StorageArgs {
    fn default() -> Self {
        let o = StoreOptions::default();
        StorageArgs {
            s3_endpoint: None,
            s3_region: None,
            s3_path_style: false,
            anonymous: false,
            retries: o.retries,
            retry_timeout: o.retry_timeout.as_secs(),
            max_requests: o.max_requests,
            part_size: Size(o.part_size as u64),
            io_threads: None,
        }
    }
}

impl StorageArgs {
    pub fn options(&self) -> StoreOptions {
        StoreOptions {
            s3_endpoint: self.s3_endpoint.clone(),
            s3_region: self.s3_region.clone(),
            s3_path_style: self.s3_path_style,
            anonymous: self.anonymous,
            retries: self.retries,
            retry_timeout: Duration::from_secs(self.retry_timeout),
            max_requests: self.max_requests.max(1),
            part_size: usize::try_from(self.part_size.0).unwrap_or(usize::MAX),
            ..StoreOptions::default()
        }
    }

    /// I/O threads for a conversion between these locations.
    pub fn io_threads(&self, locations: &[&str]) -> usize {
        let remote = locations
            .iter()
            .any(|l| l.contains("://") && !l.starts_with("file://"));
        self.io_threads
            .unwrap_or(if remote {
                8
            } else {
                zshard_pipeline::DEFAULT_IO_THREADS
            })
            .max(1)
    }
}
