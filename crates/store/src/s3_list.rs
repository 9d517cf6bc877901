//! S3's listing (ListObjectsV2) with its pages read by quick-xml's event reader.
//!
//! object_store reads a listing's page through serde (`quick_xml::de`), about 5 us of CPU per key
//! on this project's benchmark machine; the event reader below takes about 1 us. A nightly update
//! of an S3 source lists every chunk key of it (W11: 161,600 keys, a core-second through serde),
//! and on a small machine that CPU is what the update waits for (docs/benchmarks.md, W11).
//!
//! The request is object_store's own in every other respect: the same URL and query, signed by
//! its [`AwsAuthorizer`] with the credentials of the store's provider, sent by an HTTP client made
//! from the store's client options, and retried by zshard's retry layer (`crate::retry`, which
//! knows the statuses worth another attempt through [`ListStatus`]). S3 Express One Zone buckets
//! (session credentials) are listed by object_store.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey, AwsAuthorizer};
use object_store::client::{
    HttpClient, HttpConnector, HttpRequest, HttpRequestBody, ReqwestConnector,
};
use object_store::path::Path;
use object_store::{ClientConfigKey, ClientOptions, ObjectMeta};
use quick_xml::events::Event;
use url::Url;

/// The store's name in the errors of its requests (object_store's own for S3).
const STORE: &str = "S3";

/// Lists the objects of one S3 bucket (see the module's documentation).
#[derive(Debug)]
pub(crate) struct S3Lister {
    /// The store, for its credentials (refreshed by its provider as they expire).
    store: Arc<AmazonS3>,
    client: HttpClient,
    /// The bucket's URL, as object_store forms it.
    bucket_endpoint: Url,
    region: String,
    skip_signature: bool,
    sign_payload: bool,
    request_payer: bool,
}

/// The client settings object_store knows by name: the lister's HTTP client is made with the
/// store's values of them (timeouts, proxies, `allow_http`, ...).
const CLIENT_KEYS: [ClientConfigKey; 20] = [
    ClientConfigKey::AllowHttp,
    ClientConfigKey::AllowInvalidCertificates,
    ClientConfigKey::NoSystemCertificates,
    ClientConfigKey::ConnectTimeout,
    ClientConfigKey::DefaultContentType,
    ClientConfigKey::Http1Only,
    ClientConfigKey::Http2KeepAliveInterval,
    ClientConfigKey::Http2KeepAliveTimeout,
    ClientConfigKey::Http2KeepAliveWhileIdle,
    ClientConfigKey::Http2MaxFrameSize,
    ClientConfigKey::Http2Only,
    ClientConfigKey::PoolIdleTimeout,
    ClientConfigKey::PoolMaxIdlePerHost,
    ClientConfigKey::ProxyUrl,
    ClientConfigKey::ProxyCaCertificate,
    ClientConfigKey::ProxyExcludes,
    ClientConfigKey::RandomizeAddresses,
    ClientConfigKey::ReadTimeout,
    ClientConfigKey::Timeout,
    ClientConfigKey::UserAgent,
];

impl S3Lister {
    /// The lister of the bucket of `url` (`s3://bucket/...`) that `builder` made `store` for;
    /// `None` for an S3 Express One Zone bucket, which object_store lists with session
    /// credentials of its own.
    pub(crate) fn new(
        url: &Url,
        builder: &AmazonS3Builder,
        store: Arc<AmazonS3>,
    ) -> object_store::Result<Option<S3Lister>> {
        let value = |key: AmazonS3ConfigKey| builder.get_config_value(&key);
        let flag = |key: AmazonS3ConfigKey| value(key).is_some_and(|v| v == "true");
        let Some(bucket) = url
            .host_str()
            .filter(|_| !flag(AmazonS3ConfigKey::S3Express))
        else {
            return Ok(None);
        };
        let region = value(AmazonS3ConfigKey::Region).unwrap_or_else(|| "us-east-1".into());
        // As object_store's builder forms it: an endpoint is assumed to name the bucket when
        // requests are virtual-hosted style.
        let endpoint = value(AmazonS3ConfigKey::S3Endpoint).or(value(AmazonS3ConfigKey::Endpoint));
        let bucket_endpoint = match (endpoint, flag(AmazonS3ConfigKey::VirtualHostedStyleRequest)) {
            (Some(endpoint), true) => endpoint,
            (Some(endpoint), false) => format!("{}/{bucket}", endpoint.trim_end_matches('/')),
            (None, true) => format!("https://{bucket}.s3.{region}.amazonaws.com"),
            (None, false) => format!("https://s3.{region}.amazonaws.com/{bucket}"),
        };
        let bucket_endpoint = Url::parse(&bucket_endpoint).map_err(generic)?;
        let mut options = ClientOptions::new();
        for key in CLIENT_KEYS {
            if let Some(v) = value(AmazonS3ConfigKey::Client(key)) {
                options = options.with_config(key, v);
            }
        }
        Ok(Some(S3Lister {
            store,
            client: ReqwestConnector::default().connect(&options)?,
            bucket_endpoint,
            region,
            skip_signature: flag(AmazonS3ConfigKey::SkipSignature),
            sign_payload: !flag(AmazonS3ConfigKey::UnsignedPayload),
            request_payer: flag(AmazonS3ConfigKey::RequestPayer),
        }))
    }

