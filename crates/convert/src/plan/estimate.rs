//! What a whole conversion would take from storage beyond its chunks and shards (issue 44): the
//! listings, HEADs and the state's files (claim, records, manifest), by request kind, and a time
//! and price estimate from stated assumptions, so that a migration can be budgeted before it
//! starts. The counts follow the destination protocol of `zshard_state` as a run without faults
//! takes it; a run that is stopped and resumed, or retried, takes more.

use serde::Serialize;

/// Requests by kind, as object stores bill them. On a local filesystem the same operations are
/// file reads, writes, listings and removals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Requests {
    /// Listing requests (one per page of up to 1,000 keys).
    pub list: u64,
    /// HEAD requests (a reference's target file's version, a zip member's size).
    pub head: u64,
    /// GET requests (chunks, documents, records).
    pub get: u64,
    /// PUT requests (shards with their multipart requests, documents, records).
    pub put: u64,
    /// DELETE requests (a bulk delete of up to 1,000 keys counts one).
    pub delete: u64,
}

impl Requests {
    /// Every request.
    pub fn total(&self) -> u64 {
        self.list + self.head + self.get + self.put + self.delete
    }
}

impl std::ops::AddAssign for Requests {
    fn add_assign(&mut self, other: Requests) {
        self.list += other.list;
        self.head += other.head;
        self.get += other.get;
        self.put += other.put;
        self.delete += other.delete;
    }
}

/// The requests of the destination's state (see `zshard_state`), by file; each is a total of all
/// request kinds, and is part of the destination's [`Requests`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct StateRequests {
    /// The claim, each worker's options record and lease (with its renewals), the listings that
    /// check what the destination holds, and their removal.
    pub claim: u64,
    /// The records of done shards: one file per batch (every 10,000 shards or checkpoint
    /// interval, whichever comes first), their compaction, what a finished conversion keeps per
    /// array, and their reading and removal at the end.
    pub records: u64,
    /// The manifest records written beside each record file, and the manifest kept with
    /// `--keep-manifest`.
    pub manifest: u64,
}

/// Prices of requests, in US dollars per 1,000.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Prices {
    /// Where the prices come from.
    pub name: String,
    /// PUT, COPY, POST and LIST requests.
    pub usd_per_1000_put_list: f64,
    /// GET, HEAD and other reads.
    pub usd_per_1000_get_head: f64,
    /// DELETE requests.
    pub usd_per_1000_delete: f64,
}

impl Prices {
    /// S3 Standard's published request prices in us-east-1 (PUT/COPY/POST/LIST $0.005 per 1,000;
    /// GET and the rest $0.0004 per 1,000; DELETE free). Other stores and regions differ (GCS
    /// Standard and Azure hot tier are of the same order).
    pub fn s3_standard() -> Prices {
        Prices {
            name: "S3 Standard request prices, us-east-1 (list prices; other stores and regions differ)"
                .to_string(),
            usd_per_1000_put_list: 0.005,
            usd_per_1000_get_head: 0.0004,
            usd_per_1000_delete: 0.0,
        }
    }

    /// The price of `requests`, in US dollars.
    pub fn of(&self, requests: &Requests) -> f64 {
        ((requests.put + requests.list) as f64 * self.usd_per_1000_put_list
            + (requests.get + requests.head) as f64 * self.usd_per_1000_get_head
            + requests.delete as f64 * self.usd_per_1000_delete)
            / 1000.0
    }
}

/// What a user states for the estimate in place of its defaults (`estimate_with`): text of
/// comma-separated `key=value` pairs, `bandwidth=SIZE` (bytes a second one worker moves to or
/// from an object store), `latency=MS` (one request's round trip, `20`, `20ms` or `0.02s`),
/// `workers=N`, and `put=USD`, `get=USD`, `delete=USD` (request prices per 1,000 PUT/LIST,
/// GET/HEAD and DELETE requests; those not given keep S3 Standard's).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Stated {
    /// `bandwidth=`.
    pub object_store_bytes_per_second: Option<u64>,
    /// `latency=`, in milliseconds.
    pub object_store_latency_ms: Option<f64>,
    /// `workers=`.
    pub workers: Option<u64>,
    /// `put=`, `get=`, `delete=`, in that order.
    pub usd_per_1000: [Option<f64>; 3],
    /// The text it was read from, as given.
    text: String,
}

