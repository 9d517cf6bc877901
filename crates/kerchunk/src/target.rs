//! Where a reference's URL points, and whether it may be read. A reference set is untrusted input:
//!
//! - local targets (plain paths and `file://`) must lie under the root (the reference file's folder,
//!   or `--ref-root`); relative paths resolve against the root and may not climb out of it with `..`;
//!   `~` paths are refused;
//! - remote targets must use `s3`, `gs`, `az`, `http` or `https`; `http(s)` to loopback, link-local
//!   (such as the cloud metadata address 169.254.169.254), private or unspecified addresses, and to
//!   `localhost` or cloud metadata host names, is refused;
//! - an allowed prefix (`--allow-ref-prefix`) admits any target that starts with it (at a path
//!   boundary), whatever the rules above say.
//!
//! Everything here is decided on the text alone (no I/O); callers also check the real path of local
//! targets, so that a symbolic link cannot lead out of the root.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Component, Path, PathBuf};

use zshard_core::Setting;
use zshard_store::Location;

/// Schemes of remote targets that are read.
pub(crate) const REMOTE_SCHEMES: [&str; 5] = ["s3", "gs", "az", "http", "https"];

/// Where relative targets resolve and local targets must stay.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Root {
    /// An absolute, normalized local folder.
    Local(PathBuf),
    /// A remote folder URL (no trailing `/`).
    Remote(String),
}

/// The security policy of one reference set.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Policy {
    pub root: Root,
    /// Allowed prefixes: URLs, or absolute normalized local paths.
    pub allow: Vec<String>,
}

/// A resolved target.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    /// An absolute, normalized local path.
    Local(PathBuf),
    /// An object: `base` is `scheme://authority` (what the store opens), `key` the decoded path below it.
    Remote { base: String, key: String },
}

/// Whether `text` is a URL (`scheme://...`, by the store's [`Location`] rule) rather than a path.
pub(crate) fn is_url(text: &str) -> bool {
    !matches!(Location::parse(text), Ok(l) if l.local_path() == Some(Path::new(text)))
}

/// Why [`Location::parse`] refused a location, as a reason for messages.
pub(crate) fn location_error(e: zshard_store::Error) -> String {
    match e {
        zshard_store::Error::InvalidUrl { source, .. } => format!("invalid URL: {source}"),
        zshard_store::Error::NotAFileUrl { .. } => "not a local file URL".into(),
        other => other.to_string(),
    }
}

/// `path` with `.` and `..` resolved lexically (`..` at the root stays at the root).
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Whether `target` starts with `prefix` at a path boundary.
pub(crate) fn has_prefix(target: &str, prefix: &str) -> bool {
    if prefix.is_empty() || !target.starts_with(prefix) {
        return false;
    }
    prefix.ends_with('/') || target.len() == prefix.len() || target[prefix.len()..].starts_with('/')
}

fn allowed_by_prefix(policy: &Policy, forms: &[&str]) -> bool {
    policy
        .allow
        .iter()
        .any(|p| forms.iter().any(|f| has_prefix(f, p)))
}

/// Whether the local absolute path `path` may be read under `policy`.
pub(crate) fn local_allowed(path: &Path, policy: &Policy) -> Result<(), String> {
    let text = path.to_string_lossy();
    if allowed_by_prefix(policy, &[&text, &format!("file://{text}")]) {
        return Ok(());
    }
    match &policy.root {
        Root::Local(root) if path.starts_with(root) => Ok(()),
        Root::Local(root) => Err(format!(
            "it is outside the reference root {} (see {} and {})",
            root.display(),
            Setting::RefRoot,
            Setting::AllowRefPrefix
        )),
        Root::Remote(root) => Err(format!(
            "local files are not read for a remote reference set ({root}) unless {} or {} names them",
            Setting::RefRoot,
            Setting::AllowRefPrefix
        )),
    }
}

