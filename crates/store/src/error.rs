/// Errors of storage access. Every variant names the location it concerns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A location that cannot be opened as a store, or a key that is not a valid object path: an
    /// unknown scheme, a missing bucket name, a destination that is no directory.
    #[error("invalid location {location:?}: {reason}")]
    InvalidLocation {
        /// The location (or the URL of the key) as given.
        location: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A location with a `scheme://` prefix that is not a valid URL.
    #[error("invalid location {location:?}")]
    InvalidUrl {
        /// The location as given.
        location: String,
        /// The URL parser's error.
        #[source]
        source: url::ParseError,
    },

    /// A `file://` URL that names no local path (another host, say).
    #[error("invalid location {location:?}: not a local file URL")]
    NotAFileUrl {
        /// The URL as given.
        location: String,
    },

    /// A local location that must exist (a source) cannot be resolved.
    #[error("cannot resolve {location}")]
    Resolve {
        /// The path as given.
        location: String,
        /// The file system's error (usually: it does not exist).
        #[source]
        source: std::io::Error,
    },

    /// A request to an object store failed (after the retries the options allow). When it failed
    /// for want of credentials, the message says so first (see [`missing_credentials`]).
    #[error("{operation} {location}{}", missing_credentials(source))]
    Request {
        /// What was attempted, as the message starts: `"cannot read"`, `"cannot list"`, ...
        operation: &'static str,
        /// The URL of the object or prefix.
        location: String,
        /// object_store's error, whose kind tells a missing object from a failed request.
        #[source]
        source: Box<object_store::Error>,
    },

    /// A listing found a name that no object key can hold (a control character such as a tab, or a
    /// name that is not UTF-8): nothing below the listed prefix can be read or written by name.
    #[error("cannot list {location}: the name {name:?} below it holds a character no object key can (a control character, or bytes that are not UTF-8); rename it or move it out of {location}")]
    UnusableName {
        /// The URL of the listed prefix.
        location: String,
        /// The path holding the name, as the listing found it.
        name: String,
    },

    /// A ranged read returned fewer bytes than a wanted range needs: the object ends at `len`.
    #[error("{location}: bytes {start}..{end} are beyond its end ({len} bytes)")]
    RangePastEnd {
        /// The URL of the object.
        location: String,
        /// First byte of the wanted range.
        start: u64,
        /// End of the wanted range (exclusive).
        end: u64,
        /// Length of the object in bytes.
        len: u64,
    },

    /// An object (or a range of one) longer than the most its reader can need: a stored chunk longer
    /// than its codecs can encode a chunk in (see [`Store::get_many_bounded`](crate::Store)). It is
    /// not read whole: at most `max + 1` bytes of it were.
    #[error("{location} holds {} bytes, more than the {max} bytes a chunk can be stored in (its codecs' bound for the chunk's size): it was not read", if *at_least { format!("at least {len}") } else { len.to_string() })]
    TooLarge {
        /// The URL of the object (and range).
        location: String,
        /// Its length in bytes, or the bytes read before it was refused (`at_least`).
        len: u64,
        /// Whether the length is only known to be at least `len` (an object that grew while read).
        at_least: bool,
        /// The most bytes a chunk can be stored in.
        max: u64,
    },

    /// A key of a local store whose path goes through a symbolic link (a linked folder on the way, or
    /// the key itself): removing or replacing it would change a file outside the store, which zshard
    /// never does.
    #[error("{location} goes through the symbolic link {}: zshard does not remove or write through links", link.display())]
    ThroughLink {
        /// The URL of the key.
        location: String,
        /// The first link on its path.
        link: std::path::PathBuf,
    },

    /// A file operation failed: a read of a local store's file, or the spool file of an upload.
    #[error("{operation} {location}")]
    Io {
        /// What was attempted, as the message starts: `"cannot read"`, `"cannot spool"`, ...
        operation: &'static str,
        /// The URL of the object.
        location: String,
        /// The file system's error.
        #[source]
        source: std::io::Error,
    },

    /// The directory of a local destination store could not be created.
    #[error("cannot create {location}")]
    CreateDir {
        /// The directory's path.
        location: String,
        /// The file system's error.
        #[source]
        source: std::io::Error,
    },

    /// A record of a multipart upload (under a destination's `.zshard/uploads/`) that cannot be
    /// used: not zshard's format, or naming an object outside the destination.
    #[error("{location}: {reason}")]
    UploadRecord {
        /// The URL of the record.
        location: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The guard of an HTTP(S) store (see [`HttpGuard`](crate::HttpGuard)) refused a connection
    /// or a redirect.
    #[error("{request} is refused: {reason}")]
    Refused {
        /// The request, connection or redirect, with its URLs, host and address.
        request: String,
        /// Why, for people.
        reason: String,
    },

    /// A zip source whose central directory cannot be read (not a zip file, truncated, damaged).
    #[error("{zip}: {reason}")]
    ZipDirectory {
        /// The zip's location as given.
        zip: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A member of a zip source that cannot be read (compressed by an unsupported method,
    /// damaged, or lying outside the file).
    #[error("{zip}: member {member}: {reason}")]
    ZipMember {
        /// The zip's location as given.
        zip: String,
        /// The member's name in the zip.
        member: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The tokio runtime of [`IoRuntime`](crate::IoRuntime) could not be built.
    #[error("cannot start the I/O runtime")]
    Runtime {
        /// The operating system's error (threads, an event queue).
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the store answered that it does not allow or does not have this request (a
    /// permission refused, credentials not taken, an operation it does not implement), or the
    /// guard of an HTTP(S) store refused it, rather than failed to answer: asking again gets the
    /// same answer.
    pub fn is_refusal(&self) -> bool {
        match self {
            Error::Refused { .. } => true,
            Error::Request { source, .. } => {
                matches!(
                    **source,
                    object_store::Error::PermissionDenied { .. }
                        | object_store::Error::Unauthenticated { .. }
                        | object_store::Error::NotImplemented { .. }
                ) || crate::guard::refusal_in(Some(
                    source.as_ref() as &(dyn std::error::Error + 'static)
                ))
                .is_some()
            }
            _ => false,
        }
    }
}

/// The result type of this crate, [`Error`] unless told otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where an S3 request looks for credentials, in the order object_store's builder tries them.
const AWS_CREDENTIALS_LOOKED_IN: &str = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
    AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or \
    _FULL_URI, then the EC2 instance metadata service at 169.254.169.254";

/// `: no AWS credentials found (looked in: ...)` when `error` is S3's last resort for credentials
/// failing (the EC2 instance metadata service, which answers nothing useful off EC2): the message
/// then says what is missing before object_store's own words (`Error performing PUT
/// http://169.254.169.254/latest/api/token ... 403`). Empty for every other error.
fn missing_credentials(error: &object_store::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(e) = cause {
        text.push_str(&e.to_string());
        cause = e.source();
    }
    if ![
        "169.254.169.254",
        "fd00:ec2::254",
        "/latest/api/token",
        "/latest/meta-data/",
    ]
    .iter()
    .any(|imds| text.contains(imds))
    {
        return String::new();
    }
    format!(
        ": no AWS credentials found (looked in: {AWS_CREDENTIALS_LOOKED_IN}); set them, or give --anonymous for a public bucket"
    )
}

#[cfg(test)]
mod credentials_tests {
    use super::*;

    /// Issue 44, point 3: a request that failed at the instance metadata service says that no
    /// credentials were found, and where they were looked for; other failures say nothing of it.
    #[test]
    fn a_failed_metadata_request_names_the_missing_credentials() {
        let imds = object_store::Error::Generic {
            store: "S3",
            source: "Error performing PUT http://169.254.169.254/latest/api/token in 1ms - Server returned non-2xx status code: 403 Forbidden".into(),
        };
        let e = Error::Request {
            operation: "cannot list",
            location: "s3://bucket/out.zarr/.zshard".into(),
            source: Box::new(imds),
        };
        let text = e.to_string();
        assert!(
            text.starts_with("cannot list s3://bucket/out.zarr/.zshard: no AWS credentials found (looked in: AWS_ACCESS_KEY_ID"),
            "{text}"
        );
        let other = Error::Request {
            operation: "cannot read",
            location: "s3://bucket/k".into(),
            source: Box::new(object_store::Error::Generic {
                store: "S3",
                source: "connection refused".into(),
            }),
        };
        assert_eq!(other.to_string(), "cannot read s3://bucket/k");
    }
}