impl std::str::FromStr for Stated {
    type Err = crate::Error;

    fn from_str(text: &str) -> crate::Result<Stated> {
        let invalid = |why: String| crate::Error::Options {
            reason: format!(
                "{} {text:?}: {why} (expected comma-separated bandwidth=SIZE, latency=MS, \
                 workers=N, put=USD, get=USD, delete=USD)",
                zshard_core::Setting::EstimateWith
            ),
        };
        let mut stated = Stated {
            text: text.trim().to_string(),
            ..Stated::default()
        };
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| invalid(format!("{pair:?} is not key=value")))?;
            let (key, value) = (key.trim(), value.trim());
            let number = |v: &str| {
                v.parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite() && *n >= 0.0)
                    .ok_or_else(|| invalid(format!("{key}={v:?} is not a number of at least 0")))
            };
            match key {
                "bandwidth" => {
                    let bytes = crate::parse_size(value)
                        .map_err(|e| invalid(format!("bandwidth: {}", crate::one_line(&e))))?;
                    if bytes == 0 {
                        return Err(invalid("bandwidth=0 moves nothing".to_string()));
                    }
                    stated.object_store_bytes_per_second = Some(bytes);
                }
                "latency" => {
                    let ms = match (value.strip_suffix("ms"), value.strip_suffix('s')) {
                        (Some(ms), _) => number(ms.trim())?,
                        (None, Some(s)) => number(s.trim())? * 1000.0,
                        (None, None) => number(value)?,
                    };
                    stated.object_store_latency_ms = Some(ms);
                }
                "workers" => {
                    let n = value
                        .parse::<u64>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| {
                            invalid(format!("workers={value:?} is not a count of 1 or more"))
                        })?;
                    stated.workers = Some(n);
                }
                "put" => stated.usd_per_1000[0] = Some(number(value)?),
                "get" => stated.usd_per_1000[1] = Some(number(value)?),
                "delete" => stated.usd_per_1000[2] = Some(number(value)?),
                other => return Err(invalid(format!("unknown key {other:?}"))),
            }
        }
        Ok(stated)
    }
}

impl std::fmt::Display for Stated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Stated {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for Stated {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Stated, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse()
            .map_err(|e| serde::de::Error::custom(crate::one_line(&e)))
    }
}

impl Stated {
    /// The request prices: those given, the rest S3 Standard's.
    fn prices(&self) -> Prices {
        let [put, get, delete] = self.usd_per_1000;
        if put.is_none() && get.is_none() && delete.is_none() {
            return Prices::s3_standard();
        }
        let standard = Prices::s3_standard();
        let put = put.unwrap_or(standard.usd_per_1000_put_list);
        let get = get.unwrap_or(standard.usd_per_1000_get_head);
        let delete = delete.unwrap_or(standard.usd_per_1000_delete);
        Prices {
            name: format!(
                "given: ${put} per 1,000 PUT/LIST, ${get} per 1,000 GET/HEAD, ${delete} per 1,000 \
                 DELETE requests"
            ),
            usd_per_1000_put_list: put,
            usd_per_1000_get_head: get,
            usd_per_1000_delete: delete,
        }
    }
}

/// What the time and price estimates assume: stated with them, so that a reader can redo them
/// with their own figures.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Assumptions {
    /// Workers sharing the job side by side (`--worker i/N`'s N), each with the bandwidth below.
    pub workers: u64,
    /// Bytes per second one worker moves to or from an object store.
    pub object_store_bytes_per_second: u64,
    /// One request's round trip to an object store, in milliseconds.
    pub object_store_latency_ms: f64,
    /// Bytes per second one worker reads or writes on a local filesystem.
    pub local_bytes_per_second: u64,
    /// One file operation's latency on a local filesystem, in milliseconds.
    pub local_latency_ms: f64,
    /// Requests a worker has in flight at once (`--max-requests`).
    pub requests_in_flight: u64,
    /// The request prices the price is made with.
    pub prices: Prices,
}

