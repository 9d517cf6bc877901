//! Where data lives: a local path or a URL, parsed once. Every question about a location (local or
//! remote, its file path, a child key, a relative path against a base, whether a source and a
//! destination overlap) is answered here, with one rule each.
//!
//! ```
//! use zshard_store::{Location, Overlap};
//!
//! let local = Location::parse("FILE:///data/in.zarr").unwrap();
//! assert_eq!(local.local_path(), Some(std::path::Path::new("/data/in.zarr")));
//! assert!(!local.is_remote());
//!
//! let bucket = Location::parse("s3://bucket/in.zarr/").unwrap();
//! assert!(bucket.is_remote());
//! assert_eq!(bucket.scheme(), Some("s3"));
//! assert_eq!(bucket.join("a/zarr.json").to_string(), "s3://bucket/in.zarr/a/zarr.json");
//!
//! let inside = Location::parse("s3://bucket/in.zarr/out").unwrap();
//! assert_eq!(
//!     Location::overlap(&bucket, &inside).unwrap(),
//!     Some(Overlap::DestinationInSource)
//! );
//! ```

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use url::Url;

use crate::error::{Error, Result};

/// A local path or a URL, parsed once.
///
/// - Text without a `scheme://` prefix (a scheme is a letter followed by at least one letter, digit,
///   `+`, `-` or `.`, so `C://x` is a path) is a local path, relative or absolute.
/// - `file://` URLs, in any case (`FILE:///x`), are local: [`Url::to_file_path`] gives the path.
/// - Every other URL (`s3://`, `gs://`, `az://`, `abfs(s)://`, `http(s)://`, ...) is remote. Which
///   schemes can be opened is [`Store::open`](crate::Store::open)'s business, not the parser's.
///
/// [`Display`](fmt::Display) prints the text as it was given (what messages print).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The text as given (or as built by [`Location::join`] / [`Location::resolve_against`]).
    text: String,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Local(PathBuf),
    Remote(Url),
}

/// A cloud location's bucket or container (see [`Location::bucket`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// The Azure storage account, where the URL names it.
    pub account: Option<String>,
    /// The bucket or container.
    pub name: String,
    /// The path inside it, without leading or trailing `/` (empty for the whole bucket).
    pub prefix: String,
}

/// Which of two overlapping locations holds the other (see [`Location::overlap`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// The destination is the source or lies inside it.
    DestinationInSource,
    /// The source lies inside the destination.
    SourceInDestination,
}

/// The scheme of `text` when it has the form `scheme://...` with a valid scheme of two characters or
/// more (one letter would be a Windows drive).
fn scheme_of(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && scheme.len() >= 2;
    valid.then_some(scheme)
}

impl Location {
    /// Parses a path or URL (see the type's rules).
    ///
    /// ```
    /// use zshard_store::Location;
    ///
    /// assert!(Location::parse("data/in.zarr").unwrap().is_local());
    /// assert!(Location::parse("gs://bucket/x").unwrap().is_remote());
    /// assert!(Location::parse("file://somehost/x").is_err()); // not a local file URL
    /// assert!(Location::parse("https://").is_err()); // no host
    /// assert!(Location::parse("").is_err()); // not the working directory
    /// ```
    pub fn parse(text: &str) -> Result<Location> {
        // An empty location would be the working directory, which nobody means: a job entry or
        // flag left empty must not convert into (or, with --overwrite, clear) the current folder.
        if text.is_empty() {
            return Err(Error::InvalidLocation {
                location: String::new(),
                reason: "empty: name a path or URL".into(),
            });
        }
        let Some(scheme) = scheme_of(text) else {
            return Ok(Location::from_path(text));
        };
        let url = Url::parse(text).map_err(|source| Error::InvalidUrl {
            location: text.to_string(),
            source,
        })?;
        let kind = if scheme.eq_ignore_ascii_case("file") {
            Kind::Local(url.to_file_path().map_err(|()| Error::NotAFileUrl {
                location: text.to_string(),
            })?)
        } else {
            Kind::Remote(url)
        };
        Ok(Location {
            text: text.to_string(),
            kind,
        })
    }

