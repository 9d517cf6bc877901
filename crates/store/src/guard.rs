//! HTTP(S) stores whose every connection and redirect obeys a policy given by the caller (for
//! untrusted URLs, such as the targets of a kerchunk reference set). The policy is enforced where
//! the client connects, not only on the URL's text: the resolver checks every address a host name
//! resolves to (so a name in `/etc/hosts` or DNS that points at 127.0.0.1 is refused like the
//! literal), and the redirect policy checks every `Location` before it is followed.
//!
//! A refusal is an answer, not an accident: it is reported with kind `Unknown`, which neither
//! object_store nor zshard's retry layer retries.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
};
use object_store::ClientOptions;
use url::Url;

use crate::error::Error;
use crate::options::StoreOptions;

/// Most redirects followed for one request (reqwest's default).
const MAX_REDIRECTS: usize = 10;

/// What a guarded HTTP(S) store may connect to. `Err` holds the reason, for people (naming the
/// address or URL refused: messages quote it after the host or the redirect's URLs).
pub trait HttpGuard: std::fmt::Debug + Send + Sync + 'static {
    /// Whether `host` may be reached at `address`, one of the addresses it resolves to.
    fn check_address(&self, host: &str, address: IpAddr) -> Result<(), String>;

    /// Whether a redirect to `to` may be followed.
    fn check_redirect(&self, to: &Url) -> Result<(), String>;
}

/// The first refusal of a guard in an error's chain of causes.
fn refusal_in<'a>(
    mut error: Option<&'a (dyn std::error::Error + 'static)>,
) -> Option<(&'a str, &'a str)> {
    while let Some(e) = error {
        if let Some(Error::Refused { request, reason }) = e.downcast_ref::<Error>() {
            return Some((request, reason));
        }
        error = e.source();
    }
    None
}

/// Resolves host names with the system resolver and keeps only the addresses the guard allows.
struct GuardedResolver(Arc<dyn HttpGuard>);

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.0.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let lookup = host.clone();
            // getaddrinfo blocks: the same as reqwest's own resolver does.
            let addresses: Vec<SocketAddr> =
                tokio::task::spawn_blocking(move || (lookup.as_str(), 0).to_socket_addrs())
                    .await??
                    .collect();
            let mut refused = None;
            let allowed: Vec<SocketAddr> = addresses
                .into_iter()
                .filter(|a| match guard.check_address(&host, a.ip()) {
                    Ok(()) => true,
                    Err(reason) => {
                        refused.get_or_insert(reason);
                        false
                    }
                })
                .collect();
            match (allowed.is_empty(), refused) {
                (true, Some(reason)) => Err(Box::new(Error::Refused {
                    request: format!("the connection to {host}"),
                    reason,
                }) as _),
                _ => Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

/// Follows a redirect only when the guard allows its target.
fn redirect_policy(guard: Arc<dyn HttpGuard>) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        let from = attempt
            .previous()
            .last()
            .map_or_else(String::new, Url::to_string);
        let request = format!("the redirect from {from} to {}", attempt.url());
        let verdict = if attempt.previous().len() > MAX_REDIRECTS {
            Err(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            guard.check_redirect(attempt.url())
        };
        match verdict {
            Ok(()) => attempt.follow(),
            Err(reason) => attempt.error(Error::Refused { request, reason }),
        }
    })
}

/// A reqwest client under a guard; refusals come out as errors that are not retried.
#[derive(Debug)]
struct GuardedService(reqwest::Client);

#[async_trait::async_trait]
impl HttpService for GuardedService {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        // object_store's message names the method and URL around it.
        <reqwest::Client as HttpService>::call(&self.0, request)
            .await
            .map_err(|e| match refusal_in(Some(&e)) {
                Some((request, reason)) => HttpError::new(
                    HttpErrorKind::Unknown,
                    Error::Refused {
                        request: request.to_string(),
                        reason: reason.to_string(),
                    },
                ),
                None => e,
            })
    }
}

/// Builds the clients of a guarded HTTP(S) store: zshard's timeouts, no transparent decompression
/// (sizes must be those of the objects), the guard's resolver and redirect policy.
#[derive(Debug)]
pub(crate) struct GuardedConnector {
    pub guard: Arc<dyn HttpGuard>,
    pub options: StoreOptions,
    pub allow_http: bool,
}

impl std::fmt::Debug for GuardedResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("GuardedResolver").field(&self.0).finish()
    }
}

impl HttpConnector for GuardedConnector {
    fn connect(&self, _: &ClientOptions) -> object_store::Result<HttpClient> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("zshard/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(self.options.connect_timeout)
            .timeout(self.options.request_timeout)
            .no_gzip()
            .no_brotli()
            .no_zstd()
            .no_deflate()
            .https_only(!self.allow_http)
            .dns_resolver(Arc::new(GuardedResolver(self.guard.clone())))
            .redirect(redirect_policy(self.guard.clone()))
            .build()
            .map_err(|e| object_store::Error::Generic {
                store: "HTTP",
                source: Box::new(e),
            })?;
        Ok(HttpClient::new(GuardedService(client)))
    }
}
