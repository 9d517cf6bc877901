//! Opening a repository: its storage from a zshard location, and a reference (branch, tag or
//! snapshot id) resolved to a version.

use std::collections::HashMap;
use std::sync::Arc;

use icechunk::format::format_constants::SpecVersionBin;
use icechunk::format::IcechunkFormatErrorKind;
use icechunk::repository::{RepositoryError, RepositoryErrorKind, VersionInfo};
use icechunk::storage::{
    AzureCredentials, GcsBearerCredential, GcsCredentials, GcsStaticCredentials, S3Credentials,
    S3Options,
};
use icechunk::{Repository, Storage};
use zshard_store::{IoRuntime, Location};

use crate::error::{boxed, Error, Result};
use crate::SpecVersion;

/// The storage of the repository at `location`: a local folder, or an `s3://`, `az://` (or
/// `abfs(s)://`, `adl://`, `azure://`) or `gs://` bucket prefix, reached with zshard's options for
/// that cloud over its standard environment (see [`s3_options`], [`azure_settings`],
/// [`gcs_settings`]).
pub(crate) fn storage(
    location: &str,
    runtime: &IoRuntime,
) -> Result<Arc<dyn Storage + Send + Sync>> {
    let open_error = |e: Box<dyn std::error::Error + Send + Sync>| Error::Open {
        repo: location.to_string(),
        source: e,
    };
    let parsed = Location::parse(location).map_err(|e| open_error(boxed(e)))?;
    if let Some(path) = parsed.local_path() {
        let path = path.to_path_buf();
        return runtime
            .block_on(icechunk::new_local_filesystem_storage(&path))
            .map_err(|e| open_error(boxed(e.kind)));
    }
    let Some(bucket) = parsed.bucket() else {
        return Err(open_error(
            "an icechunk repository is a local folder or an s3://, gs:// or az:// prefix".into(),
        ));
    };
    let prefix = (!bucket.prefix.is_empty()).then(|| bucket.prefix.clone());
    let options = runtime.options();
    match parsed.scheme().unwrap_or_default() {
        "s3" | "s3a" => {
            let credentials = if options.anonymous {
                S3Credentials::Anonymous
            } else {
                S3Credentials::FromEnv
            };
            // The key layout (icechunk's legacy leading-slash one, at a bucket's root only) is
            // detected on first use.
            icechunk::new_s3_storage(
                s3_options(options),
                bucket.name,
                prefix,
                Some(credentials),
                Vec::new(),
                Vec::new(),
                None,
            )
            .map_err(|e| open_error(boxed(e.kind)))
        }
        "az" | "azure" | "abfs" | "abfss" | "adl" => {
            let settings = azure_settings(bucket.account, options, &process_env)
                .map_err(|e| open_error(e.into()))?;
            runtime
                .block_on(icechunk::storage::new_azure_blob_storage(
                    settings.account,
                    bucket.name,
                    prefix,
                    Some(AzureCredentials::FromEnv),
                    Some(settings.config),
                ))
                .map_err(|e| open_error(boxed(e.kind)))
        }
        "gs" => {
            let (credentials, config) = gcs_settings(options, &process_env);
            icechunk::storage::new_gcs_storage(
                bucket.name,
                prefix,
                Some(credentials),
                Some(config),
                Vec::new(),
                Vec::new(),
            )
            .map_err(|e| open_error(boxed(e.kind)))
        }
        other => Err(open_error(
            format!("{other}:// is not a store an icechunk repository can live on (local, s3://, gs://, az://)").into(),
        )),
    }
}

/// A variable of the process environment, unset when empty.
fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Whether a flag variable is set, as object_store reads its boolean settings.
fn truthy(value: Option<String>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.to_ascii_lowercase().as_str(),
            "1" | "true" | "on" | "yes" | "y"
        )
    })
}

/// The storage account and object_store settings of an Azure repository.
#[derive(Debug, PartialEq, Eq)]
struct AzureSettings {
    account: String,
    config: HashMap<String, String>,
}

/// The emulator's (Azurite's) documented account, which object_store uses when none is named.
const AZURE_EMULATOR_ACCOUNT: &str = "devstoreaccount1";

/// Azure settings as zshard's own Azure client takes them: the account from the URL, else
/// `AZURE_STORAGE_ACCOUNT_NAME`, else the emulator's when `AZURE_STORAGE_USE_EMULATOR` is set
/// (icechunk names the account explicitly, so object_store's own fallbacks never apply). Everything
/// else of `AZURE_*` (keys, SAS tokens, `AZURITE_BLOB_STORAGE_URL`, endpoint, `AZURE_ALLOW_HTTP`)
/// icechunk's client reads from the environment itself; `--anonymous` skips signing.
fn azure_settings(
    url_account: Option<String>,
    options: &zshard_store::StoreOptions,
    env: &dyn Fn(&str) -> Option<String>,
) -> std::result::Result<AzureSettings, String> {
    let emulator = truthy(env("AZURE_STORAGE_USE_EMULATOR"));
    let account = url_account
        .or_else(|| env("AZURE_STORAGE_ACCOUNT_NAME"))
        .or_else(|| emulator.then(|| AZURE_EMULATOR_ACCOUNT.to_string()))
        .ok_or_else(|| {
            "no Azure storage account: name it in the URL \
             (abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH) or in AZURE_STORAGE_ACCOUNT_NAME"
                .to_string()
        })?;
    let mut config = HashMap::new();
    if options.anonymous {
        config.insert("azure_skip_signature".to_string(), "true".to_string());
    }
    Ok(AzureSettings { account, config })
}