    /// A local path (never parsed as a URL).
    pub fn from_path(path: impl Into<PathBuf>) -> Location {
        let path = path.into();
        Location {
            text: path.to_string_lossy().into_owned(),
            kind: Kind::Local(path),
        }
    }

    /// Whether this is an object store or web location (not a local path or `file://` URL). Remote
    /// outputs are uploaded in parts, and remote conversions want more I/O threads.
    pub fn is_remote(&self) -> bool {
        matches!(self.kind, Kind::Remote(_))
    }

    /// Whether this is a local path or `file://` URL.
    pub fn is_local(&self) -> bool {
        !self.is_remote()
    }

    /// The local path (a `file://` URL's converted), `None` for remote locations.
    pub fn local_path(&self) -> Option<&Path> {
        match &self.kind {
            Kind::Local(path) => Some(path),
            Kind::Remote(_) => None,
        }
    }

    /// The URL of a remote location, `None` for local ones.
    pub fn url(&self) -> Option<&Url> {
        match &self.kind {
            Kind::Local(_) => None,
            Kind::Remote(url) => Some(url),
        }
    }

    /// The scheme of a remote location, lower case (`s3`, `gs`, `az`, `abfss`, `https`, ...).
    pub fn scheme(&self) -> Option<&str> {
        self.url().map(Url::scheme)
    }

    /// The bucket (an Azure container for `az://`, `abfs(s)://`, `adl://`, `azure://`) of a cloud
    /// location and the path inside it, read as object_store reads these URLs; the storage account
    /// too where the URL names one (`abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/path`). `None`
    /// for local and `http(s)://` locations.
    ///
    /// ```
    /// use zshard_store::Location;
    ///
    /// let az = Location::parse("abfss://data@acct.dfs.core.windows.net/repo/").unwrap();
    /// let bucket = az.bucket().unwrap();
    /// assert_eq!((bucket.account.as_deref(), bucket.name.as_str()), (Some("acct"), "data"));
    /// assert_eq!(bucket.prefix, "repo");
    /// assert_eq!(Location::parse("gs://b/x/y").unwrap().bucket().unwrap().prefix, "x/y");
    /// ```
    pub fn bucket(&self) -> Option<Bucket> {
        let url = self.url()?;
        if matches!(url.scheme(), "http" | "https") {
            return None;
        }
        let host = url.host_str().unwrap_or_default();
        let (account, name) = match url.username() {
            // The Hadoop form: the container is the user, the account the host's first label.
            "" => (None, host.to_string()),
            container => (
                host.split_once('.').map(|(account, _)| account.to_string()),
                container.to_string(),
            ),
        };
        Some(Bucket {
            account,
            name,
            prefix: url.path().trim_matches('/').to_string(),
        })
    }

    /// Whether this names a zip file (`.zip`, or `.ozx` for a zipped OME-Zarr, in any case): opened
    /// as a source, its members are the store's keys.
    ///
    /// ```
    /// use zshard_store::Location;
    ///
    /// assert!(Location::parse("s3://b/image.OZX").unwrap().is_zip());
    /// assert!(Location::parse("/data/in.zarr.zip/").unwrap().is_zip());
    /// assert!(!Location::parse("/data/in.zarr").unwrap().is_zip());
    /// ```
    pub fn is_zip(&self) -> bool {
        let name = self.text.trim_end_matches('/').to_ascii_lowercase();
        name.ends_with(".zip") || name.ends_with(".ozx")
    }

