//! Building object_store clients for URLs: each cloud's standard environment first (as its builder's
//! `from_env` reads it: `AWS_*`, `AZURE_*`, `GOOGLE_*`, and, through reqwest, `HTTPS_PROXY`,
//! `HTTP_PROXY`, `NO_PROXY` and `SSL_CERT_FILE`), then zshard's defaults for what the environment
//! leaves unset, then only the options the user gave ([`StoreOptions`]), which override both.

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::Arc;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GcpCredential, GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::multipart::MultipartStore;
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientConfigKey, ClientOptions, ObjectStore, RetryConfig,
    StaticCredentialProvider,
};
use url::Url;

use crate::error::{Error, Result};
use crate::guard::{GuardedConnector, HttpGuard};
use crate::options::StoreOptions;
use crate::s3_list::S3Lister;

/// object_store's retries of failed requests (statuses 5xx and 429, connections refused or reset,
/// timeouts): the same timing as zshard's own retry layer, so both span `--retry-timeout`.
fn retry(o: &StoreOptions) -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: crate::retry::INITIAL_BACKOFF,
            max_backoff: crate::retry::max_backoff(o),
            base: 2.0,
        },
        max_retries: crate::retry::max_retries(o),
        retry_timeout: o.retry_timeout,
    }
}

/// The client settings that variables of the environment whose names start with `prefix` give, as
/// the cloud's builder parses them (`AWS_TIMEOUT`, `AZURE_ALLOW_HTTP`, `GOOGLE_PROXY_URL`, ...).
fn client_keys_in_env<K: FromStr>(
    prefix: &str,
    client_key: impl Fn(K) -> Option<ClientConfigKey>,
) -> HashSet<ClientConfigKey> {
    std::env::vars_os()
        .filter_map(|(key, _)| key.into_string().ok())
        .filter(|key| key.starts_with(prefix))
        .filter_map(|key| key.to_ascii_lowercase().parse::<K>().ok())
        .filter_map(client_key)
        .collect()
}

/// zshard's timeouts, for those the environment does not set (object_store's own defaults, 30 s
/// per request, are too short for a 32 MiB part on a slow link).
fn client_defaults(
    o: &StoreOptions,
    in_env: &HashSet<ClientConfigKey>,
) -> Vec<(ClientConfigKey, String)> {
    [
        (ClientConfigKey::ConnectTimeout, o.connect_timeout),
        (ClientConfigKey::Timeout, o.request_timeout),
    ]
    .into_iter()
    .filter(|(key, _)| !in_env.contains(key))
    .map(|(key, value)| (key, format!("{}ms", value.as_millis())))
    .collect()
}

/// The store for `url` and what goes with it.
pub(crate) struct Opened {
    pub(crate) inner: Arc<dyn ObjectStore>,
    /// The same store as a [`MultipartStore`] where it is one (so that upload ids can be recorded
    /// and aborted later).
    pub(crate) multipart: Option<Arc<dyn MultipartStore>>,
    /// The path of the location inside the store.
    pub(crate) root: Path,
    /// An S3 bucket's faster listing (see `crate::s3_list`).
    pub(crate) s3_lister: Option<Arc<S3Lister>>,
}

fn client(o: &StoreOptions, allow_http: bool) -> ClientOptions {
    ClientOptions::new()
        .with_allow_http(allow_http)
        .with_connect_timeout(o.connect_timeout)
        .with_timeout(o.request_timeout)
}

/// Opens the store of `url` (see the module's documentation for where settings come from).
pub(crate) fn open(url: &Url, o: &StoreOptions) -> Result<Opened> {
    let invalid = |reason: String| Error::InvalidLocation {
        location: url.to_string(),
        reason,
    };
    let build = |e: object_store::Error| invalid(e.to_string());
    let path = |p: &str| Path::from_url_path(p).map_err(|e| invalid(e.to_string()));
    match url.scheme() {
        "s3" | "s3a" => {
            let builder = s3(url, o);
            let store = Arc::new(builder.clone().build().map_err(build)?);
            let s3_lister = S3Lister::new(url, &builder, store.clone()).map_err(build)?;
            Ok(Opened {
                inner: store.clone(),
                multipart: Some(store),
                root: path(url.path())?,
                s3_lister: s3_lister.map(Arc::new),
            })
        }
        "gs" => {
            let store = Arc::new(gcs(url, o, &Environment::process()).build().map_err(build)?);
            Ok(Opened {
                inner: store.clone(),
                multipart: Some(store),
                root: path(url.path())?,
                s3_lister: None,
            })
        }
        "az" | "azure" | "abfs" | "abfss" | "adl" => {
            let store = Arc::new(azure(url, o).build().map_err(build)?);
            Ok(Opened {
                inner: store.clone(),
                multipart: Some(store),
                root: path(url.path())?,
                s3_lister: None,
            })
        }
        "http" | "https" => {
            let (inner, root) = http(url, o, None)?;
            Ok(Opened {
                inner,
                multipart: None,
                root,
                s3_lister: None,
            })
        }
        other => Err(invalid(format!(
            "unsupported scheme {other}:// (use a local path, file://, s3://, gs://, az://, abfs:// or http(s)://)"
        ))),
    }
}

