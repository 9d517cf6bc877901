//! Retries of transient failures that object_store's own retry layer does not cover: a connection
//! dropped while a response body (a GET's data, a LIST page) is being read. Status codes (5xx, 429)
//! and connection errors are already retried inside object_store; permanent failures never are.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Whether an error is worth another attempt.
pub(crate) fn is_transient(e: &object_store::Error) -> bool {
    let object_store::Error::Generic { .. } = e else {
        // NotFound, PermissionDenied, Unauthenticated, Precondition, ... are answers, not accidents.
        return false;
    };
    let text = zshard_core::chain_text(e).to_ascii_lowercase();
    if text.contains("status code: 4") {
        return false;
    }
    // Only failures while reading a body: statuses, timeouts and connects were retried by object_store
    // already, and retrying them here too would multiply the attempts.
    [
        "body error",
        "end of file",
        "connection reset",
        "broken pipe",
        "error decoding response body",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// Backoff before attempt `attempt` (1-based): exponential from 100 ms, capped at 10 s, with jitter.
fn backoff(attempt: usize) -> Duration {
    let base = 100u64.saturating_mul(1 << attempt.min(7)).min(10_000);
    // Jitter without a random number generator: the clock's nanoseconds are unpredictable enough to
    // keep workers that failed together from retrying together.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    Duration::from_millis(base / 2 + nanos % (base / 2 + 1))
}

/// Runs `operation` until it succeeds, fails permanently, or `retries` retries are spent.
pub(crate) async fn with_retries<T, F, Fut>(
    retries: usize,
    counter: &AtomicU64,
    mut operation: F,
) -> object_store::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = object_store::Result<T>>,
{
    let mut attempt = 0;
    loop {
        match operation().await {
            Err(e) if attempt < retries && is_transient(&e) => {
                attempt += 1;
                counter.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(backoff(attempt)).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(message: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: message.to_string().into(),
        }
    }

    #[test]
    fn transient_and_permanent() {
        assert!(is_transient(&generic(
            "Error getting list response body: request or response body error"
        )));
        assert!(!is_transient(&generic(
            "Server returned non-2xx status code: 503 Service Unavailable"
        )));
        assert!(is_transient(&generic(
            "error reading a body from connection: end of file before message length reached"
        )));
        assert!(!is_transient(&generic(
            "Server returned non-2xx status code: 404 Not Found: NoSuchBucket"
        )));
        assert!(!is_transient(&generic(
            "Server returned non-2xx status code: 403 Forbidden"
        )));
        assert!(!is_transient(&object_store::Error::NotFound {
            path: "x".into(),
            source: "gone".into()
        }));
    }

    #[test]
    fn backoff_grows_and_is_bounded() {
        assert!(backoff(1) <= Duration::from_millis(200));
        assert!(backoff(20) <= Duration::from_secs(10));
        assert!(backoff(20) >= Duration::from_secs(5));
    }

    #[tokio::test]
    async fn retries_transient_then_succeeds_and_counts() {
        let counter = AtomicU64::new(0);
        let mut calls = 0;
        let result = with_retries(5, &counter, || {
            calls += 1;
            let fail = calls < 3;
            async move {
                if fail {
                    Err(generic("response body error"))
                } else {
                    Ok(7)
                }
            }
        })
        .await;
        assert_eq!(result.ok(), Some(7));
        assert_eq!(counter.load(Ordering::Relaxed), 2);
        let permanent = with_retries(5, &counter, || async {
            Err::<(), _>(generic("status code: 404 Not Found"))
        })
        .await;
        assert!(permanent.is_err());
        assert_eq!(counter.load(Ordering::Relaxed), 2);
    }
}