    /// The text as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The text of the parent and the last component: `s3://b/refs/a.json` gives `s3://b/refs` and
    /// `a.json` (a trailing `/` is ignored), which is how a single object is opened through the store
    /// of its folder.
    ///
    /// ```
    /// use zshard_store::Location;
    ///
    /// let refs = Location::parse("s3://b/refs/a.json").unwrap();
    /// assert_eq!(refs.split_last(), ("s3://b/refs".to_string(), "a.json".to_string()));
    /// ```
    pub fn split_last(&self) -> (String, String) {
        let trimmed = self.as_str().trim_end_matches('/');
        match trimmed.rsplit_once('/') {
            Some((parent, name)) => (parent.to_string(), name.to_string()),
            None => (String::new(), trimmed.to_string()),
        }
    }

    /// The location of `key` (`/`-separated, empty parts ignored) below this one. The text is this
    /// one's without trailing `/`, a `/`, and the key without surrounding `/`, as messages print a
    /// key of a store; an empty key gives this location unchanged.
    ///
    /// ```
    /// use zshard_store::Location;
    ///
    /// let root = Location::parse("/data/out.zarr/").unwrap();
    /// let child = root.join("/a/c/0/");
    /// assert_eq!(child.as_str(), "/data/out.zarr/a/c/0");
    /// assert_eq!(child.local_path(), Some(std::path::Path::new("/data/out.zarr/a/c/0")));
    /// let remote = Location::parse("s3://b/out.zarr").unwrap().join("a b/zarr.json");
    /// assert_eq!(remote.url().unwrap().path(), "/out.zarr/a%20b/zarr.json");
    /// ```
    pub fn join(&self, key: &str) -> Location {
        let key = key.trim_matches('/');
        if key.is_empty() {
            return self.clone();
        }
        let parts = key.split('/').filter(|p| !p.is_empty());
        let kind = match &self.kind {
            Kind::Local(path) => {
                Kind::Local(parts.fold(path.clone(), |path, part| path.join(part)))
            }
            Kind::Remote(url) => {
                let mut url = url.clone();
                // Only URLs without an authority ("mailto:x") cannot have segments; every remote
                // location has one (it was written `scheme://`).
                if let Ok(mut segments) = url.path_segments_mut() {
                    segments.pop_if_empty().extend(parts);
                }
                Kind::Remote(url)
            }
        };
        Location {
            text: format!("{}/{key}", self.text.trim_end_matches('/')),
            kind,
        }
    }

    /// A relative local path resolved against the folder `base` (relative paths in a job file are
    /// relative to the file's folder); absolute paths and URLs are returned unchanged.
    ///
    /// ```
    /// use std::path::Path;
    /// use zshard_store::Location;
    ///
    /// let base = Path::new("/jobs");
    /// let relative = Location::parse("data/in.zarr").unwrap().resolve_against(base);
    /// assert_eq!(relative.as_str(), "/jobs/data/in.zarr");
    /// let absolute = Location::parse("/data/in.zarr").unwrap().resolve_against(base);
    /// assert_eq!(absolute.as_str(), "/data/in.zarr");
    /// let url = Location::parse("s3://b/in.zarr").unwrap().resolve_against(base);
    /// assert_eq!(url.as_str(), "s3://b/in.zarr");
    /// ```
    pub fn resolve_against(&self, base: &Path) -> Location {
        match &self.kind {
            Kind::Local(path) if path.is_relative() => Location::from_path(base.join(path)),
            _ => self.clone(),
        }
    }

    /// For a local location: the absolute path with `..` and symbolic links resolved, also when its
    /// last components do not exist yet (the nearest existing ancestor is canonicalized and the rest
    /// applied lexically). `None` for remote locations.
    pub fn resolved_path(&self) -> Option<PathBuf> {
        self.local_path().map(resolve)
    }

