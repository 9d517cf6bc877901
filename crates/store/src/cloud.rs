//! Building object_store clients for URLs, from the environment plus [`StoreOptions`].

use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::http::HttpBuilder;
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use url::Url;

use crate::error::{Error, Result};
use crate::guard::{GuardedConnector, HttpGuard};
use crate::options::StoreOptions;

fn retry(o: &StoreOptions) -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: o.retries,
        retry_timeout: o.retry_timeout,
    }
}

fn client(o: &StoreOptions, allow_http: bool) -> ClientOptions {
    ClientOptions::new()
        .with_allow_http(allow_http)
        .with_connect_timeout(o.connect_timeout)
        .with_timeout(o.request_timeout)
}

/// The store for `url` and the path of its location inside it.
pub(crate) fn open(url: &Url, o: &StoreOptions) -> Result<(Arc<dyn ObjectStore>, Path)> {
    let invalid = |reason: String| Error::InvalidLocation {
        location: url.to_string(),
        reason,
    };
    let build =
        |r: object_store::Result<Arc<dyn ObjectStore>>| r.map_err(|e| invalid(e.to_string()));
    let path = |p: &str| Path::from_url_path(p).map_err(|e| invalid(e.to_string()));
    match url.scheme() {
        "s3" | "s3a" => {
            let mut b = AmazonS3Builder::from_env()
                .with_url(url.as_str())
                .with_retry(retry(o))
                .with_skip_signature(o.anonymous);
            let endpoint_is_http = o.s3_endpoint.as_deref().is_some_and(|e| e.starts_with("http://"));
            if let Some(endpoint) = &o.s3_endpoint {
                b = b.with_endpoint(endpoint);
            }
            if let Some(region) = &o.s3_region {
                b = b.with_region(region);
            }
            if o.s3_path_style {
                b = b.with_virtual_hosted_style_request(false);
            }
            let store = build(b.with_client_options(client(o, endpoint_is_http)).build().map(|s| Arc::new(s) as _))?;
            Ok((store, path(url.path())?))
        }
        "gs" => {
            let b = GoogleCloudStorageBuilder::from_env()
                .with_url(url.as_str())
                .with_retry(retry(o))
                .with_skip_signature(o.anonymous)
                .with_client_options(client(o, false));
            Ok((build(b.build().map(|s| Arc::new(s) as _))?, path(url.path())?))
        }
        "az" | "azure" | "abfs" | "abfss" | "adl" => {
            // AZURE_STORAGE_USE_EMULATOR=true (with AZURITE_BLOB_STORAGE_URL) targets Azurite.
            let emulator = std::env::var("AZURE_STORAGE_USE_EMULATOR").is_ok_and(|v| v == "true" || v == "1");
            let b = MicrosoftAzureBuilder::from_env()
                .with_url(url.as_str())
                .with_retry(retry(o))
                .with_skip_signature(o.anonymous)
                .with_client_options(client(o, emulator));
            Ok((build(b.build().map(|s| Arc::new(s) as _))?, path(url.path())?))
        }
        "http" | "https" => http(url, o, None),
        other => Err(invalid(format!(
            "unsupported scheme {other}:// (use a local path, file://, s3://, gs://, az://, abfs:// or http(s)://)"
        ))),
    }
}

/// The store of an `http(s)://` URL; with a guard, every connection and redirect is checked by it.
pub(crate) fn http(
    url: &Url,
    o: &StoreOptions,
    guard: Option<Arc<dyn HttpGuard>>,
) -> Result<(Arc<dyn ObjectStore>, Path)> {
    let allow_http = url.scheme() == "http";
    let mut b = HttpBuilder::new()
        .with_url(url.as_str())
        .with_retry(retry(o))
        .with_client_options(client(o, allow_http));
    if let Some(guard) = guard {
        b = b.with_http_connector(GuardedConnector {
            guard,
            options: o.clone(),
            allow_http,
        });
    }
    let store = b.build().map_err(|e| Error::InvalidLocation {
        location: url.to_string(),
        reason: e.to_string(),
    })?;
    Ok((Arc::new(store), Path::default()))
}
