use std::time::Duration;

/// How stores are reached: endpoints, credentials choices, retries, request concurrency and upload
/// part size. Everything else (credentials, endpoints, `AWS_ALLOW_HTTP`, proxies, CA bundles, ...)
/// comes from each cloud's standard environment variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`,
/// `STORAGE_EMULATOR_HOST`, `HTTPS_PROXY`, `SSL_CERT_FILE`), as object_store and reqwest read them;
/// the options set here override the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreOptions {
    /// An S3-compatible endpoint (MinIO, Ceph, a local server), e.g. `http://127.0.0.1:9000`.
    pub s3_endpoint: Option<String>,
    /// The S3 region; `None` lets object_store take it from the environment (`AWS_REGION`), else
    /// `us-east-1`.
    pub s3_region: Option<String>,
    /// Path-style requests (`endpoint/bucket/key`) instead of virtual-hosted style.
    pub s3_path_style: bool,
    /// Unsigned requests (public buckets and containers).
    pub anonymous: bool,
    /// Retries of one request at most; `None`: as many as [`retry_timeout`](Self::retry_timeout)
    /// allows. Transient failures (5xx, 429 slow-down, timeouts, refused or reset connections) are
    /// retried with exponential backoff and jitter; permanent failures (403, 404 on a required key, a
    /// missing bucket) never are.
    pub retries: Option<usize>,
    /// No retry starts after this long since the first attempt of a request: an outage shorter than
    /// this is ridden out.
    pub retry_timeout: Duration,
    /// How long establishing a connection may take before the attempt fails (and may be retried),
    /// unless the environment says otherwise (`AWS_CONNECT_TIMEOUT`, ...).
    pub connect_timeout: Duration,
    /// How long one request may take in all, body included, before it fails (and may be retried),
    /// unless the environment says otherwise (`AWS_TIMEOUT`, ...).
    pub request_timeout: Duration,
    /// Requests in flight per batch (chunk reads of one shard, parts of one upload).
    pub max_requests: usize,
    /// Objects larger than this are uploaded in parts of this size; smaller ones with one PUT.
    pub part_size: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            s3_endpoint: None,
            s3_region: None,
            s3_path_style: false,
            anonymous: false,
            retries: None,
            retry_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(300),
            max_requests: 32,
            part_size: 32 << 20,
        }
    }
}