    /// Whether `source` and `destination` overlap, and which holds the other (a destination equal to
    /// the source is [`Overlap::DestinationInSource`]). Converting into the source would read our own
    /// output, and a destination holding the source could be cleared by `--overwrite`.
    ///
    /// - Both local: the source must exist and is canonicalized; the destination is
    ///   [resolved](Location::resolved_path) (it may not exist yet); then paths compare by components.
    /// - Both remote: the URLs, each with one trailing `/`, compare as text prefixes (so `s3://b/a`
    ///   does not hold `s3://b/ab`).
    /// - One local and one remote never overlap.
    ///
    /// ```
    /// use zshard_store::{Location, Overlap};
    ///
    /// let parse = |s| Location::parse(s).unwrap();
    /// assert_eq!(Location::overlap(&parse("s3://b/a"), &parse("s3://b/ab")).unwrap(), None);
    /// assert_eq!(
    ///     Location::overlap(&parse("s3://b/a/in"), &parse("s3://b/a/")).unwrap(),
    ///     Some(Overlap::SourceInDestination)
    /// );
    /// assert_eq!(Location::overlap(&parse("/x"), &parse("s3://b/x")).unwrap(), None);
    /// ```
    pub fn overlap(source: &Location, destination: &Location) -> Result<Option<Overlap>> {
        let (inside, holds) = match (&source.kind, &destination.kind) {
            (Kind::Local(src), Kind::Local(dst)) => {
                let src = src.canonicalize().map_err(|source_error| Error::Resolve {
                    location: source.text.clone(),
                    source: source_error,
                })?;
                let dst = resolve(dst);
                (dst.starts_with(&src), src.starts_with(&dst))
            }
            (Kind::Remote(src), Kind::Remote(dst)) => {
                let norm = |u: &Url| format!("{}/", u.as_str().trim_end_matches('/'));
                let (src, dst) = (norm(src), norm(dst));
                (dst.starts_with(&src), src.starts_with(&dst))
            }
            _ => (false, false),
        };
        Ok(if inside {
            Some(Overlap::DestinationInSource)
        } else if holds {
            Some(Overlap::SourceInDestination)
        } else {
            None
        })
    }
}

impl FromStr for Location {
    type Err = Error;