/// How long the job's storage traffic would take and what its requests would cost: an estimate
/// from [`Assumptions`], not a measurement.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Estimate {
    /// Seconds the job's transfers and requests take with its workers side by side: per worker
    /// the larger of its bytes over the bandwidth and its requests' round trips over the requests
    /// in flight. CPU time (decoding, compressing) is not counted: a job of slow codecs takes
    /// longer.
    pub seconds: f64,
    /// Bytes the estimate moves: the source's stored bytes (raw sizes when unknown) and the
    /// output's, taken to compress as the source does (raw sizes when unknown).
    pub bytes: u64,
    /// The request price in US dollars of the sides on an object store (the source, the
    /// destination, or both); `None` when neither is. Data transfer (free within a region, billed
    /// out of it) and storage are not counted.
    pub request_price_usd: Option<f64>,
    /// What the estimate assumes.
    pub assumptions: Assumptions,
    /// What the estimate is, in one sentence.
    pub note: String,
}

/// The figures the estimate assumes: one worker reaching an object store at about 1 Gbit/s with
/// 30 ms round trips (a cloud VM in the bucket's region is usually faster, a laptop slower), a
/// local disk at 1 GB/s.
pub(crate) const OBJECT_STORE_BYTES_PER_SECOND: u64 = 100_000_000;
/// See [`OBJECT_STORE_BYTES_PER_SECOND`].
pub(crate) const OBJECT_STORE_LATENCY_MS: f64 = 30.0;
/// See [`OBJECT_STORE_BYTES_PER_SECOND`].
pub(crate) const LOCAL_BYTES_PER_SECOND: u64 = 1_000_000_000;
/// See [`OBJECT_STORE_BYTES_PER_SECOND`].
pub(crate) const LOCAL_LATENCY_MS: f64 = 0.1;

/// Keys per listing page (S3's `ListObjectsV2`) and per bulk delete (`DeleteObjects`).
const KEYS_PER_REQUEST: u64 = 1000;

/// What a job is, for its state's requests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Job {
    /// Workers (`--worker i/N`'s N).
    pub workers: u64,
    /// Shards of the whole job.
    pub shards: u64,
    /// Arrays written.
    pub arrays: u64,
    /// Whether what each shard was made from is kept (every source names its chunks' versions).
    pub tracked: bool,
    /// `--keep-manifest`.
    pub keep_manifest: bool,
    /// Seconds between record batches (the checkpoint interval).
    pub checkpoint_seconds: f64,
    /// Seconds between lease renewals (a quarter of how long a lease stays fresh).
    pub renew_seconds: f64,
}

/// The requests of the state (see `zshard_state`) of `job` running for `seconds` (each worker),
/// by file and in all.
pub(crate) fn state_requests(job: &Job, seconds: f64) -> (StateRequests, Requests) {
    let workers = job.workers.max(1);
    let shards_per_worker = job.shards.div_ceil(workers);
    // A batch of records every 10,000 shards or checkpoint interval, whichever comes first; at
    // least one when a worker has shards.
    let by_count =
        shards_per_worker.div_ceil(zshard_state::RecordLimits::default().flush_entries as u64);
    let by_time = (seconds / job.checkpoint_seconds.max(0.001)).ceil() as u64;
    let batches = match shards_per_worker {
        0 => 0,
        _ => by_count.max(by_time).clamp(1, shards_per_worker),
    };
    // Compaction merges `k` record files into one, level by level: about batches / (k - 1) more
    // files written (and as many removed).
    let k = zshard_state::RecordLimits::default().compact_at.max(2) as u64;
    let compacted = batches / (k - 1);
    let renewals = (seconds / job.renew_seconds.max(0.001)).floor() as u64;

    let mut claim = Requests::default();
    // Per worker: the claim read and (by the first) written, the options record, the lease and
    // its renewals and removal, a listing of the state.
    claim.get += workers;
    claim.put += 1 + workers + workers * (1 + renewals);
    claim.delete += workers;
    claim.list += workers;
    let mut records = Requests::default();
    records.put += workers * (batches + compacted);
    records.delete += workers * compacted;
    let mut manifest = Requests::default();
    manifest.put += workers * (batches + compacted);
    manifest.delete += workers * compacted;

    // Finalize: one listing of the state, the record files read when the manifest is kept or the
    // made-from records are, the kept records written per array, then the state removed in bulk
    // deletes and the claim last.
    let files = workers * (batches + 2) + 2;
    claim.list += files.div_ceil(KEYS_PER_REQUEST);
    if job.tracked {
        records.get += workers * batches;
        records.put += job.arrays;
    }
    if job.keep_manifest {
        manifest.get += workers * batches;
        manifest.put += 1;
    }
    claim.delete += files.div_ceil(KEYS_PER_REQUEST) + 1;

    let by_file = StateRequests {
        claim: claim.total(),
        records: records.total(),
        manifest: manifest.total(),
    };
    let mut all = claim;
    all += records;
    all += manifest;
    (by_file, all)
}