/// Why an address may not be reached without an allowed prefix, if it may not: loopback,
/// link-local, private (and carrier-grade NAT), unique-local, unspecified, broadcast and multicast
/// addresses, IPv4-mapped IPv6 forms included.
pub(crate) fn internal_address(ip: IpAddr) -> Option<&'static str> {
    fn v4(ip: Ipv4Addr) -> Option<&'static str> {
        let o = ip.octets();
        if ip.is_loopback() {
            Some("a loopback address")
        } else if ip.is_link_local() {
            Some("a link-local address")
        } else if ip.is_private() || (o[0] == 100 && (64..128).contains(&o[1])) {
            Some("a private address")
        } else if ip.is_unspecified() || o[0] == 0 || ip.is_broadcast() {
            Some("an unspecified address")
        } else if ip.is_multicast() {
            Some("a multicast address")
        } else {
            None
        }
    }
    fn v6(ip: Ipv6Addr) -> Option<&'static str> {
        if let Some(mapped) = ip.to_ipv4_mapped() {
            return v4(mapped);
        }
        let first = ip.segments()[0];
        if ip.is_loopback() {
            Some("a loopback address")
        } else if ip.is_unspecified() {
            Some("an unspecified address")
        } else if (first & 0xffc0) == 0xfe80 || (first & 0xffc0) == 0xfec0 {
            Some("a link-local address")
        } else if (first & 0xfe00) == 0xfc00 {
            Some("a private address")
        } else if ip.is_multicast() {
            Some("a multicast address")
        } else {
            None
        }
    }
    match ip {
        IpAddr::V4(ip) => v4(ip),
        IpAddr::V6(ip) => v6(ip),
    }
}

/// Why a host may not be reached without an allowed prefix, if it may not (by its text: a literal
/// address, or a name that is internal by definition).
fn internal_host(host: &url::Host<&str>) -> Option<&'static str> {
    match host {
        url::Host::Ipv4(ip) => internal_address(IpAddr::V4(*ip)),
        url::Host::Ipv6(ip) => internal_address(IpAddr::V6(*ip)),
        url::Host::Domain(d) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            if d == "localhost" || d.ends_with(".localhost") {
                Some("a loopback address")
            } else if d == "metadata" || d == "metadata.google.internal" {
                Some("a cloud metadata service")
            } else if let Ok(ip) = d.parse::<IpAddr>() {
                internal_address(ip)
            } else {
                None
            }
        }
    }
}

/// Whether the remote URL `url` (`raw` as the reference writes it) may be read under `policy`:
/// an allowed prefix admits it; otherwise its scheme must be a remote one, and an `http(s)` host
/// must not be internal by its text. (Connections check the addresses a name resolves to too:
/// see the [`HttpGuard`](zshard_store::HttpGuard) implementation below.)
fn remote_allowed(url: &url::Url, raw: &str, policy: &Policy) -> Result<(), String> {
    // The URL fetched is the parsed one, with dot segments resolved: `raw` with `../` (or `%2e%2e/`)
    // would match a prefix it climbs out of, so it is matched as written only without them.
    let forms: &[&str] = if has_dot_segments(raw) {
        &[url.as_str()]
    } else {
        &[url.as_str(), raw]
    };
    if allowed_by_prefix(policy, forms) {
        return Ok(());
    }
    let scheme = url.scheme();
    if !REMOTE_SCHEMES.contains(&scheme) {
        return Err(format!(
            "scheme {scheme} is not allowed (file, {})",
            REMOTE_SCHEMES.join(", ")
        ));
    }
    if scheme == "http" || scheme == "https" {
        if let Some(why) = url.host().as_ref().and_then(internal_host) {
            return Err(format!(
                "it is {why}, read only when {} names it",
                Setting::AllowRefPrefix
            ));
        }
    }
    Ok(())
}