    /// The objects below `prefix` (all of them for an empty one) after the key `offset`, in key
    /// order, page by page: what object_store's `list` and `list_with_offset` give.
    pub(crate) fn list(
        self: &Arc<Self>,
        prefix: &Path,
        offset: Option<&Path>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let prefix = Some(prefix.as_ref())
            .filter(|p| !p.is_empty())
            .map(|p| format!("{p}/"));
        let offset = offset.map(|o| o.as_ref().to_string());
        let lister = Arc::clone(self);
        let pages = futures::stream::try_unfold(Some(None), move |next| {
            let (lister, prefix, offset) = (Arc::clone(&lister), prefix.clone(), offset.clone());
            async move {
                // `None`: the last page was read; `Some(token)`: the page to ask for.
                let Some(token) = next else {
                    return Ok::<_, object_store::Error>(None);
                };
                let page = lister
                    .page(prefix.as_deref(), offset.as_deref(), token.as_deref())
                    .await?;
                let objects = futures::stream::iter(page.objects.into_iter().map(Ok));
                Ok(Some((objects, page.next_token.map(Some))))
            }
        });
        pages.try_flatten().boxed()
    }

    /// One page of the listing: the request object_store's S3 client makes.
    async fn page(
        &self,
        prefix: Option<&str>,
        start_after: Option<&str>,
        token: Option<&str>,
    ) -> object_store::Result<ListPage> {
        let mut url = self.bucket_endpoint.clone();
        {
            let mut query = url.query_pairs_mut();
            if let Some(token) = token {
                query.append_pair("continuation-token", token);
            }
            query.append_pair("list-type", "2");
            if let Some(prefix) = prefix {
                query.append_pair("prefix", prefix);
            }
            if let Some(start_after) = start_after {
                query.append_pair("start-after", start_after);
            }
        }
        let mut request = HttpRequest::new(HttpRequestBody::empty());
        *request.uri_mut() = url.as_str().parse().map_err(generic)?;
        if !self.skip_signature {
            let credential = self.store.credentials().get_credential().await?;
            AwsAuthorizer::new(&credential, "s3", &self.region)
                .with_sign_payload(self.sign_payload)
                .with_request_payer(self.request_payer)
                .try_authorize(&mut request, None)?;
        }
        let (head, body) = self
            .client
            .execute(request)
            .await
            .map_err(generic)?
            .into_parts();
        let body = body.bytes().await.map_err(generic)?;
        if !head.status.is_success() {
            return Err(generic(ListStatus {
                status: head.status.as_u16(),
                answer: String::from_utf8_lossy(&body[..body.len().min(600)]).into_owned(),
            }));
        }
        parse_page(&body)
    }
}

fn generic(source: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: Box::new(source),
    }
}

/// A listing's request answered with a status other than success.
#[derive(Debug, thiserror::Error)]
#[error("the listing request was answered with HTTP status {status}: {answer}")]
pub(crate) struct ListStatus {
    status: u16,
    /// The start of the answer's body (S3's error code and message).
    answer: String,
}

impl ListStatus {
    /// Whether another attempt may get a listing: what object_store retries (server errors,
    /// too many requests) and a request timeout.
    pub(crate) fn is_transient(&self) -> bool {
        self.status >= 500 || self.status == 429 || self.status == 408
    }
}

/// A page whose XML could not be read as a listing.
#[derive(Debug, thiserror::Error)]
#[error("the listing's page is not a ListObjectsV2 answer: {reason}")]
struct BadPage {
    reason: String,
}

/// One page of a listing: its objects and the token of the next page, if there is one.
#[derive(Debug, Default)]
struct ListPage {
    objects: Vec<ObjectMeta>,
    next_token: Option<String>,
}

/// The element of a listing whose text is being read.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Field {
    Key,
    Size,
    LastModified,
    ETag,
    NextToken,
    Other,
}

/// An object's fields as a page names them, read as they come.
#[derive(Debug, Default)]
struct Contents {
    key: Option<String>,
    size: Option<u64>,
    last_modified: Option<DateTime<Utc>>,
    e_tag: Option<String>,
}