/// Listing pages for `objects` keys (at least one listing).
pub(crate) fn listing_pages(objects: u64) -> u64 {
    objects.div_ceil(KEYS_PER_REQUEST).max(1)
}

/// One side of the job (the source or the destination) for the estimate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Side {
    pub requests: Requests,
    pub bytes: u64,
    pub remote: bool,
}

impl Side {
    fn seconds(&self, workers: u64, stated: &Stated) -> (f64, f64) {
        let (rate, latency) = match self.remote {
            true => (
                stated
                    .object_store_bytes_per_second
                    .unwrap_or(OBJECT_STORE_BYTES_PER_SECOND),
                stated
                    .object_store_latency_ms
                    .unwrap_or(OBJECT_STORE_LATENCY_MS),
            ),
            false => (LOCAL_BYTES_PER_SECOND, LOCAL_LATENCY_MS),
        };
        let workers = workers.max(1) as f64;
        (
            self.bytes as f64 / workers / rate as f64,
            self.requests.total() as f64 / workers * latency / 1000.0,
        )
    }
}

/// The seconds the transfers and requests of `source` and `destination` take with `workers` side
/// by side, each with `in_flight` requests at once.
pub(crate) fn seconds(
    source: &Side,
    destination: &Side,
    (workers, in_flight): (u64, u64),
    stated: &Stated,
) -> f64 {
    let (read, read_trips) = source.seconds(workers, stated);
    let (write, write_trips) = destination.seconds(workers, stated);
    // One worker's link carries both sides' bytes; its requests overlap `in_flight` at a time.
    (read + write).max((read_trips + write_trips) / in_flight.max(1) as f64)
}

