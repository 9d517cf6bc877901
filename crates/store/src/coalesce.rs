//! Turning the byte ranges one batch needs from one object into few requests: ranges that overlap,
//! touch, or lie at most a gap apart become one ranged read (the bytes in the gaps are read and
//! dropped), as long as the read stays within a cap. Callers with ranges of several objects group them
//! by object first and coalesce each group.
//!
//! object_store's own `coalesce_ranges` does not fit: it has no cap on a request's size, no way to
//! turn coalescing off, and runs its own requests (ours go through [`Store::get_ranges`](crate::Store::get_ranges),
//! which reads local files directly and bounds the requests in flight).
//!
//! ```
//! use bytes::Bytes;
//! use zshard_store::{coalesce, COALESCE_GAP, MAX_REQUEST};
//!
//! let wanted = [100..200, 0..100, 1 << 30..(1 << 30) + 5];
//! let requests = coalesce(&wanted, Some(COALESCE_GAP), MAX_REQUEST);
//! assert_eq!(requests.len(), 2);
//! assert_eq!(requests[0].range, 0..200);
//! assert_eq!(requests[0].members, vec![1, 0]);
//! // The response of requests[0] (here made up), and wanted range 0 out of it:
//! let response = Bytes::from(vec![7u8; 200]);
//! let bytes = requests[0].slice(&response, &wanted[0], "s3://b/shard").unwrap();
//! assert_eq!(bytes.len(), 100);
//! // A response shorter than the request: the ranges past its end are an error.
//! let short = response.slice(..150);
//! assert!(requests[0].slice(&short, &wanted[0], "s3://b/shard").is_err());
//! ```

use std::ops::Range;

use bytes::Bytes;

use crate::error::{Error, Result};

/// Ranges at most this far apart are read as one request by default (64 KiB: below that, another
/// request costs more than the bytes read in between).
pub const COALESCE_GAP: u64 = 64 << 10;

/// A coalesced request is not grown past this many bytes (64 MiB); one wanted range larger than this
/// is still read, alone.
pub const MAX_REQUEST: u64 = 64 << 20;

/// One request: bytes `range` of the object, serving the wanted ranges `members` (indices into the
/// slice given to [`coalesce`], in the order of their start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeRequest {
    /// The byte range of the object this request reads.
    pub range: Range<u64>,
    /// Indices (into the slice given to [`coalesce`]) of the wanted ranges this request serves, by start.
    pub members: Vec<usize>,
}

/// Groups `wanted` (byte ranges of one object, any order, `start <= end`) into requests, ordered by
/// offset. With `max_gap` `None`, every range is its own request (no coalescing at all); with
/// `Some(gap)`, a range joins the request before it when it starts at most `gap` bytes after its end
/// and the request stays within `max_request` bytes (a range inside the request always joins it).
/// Every wanted range lies inside its request; requests only overlap where wanted ranges overlap and
/// joining them would break the cap.
pub fn coalesce(
    wanted: &[Range<u64>],
    max_gap: Option<u64>,
    max_request: u64,
) -> Vec<RangeRequest> {
    let mut order: Vec<usize> = (0..wanted.len()).collect();
    order.sort_by_key(|&i| (wanted[i].start, wanted[i].end));
    let mut out: Vec<RangeRequest> = Vec::new();
    for i in order {
        let w = &wanted[i];
        if let (Some(gap), Some(last)) = (max_gap, out.last_mut()) {
            let end = last.range.end.max(w.end);
            // A range inside the request costs nothing, whatever the cap.
            let inside = w.end <= last.range.end;
            if inside
                || (w.start <= last.range.end.saturating_add(gap)
                    && end.saturating_sub(last.range.start) <= max_request)
            {
                last.range.end = end;
                last.members.push(i);
                continue;
            }
        }
        out.push(RangeRequest {
            range: w.clone(),
            members: vec![i],
        });
    }
    tracing::debug!(
        ranges = wanted.len(),
        requests = out.len(),
        ?max_gap,
        bytes = out.iter().map(|r| r.range.end - r.range.start).sum::<u64>(),
        "coalesced byte ranges"
    );
    out
}

