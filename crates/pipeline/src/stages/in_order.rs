//! Releasing the parts of a shard in order. Parts travel through the stateless stages on their own and
//! can overtake each other; the assembler (which keeps source chunks from one part for the next) and
//! the writer (which appends parts to the shard's stream) both need them in order again.

use std::collections::BTreeMap;

/// The parts of one shard that arrived, released in the order of their index. Parts that arrive
/// early wait here; there are at most as many as the window lets into the pipeline.
#[derive(Debug)]
pub(super) struct InOrder<T> {
    next: u64,
    waiting: BTreeMap<u64, T>,
}

impl<T> Default for InOrder<T> {
    fn default() -> Self {
        InOrder {
            next: 0,
            waiting: BTreeMap::new(),
        }
    }
}

impl<T> InOrder<T> {
    /// Adds part `index`; it is released once every part before it was.
    pub(super) fn insert(&mut self, index: u64, part: T) {
        self.waiting.insert(index, part);
    }

    /// The next part in order, if it has arrived.
    pub(super) fn pop_next(&mut self) -> Option<T> {
        let part = self.waiting.remove(&self.next)?;
        self.next += 1;
        Some(part)
    }

    /// How many parts were released.
    pub(super) fn released(&self) -> u64 {
        self.next
    }

    /// Drops the parts that wait (their shard was abandoned).
    pub(super) fn clear(&mut self) {
        self.waiting.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_released_in_order_once_their_predecessors_are() {
        let mut parts = InOrder::default();
        parts.insert(2, "c");
        parts.insert(1, "b");
        assert_eq!(parts.pop_next(), None, "part 0 has not arrived");
        parts.insert(0, "a");
        let released: Vec<_> = std::iter::from_fn(|| parts.pop_next()).collect();
        assert_eq!(released, ["a", "b", "c"]);
        assert_eq!(parts.released(), 3);
        parts.insert(4, "e");
        assert_eq!(parts.pop_next(), None, "part 3 has not arrived");
        parts.clear();
        parts.insert(3, "d");
        assert_eq!(parts.pop_next(), Some("d"));
        assert_eq!(parts.pop_next(), None, "part 4 was dropped");
    }
}