impl zshard_store::HttpGuard for Policy {
    /// The addresses of a host that an allowed prefix names (`http://localhost:8000/` names
    /// `localhost`) are all allowed; other hosts may not resolve to internal addresses.
    fn check_address(&self, host: &str, address: IpAddr) -> Result<(), String> {
        let named = self.allow.iter().any(|prefix| {
            url::Url::parse(prefix)
                .ok()
                .and_then(|u| u.host_str().map(|h| h.eq_ignore_ascii_case(host)))
                .unwrap_or(false)
        });
        match internal_address(address) {
            Some(why) if !named => Err(format!(
                "{address} is {why}, read only when {} names the host {host}",
                Setting::AllowRefPrefix
            )),
            _ => Ok(()),
        }
    }

    /// A redirect is followed only to a URL that a reference could name directly.
    fn check_redirect(&self, to: &url::Url) -> Result<(), String> {
        if !matches!(to.scheme(), "http" | "https") {
            return Err(format!("scheme {} is not followed", to.scheme()));
        }
        remote_allowed(to, to.as_str(), self)
    }
}

/// Whether the path of the URL `raw` (as a reference writes it) has a `.` or `..` segment, escaped
/// (`%2e`) or not, separated by `/` or (as WHATWG URLs of special schemes allow) `\`.
fn has_dot_segments(raw: &str) -> bool {
    let after_scheme = raw.split_once("://").map_or(raw, |(_, rest)| rest);
    let path = after_scheme.split(['?', '#']).next().unwrap_or_default();
    path.split(['/', '\\'])
        .skip(1)
        .any(|segment| matches!(percent_decode(segment).as_str(), "." | ".."))
}

/// Decodes `%XX` escapes of a URL path; a `%` not followed by two hex digits stays as it is, and
/// bytes that are not UTF-8 become U+FFFD.
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

fn remote(url: &url::Url) -> Result<Target, String> {
    let host = url.host_str().unwrap_or_default();
    if host.is_empty() {
        return Err("the URL has no host or bucket".into());
    }
    let base = match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    };
    let key = percent_decode(url.path().trim_start_matches('/'));
    if key.is_empty() || key.ends_with('/') {
        return Err("the URL names no object".into());
    }
    if url.query().is_some() {
        return Err("URLs with a query string are not supported".into());
    }
    Ok(Target::Remote { base, key })
}