/// GCS settings as zshard's own GCS client takes them: `GOOGLE_*` from the environment (read by
/// icechunk's client), `STORAGE_EMULATOR_HOST` as Google's libraries read it (the emulator's URL,
/// unsigned requests) unless `GOOGLE_BASE_URL` is set, and `--anonymous`.
fn gcs_settings(
    options: &zshard_store::StoreOptions,
    env: &dyn Fn(&str) -> Option<String>,
) -> (GcsCredentials, HashMap<String, String>) {
    let mut config = HashMap::new();
    let mut anonymous = options.anonymous;
    if let (Some(host), None) = (env("STORAGE_EMULATOR_HOST"), env("GOOGLE_BASE_URL")) {
        let base = if host.contains("://") {
            host
        } else {
            format!("http://{host}")
        };
        config.insert(
            "allow_http".to_string(),
            base.starts_with("http://").to_string(),
        );
        config.insert("google_base_url".to_string(), base);
        anonymous = true;
    }
    if !anonymous {
        return (GcsCredentials::FromEnv, config);
    }
    // As zshard's own GCS client (zshard_store): object_store leaves unsigned reads unsigned, but a
    // write (PUT, multipart upload, DELETE) still asks for a bearer token, from the metadata server
    // when no credential is named: against an emulator that failed every repository write ("Error
    // performing token request"). Unsigned, with a fixed token it never has to fetch.
    config.insert("google_skip_signature".to_string(), "true".to_string());
    let token = GcsBearerCredential {
        bearer: "unsigned".to_string(),
        expires_after: None,
    };
    (
        GcsCredentials::Static(GcsStaticCredentials::BearerToken(token)),
        config,
    )
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
    let mut s3 = S3Options::default();
    s3.region = options
        .s3_region
        .clone()
        .or_else(|| env("AWS_REGION"))
        .or_else(|| env("AWS_DEFAULT_REGION"));
    s3.endpoint_url = endpoint_url;
    s3.anonymous = options.anonymous;
    s3.allow_http = allow_http;
    s3.force_path_style = options.s3_path_style;
    s3
}

/// Opens the existing repository at `location`, of either spec version.
pub(crate) fn open(location: &str, runtime: &IoRuntime) -> Result<Repository> {
    let storage = storage(location, runtime)?;
    runtime
        .block_on(Repository::open(storage).execute())
        .map_err(|e| open_failure(location, e))
}

