//! Retries of transient failures that object_store's own retry layer does not cover: a connection
//! dropped while a response body (a GET's data, a LIST page) is being read. Status codes (5xx, 429)
//! and connection errors are already retried inside object_store; permanent failures never are.

use std::error::Error as StdError;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use object_store::client::HttpError;

use crate::options::StoreOptions;

/// Whether an error is worth another attempt: a transport failure while a response body was read.
/// Everything else is an answer or was retried already:
///
/// - NotFound, PermissionDenied, Unauthenticated, Precondition, ... are answers, not accidents;
/// - a status (4xx or 5xx) comes in object_store's `RetryError` without an [`HttpError`] below it:
///   4xx are answers, and 5xx/429 were retried by object_store;
/// - a transport failure of the request itself (connect, send, a timeout before the response) sits
///   below object_store's `RetryError` and `RequestError`, which retried it as far as it is safe.
///
/// A body failure is either an [`HttpError`] close to the `Generic` error (the body of a GET or a
/// LIST page, read after object_store's request loop: the `Generic` error's source, or the source of
/// the store's "response body" error such as S3's `ListResponseBody`), or, deeper inside the request
/// loop, reqwest's body or decode error: object_store reads the body of an error status there
/// (`RequestError::Http`) and does not retry when that read fails. `RetryError` and `RequestError`
/// are not public in object_store 0.14, so the first case is recognised by its place in the chain.
pub(crate) fn is_transient(e: &object_store::Error) -> bool {
    let object_store::Error::Generic { source, .. } = e else {
        return false;
    };
    let mut link: Option<&(dyn StdError + 'static)> = Some(source.as_ref());
    let mut depth = 0;
    let mut below_http = false;
    while let Some(error) = link {
        // zshard's own S3 listing (s3_list.rs) meets statuses outside object_store's retries.
        if let Some(status) = error.downcast_ref::<crate::s3_list::ListStatus>() {
            return status.is_transient();
        }
        if error.downcast_ref::<HttpError>().is_some() {
            if depth < REQUEST_LOOP_DEPTH {
                return true;
            }
            below_http = true;
        }
        if let (true, Some(e)) = (below_http, error.downcast_ref::<reqwest::Error>()) {
            return e.is_body() || e.is_decode();
        }
        link = error.source();
        depth += 1;
    }
    false
}

/// How deep below a `Generic` error's source an [`HttpError`] of the request loop is, at least
/// (`RetryError`, then `RequestError::Http`, then the [`HttpError`]).
const REQUEST_LOOP_DEPTH: usize = 2;

/// The first wait between two attempts; each later one doubles, up to [`max_backoff`], with jitter.
pub(crate) const INITIAL_BACKOFF: Duration = Duration::from_millis(100);

/// The longest wait between two attempts at all. Short enough that the end of an outage is noticed
/// within seconds, long enough that a fleet of workers does not hammer a struggling endpoint.
const LONGEST_BACKOFF: Duration = Duration::from_secs(10);

/// The longest wait between two attempts under `o`: a tenth of the retry timeout (so that the last
/// wait overshoots the timeout by little), between 200 ms and [`LONGEST_BACKOFF`].
pub(crate) fn max_backoff(o: &StoreOptions) -> Duration {
    (o.retry_timeout / 10).clamp(Duration::from_millis(200), LONGEST_BACKOFF)
}

/// Attempts after the first that `o` allows: `--retries` when given, else as many as the retry
/// timeout can hold (the timeout is what ends the retries then).
pub(crate) fn max_retries(o: &StoreOptions) -> usize {
    o.retries.unwrap_or_else(|| {
        let most = o.retry_timeout.as_millis() / INITIAL_BACKOFF.as_millis();
        usize::try_from(most).unwrap_or(usize::MAX).max(1)
    })
}

/// Runs `operation` until it succeeds, fails permanently, or the retries `o` allows are spent: no
/// retry starts later than the retry timeout after the first attempt. Waits grow exponentially with
/// jitter (so that workers that failed together do not retry together). Every retry is counted.
pub(crate) async fn with_retries<T, F, Fut>(
    o: &StoreOptions,
    counter: &AtomicU64,
    operation: F,
) -> object_store::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = object_store::Result<T>>,
{
    let started = Instant::now();
    let policy = ExponentialBuilder::new()
        .with_min_delay(INITIAL_BACKOFF)
        .with_max_delay(max_backoff(o))
        .with_factor(2.0)
        .with_jitter()
        .with_max_times(max_retries(o));
    operation
        .retry(policy)
        .sleep(tokio::time::sleep)
        .when(|e| is_transient(e) && started.elapsed() < o.retry_timeout)
        .notify(|error, wait| {
            counter.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%error, ?wait, "transient storage failure: retrying");
        })
        .await
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use object_store::client::HttpErrorKind;
    use object_store::http::HttpBuilder;
    use object_store::path::Path;
    use object_store::{ClientOptions, ObjectStoreExt, RetryConfig};

    use super::*;

    /// A failure while reading a body, as object_store reports it for a GET's data.
    fn body_error(kind: HttpErrorKind) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: Box::new(HttpError::new(
                kind,
                std::io::Error::from(std::io::ErrorKind::ConnectionReset),
            )),
        }
    }

    /// The shape of S3's `Error::ListResponseBody` (not public): a store error holding the
    /// [`HttpError`] of a LIST page's body.
    #[derive(Debug, thiserror::Error)]
    #[error("Error getting list response body: {source}")]
    struct ListResponseBody {
        source: HttpError,
    }

    /// A server on a local port that answers each of its connections with the next of `responses`
    /// (`None`: read the request and close without answering), then stops.
    fn serve(responses: Vec<Option<&'static str>>) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        std::thread::spawn(move || {
            for response in responses {
                let Ok((mut stream, _)) = listener.accept() else {
                    return;
                };
                let mut request = Vec::new();
                let mut buffer = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                if let Some(response) = response {
                    let _ = stream.write_all(response.as_bytes());
                }
            }
        });
        format!("http://{address}")
    }

    /// The error of a GET (and of reading its body) from a server that answers `response`, with
    /// object_store's own retries off.
    async fn get_error(url: String) -> object_store::Error {
        let store = HttpBuilder::new()
            .with_url(url)
            .with_retry(RetryConfig {
                max_retries: 0,
                retry_timeout: Duration::from_secs(5),
                ..RetryConfig::default()
            })
            .with_client_options(ClientOptions::new().with_allow_http(true))
            .build()
            .expect("http store");
        match store.get(&Path::from("x")).await {
            Err(e) => e,
            Ok(response) => response.bytes().await.expect_err("a failing body"),
        }
    }

    async fn answered(response: &'static str) -> object_store::Error {
        get_error(serve(vec![Some(response)])).await
    }

    #[tokio::test]
    async fn transient_and_permanent() {
        // A body cut short by the server (a real error from object_store's HTTP client).
        let cut = answered("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789").await;
        assert!(matches!(cut, object_store::Error::Generic { .. }), "{cut}");
        assert!(is_transient(&cut), "{cut}");
        // Statuses: 5xx was retried by object_store, 4xx are answers.
        let unavailable =
            answered("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n").await;
        assert!(
            matches!(unavailable, object_store::Error::Generic { .. }),
            "{unavailable}"
        );
        assert!(!is_transient(&unavailable), "{unavailable}");
        let bad = answered("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").await;
        assert!(matches!(bad, object_store::Error::Generic { .. }), "{bad}");
        assert!(!is_transient(&bad), "{bad}");
        let missing = answered("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n").await;
        assert!(
            matches!(missing, object_store::Error::NotFound { .. }),
            "{missing}"
        );
        assert!(!is_transient(&missing));
        let forbidden = answered("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n").await;
        assert!(!is_transient(&forbidden), "{forbidden}");
        // The body of an error status cut short: object_store reads it inside its request loop and
        // does not retry (a fault proxy dropping the body of a 404 for a zarr.json that is not there).
        for status in [
            "404 Not Found",
            "400 Bad Request",
            "503 Service Unavailable",
        ] {
            let response: &'static str = Box::leak(
                format!("HTTP/1.1 {status}\r\nContent-Length: 100\r\n\r\nabc").into_boxed_str(),
            );
            let cut = answered(response).await;
            assert!(matches!(cut, object_store::Error::Generic { .. }), "{cut}");
            assert!(is_transient(&cut), "{status}: {cut}");
        }
        // A connection closed before any answer: a failure of the request, object_store's to retry.
        let closed = get_error(serve(vec![None])).await;
        assert!(
            matches!(closed, object_store::Error::Generic { .. }),
            "{closed}"
        );
        assert!(!is_transient(&closed), "{closed}");
        // Nobody listening.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let refused = get_error(format!("http://127.0.0.1:{port}")).await;
        assert!(!is_transient(&refused), "{refused}");

        // Body failures of every kind, directly or inside a store's body error.
        for kind in [
            HttpErrorKind::Interrupted,
            HttpErrorKind::Request,
            HttpErrorKind::Timeout,
            HttpErrorKind::Decode,
            HttpErrorKind::Unknown,
        ] {
            assert!(is_transient(&body_error(kind)), "{kind:?}");
        }
        let list = object_store::Error::Generic {
            store: "S3",
            source: Box::new(ListResponseBody {
                source: HttpError::new(
                    HttpErrorKind::Unknown,
                    std::io::Error::other("request or response body error"),
                ),
            }),
        };
        assert!(is_transient(&list));
        // A message that reads like a body error is not one.
        let text = object_store::Error::Generic {
            store: "S3",
            source: "request or response body error: connection reset".into(),
        };
        assert!(!is_transient(&text));
        assert!(!is_transient(&object_store::Error::NotFound {
            path: "x".into(),
            source: "gone".into()
        }));
    }

    fn options(retries: Option<usize>, timeout_ms: u64) -> StoreOptions {
        StoreOptions {
            retries,
            retry_timeout: Duration::from_millis(timeout_ms),
            ..StoreOptions::default()
        }
    }

    #[test]
    fn waits_and_counts_follow_the_timeout() {
        assert_eq!(max_backoff(&options(None, 30_000)), Duration::from_secs(3));
        assert_eq!(max_backoff(&options(None, 600_000)), LONGEST_BACKOFF);
        assert_eq!(
            max_backoff(&options(None, 1_000)),
            Duration::from_millis(200)
        );
        assert_eq!(max_retries(&options(None, 30_000)), 300);
        assert_eq!(max_retries(&options(Some(4), 30_000)), 4);
    }

    /// A body failure that never goes away is retried until the timeout, not for a number of tries.
    #[tokio::test]
    async fn transient_failures_are_retried_until_the_timeout() {
        let counter = AtomicU64::new(0);
        let started = Instant::now();
        let result = with_retries(&options(None, 1_500), &counter, || async {
            Err::<(), _>(body_error(HttpErrorKind::Interrupted))
        })
        .await;
        let took = started.elapsed();
        assert!(result.is_err());
        assert!(took >= Duration::from_millis(1_500), "{took:?}");
        assert!(
            took < Duration::from_millis(1_500) + Duration::from_millis(500),
            "{took:?}"
        );
        assert!(counter.load(Ordering::Relaxed) >= 5, "{counter:?}");
        // `--retries` given: that many and no more.
        let counter = AtomicU64::new(0);
        let result = with_retries(&options(Some(2), 60_000), &counter, || async {
            Err::<(), _>(body_error(HttpErrorKind::Interrupted))
        })
        .await;
        assert!(result.is_err());
        assert_eq!(counter.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn retries_transient_then_succeeds_and_counts() {
        let counter = AtomicU64::new(0);
        let mut calls = 0;
        let result = with_retries(&options(Some(5), 60_000), &counter, || {
            calls += 1;
            let fail = calls < 3;
            async move {
                if fail {
                    Err(body_error(HttpErrorKind::Interrupted))
                } else {
                    Ok(7)
                }
            }
        })
        .await;
        assert_eq!(result.ok(), Some(7));
        assert_eq!(counter.load(Ordering::Relaxed), 2);
        let permanent = with_retries(&options(Some(5), 60_000), &counter, || async {
            Err::<(), _>(object_store::Error::NotFound {
                path: "x".into(),
                source: "404 Not Found".into(),
            })
        })
        .await;
        assert!(permanent.is_err());
        assert_eq!(counter.load(Ordering::Relaxed), 2);
    }
}
