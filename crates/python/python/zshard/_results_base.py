"""The hand-written part of the result classes: what the library's documents do not define. The
generated ``_results.py`` (``crates/python/generate_results.py``, from the Rust types' schema)
subclasses the properties here and re-exports the progress tuple handed to callbacks."""

from __future__ import annotations

from typing import Any, NamedTuple


class Progress(NamedTuple):
    """How far a conversion is, as handed to a ``progress=`` callback. Shards count this worker's
    whole share: a resumed run starts from the shards earlier runs did (as ``zshard.status`` counts
    them); chunks and bytes are this run's.

    Attributes
    ----------
    shards_done : int
        Shards done: by earlier runs, then by this one.
    shards_total : int
        Shards of this worker's share, done or not.
    chunks_read : int
        Source chunks read so far.
    bytes_read : int
        Bytes read from the source so far.
    bytes_written : int
        Bytes written to the destination so far.
    objects_listed : int
        Objects the run's listings named before its work was known: the source's (what each shard
        is made from) and those of the destination's survey. A source of millions of chunks takes
        minutes to list: the first calls may come meanwhile, with ``shards_total`` still 0.
    """

    shards_done: int
    shards_total: int
    chunks_read: int
    bytes_read: int
    bytes_written: int
    objects_listed: int = 0


def _skipped(docs: list[dict[str, Any]] | None) -> list[tuple[str, str]]:
    """``(array, reason)`` of each skipped array of a document's ``skipped_arrays``."""
    return [(s["path"], s["reason"]) for s in docs or []]


class _PlanRequests:
    """What :class:`PlanRequests` adds to its document."""

    list: int
    head: int
    get: int
    put: int
    delete: int

    @property
    def total(self) -> int:
        """Every request."""
        return self.list + self.head + self.get + self.put + self.delete


class _WorkerStatus:
    """What :class:`WorkerStatus` adds to its document."""

    leases: list[Any]
    live: bool

    @property
    def stale(self) -> bool:
        """It holds leases, none of them live: its run was killed or hangs."""
        return bool(self.leases) and not self.live


class _VerifyResult:
    """What :class:`VerifyResult` adds to its document."""

    mismatch_count: int

    @property
    def ok(self) -> bool:
        """No mismatch: every element equals the source and every shard index is valid."""
        return self.mismatch_count == 0