impl Contents {
    /// The object, with what object_store requires of it: a key that is a valid path, a size and
    /// a modification time.
    fn into_meta(self) -> object_store::Result<ObjectMeta> {
        let Contents {
            key,
            size,
            last_modified,
            e_tag,
        } = self;
        let missing = |field: &str, key: Option<&str>| {
            generic(BadPage {
                reason: format!("an object ({key:?}) without {field}"),
            })
        };
        let Some(size) = size else {
            return Err(missing("a Size", key.as_deref()));
        };
        let Some(last_modified) = last_modified else {
            return Err(missing("a LastModified", key.as_deref()));
        };
        let Some(key) = key else {
            return Err(missing("a Key", None));
        };
        Ok(ObjectMeta {
            location: Path::parse(key)?,
            last_modified,
            size,
            e_tag,
            version: None,
        })
    }
}

/// The size of the object `key` (S3 writes the Key before the Size, so it is known here).
fn parse_size(text: &str, key: Option<&str>) -> object_store::Result<u64> {
    text.trim().parse::<u64>().map_err(|e| {
        generic(BadPage {
            reason: format!("the size {text:?} of {key:?}: {e}"),
        })
    })
}

/// The modification time of the object `key`.
fn parse_time(text: &str, key: Option<&str>) -> object_store::Result<DateTime<Utc>> {
    let time = DateTime::parse_from_rfc3339(text.trim()).map_err(|e| {
        generic(BadPage {
            reason: format!("the time {text:?} of {key:?}: {e}"),
        })
    })?;
    Ok(time.with_timezone(&Utc))
}