impl RangeRequest {
    /// The bytes of `wanted` (one of this request's members) out of `response`, the bytes this
    /// request returned. A response that ends before `wanted` does (the object is shorter than a
    /// reference or an index says) is [`Error::RangePastEnd`], naming `location` (the object's key or
    /// URL, for messages).
    pub fn slice(&self, response: &Bytes, wanted: &Range<u64>, location: &str) -> Result<Bytes> {
        let past_end = || Error::RangePastEnd {
            location: location.to_string(),
            start: wanted.start,
            end: wanted.end,
            len: self.range.start.saturating_add(response.len() as u64),
        };
        let from = wanted
            .start
            .checked_sub(self.range.start)
            .ok_or_else(past_end)?;
        let to = wanted
            .end
            .checked_sub(self.range.start)
            .ok_or_else(past_end)?;
        match (usize::try_from(from), usize::try_from(to)) {
            (Ok(from), Ok(to)) if from <= to && to <= response.len() => {
                Ok(response.slice(from..to))
            }
            _ => Err(past_end()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_near_ranges() {
        let wanted = [100..200, 0..100, 250..300, 10_000..10_100, 5..8];
        let got = coalesce(&wanted, Some(64), 1 << 20);
        assert_eq!(
            got,
            vec![
                RangeRequest {
                    range: 0..300,
                    members: vec![1, 4, 0, 2]
                },
                RangeRequest {
                    range: 10_000..10_100,
                    members: vec![3]
                },
            ]
        );
    }

    #[test]
    fn gap_zero_merges_only_touching_and_none_merges_nothing() {
        let wanted = [0..10, 10..20, 21..30];
        assert_eq!(coalesce(&wanted, Some(0), u64::MAX).len(), 2);
        assert_eq!(coalesce(&wanted, None, u64::MAX).len(), 3);
        assert_eq!(coalesce(&wanted, Some(1), u64::MAX).len(), 1);
        assert!(coalesce(&[], Some(1), 1).is_empty());
        // Without coalescing, even the same range twice is read twice.
        assert_eq!(coalesce(&[0..10, 0..10], None, u64::MAX).len(), 2);
    }

    #[test]
    fn requests_stay_within_the_size_limit() {
        let wanted: Vec<Range<u64>> = (0..10).map(|i| i * 100..i * 100 + 100).collect();
        let got = coalesce(&wanted, Some(0), 300);
        assert_eq!(got.len(), 4);
        assert!(got.iter().all(|r| r.range.end - r.range.start <= 300));
        // A single range larger than the limit is still read, alone.
        let big = coalesce(&[0..1000, 1000..1001], Some(0), 300);
        assert_eq!(big.len(), 2);
        // A range inside a request joins it even when the request is over the limit.
        let inside = coalesce(&[0..1000, 0..1000, 10..20], Some(0), 300);
        assert_eq!(inside.len(), 1);
        assert_eq!(inside[0].members, vec![0, 1, 2]);
    }

    #[test]
    fn slices_and_reports_ranges_past_the_end() {
        let request = RangeRequest {
            range: 100..200,
            members: vec![0, 1],
        };
        let response = Bytes::from((0..100u8).collect::<Vec<_>>());
        let bytes = request.slice(&response, &(110..120), "k").expect("inside");
        assert_eq!(&bytes[..], &(10..20u8).collect::<Vec<_>>()[..]);
        let short = response.slice(..50);
        let err = request
            .slice(&short, &(140..160), "s3://b/k")
            .expect_err("past the end");
        assert!(
            matches!(
                err,
                Error::RangePastEnd {
                    start: 140,
                    end: 160,
                    len: 150,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "s3://b/k: bytes 140..160 are beyond its end (150 bytes)"
        );
        // A range outside the request is not sliced from it.
        assert!(request.slice(&response, &(50..120), "k").is_err());
    }

    /// xorshift64*: random enough for test cases, without a dependency.
    struct Random(u64);

    impl Random {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
        }
    }

    /// Checks what `coalesce` promises for `wanted`.
    fn check(wanted: &[Range<u64>], gap: Option<u64>, cap: u64, disjoint: bool) {
        let requests = coalesce(wanted, gap, cap);
        // Every wanted range is a member of exactly one request, and lies inside it.
        let mut owner = vec![None; wanted.len()];
        for (r, request) in requests.iter().enumerate() {
            assert!(!request.members.is_empty());
            for &m in &request.members {
                assert_eq!(owner[m], None, "range {m} in two requests");
                owner[m] = Some(r);
                assert!(
                    request.range.start <= wanted[m].start && wanted[m].end <= request.range.end,
                    "{:?} not inside {:?}",
                    wanted[m],
                    request.range
                );
            }
            // A request starts and ends with wanted bytes (no bytes read for nothing at its edges).
            assert!(request
                .members
                .iter()
                .any(|&m| wanted[m].start == request.range.start));
            assert!(request
                .members
                .iter()
                .any(|&m| wanted[m].end == request.range.end));
            // Over the cap only when one range alone is.
            let len = request.range.end - request.range.start;
            assert!(
                len <= cap
                    || request
                        .members
                        .iter()
                        .any(|&m| wanted[m].end - wanted[m].start > cap),
                "{:?} exceeds {cap}",
                request.range
            );
        }
        assert!(owner.iter().all(Option::is_some));
        for pair in requests.windows(2) {
            let (a, b) = (&pair[0].range, &pair[1].range);
            assert!(a.start <= b.start, "not sorted: {a:?} {b:?}");
            match gap {
                // Apart by more than the gap, or joining them would break the cap.
                Some(gap) => assert!(
                    b.start > a.end.saturating_add(gap) || b.end.max(a.end) - a.start > cap,
                    "{a:?} and {b:?} should be one request"
                ),
                None => assert_eq!(pair[1].members.len(), 1),
            }
            if disjoint {
                assert!(a.end <= b.start, "overlap: {a:?} {b:?}");
            }
        }
        if gap.is_none() {
            assert_eq!(requests.len(), wanted.len());
        }
    }

    #[test]
    fn random_ranges_keep_every_promise() {
        let mut random = Random(0x9e37_79b9_7f4a_7c15);
        for case in 0..2000 {
            let count = random.below(40) as usize;
            let cap = 1 + random.below(3000);
            let gap = match random.below(4) {
                0 => None,
                1 => Some(0),
                _ => Some(random.below(500)),
            };
            // Disjoint ranges (inner chunks of a shard) every other case, any ranges otherwise.
            let disjoint = case % 2 == 0;
            let mut wanted = Vec::with_capacity(count);
            let mut at = 0;
            for _ in 0..count {
                let len = random.below(1500);
                let start = if disjoint {
                    at + random.below(800)
                } else {
                    random.below(20_000)
                };
                wanted.push(start..start + len);
                at = start + len;
            }
            // Shuffle the disjoint ones: callers need not sort.
            for i in (1..wanted.len()).rev() {
                let j = random.below(i as u64 + 1) as usize;
                wanted.swap(i, j);
            }
            check(&wanted, gap, cap, disjoint);
        }
    }
}
