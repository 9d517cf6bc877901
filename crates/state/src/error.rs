//! The one error type of the destination protocol. Every variant names what it is about (the record's
//! key, the file's path); causes from the other crates stay attached as `source`. `zshard-convert`
//! turns each into its own error variant of the same name and text.

use std::path::PathBuf;

/// Why the destination could not be claimed, surveyed, resumed, recorded in or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A worker specification (`--worker I/N`, SLURM or Kubernetes environment) that does not hold.
    #[error("{reason}")]
    Worker {
        /// What is wrong with it.
        reason: String,
    },

    /// The destination holds something this conversion must not resume or overwrite.
    #[error("{reason}")]
    Destination {
        /// What it holds and what to do.
        reason: String,
    },

    /// A record of zshard's own resume state that cannot be read.
    #[error("{key} is not JSON")]
    State {
        /// The record's location.
        key: String,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },

    /// A file of the local machine (a leftover of an interrupted write).
    #[error("cannot {action} {}", path.display())]
    File {
        /// `remove`, ...
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's complaint.
        #[source]
        source: std::io::Error,
    },

    /// An internal lock was poisoned by a panicking thread.
    #[error("a worker thread panicked while holding {what}")]
    Poisoned {
        /// What was locked.
        what: &'static str,
    },

    /// A thread of zshard's own (the lease renewal, the state write sent ahead) could not be started.
    #[error("cannot start the thread of {what}")]
    Thread {
        /// What the thread does.
        what: &'static str,
        /// The operating system's complaint.
        #[source]
        source: std::io::Error,
    },

    /// Serializing a record of zshard's own failed.
    #[error("cannot serialize {what}")]
    Serialize {
        /// What was being serialized.
        what: &'static str,
        /// Why.
        #[source]
        source: serde_json::Error,
    },

    /// An array geometry the core model rejects.
    #[error(transparent)]
    Core(#[from] zshard_core::Error),

    /// Storage: reading, listing or writing the destination.
    #[error(transparent)]
    Store(#[from] zshard_store::Error),
}

/// A result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One readable line from an error and its causes, outermost first: a cause whose text is already
/// shown (object_store repeats its sources) is left out, a server's XML error document becomes its
/// code and message, and line breaks become spaces.
///
/// ```
/// let e = zshard_state::Error::Destination { reason: "a\nb".into() };
/// assert_eq!(zshard_state::one_line(&e), "a b");
/// ```
pub fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cause = Some(error);
    while let Some(e) = cause {
        let text = condense(&e.to_string());
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cause = e.source();
    }
    parts.join(": ")
}

/// `text` with every XML error document replaced by its code and message, on one line.
fn condense(text: &str) -> String {
    let mut out = text.to_string();
    while let Some(start) = out.find("<?xml").or_else(|| out.find("<Error>")) {
        let end = out[start..]
            .find("</Error>")
            .map_or(out.len(), |e| start + e + "</Error>".len());
        let block = &out[start..end];
        let tag = |t: &str| {
            let open = format!("<{t}>");
            let from = block.find(&open)? + open.len();
            let to = block[from..].find(&format!("</{t}>"))?;
            Some(block[from..from + to].to_string())
        };
        let summary = match (tag("Code"), tag("Message")) {
            (Some(code), Some(message)) => format!("{code} ({message})"),
            (Some(code), None) => code,
            _ => "(error document)".to_string(),
        };
        out.replace_range(start..end, &summary);
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    /// An error with a message and an optional cause, as object_store builds its chains.
    #[derive(Debug)]
    struct Layer(String, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn error_lines_are_short_and_single() {
        let xml = "status code: 404 Not Found: <?xml version=\"1.0\"?>\n<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message><RequestId>1</RequestId></Error>";
        let inner = Layer(xml.to_string(), None);
        let generic = Layer(format!("Generic S3 error: {xml}"), Some(Box::new(inner)));
        let e = Layer(
            "cannot list s3://b/out.zarr".into(),
            Some(Box::new(generic)),
        );
        assert_eq!(
            super::one_line(&e),
            "cannot list s3://b/out.zarr: Generic S3 error: status code: 404 Not Found: NoSuchBucket (The specified bucket does not exist)"
        );
    }
}