/// The estimate of a job whose sides are `source` and `destination`, with the figures `stated` in
/// place of the defaults (its `workers` over `workers`).
pub(crate) fn estimate(
    source: &Side,
    destination: &Side,
    (workers, in_flight): (u64, u64),
    stated: &Stated,
) -> Estimate {
    let workers = stated.workers.unwrap_or(workers);
    let prices = stated.prices();
    let price = match (source.remote, destination.remote) {
        (false, false) => None,
        (s, d) => Some(
            if s { prices.of(&source.requests) } else { 0.0 }
                + if d {
                    prices.of(&destination.requests)
                } else {
                    0.0
                },
        ),
    };
    Estimate {
        seconds: seconds(source, destination, (workers, in_flight), stated),
        bytes: source.bytes + destination.bytes,
        request_price_usd: price,
        assumptions: Assumptions {
            workers: workers.max(1),
            object_store_bytes_per_second: stated
                .object_store_bytes_per_second
                .unwrap_or(OBJECT_STORE_BYTES_PER_SECOND),
            object_store_latency_ms: stated
                .object_store_latency_ms
                .unwrap_or(OBJECT_STORE_LATENCY_MS),
            local_bytes_per_second: LOCAL_BYTES_PER_SECOND,
            local_latency_ms: LOCAL_LATENCY_MS,
            requests_in_flight: in_flight.max(1),
            prices,
        },
        note: "an estimate from the assumptions stated, not a measurement: storage I/O only (CPU \
               time for codecs is not counted), request prices only (no transfer or storage)"
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(shards: u64, workers: u64) -> Job {
        Job {
            workers,
            shards,
            arrays: 1,
            tracked: true,
            keep_manifest: false,
            checkpoint_seconds: 10.0,
            renew_seconds: 15.0,
        }
    }

    #[test]
    fn a_short_single_run_takes_one_batch_of_records() {
        let (by_file, all) = state_requests(&job(16, 1), 1.0);
        // Claim: GET claim; PUT claim, options, lease; DELETE lease; LIST state at the start and
        // at the end; the bulk delete of the state and the claim's removal.
        assert_eq!(by_file.claim, 1 + 3 + 1 + 2 + 2);
        // Records: one batch, read at the end (made-from records kept), the array's kept records.
        assert_eq!(by_file.records, 1 + 1 + 1);
        assert_eq!(by_file.manifest, 1);
        assert_eq!(
            all.total(),
            by_file.claim + by_file.records + by_file.manifest
        );
        assert_eq!((all.list, all.get), (2, 2));
    }

    #[test]
    fn batches_follow_the_shard_count_and_the_recording_interval() {
        // A million shards by four workers in a minute: 25 batches each by count (6 by time).
        let (by_file, _) = state_requests(&job(1_000_000, 4), 60.0);
        let compacted = 25 / 3;
        assert_eq!(by_file.manifest, 4 * (25 + 2 * compacted));
        // An hour: a batch every 10 s, 360 each; the lease renewed 240 times.
        let (long, all) = state_requests(&job(1_000_000, 4), 3600.0);
        assert_eq!(long.manifest, 4 * (360 + 2 * (360 / 3)));
        // PUTs: the claim, 4 options records, 4 leases with 240 renewals each; 4 x (360 batches
        // + 120 compacted) record and manifest files, and the array's kept records.
        assert_eq!(all.put, 1 + 4 + 4 * 241 + 2 * 4 * (360 + 120) + 1);
    }

    #[test]
    fn the_price_is_s3_standard_request_prices() {
        let requests = Requests {
            list: 1000,
            head: 0,
            get: 1_000_000,
            put: 9000,
            delete: 50,
        };
        let price = Prices::s3_standard().of(&requests);
        // 10,000 PUT/LIST at $0.005 per 1,000 and a million GETs at $0.0004 per 1,000.
        assert!((price - (0.05 + 0.4)).abs() < 1e-9, "{price}");
    }

    #[test]
    fn the_time_is_the_larger_of_transfer_and_round_trips() {
        let remote = |bytes, get| Side {
            requests: Requests {
                get,
                ..Requests::default()
            },
            bytes,
            remote: true,
        };
        let local = Side {
            requests: Requests::default(),
            bytes: 0,
            remote: false,
        };
        // 10 GB at 100 MB/s: 100 s; 1,000 GETs at 30 ms, 10 in flight: 3 s.
        let defaults = Stated::default();
        let s = seconds(&remote(10_000_000_000, 1000), &local, (1, 10), &defaults);
        assert!((s - 100.0).abs() < 1e-9, "{s}");
        // 100,000 GETs of nothing: 300 s of round trips; two workers halve it.
        let s = seconds(&remote(0, 100_000), &local, (2, 10), &defaults);
        assert!((s - 150.0).abs() < 1e-9, "{s}");
        let e = estimate(&remote(0, 1_000_000), &local, (1, 8), &defaults);
        let price = e.request_price_usd.unwrap_or(0.0);
        assert!((price - 0.4).abs() < 1e-9, "{price}");
        assert_eq!(
            estimate(&local, &local, (1, 8), &defaults).request_price_usd,
            None
        );
    }

    #[test]
    fn stated_figures_replace_the_defaults() {
        let local = Side {
            requests: Requests::default(),
            bytes: 0,
            remote: false,
        };
        let remote = Side {
            requests: Requests {
                get: 1_000_000,
                ..Requests::default()
            },
            bytes: 10_000_000_000,
            remote: true,
        };
        let stated: Stated = "bandwidth=1GB, latency=10ms, workers=4, get=0.001"
            .parse()
            .expect("valid");
        let e = estimate(&remote, &local, (1, 8), &stated);
        // 10 GB at 1 GB/s over 4 workers: 2.5 s; 10^6 GETs at 10 ms, 8 in flight, 4 workers:
        // 312.5 s.
        assert!((e.seconds - 312.5).abs() < 1e-6, "{}", e.seconds);
        assert_eq!(e.assumptions.workers, 4);
        assert_eq!(e.assumptions.object_store_bytes_per_second, 1_000_000_000);
        assert!((e.request_price_usd.unwrap_or(0.0) - 1.0).abs() < 1e-9);
        // The PUT price not given stays S3 Standard's.
        assert!((e.assumptions.prices.usd_per_1000_put_list - 0.005).abs() < 1e-12);
        assert!(e.assumptions.prices.name.starts_with("given"));
        let latency: Stated = "latency=0.02s".parse().expect("seconds");
        assert_eq!(latency.object_store_latency_ms, Some(20.0));
        for bad in [
            "bandwidth",
            "speed=1",
            "workers=0",
            "put=-1",
            "bandwidth=0",
            "latency=x",
        ] {
            let e = bad.parse::<Stated>().expect_err(bad);
            assert!(e.to_string().contains("estimate_with"), "{bad}: {e}");
        }
    }
}