    fn from_str(text: &str) -> Result<Location> {
        Location::parse(text)
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// An absolute path with symlinks and `..` resolved, also when its last components do not exist yet:
/// the nearest existing ancestor is canonicalized and the rest applied lexically.
fn resolve(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // `..` lexically first (as create_dir_all would walk it), then symlinks of the existing part.
    let mut lexical = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    let mut existing = lexical.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            // `..` at the end, or the root: let the lexical pass below handle it.
            _ => break,
        }
    }
    let mut out = existing
        .canonicalize()
        .unwrap_or_else(|_| existing.to_path_buf());
    for part in rest.iter().rev() {
        if part == ".." {
            out.pop();
        } else if part != "." {
            out.push(part);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Location {
        Location::parse(text).expect("location")
    }

    #[test]
    fn an_empty_location_is_refused() {
        let error = Location::parse("").expect_err("empty");
        assert!(error.to_string().contains("empty"), "{error}");
    }

    #[test]
    fn local_and_remote() {
        for local in [
            "/x",
            "x",
            "./x",
            "../x",
            "file:///x",
            "FILE:///x",
            "File:///x",
            "C://x",
        ] {
            assert!(parse(local).is_local(), "{local}");
            assert!(!parse(local).is_remote(), "{local}");
            assert_eq!(parse(local).url(), None, "{local}");
        }
        for remote in [
            "s3://b/x",
            "S3://b/x",
            "gs://b",
            "az://c/x",
            "abfs://c@a.dfs.core.windows.net/x",
            "abfss://c@a.dfs.core.windows.net/x",
            "http://host/x",
            "https://host/x",
        ] {
            assert!(parse(remote).is_remote(), "{remote}");
            assert_eq!(parse(remote).local_path(), None, "{remote}");
        }
        assert_eq!(parse("S3://b/x").scheme(), Some("s3"));
        assert_eq!(parse("abfss://c@a/x").scheme(), Some("abfss"));
        assert_eq!(parse("/x").scheme(), None);
        // `a/b://c` has no valid scheme: a relative path.
        assert_eq!(parse("a/b://c").local_path(), Some(Path::new("a/b://c")));
    }

    #[test]
    fn file_urls_become_paths_through_the_url_parser() {
        assert_eq!(parse("file:///x/y").local_path(), Some(Path::new("/x/y")));
        assert_eq!(parse("FILE:///x").local_path(), Some(Path::new("/x")));
        // Percent escapes are decoded (string slicing kept them).
        assert_eq!(
            parse("file:///x/a%20b").local_path(),
            Some(Path::new("/x/a b"))
        );
        assert_eq!(
            parse("file://localhost/x").local_path(),
            Some(Path::new("/x"))
        );
        assert!(matches!(
            Location::parse("file://elsewhere/x"),
            Err(Error::NotAFileUrl { .. })
        ));
        assert!(matches!(
            Location::parse("https://"),
            Err(Error::InvalidUrl { .. })
        ));
        let err = Location::parse("http://[bad/x").expect_err("bad url");
        assert!(err.to_string().contains("http://[bad/x"), "{err}");
    }

    #[test]
    fn display_is_the_text_as_given() {
        for text in ["s3://b/x/", "FILE:///x", "rel/dir/", "https://h/a%20b"] {
            assert_eq!(parse(text).to_string(), text);
            assert_eq!(parse(text).as_str(), text);
        }
        assert_eq!(Location::from_path("/a/b").to_string(), "/a/b");
        assert_eq!(
            "s3://b/x".parse::<Location>().expect("parse"),
            parse("s3://b/x")
        );
    }

    #[test]
    fn join_appends_a_key() {
        let root = parse("s3://b/out.zarr/");
        let child = root.join("a/c/0");
        assert_eq!(child.as_str(), "s3://b/out.zarr/a/c/0");
        assert_eq!(child.url().map(Url::as_str), Some("s3://b/out.zarr/a/c/0"));
        assert_eq!(root.join("").as_str(), "s3://b/out.zarr/");
        assert_eq!(root.join("/").as_str(), "s3://b/out.zarr/");
        assert_eq!(
            parse("gs://b").join("x").url().map(Url::as_str),
            Some("gs://b/x")
        );
        let local = parse("file:///d/").join("a//b/");
        assert_eq!(local.as_str(), "file:///d/a//b");
        assert_eq!(local.local_path(), Some(Path::new("/d/a/b")));
        assert_eq!(
            parse("rel").join("k").local_path(),
            Some(Path::new("rel/k"))
        );
    }

    #[test]
    fn relative_paths_resolve_against_a_base() {
        let base = Path::new("/jobs/here");
        assert_eq!(
            parse("in.zarr").resolve_against(base).local_path(),
            Some(Path::new("/jobs/here/in.zarr"))
        );
        assert_eq!(
            parse("../in.zarr").resolve_against(base).as_str(),
            "/jobs/here/../in.zarr"
        );
        assert_eq!(parse("/abs").resolve_against(base).as_str(), "/abs");
        assert_eq!(
            parse("file:///abs").resolve_against(base).as_str(),
            "file:///abs"
        );
        assert_eq!(parse("s3://b/k").resolve_against(base).as_str(), "s3://b/k");
        // An empty base (a job file named without a folder) leaves the path relative.
        assert_eq!(parse("x").resolve_against(Path::new("")).as_str(), "x");
    }

    #[test]
    fn remote_overlap_compares_prefixes_at_a_slash() {
        let overlap = |a: &str, b: &str| Location::overlap(&parse(a), &parse(b)).expect("overlap");
        assert_eq!(overlap("s3://b/a", "s3://b/ab"), None);
        assert_eq!(overlap("s3://b/ab", "s3://b/a"), None);
        assert_eq!(
            overlap("s3://b/a", "s3://b/a/out"),
            Some(Overlap::DestinationInSource)
        );
        assert_eq!(
            overlap("s3://b/a/", "s3://b/a"),
            Some(Overlap::DestinationInSource)
        );
        assert_eq!(
            overlap("s3://b/a/in", "s3://b/a/"),
            Some(Overlap::SourceInDestination)
        );
        assert_eq!(
            overlap("s3://b", "s3://b/x"),
            Some(Overlap::DestinationInSource)
        );
        assert_eq!(overlap("s3://b/a", "gs://b/a"), None);
        assert_eq!(overlap("s3://b/a", "s3://c/a"), None);
    }

    #[test]
    fn local_overlap_resolves_dots_and_symlinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let src = root.join("src");
        std::fs::create_dir_all(src.join("sub")).expect("mkdir");
        let text = |p: &Path| p.to_string_lossy().into_owned();
        let overlap = |a: &str, b: &str| Location::overlap(&parse(a), &parse(b)).expect("overlap");
        // Inside, also through `..` and a destination that does not exist yet.
        assert_eq!(
            overlap(&text(&src), &text(&src.join("out"))),
            Some(Overlap::DestinationInSource)
        );
        assert_eq!(
            overlap(&text(&src), &text(&root.join("other/../src/new/out"))),
            Some(Overlap::DestinationInSource)
        );
        assert_eq!(
            overlap(&text(&src), &text(&src)),
            Some(Overlap::DestinationInSource)
        );
        assert_eq!(
            overlap(&text(&src.join("sub")), &text(&src)),
            Some(Overlap::SourceInDestination)
        );
        // A sibling whose name extends the source's is not inside it.
        assert_eq!(overlap(&text(&src), &text(&root.join("src2"))), None);
        assert_eq!(
            overlap(&text(&src), &text(&root.join("src/.."))),
            Some(Overlap::SourceInDestination)
        );
        // Trailing slashes do not matter.
        assert_eq!(
            overlap(&format!("{}/", text(&src)), &format!("{}/out/", text(&src))),
            Some(Overlap::DestinationInSource)
        );
        // A file URL, in any case, is the same folder.
        assert_eq!(
            overlap(&format!("FILE://{}", text(&src)), &text(&src.join("o"))),
            Some(Overlap::DestinationInSource)
        );
        // A symlinked folder leads to the source.
        let link = root.join("link");
        std::os::unix::fs::symlink(&src, &link).expect("symlink");
        assert_eq!(
            overlap(&text(&src), &text(&link.join("out"))),
            Some(Overlap::DestinationInSource)
        );
        assert_eq!(
            overlap(&text(&link.join("sub")), &text(&src)),
            Some(Overlap::SourceInDestination)
        );
        // Local and remote never overlap.
        assert_eq!(overlap(&text(&src), "s3://b/src"), None);
        assert_eq!(overlap("s3://b/src", &text(&src)), None);
        // A relative destination resolves against the working directory.
        let cwd = std::env::current_dir().expect("cwd");
        assert_eq!(
            overlap(&text(&cwd), "some/relative/out"),
            Some(Overlap::DestinationInSource)
        );
    }

    #[test]
    fn a_missing_local_source_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing");
        let err = Location::overlap(
            &Location::from_path(&missing),
            &Location::from_path(dir.path().join("out")),
        )
        .expect_err("missing source");
        assert!(matches!(err, Error::Resolve { .. }), "{err}");
        assert!(err.to_string().contains("missing"), "{err}");
        // Remote sources are not checked.
        assert_eq!(
            Location::overlap(&parse("s3://b/missing"), &parse("s3://b/out")).expect("remote"),
            None
        );
    }

    #[test]
    fn resolved_path_applies_dots_to_missing_components() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().canonicalize().expect("canonical");
        let location = Location::from_path(dir.path().join("a/b/../c/./d"));
        assert_eq!(location.resolved_path(), Some(real.join("a/c/d")));
        assert_eq!(parse("s3://b/x").resolved_path(), None);
    }
}