/// [`open`] for reading a version of the repository as a source: without Icechunk's preloading of
/// manifests, which every session would start in the background (matching each array's manifests
/// against its conditions, and reading those that match): zshard reads the manifests it needs, and
/// none when a rerun finds the snapshot it converted (see `Source`).
pub(crate) fn open_reading(location: &str, runtime: &IoRuntime) -> Result<Repository> {
    let storage = storage(location, runtime)?;
    let config = icechunk::RepositoryConfig {
        manifest: Some(icechunk::config::ManifestConfig {
            preload: Some(icechunk::config::ManifestPreloadConfig {
                max_total_refs: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    runtime
        .block_on(Repository::open(storage).config(config).execute())
        .map_err(|e| open_failure(location, e))
}

/// The spec version of the repository at `location`, `None` when there is none.
pub(crate) fn detect(
    location: &str,
    storage: &Arc<dyn Storage + Send + Sync>,
    runtime: &IoRuntime,
) -> Result<Option<SpecVersion>> {
    let detected = runtime
        .block_on(Repository::fetch_spec_version(Arc::clone(storage), None))
        .map_err(|e| open_failure(location, e))?;
    Ok(detected.map(|d| spec_version(d.spec_version())))
}

/// zshard's name of one of the versions icechunk reads.
pub(crate) fn spec_version(version: SpecVersionBin) -> SpecVersion {
    match version {
        SpecVersionBin::V1 => SpecVersion::V1,
        SpecVersionBin::V2 => SpecVersion::V2,
    }
}

/// Icechunk's name of a version zshard writes.
pub(crate) fn spec_version_bin(version: SpecVersion) -> SpecVersionBin {
    match version {
        SpecVersion::V1 => SpecVersionBin::V1,
        SpecVersion::V2 => SpecVersionBin::V2,
    }
}

/// Why the repository at `location` could not be opened or made, in zshard's words where
/// icechunk's would mislead (a folder that is no repository, a version too new).
pub(crate) fn open_failure(location: &str, e: RepositoryError) -> Error {
    let repo = location.to_string();
    match e.kind {
        RepositoryErrorKind::FormatError(IcechunkFormatErrorKind::InvalidSpecVersion {
            found,
            ..
        }) => Error::Version { repo, found },
        RepositoryErrorKind::RepositoryDoesntExist => Error::Open {
            repo,
            source: "no Icechunk repository there (neither the `repo` object of spec version 2 \
                     nor the branch main under `refs/` of spec version 1)"
                .into(),
        },
        RepositoryErrorKind::ParentDirectoryNotClean => Error::Open {
            repo,
            source: "the folder or prefix holds objects but no Icechunk repository (neither the \
                     `repo` object of spec version 2 nor the branch main under `refs/` of spec \
                     version 1); a repository is made only where nothing is"
                .into(),
        },
        kind => Error::Open {
            repo,
            source: boxed(kind),
        },
    }
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
        .map_err(|e| error(e.kind.to_string()))?;
    if branches.contains(reference) {
        return Ok(VersionInfo::BranchTipRef(reference.to_string()));
    }
    let tags = runtime
        .block_on(repo.list_tags())
        .map_err(|e| error(e.kind.to_string()))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An environment of the given variables only (the process environment is shared by tests).
    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    fn anonymous() -> zshard_store::StoreOptions {
        zshard_store::StoreOptions {
            anonymous: true,
            ..Default::default()
        }
    }

    #[test]
    fn the_azure_account_comes_from_the_url_then_the_environment_then_the_emulator() {
        let options = zshard_store::StoreOptions::default();
        let named = env_of(&[("AZURE_STORAGE_ACCOUNT_NAME", "fromenv")]);
        let emulator = env_of(&[("AZURE_STORAGE_USE_EMULATOR", "true")]);
        let account = |url: Option<&str>, env: &dyn Fn(&str) -> Option<String>| {
            azure_settings(url.map(str::to_string), &options, env).map(|s| s.account)
        };
        assert_eq!(account(Some("inurl"), &named), Ok("inurl".to_string()));
        assert_eq!(account(None, &named), Ok("fromenv".to_string()));
        assert_eq!(account(None, &emulator), Ok("devstoreaccount1".to_string()));
        let none = account(None, &env_of(&[])).expect_err("no account");
        assert!(none.contains("AZURE_STORAGE_ACCOUNT_NAME"), "{none}");
    }

    #[test]
    fn anonymous_azure_skips_signing_and_otherwise_sets_nothing() {
        let env = env_of(&[("AZURE_STORAGE_ACCOUNT_NAME", "a")]);
        let signed = azure_settings(None, &Default::default(), &env).expect("settings");
        assert!(signed.config.is_empty());
        let unsigned = azure_settings(None, &anonymous(), &env).expect("settings");
        assert_eq!(
            unsigned.config,
            HashMap::from([("azure_skip_signature".to_string(), "true".to_string())])
        );
    }

    #[test]
    fn gcs_storage_emulator_host_is_the_base_url_unsigned() {
        let emulator = env_of(&[("STORAGE_EMULATOR_HOST", "127.0.0.1:4443")]);
        let (credentials, config) = gcs_settings(&Default::default(), &emulator);
        assert!(unsigned_with_a_fixed_token(&credentials), "{credentials:?}");
        assert_eq!(
            config,
            HashMap::from([
                (
                    "google_base_url".to_string(),
                    "http://127.0.0.1:4443".to_string()
                ),
                ("allow_http".to_string(), "true".to_string()),
                ("google_skip_signature".to_string(), "true".to_string()),
            ])
        );
        // GOOGLE_BASE_URL, object_store's own name (read by icechunk's client), wins.
        let both = env_of(&[
            ("STORAGE_EMULATOR_HOST", "127.0.0.1:4443"),
            ("GOOGLE_BASE_URL", "https://gcs.example"),
        ]);
        let (credentials, config) = gcs_settings(&Default::default(), &both);
        assert!(matches!(credentials, GcsCredentials::FromEnv));
        assert!(config.is_empty());
        let (credentials, config) = gcs_settings(&anonymous(), &env_of(&[]));
        assert!(unsigned_with_a_fixed_token(&credentials), "{credentials:?}");
        assert_eq!(
            config,
            HashMap::from([("google_skip_signature".to_string(), "true".to_string())])
        );
    }

    /// Whether `credentials` are the fixed token of an unsigned client (no token request).
    fn unsigned_with_a_fixed_token(credentials: &GcsCredentials) -> bool {
        matches!(
            credentials,
            GcsCredentials::Static(GcsStaticCredentials::BearerToken(t)) if t.bearer == "unsigned"
        )
    }

    #[test]
    fn cloud_repositories_open_without_a_request_and_others_are_refused() {
        let runtime = IoRuntime::new(1).expect("runtime");
        for location in [
            "s3://bucket/repo",
            "gs://bucket/repo",
            "abfss://container@acct.dfs.core.windows.net/repo",
        ] {
            assert!(storage(location, &runtime).is_ok(), "{location}");
        }
        let refused = storage("https://example.org/repo", &runtime).expect_err("http");
        assert!(
            refused.to_string().contains("s3://, gs:// or az://"),
            "{refused}"
        );
    }
}
