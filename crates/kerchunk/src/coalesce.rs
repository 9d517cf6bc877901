//! Turning the byte ranges one batch needs into few requests: ranges of the same target that overlap,
//! touch, or lie at most `max_gap` bytes apart become one ranged read (the bytes in the gaps are read
//! and dropped), as long as the read stays within `max_request` bytes.

/// One wanted byte range `start..end` of target `target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wanted {
    pub target: usize,
    pub start: u64,
    pub end: u64,
}

/// One request: bytes `start..end` of `target`, serving the wanted ranges `members` (indices into the
/// input).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub target: usize,
    pub start: u64,
    pub end: u64,
    pub members: Vec<usize>,
}

/// Groups `wanted` into requests. With `max_gap` `None`, every range is its own request (no
/// coalescing at all). Requests come out ordered by target and offset.
pub(crate) fn coalesce(wanted: &[Wanted], max_gap: Option<u64>, max_request: u64) -> Vec<Request> {
    let mut order: Vec<usize> = (0..wanted.len()).collect();
    order.sort_by_key(|&i| (wanted[i].target, wanted[i].start, wanted[i].end));
    let mut out: Vec<Request> = Vec::new();
    for i in order {
        let w = wanted[i];
        if let (Some(gap), Some(last)) = (max_gap, out.last_mut()) {
            let end = last.end.max(w.end);
            if last.target == w.target
                && w.start <= last.end.saturating_add(gap)
                && end - last.start <= max_request
            {
                last.end = end;
                last.members.push(i);
                continue;
            }
        }
        out.push(Request {
            target: w.target,
            start: w.start,
            end: w.end,
            members: vec![i],
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(target: usize, start: u64, end: u64) -> Wanted {
        Wanted { target, start, end }
    }

    #[test]
    fn merges_near_ranges_per_target() {
        let wanted = [
            w(0, 100, 200),
            w(1, 0, 10),
            w(0, 0, 100),
            w(0, 250, 300),
            w(0, 10_000, 10_100),
            w(1, 5, 8),
        ];
        let got = coalesce(&wanted, Some(64), 1 << 20);
        assert_eq!(
            got,
            vec![
                Request {
                    target: 0,
                    start: 0,
                    end: 300,
                    members: vec![2, 0, 3]
                },
                Request {
                    target: 0,
                    start: 10_000,
                    end: 10_100,
                    members: vec![4]
                },
                Request {
                    target: 1,
                    start: 0,
                    end: 10,
                    members: vec![1, 5]
                },
            ]
        );
    }

    #[test]
    fn gap_zero_merges_only_touching_and_none_merges_nothing() {
        let wanted = [w(0, 0, 10), w(0, 10, 20), w(0, 21, 30)];
        assert_eq!(coalesce(&wanted, Some(0), u64::MAX).len(), 2);
        assert_eq!(coalesce(&wanted, None, u64::MAX).len(), 3);
        assert_eq!(coalesce(&wanted, Some(1), u64::MAX).len(), 1);
        assert!(coalesce(&[], Some(1), 1).is_empty());
    }

    #[test]
    fn requests_stay_within_the_size_limit() {
        let wanted: Vec<Wanted> = (0..10).map(|i| w(0, i * 100, i * 100 + 100)).collect();
        let got = coalesce(&wanted, Some(0), 300);
        assert_eq!(got.len(), 4);
        assert!(got.iter().all(|r| r.end - r.start <= 300));
        // A single range larger than the limit is still read, alone.
        let big = coalesce(&[w(0, 0, 1000), w(0, 1000, 1001)], Some(0), 300);
        assert_eq!(big.len(), 2);
    }
}