/// S3: `AWS_*` (endpoint `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, credentials, region, session token,
/// `AWS_VIRTUAL_HOSTED_STYLE_REQUEST`, ...), then the `--s3-*` and `--anonymous` flags.
fn s3(url: &Url, o: &StoreOptions) -> AmazonS3Builder {
    let in_env = client_keys_in_env("AWS_", |k| match k {
        AmazonS3ConfigKey::Client(key) => Some(key),
        _ => None,
    });
    let mut b = AmazonS3Builder::from_env()
        .with_url(url.as_str())
        .with_retry(retry(o));
    for (key, value) in client_defaults(o, &in_env) {
        b = b.with_config(AmazonS3ConfigKey::Client(key), value);
    }
    if let Some(endpoint) = &o.s3_endpoint {
        b = b.with_endpoint(endpoint);
        // An endpoint given as http:// is meant to be reached over http.
        if endpoint.starts_with("http://") {
            b = b.with_allow_http(true);
        }
    }
    if let Some(region) = &o.s3_region {
        b = b.with_region(region);
    }
    if o.s3_path_style {
        b = b.with_virtual_hosted_style_request(false);
    }
    if o.anonymous {
        b = b.with_skip_signature(true);
    }
    b
}

/// Azure: `AZURE_*` (account name and key, `AZURE_STORAGE_ENDPOINT`, `AZURE_ALLOW_HTTP`,
/// `AZURE_STORAGE_USE_EMULATOR` with `AZURITE_BLOB_STORAGE_URL`, SAS tokens, ...), then `--anonymous`.
fn azure(url: &Url, o: &StoreOptions) -> MicrosoftAzureBuilder {
    let in_env = client_keys_in_env("AZURE_", |k| match k {
        AzureConfigKey::Client(key) => Some(key),
        _ => None,
    });
    let mut b = MicrosoftAzureBuilder::from_env()
        .with_url(url.as_str())
        .with_retry(retry(o));
    for (key, value) in client_defaults(o, &in_env) {
        b = b.with_config(AzureConfigKey::Client(key), value);
    }
    if o.anonymous {
        b = b.with_skip_signature(true);
    }
    b
}

/// What the GCS builder reads besides `GOOGLE_*` (a seam for tests: the process environment is shared).
struct Environment {
    storage_emulator_host: Option<String>,
    google_base_url: Option<String>,
}

impl Environment {
    fn process() -> Self {
        Environment {
            storage_emulator_host: std::env::var("STORAGE_EMULATOR_HOST").ok(),
            google_base_url: std::env::var("GOOGLE_BASE_URL").ok(),
        }
    }
}

