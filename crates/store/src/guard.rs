//! HTTP(S) stores whose every connection and redirect obeys a policy given by the caller (for
//! untrusted URLs, such as the targets of a kerchunk reference set). The policy is enforced where
//! the client connects, not only on the URL's text: the resolver checks every address a host name
//! resolves to (so a name in `/etc/hosts` or DNS that points at 127.0.0.1 is refused like the
//! literal), and the redirect policy checks every `Location` before it is followed.
//!
//! A refusal is an answer, not an accident: it is reported with kind `Unknown`, which neither
//! object_store nor zshard's retry layer retries.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
};
use object_store::{ClientConfigKey, ClientOptions};
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
pub(crate) fn refusal_in<'a>(
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
/// The proxies the user configured are resolved unchecked: through a proxy, the client connects
/// only to the proxy, and the target is checked before the request instead ([`GuardedService`]).
struct GuardedResolver {
    guard: Arc<dyn HttpGuard>,
    proxies: Arc<HashSet<String>>,
}

/// The addresses `host` resolves to (getaddrinfo blocks: on a blocking thread, as reqwest's own
/// resolver does).
async fn lookup(host: &str) -> std::io::Result<Vec<SocketAddr>> {
    let name = host.to_string();
    tokio::task::spawn_blocking(move || (name.as_str(), 0).to_socket_addrs())
        .await
        .map_err(std::io::Error::other)?
        .map(Iterator::collect)
}