/// Resolves the URL of a reference under `policy`; `Err` is the reason it is refused.
pub(crate) fn resolve(raw: &str, policy: &Policy) -> Result<Target, String> {
    if raw.is_empty() {
        return Err("the URL is empty".into());
    }
    let location = Location::parse(raw).map_err(location_error)?;
    if let Some(url) = location.url() {
        remote_allowed(url, raw, policy)?;
        return remote(url);
    }
    // A plain path (`~` is the shell's, not ours), or a `file://` URL's path (always absolute).
    if raw.starts_with('~') {
        return Err("home-relative paths (~) are not allowed".into());
    }
    let path = location.local_path().unwrap_or_else(|| Path::new(raw));
    if path.is_absolute() {
        let path = normalize(path);
        local_allowed(&path, policy)?;
        return Ok(Target::Local(path));
    }
    match &policy.root {
        Root::Local(root) => {
            let joined = normalize(&root.join(path));
            if !joined.starts_with(root) {
                return Err(format!(
                    "the relative path climbs out of the reference root {}",
                    root.display()
                ));
            }
            local_allowed(&joined, policy)?;
            Ok(Target::Local(joined))
        }
        Root::Remote(root) => {
            let joined = format!("{root}/{raw}");
            let url = url::Url::parse(&joined).map_err(|e| format!("invalid URL: {e}"))?;
            if !has_prefix(url.as_str(), root) {
                return Err(format!(
                    "the relative path climbs out of the reference root {root}"
                ));
            }
            remote(&url)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str]) -> Policy {
        Policy {
            root: Root::Local(PathBuf::from("/data/refs")),
            allow: allow.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn local(p: &str) -> Target {
        Target::Local(PathBuf::from(p))
    }

    #[test]
    fn local_targets_stay_under_the_root() {
        let p = policy(&[]);
        assert_eq!(resolve("a.h5", &p), Ok(local("/data/refs/a.h5")));
        assert_eq!(resolve("./sub/../b.h5", &p), Ok(local("/data/refs/b.h5")));
        assert_eq!(
            resolve("/data/refs/x/c.nc", &p),
            Ok(local("/data/refs/x/c.nc"))
        );
        assert_eq!(
            resolve("file:///data/refs/d.nc", &p),
            Ok(local("/data/refs/d.nc"))
        );
        for refused in [
            "/etc/passwd",
            "file:///etc/passwd",
            "../secret.h5",
            "sub/../../refs2/x",
            "/data/refs/../other",
            "file:///data/refs/../../etc/shadow",
            "~/.aws/credentials",
            "~root/x",
            "/data/refsX/y",
        ] {
            let e = resolve(refused, &p).expect_err(refused);
            assert!(!e.is_empty());
        }
        assert!(resolve("../secret.h5", &p)
            .expect_err("escape")
            .contains("climbs out"));
        assert!(resolve("/etc/passwd", &p)
            .expect_err("outside")
            .contains(&Setting::RefRoot.to_string()));
    }

    /// Issue 31, row 3: a reference that climbs out of an allowed prefix with dot segments is
    /// matched as the URL that would be fetched.
    #[test]
    fn dot_segments_do_not_climb_out_of_an_allowed_prefix() {
        let p = policy(&["http://10.0.0.5/ok/"]);
        for climbing in [
            "http://10.0.0.5/ok/../data.bin",
            "http://10.0.0.5/ok/%2e%2e/data.bin",
            "http://10.0.0.5/ok/%2E%2e/data.bin",
            "http://10.0.0.5/ok/.%2e/data.bin",
            "http://10.0.0.5/ok/sub/../../data.bin",
            "http://10.0.0.5/ok\\..\\data.bin",
        ] {
            let e = resolve(climbing, &p).expect_err(climbing);
            assert!(e.contains("private address"), "{climbing}: {e}");
        }
        for inside in [
            "http://10.0.0.5/ok/data.bin",
            "http://10.0.0.5/ok/./data.bin",
            "http://10.0.0.5/ok/sub/../data.bin",
        ] {
            assert_eq!(
                resolve(inside, &p),
                Ok(Target::Remote {
                    base: "http://10.0.0.5".into(),
                    key: "ok/data.bin".into()
                }),
                "{inside}"
            );
        }
        assert!(!has_dot_segments("http://h/ok/..data/x.bin"));
    }

    #[test]
    fn remote_schemes_and_internal_addresses() {
        let p = policy(&[]);
        assert_eq!(
            resolve("s3://bucket/path/f.nc", &p),
            Ok(Target::Remote {
                base: "s3://bucket".into(),
                key: "path/f.nc".into()
            })
        );
        assert_eq!(
            resolve("https://example.org:8443/a%20b/f.nc", &p),
            Ok(Target::Remote {
                base: "https://example.org:8443".into(),
                key: "a b/f.nc".into()
            })
        );
        assert!(resolve("gs://b/x", &p).is_ok());
        assert!(resolve("az://container/x", &p).is_ok());
        for refused in [
            "ftp://host/f",
            "memory://x/y",
            "http://169.254.169.254/latest/meta-data",
            "http://127.0.0.1:8000/f",
            "http://localhost/f",
            "https://10.1.2.3/f",
            "http://192.168.0.1/f",
            "http://172.16.5.4/f",
            "http://[::1]/f",
            "http://[fe80::1]/f",
            "http://[fd00::1]/f",
            "http://[::ffff:127.0.0.1]/f",
            "http://239.1.2.3/f",
            "http://[ff05::2]/f",
            "http://0.0.0.0/f",
            "http://2130706433/f",
            "http://metadata.google.internal/computeMetadata/v1/",
            "https://host/",
            "https://host/f?sig=1",
        ] {
            assert!(resolve(refused, &p).is_err(), "{refused} must be refused");
        }
        assert!(resolve("http://169.254.169.254/x", &p)
            .expect_err("link-local")
            .contains("link-local"));
    }

    #[test]
    fn allowed_prefixes_open_exactly_what_they_name() {
        let p = policy(&["http://127.0.0.1:8000/", "/srv/data"]);
        assert!(resolve("http://127.0.0.1:8000/f.h5", &p).is_ok());
        assert!(resolve("http://127.0.0.1:8001/f.h5", &p).is_err());
        assert!(resolve("/srv/data/x.h5", &p).is_ok());
        assert!(resolve("file:///srv/data/x.h5", &p).is_ok());
        assert!(resolve("/srv/database/x.h5", &p).is_err());
        assert!(resolve("/srv/data/../../etc/passwd", &p).is_err());
        assert!(has_prefix("/a/b", "/a") && has_prefix("/a/b", "/a/") && !has_prefix("/ab", "/a"));
    }

    #[test]
    fn resolved_addresses_and_redirects() {
        use zshard_store::HttpGuard;
        let p = policy(&["http://data.example:8000/", "http://127.0.0.1:9000/"]);
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        // A name that no prefix names may not resolve to an internal address, in any notation.
        for internal in [
            "127.0.0.1",
            "127.1.2.3",
            "169.254.169.254",
            "10.0.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd12::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            let e = p
                .check_address("evil.example", ip(internal))
                .expect_err(internal);
            assert!(
                e.starts_with(&format!("{internal} is a"))
                    && e.ends_with("names the host evil.example"),
                "{e}"
            );
        }
        assert!(p.check_address("evil.example", ip("93.184.216.34")).is_ok());
        assert!(p.check_address("evil.example", ip("2606:2800::1")).is_ok());
        // A host that an allowed prefix names may resolve anywhere (any case).
        assert!(p.check_address("data.example", ip("127.0.0.1")).is_ok());
        assert!(p.check_address("DATA.example", ip("10.1.1.1")).is_ok());
        // Redirects: only where a reference could point.
        let url = |s: &str| url::Url::parse(s).expect("url");
        assert!(p.check_redirect(&url("http://127.0.0.1:9000/x")).is_ok());
        assert!(p
            .check_redirect(&url("https://public.example/x?sig=1"))
            .is_ok());
        for (refused, why) in [
            ("http://127.0.0.1:9001/x", "a loopback address"),
            ("http://169.254.169.254/latest", "a link-local address"),
            ("http://localhost:9000/x", "a loopback address"),
            ("http://[::ffff:10.0.0.1]/x", "a private address"),
            ("http://224.0.0.1/x", "a multicast address"),
            ("file:///etc/passwd", "scheme file is not followed"),
        ] {
            let e = p.check_redirect(&url(refused)).expect_err(refused);
            assert!(e.contains(why), "{refused}: {e}");
        }
    }

    #[test]
    fn remote_roots() {
        let p = Policy {
            root: Root::Remote("s3://bucket/refs".into()),
            allow: vec![],
        };
        assert_eq!(
            resolve("data/f.nc", &p),
            Ok(Target::Remote {
                base: "s3://bucket".into(),
                key: "refs/data/f.nc".into()
            })
        );
        assert!(resolve("../other/f.nc", &p).is_err());
        assert!(resolve("/local/f.nc", &p).is_err());
    }

    #[test]
    fn helpers() {
        assert!(is_url("s3://b/k"));
        assert!(is_url("FILE:///x") && is_url("file://host/x") && is_url("http://"));
        assert!(!is_url("c://x"));
        assert!(!is_url("a/b://c"));
        assert!(!is_url("/srv/data/"));
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../x")), PathBuf::from("/x"));
        assert_eq!(percent_decode("a%20b%2"), "a b%2");
        assert_eq!(percent_decode("%zz%%41%"), "%zz%A%");
        assert_eq!(percent_decode("x%2Fy%2fz"), "x/y/z");
        assert_eq!(percent_decode("%C3%A9%ff"), "\u{e9}\u{fffd}");
    }
}