/// GCS: `GOOGLE_*` (`GOOGLE_SERVICE_ACCOUNT`, `GOOGLE_APPLICATION_CREDENTIALS`, `GOOGLE_BASE_URL`, ...),
/// `STORAGE_EMULATOR_HOST` as Google's own libraries read it (an emulator such as fake-gcs-server:
/// its URL, unsigned requests), then `--anonymous`.
fn gcs(url: &Url, o: &StoreOptions, env: &Environment) -> GoogleCloudStorageBuilder {
    let in_env = client_keys_in_env("GOOGLE_", |k| match k {
        GoogleConfigKey::Client(key) => Some(key),
        _ => None,
    });
    let mut b = GoogleCloudStorageBuilder::from_env()
        .with_url(url.as_str())
        .with_retry(retry(o));
    for (key, value) in client_defaults(o, &in_env) {
        b = b.with_config(GoogleConfigKey::Client(key), value);
    }
    // object_store does not read STORAGE_EMULATOR_HOST; GOOGLE_BASE_URL, its own name, wins.
    if let (Some(host), None) = (&env.storage_emulator_host, &env.google_base_url) {
        let base = if host.contains("://") {
            host.clone()
        } else {
            format!("http://{host}")
        };
        b = b
            .with_base_url(&base)
            .with_skip_signature(true)
            .with_config(
                GoogleConfigKey::Client(ClientConfigKey::AllowHttp),
                base.starts_with("http://").to_string(),
            );
    }
    if o.anonymous {
        b = b.with_skip_signature(true);
    }
    if b.get_config_value(&GoogleConfigKey::SkipSignature)
        .is_some_and(|v| v == "true")
    {
        // object_store 0.14 leaves a read unsigned then, but still asks for a bearer token for a
        // write (PUT, multipart upload, DELETE): from the metadata server, when nothing else names
        // a credential, which fails after the retry timeout. A fixed token it never has to fetch.
        b = b.with_credentials(Arc::new(StaticCredentialProvider::new(GcpCredential {
            bearer: "unsigned".into(),
        })));
    }
    b
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn options() -> StoreOptions {
        StoreOptions::default()
    }

    #[test]
    fn object_store_retries_span_the_timeout() {
        let mut o = options();
        o.retry_timeout = Duration::from_secs(30);
        let r = retry(&o);
        assert_eq!(r.backoff.max_backoff, Duration::from_secs(3));
        assert_eq!(r.max_retries, 300);
        assert_eq!(r.retry_timeout, Duration::from_secs(30));
    }

    #[test]
    fn defaults_only_where_the_environment_is_silent() {
        let o = options();
        let all = client_defaults(&o, &HashSet::new());
        assert_eq!(
            all,
            vec![
                (ClientConfigKey::ConnectTimeout, "10000ms".to_string()),
                (ClientConfigKey::Timeout, "300000ms".to_string()),
            ]
        );
        let set = HashSet::from([ClientConfigKey::Timeout]);
        assert_eq!(
            client_defaults(&o, &set),
            vec![(ClientConfigKey::ConnectTimeout, "10000ms".to_string())]
        );
    }

    #[test]
    fn flags_override_and_unset_flags_leave_settings_alone() {
        let url = Url::parse("s3://bucket/prefix").expect("url");
        let mut o = options();
        let b = s3(&url, &o);
        // No flag: nothing forced (skip_signature stays whatever AWS_SKIP_SIGNATURE said).
        assert_eq!(
            b.get_config_value(&AmazonS3ConfigKey::Client(ClientConfigKey::Timeout)),
            std::env::var("AWS_TIMEOUT")
                .ok()
                .or(Some("300000ms".into()))
        );
        o.s3_endpoint = Some("http://127.0.0.1:9".into());
        o.s3_region = Some("eu-west-3".into());
        let b = s3(&url, &o);
        assert_eq!(
            b.get_config_value(&AmazonS3ConfigKey::Endpoint).as_deref(),
            Some("http://127.0.0.1:9")
        );
        assert_eq!(
            b.get_config_value(&AmazonS3ConfigKey::Region).as_deref(),
            Some("eu-west-3")
        );
        assert_eq!(
            b.get_config_value(&AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp))
                .as_deref(),
            Some("true")
        );
    }

    #[test]
    fn storage_emulator_host_is_the_gcs_base_url() {
        let url = Url::parse("gs://bucket/prefix").expect("url");
        let emulator = Environment {
            storage_emulator_host: Some("127.0.0.1:4443".into()),
            google_base_url: None,
        };
        let b = gcs(&url, &options(), &emulator);
        assert_eq!(
            b.get_config_value(&GoogleConfigKey::BaseUrl).as_deref(),
            Some("http://127.0.0.1:4443")
        );
        assert_eq!(
            b.get_config_value(&GoogleConfigKey::SkipSignature)
                .as_deref(),
            Some("true")
        );
        assert_eq!(
            b.get_config_value(&GoogleConfigKey::Client(ClientConfigKey::AllowHttp))
                .as_deref(),
            Some("true")
        );
        // GOOGLE_BASE_URL, object_store's own name, wins over the emulator variable.
        let both = Environment {
            storage_emulator_host: Some("127.0.0.1:4443".into()),
            google_base_url: Some("https://gcs.example".into()),
        };
        let b = gcs(&url, &options(), &both);
        assert_ne!(
            b.get_config_value(&GoogleConfigKey::BaseUrl).as_deref(),
            Some("http://127.0.0.1:4443")
        );
    }

    /// One HTTP exchange on a loopback listener: the request's head, answered 200 with an ETag.
    fn answer_one_request() -> (String, std::thread::JoinHandle<String>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let (mut head, mut length) = (String::new(), 0usize);
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).expect("read");
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().expect("length");
                }
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                head.push_str(&line);
            }
            reader.read_exact(&mut vec![0; length]).expect("body");
            let reply = "HTTP/1.1 200 OK\r\nETag: \"e1\"\r\nx-goog-generation: 7\r\ncontent-length: 0\r\n\r\n";
            (&stream).write_all(reply.as_bytes()).expect("write");
            head
        });
        (address, server)
    }

    #[test]
    fn an_emulator_takes_writes_without_a_token_request() {
        // object_store 0.14's GCS writes (PUT, multipart, DELETE) ask for a bearer token even with
        // skip_signature (its reads do not): without a credential of its own, a write to an emulator
        // went to the metadata server for one and failed after the retry timeout.
        let (address, server) = answer_one_request();
        let url = Url::parse("gs://bucket/prefix").expect("url");
        let emulator = Environment {
            storage_emulator_host: Some(address),
            google_base_url: None,
        };
        let mut o = options();
        o.retry_timeout = Duration::from_secs(2);
        let store = gcs(&url, &o, &emulator).build().expect("store");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let put = runtime.block_on(object_store::ObjectStoreExt::put(
            &store,
            &Path::from("prefix/x"),
            "data".into(),
        ));
        let put = put.expect("the emulator's PUT");
        assert_eq!(put.e_tag.as_deref(), Some("\"e1\""));
        assert_eq!(put.version.as_deref(), Some("7"));
        let head = server.join().expect("server");
        // object_store escapes the object name whole.
        assert!(
            head.starts_with("PUT /bucket/prefix%2Fx HTTP/1.1"),
            "{head}"
        );
    }
}