/// `addresses` that `guard` allows for `host`, and the first reason it gave to refuse one.
fn allowed(
    guard: &dyn HttpGuard,
    host: &str,
    addresses: Vec<SocketAddr>,
) -> (Vec<SocketAddr>, Option<String>) {
    let mut refused = None;
    let allowed = addresses
        .into_iter()
        .filter(|a| match guard.check_address(host, a.ip()) {
            Ok(()) => true,
            Err(reason) => {
                refused.get_or_insert(reason);
                false
            }
        })
        .collect();
    (allowed, refused)
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let (guard, proxies) = (self.guard.clone(), self.proxies.clone());
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addresses = lookup(&host).await?;
            if proxies.contains(&host.to_ascii_lowercase()) {
                return Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs);
            }
            match allowed(guard.as_ref(), &host, addresses) {
                (allowed, Some(reason)) if allowed.is_empty() => Err(Box::new(Error::Refused {
                    request: format!("the connection to {host}"),
                    reason,
                }) as _),
                (allowed, _) => Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

/// The host names of the proxies a client may use: `options`' proxy URL and the environment's
/// `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` (either case), as reqwest reads them.
fn proxy_hosts(options: &ClientOptions) -> HashSet<String> {
    let configured = options.get_config_value(&ClientConfigKey::ProxyUrl);
    let from_env = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]
        .into_iter()
        .flat_map(|name| [name.to_string(), name.to_ascii_lowercase()])
        .filter_map(|name| std::env::var(name).ok());
    configured
        .into_iter()
        .chain(from_env)
        .filter_map(|url| {
            // reqwest takes a proxy without a scheme as http://.
            let url = if url.contains("://") {
                url
            } else {
                format!("http://{url}")
            };
            Url::parse(&url)
                .ok()?
                .host_str()
                .map(str::to_ascii_lowercase)
        })
        .map(|host| {
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string()
        })
        .collect()
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
struct GuardedService {
    client: reqwest::Client,
    guard: Arc<dyn HttpGuard>,
    /// Whether a proxy may carry requests: then the resolver only sees the proxy's name, and the
    /// target is checked here before each request.
    proxied: bool,
}

impl GuardedService {
    /// Refuses a request whose target host resolves to any address the guard refuses. What remains
    /// open: the proxy resolves the name again, and a DNS answer that changes between our lookup and
    /// the proxy's (DNS rebinding) is not seen; without a proxy the resolver checks the very
    /// addresses connected to.
    async fn check_target(&self, request: &HttpRequest) -> Result<(), HttpError> {
        let Some(host) = request.uri().host() else {
            return Ok(());
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let refuse = |reason: String| {
            HttpError::new(
                HttpErrorKind::Unknown,
                Error::Refused {
                    request: format!("the connection to {host}"),
                    reason,
                },
            )
        };
        let addresses = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, 0)],
            Err(_) => lookup(host)
                .await
                .map_err(|e| HttpError::new(HttpErrorKind::Connect, e))?,
        };
        match allowed(self.guard.as_ref(), host, addresses) {
            (_, Some(reason)) => Err(refuse(reason)),
            _ => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl HttpService for GuardedService {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        if self.proxied {
            self.check_target(&request).await?;
        }
        // object_store's message names the method and URL around it.
        <reqwest::Client as HttpService>::call(&self.client, request)
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
        f.debug_tuple("GuardedResolver").field(&self.guard).finish()
    }
}

impl HttpConnector for GuardedConnector {
    fn connect(&self, client_options: &ClientOptions) -> object_store::Result<HttpClient> {
        let generic = |e: reqwest::Error| object_store::Error::Generic {
            store: "HTTP",
            source: Box::new(e),
        };
        let proxies = Arc::new(proxy_hosts(client_options));
        let mut builder = reqwest::Client::builder();
        // The proxy of the client options (`<PREFIX>_PROXY_URL`, with its exclusions and the CA
        // certificate (PEM) it is trusted by, `<PREFIX>_PROXY_CA_CERTIFICATE`, as object_store's own
        // client reads them); otherwise reqwest reads HTTP(S)_PROXY, ALL_PROXY and NO_PROXY itself.
        if let Some(url) = client_options.get_config_value(&ClientConfigKey::ProxyUrl) {
            let excludes = client_options.get_config_value(&ClientConfigKey::ProxyExcludes);
            let proxy = reqwest::Proxy::all(url.as_str())
                .map_err(generic)?
                .no_proxy(excludes.and_then(|e| reqwest::NoProxy::from_string(&e)));
            builder = builder.proxy(proxy);
            let ca = client_options.get_config_value(&ClientConfigKey::ProxyCaCertificate);
            if let Some(pem) = ca {
                let certificate =
                    reqwest::tls::Certificate::from_pem(pem.as_bytes()).map_err(generic)?;
                builder = builder.tls_certs_merge(std::iter::once(certificate));
            }
        }
        let client = builder
            .user_agent(concat!("zshard/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(self.options.connect_timeout)
            .timeout(self.options.request_timeout)
            .no_gzip()
            .no_brotli()
            .no_zstd()
            .no_deflate()
            .https_only(!self.allow_http)
            .dns_resolver(Arc::new(GuardedResolver {
                guard: self.guard.clone(),
                proxies: proxies.clone(),
            }))
            .redirect(redirect_policy(self.guard.clone()))
            .build()
            .map_err(generic)?;
        Ok(HttpClient::new(GuardedService {
            client,
            guard: self.guard.clone(),
            proxied: !proxies.is_empty(),
        }))
    }
}

#[cfg(test)]
mod proxy_ca_tests {
    use super::*;

    #[derive(Debug)]
    struct AllowAll;

    impl HttpGuard for AllowAll {
        fn check_address(&self, _: &str, _: IpAddr) -> Result<(), String> {
            Ok(())
        }
        fn check_redirect(&self, _: &Url) -> Result<(), String> {
            Ok(())
        }
    }

    fn connect(options: &ClientOptions) -> object_store::Result<HttpClient> {
        let connector = GuardedConnector {
            guard: Arc::new(AllowAll),
            options: StoreOptions::default(),
            allow_http: true,
        };
        connector.connect(options)
    }

    /// `<PREFIX>_PROXY_CA_CERTIFICATE` is read beside the proxy URL: a value that is no PEM
    /// certificate fails the client, as object_store's own client does (it was ignored).
    #[test]
    fn the_proxy_ca_certificate_is_read() {
        let proxied = ClientOptions::new().with_proxy_url("http://127.0.0.1:3128");
        connect(&proxied).expect("a proxy without a CA certificate");
        let bad = proxied.with_proxy_ca_certificate(
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        let error = connect(&bad).expect_err("a CA certificate that is no PEM");
        assert_eq!(error.to_string(), "Generic HTTP error: builder error");
    }
}
