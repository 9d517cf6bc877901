//! Opening a repository: its storage from a zshard location, and a reference (branch, tag or
//! snapshot id) resolved to a version.

use std::collections::HashMap;
use std::sync::Arc;

use icechunk::config::{S3Credentials, S3Options};
use icechunk::repository::VersionInfo;
use icechunk::Repository;
use zshard_store::{IoRuntime, Location};

use crate::error::{boxed, Error, Result};

/// The storage of the repository at `location`: a local folder, or an `s3://bucket/prefix` reached
/// with zshard's S3 options (`--s3-endpoint`, `--s3-region`, `--s3-path-style`, `--anonymous`) over
/// the standard environment (`AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, `AWS_REGION`, credentials).
pub(crate) fn storage(
    location: &str,
    runtime: &IoRuntime,
) -> Result<Arc<dyn icechunk::Storage + Send + Sync>> {
    let open_error = |e: Box<dyn std::error::Error + Send + Sync>| Error::Open {
        repo: location.to_string(),
        source: e,
    };
    let parsed = Location::parse(location).map_err(|e| open_error(boxed(e)))?;
    if let Some(path) = parsed.local_path() {
        let path = path.to_path_buf();
        let storage = runtime
            .block_on(icechunk::ObjectStorage::new_local_filesystem(&path))
            .map_err(|e| open_error(boxed(e)))?;
        return Ok(Arc::new(storage));
    }
    match parsed.url() {
        Some(url) if matches!(url.scheme(), "s3" | "s3a") => {
            let bucket = url.host_str().unwrap_or_default().to_string();
            let prefix = url.path().trim_matches('/').to_string();
            let options = s3_options(runtime.options());
            let credentials = if runtime.options().anonymous {
                S3Credentials::Anonymous
            } else {
                S3Credentials::FromEnv
            };
            let storage = icechunk::storage::s3::S3Storage::new(
                options,
                bucket,
                (!prefix.is_empty()).then_some(prefix),
                credentials,
                true,
                Vec::new(),
                Vec::new(),
            )
            .map_err(|e| open_error(boxed(e)))?;
            Ok(Arc::new(storage))
        }
        _ => Err(open_error(
            "only local and s3:// repositories are supported (gs:// and az:// are not yet)".into(),
        )),
    }
}

/// Icechunk's S3 settings from zshard's options, falling back to the variables the AWS tools read.
fn s3_options(options: &zshard_store::StoreOptions) -> S3Options {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let endpoint_url = options
        .s3_endpoint
        .clone()
        .or_else(|| env("AWS_ENDPOINT_URL_S3"))
        .or_else(|| env("AWS_ENDPOINT_URL"));
    // An endpoint given as http:// is meant to be reached over http, as for zshard's own S3 client.
    let allow_http = endpoint_url
        .as_deref()
        .is_some_and(|e| e.starts_with("http://"))
        || env("AWS_ALLOW_HTTP").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    S3Options {
        region: options
            .s3_region
            .clone()
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION")),
        endpoint_url,
        anonymous: options.anonymous,
        allow_http,
        force_path_style: options.s3_path_style,
        network_stream_timeout_seconds: None,
        requester_pays: false,
    }
}

/// Opens the existing repository at `location`.
pub(crate) fn open(location: &str, runtime: &IoRuntime) -> Result<Repository> {
    let storage = storage(location, runtime)?;
    runtime
        .block_on(Repository::open(None, storage, HashMap::new()))
        .map_err(|e| Error::Open {
            repo: location.to_string(),
            source: boxed(e),
        })
}

/// The version `reference` names: a branch, else a tag, else a snapshot id.
pub(crate) fn version(
    repo: &Repository,
    location: &str,
    reference: &str,
    runtime: &IoRuntime,
) -> Result<VersionInfo> {
    let error = |reason: String| Error::Reference {
        repo: location.to_string(),
        reference: reference.to_string(),
        reason,
    };
    let branches = runtime
        .block_on(repo.list_branches())
        .map_err(|e| error(e.to_string()))?;
    if branches.contains(reference) {
        return Ok(VersionInfo::BranchTipRef(reference.to_string()));
    }
    let tags = runtime
        .block_on(repo.list_tags())
        .map_err(|e| error(e.to_string()))?;
    if tags.contains(reference) {
        return Ok(VersionInfo::TagRef(reference.to_string()));
    }
    let id = icechunk::format::SnapshotId::try_from(reference).map_err(|_| {
        let names = |set: &std::collections::BTreeSet<String>| {
            set.iter().cloned().collect::<Vec<_>>().join(", ")
        };
        error(format!(
            "branches: {}; tags: {}",
            names(&branches),
            names(&tags)
        ))
    })?;
    Ok(VersionInfo::SnapshotId(id))
}