/// The objects and next page's token of a ListObjectsV2 answer. Element text is unescaped as
/// object_store's serde reading unescapes it (`&quot;` in an ETag, `&amp;` in a key), so that the
/// keys and versions are the same whichever lists them.
fn parse_page(body: &[u8]) -> object_store::Result<ListPage> {
    let bad = |reason: String| generic(BadPage { reason });
    let mut reader = quick_xml::Reader::from_reader(body);
    let mut page = ListPage::default();
    let mut contents: Option<Contents> = None;
    let mut field = Field::Other;
    let mut text = String::new();
    let mut depth = 0usize;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| bad(format!("at byte {}: {e}", reader.buffer_position())))?;
        match event {
            Event::Start(start) => {
                depth += 1;
                text.clear();
                field = Field::Other;
                match (depth, start.local_name().as_ref()) {
                    (2, b"Contents") => contents = Some(Contents::default()),
                    (2, b"NextContinuationToken") => field = Field::NextToken,
                    (3, b"Key") if contents.is_some() => field = Field::Key,
                    (3, b"Size") if contents.is_some() => field = Field::Size,
                    (3, b"LastModified") if contents.is_some() => field = Field::LastModified,
                    (3, b"ETag") if contents.is_some() => field = Field::ETag,
                    _ => {}
                }
            }
            Event::Text(t) if field != Field::Other => {
                let decoded = t.decode().map_err(|e| bad(e.to_string()))?;
                text.push_str(&decoded);
            }
            Event::CData(t) if field != Field::Other => {
                let decoded = t.decode().map_err(|e| bad(e.to_string()))?;
                text.push_str(&decoded);
            }
            Event::GeneralRef(reference) if field != Field::Other => {
                let resolved = match reference.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    Ok(None) => {
                        let name = reference.decode().map_err(|e| bad(e.to_string()))?;
                        quick_xml::escape::resolve_predefined_entity(&name)
                            .ok_or_else(|| bad(format!("an unknown entity &{name};")))?
                            .to_string()
                    }
                    Err(e) => return Err(bad(e.to_string())),
                };
                text.push_str(&resolved);
            }
            Event::End(end) => {
                // The text buffer is kept for the fields read in place (size, time).
                match (field, contents.as_mut()) {
                    (Field::NextToken, _) if !text.is_empty() => {
                        page.next_token = Some(std::mem::take(&mut text))
                    }
                    (Field::Key, Some(c)) => c.key = Some(text.clone()),
                    (Field::Size, Some(c)) => c.size = Some(parse_size(&text, c.key.as_deref())?),
                    (Field::LastModified, Some(c)) => {
                        c.last_modified = Some(parse_time(&text, c.key.as_deref())?)
                    }
                    (Field::ETag, Some(c)) => c.e_tag = Some(text.clone()),
                    _ => {}
                }
                text.clear();
                if depth == 2 && end.local_name().as_ref() == b"Contents" {
                    if let Some(c) = contents.take() {
                        page.objects.push(c.into_meta()?);
                    }
                }
                field = Field::Other;
                depth = depth.saturating_sub(1);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if depth != 0 {
        return Err(bad("the answer ends inside an element".into()));
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name><Prefix>a/</Prefix><KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys>
  <IsTruncated>true</IsTruncated>
  <Contents>
    <Key>a/c/0/0</Key><LastModified>2026-12-07T15:28:42.123Z</LastModified>
    <ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>512</Size>
    <StorageClass>STANDARD</StorageClass>
    <Owner><ID>x</ID><DisplayName>Key</DisplayName></Owner>
  </Contents>
  <Contents><Key>a/R&amp;D &#233;t&#xE9;/&lt;1&gt;</Key><Size>0</Size>
    <LastModified>2026-01-02T03:04:05Z</LastModified><ETag>"e"</ETag></Contents>
  <Contents><Key><![CDATA[a/x<y]]></Key><Size> 7 </Size><LastModified>2026-01-02T03:04:05+01:00</LastModified></Contents>
  <CommonPrefixes><Prefix>a/d/</Prefix></CommonPrefixes>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
</ListBucketResult>"#;

    /// Every field as object_store's serde reading gives it: unescaped, the ETag with its quotes,
    /// other elements (the owner's `Key`-like names among them) ignored.
    #[test]
    fn a_page_reads_as_object_store_reads_it() {
        let page = parse_page(PAGE.as_bytes()).expect("page");
        let keys: Vec<&str> = page.objects.iter().map(|o| o.location.as_ref()).collect();
        assert_eq!(keys, ["a/c/0/0", "a/R&D été/<1>", "a/x<y"]);
        let sizes: Vec<u64> = page.objects.iter().map(|o| o.size).collect();
        assert_eq!(sizes, [512, 0, 7]);
        assert_eq!(
            page.objects[0].e_tag.as_deref(),
            Some("\"9b2cf535f27731c974343645a3985328\"")
        );
        assert_eq!(page.objects[1].e_tag.as_deref(), Some("\"e\""));
        assert_eq!(page.objects[2].e_tag, None);
        assert_eq!(
            page.objects[0].last_modified.timestamp_millis(),
            1_796_657_322_123
        );
        assert_eq!(
            page.objects[2].last_modified.to_rfc3339(),
            "2026-01-02T02:04:05+00:00"
        );
        assert_eq!(
            page.next_token.as_deref(),
            Some("1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=")
        );
    }

    #[test]
    fn the_last_page_names_no_next_one() {
        let last = r#"<ListBucketResult><IsTruncated>false</IsTruncated>
            <Contents><Key>k</Key><Size>1</Size><LastModified>2026-01-02T03:04:05Z</LastModified></Contents>
            </ListBucketResult>"#;
        let page = parse_page(last.as_bytes()).expect("page");
        assert_eq!(page.objects.len(), 1);
        assert_eq!(page.next_token, None);
        let empty = parse_page(b"<ListBucketResult><KeyCount>0</KeyCount></ListBucketResult>")
            .expect("empty");
        assert!(empty.objects.is_empty());
    }

    /// A page that cannot be a listing is an error naming what is wrong, never a panic and
    /// never a listing that quietly lacks objects.
    #[test]
    fn a_bad_page_is_an_error() {
        let cases = [
            "<ListBucketResult><Contents><Key>k</Key><Size>x</Size><LastModified>2026-01-02T03:04:05Z</LastModified></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>k</Key><LastModified>2026-01-02T03:04:05Z</LastModified></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>k</Key><Size>1</Size><LastModified>yesterday</LastModified></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>a//b</Key><Size>1</Size><LastModified>2026-01-02T03:04:05Z</LastModified></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>k&bogus;</Key></Contents></ListBucketResult>",
            "<ListBucketResult><Contents><Key>k</Key>",
            "<ListBucketResult><Contents></Key></ListBucketResult>",
        ];
        for case in cases {
            let error = parse_page(case.as_bytes()).expect_err(case);
            assert!(!error.to_string().is_empty(), "{case}");
        }
        // A bad field names the object it belongs to.
        for case in &cases[..3] {
            let error = parse_page(case.as_bytes()).expect_err(case).to_string();
            assert!(error.contains("\"k\""), "{case}: {error}");
        }
    }

    #[test]
    fn statuses_worth_another_attempt() {
        let status = |status| ListStatus {
            status,
            answer: String::new(),
        };
        for transient in [500, 503, 429, 408] {
            assert!(status(transient).is_transient(), "{transient}");
        }
        for answer in [301, 400, 403, 404] {
            assert!(!status(answer).is_transient(), "{answer}");
        }
    }
}
