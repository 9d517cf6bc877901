"""What the functions of ``zshard`` return: frozen dataclasses built from the library's documents (dicts
the extension makes from the library's result types)."""

from __future__ import annotations

from dataclasses import dataclass, field
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
    """

    shards_done: int
    shards_total: int
    chunks_read: int
    bytes_read: int
    bytes_written: int


def _skipped(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["path"], s["reason"]) for s in doc.get("skipped_arrays") or []]


@dataclass(frozen=True)
class Counts:
    """Shard, chunk and byte counts of one array or of all of them.

    Attributes
    ----------
    shards_total : int
        Shards of the array(s) (in this worker's share).
    shards_skipped : int
        Shards already complete from an earlier run (resumed past).
    shards_written : int
        Shards written by this run.
    shards_empty : int
        Shards holding only the fill value (not written).
    chunks_read : int
        Source chunks read.
    chunks_missing : int
        Source chunks not stored (read as the fill value).
    bytes_read : int
        Bytes read from the source.
    bytes_written : int
        Bytes written to the destination.
    """

    shards_total: int = 0
    shards_skipped: int = 0
    shards_written: int = 0
    shards_empty: int = 0
    chunks_read: int = 0
    chunks_missing: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> Counts:
        return cls(**{name: doc.get(name, 0) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Update:
    """What a run over a finished conversion brought up to date (``Report.update``): the source
    changed since, and only the shards made from what changed were written again.

    Attributes
    ----------
    shards_rewritten : int
        Shards written again (or removed, now all fill): their source chunks changed, appeared or
        disappeared, or their extent did.
    shards_added : int
        Shards the finished conversion did not have (the array grew, or is new to the hierarchy).
    shards_removed : int
        Shards it had beyond the array's extent now (the array shrank), removed (by ``finalize``
        after workers, whose own reports count none).
    inner_chunks_copied : int
        Inner chunks of the rewritten shards copied, encoded, from the shards as they stood (their
        source chunks did not change), not converted again.
    """

    shards_rewritten: int = 0
    shards_added: int = 0
    shards_removed: int = 0
    inner_chunks_copied: int = 0

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> Update:
        return cls(**{name: doc.get(name, 0) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Report:
    """What :func:`zshard.convert` did: the same document as the command's ``--report`` (in ``document``).

    Attributes
    ----------
    status : str
        ``"ok"``, or ``"complete"`` when the destination was already converted with these options
        (nothing was done).
    source : str
        The source's location.
    destination : str
        The destination's location.
    worker : tuple[int, int]
        ``(index, count)`` of the share converted (``(0, 1)``: every shard).
    duration_seconds : float
        Wall time of the run.
    totals : Counts
        Counts over every array.
    arrays : dict[str, Counts]
        Counts per array, by path in the hierarchy.
    skipped_arrays : list[tuple[str, str]]
        ``(array, reason)`` for each array left out by ``on_unsupported="skip"`` (zshard does not
        read its data type or codecs).
    update : Update | None
        What a rerun over a finished conversion brought up to date (``None`` for a first conversion,
        and when the destination was already up to date: ``status`` is then ``"complete"``).
    document : dict[str, Any]
        The whole report document (options, version, host, times, throughput, ...).
    """

    status: str
    source: str
    destination: str
    worker: tuple[int, int]
    duration_seconds: float
    totals: Counts
    arrays: dict[str, Counts]
    skipped_arrays: list[tuple[str, str]]
    update: Update | None
    document: dict[str, Any] = field(repr=False)

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> Report:
        return cls(
            status=doc["status"],
            source=doc["source"],
            destination=doc["destination"],
            worker=(doc["worker"]["index"], doc["worker"]["count"]),
            duration_seconds=doc["duration_seconds"],
            totals=Counts._from_dict(doc["totals"]),
            arrays={a["path"]: Counts._from_dict(a) for a in doc["arrays"]},
            skipped_arrays=_skipped(doc),
            update=Update._from_dict(doc["update"]) if doc.get("update") is not None else None,
            document=doc,
        )


@dataclass(frozen=True)
class VerifyResult:
    """What :func:`zshard.verify` found.

    Attributes
    ----------
    destination : str
        The output compared.
    shards_checked : int
        Shards compared element by element (all, or the ``sample``).
    arrays : int
        Arrays compared.
    mismatch_count : int
        Differences found (elements, shard indexes, stray objects, metadata).
    mismatches : list[str]
        The first differences, one message each.
    """

    destination: str
    shards_checked: int
    arrays: int
    mismatch_count: int
    mismatches: list[str]

    @property
    def ok(self) -> bool:
        """No mismatch: every element equals the source and every shard index is valid."""
        return self.mismatch_count == 0

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> VerifyResult:
        return cls(**{name: doc[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Finalized:
    """What :func:`zshard.finalize` wrote.

    Attributes
    ----------
    destination : str
        The output finalized.
    arrays : int
        Arrays whose metadata was written.
    groups : int
        Groups whose metadata was written.
    already_finalized : bool
        The metadata was already there: nothing was written.
    """

    destination: str
    arrays: int
    groups: int
    already_finalized: bool

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> Finalized:
        return cls(**{name: doc[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class PyramidLevel:
    """An array's place in a multiscale (OME-Zarr) pyramid.

    Attributes
    ----------
    group : str
        The multiscale group's path.
    level : int
        The level (0 is the full resolution).
    """

    group: str
    level: int


@dataclass(frozen=True)
class PlannedArray:
    """One array of a :class:`Plan`.

    Attributes
    ----------
    path : str
        Path in the hierarchy (empty for a single array).
    name : str
        The array as messages name it (source and path).
    shape : list[int]
        Extent per dimension.
    data_type : str | dict[str, Any]
        The Zarr v3 ``data_type`` (a name, or an object for parametrised types).
    fill_value : Any
        The Zarr v3 fill value.
    source_chunk_shape : list[int]
        The chunks the source is read by (an already sharded source's inner chunks; on a rectilinear
        grid, its largest chunk).
    source_chunk_grid : dict[str, Any] | None
        A rectilinear source grid: ``chunks`` per dimension, ``smallest_chunk`` and ``largest_chunk``
        (``None`` for a regular grid).
    source_shard_shape : list[int] | None
        An already sharded source's shard shape.
    source_chunks : int
        Chunks in the source's grid.
    source_codecs : list[Any]
        The source's codec chain as Zarr v3 codecs.
    dimension_names : list[str | None] | None
        Names of the dimensions (``None`` when the source gives none).
    pyramid : PyramidLevel | None
        Its place in a multiscale pyramid.
    made_from : dict[str, str] | None
        For a level of a pyramid the conversion makes (``pyramid=``): ``{"path": the level above,
        "downsample": the reduction}``; it reads no source chunk. ``None`` for an array read from its
        source.
    inner_chunk_shape : list[int]
        The output's inner chunk shape.
    shard_shape : list[int]
        The output's shard shape.
    shards : int
        Shards in the output's grid.
    inner_chunks_per_shard : int
        Inner chunks in one shard.
    index_location : str
        ``"start"`` or ``"end"``.
    output_codecs : list[Any]
        The inner chunks' codec chain.
    passthrough : bool
        Source chunks are copied into the shards without decoding.
    compressor_fallback : str | None
        Why ``compressor="source"`` could not keep the source's codecs (the default was used).
    estimated_bytes_in : int
        Raw (uncompressed) size: an upper bound on the data read.
    estimated_bytes_out : int
        Raw size: an upper bound on the data written by compressing codecs.
    parts_per_shard : int
        Parts a shard is processed and written in under the memory limit.
    source_chunks_kept_between_parts : bool
        A source chunk under several parts of a shard is read once.
    estimated_peak_memory_per_worker : int
        Bytes a worker needs at most for this array.
    warnings : list[str]
        What readers will see differently.
    """

    path: str
    name: str
    shape: list[int]
    data_type: str | dict[str, Any]
    fill_value: Any
    source_chunk_shape: list[int]
    source_chunk_grid: dict[str, Any] | None
    source_shard_shape: list[int] | None
    source_chunks: int
    source_codecs: list[Any]
    dimension_names: list[str | None] | None
    pyramid: PyramidLevel | None
    made_from: dict[str, str] | None
    inner_chunk_shape: list[int]
    shard_shape: list[int]
    shards: int
    inner_chunks_per_shard: int
    index_location: str
    output_codecs: list[Any]
    passthrough: bool
    compressor_fallback: str | None
    estimated_bytes_in: int
    estimated_bytes_out: int
    parts_per_shard: int
    source_chunks_kept_between_parts: bool
    estimated_peak_memory_per_worker: int
    warnings: list[str]

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> PlannedArray:
        values: dict[str, Any] = {name: doc.get(name) for name in cls.__dataclass_fields__}
        pyramid = doc.get("pyramid")
        values["pyramid"] = None if pyramid is None else PyramidLevel(pyramid["group"], pyramid["level"])
        values["warnings"] = list(doc.get("warnings") or [])
        return cls(**values)


@dataclass(frozen=True)
class PlanTotals:
    """The sums of a :class:`Plan` over its arrays.

    Attributes
    ----------
    arrays : int
        Arrays converted.
    shards : int
        Shards written.
    source_chunks : int
        Source chunks read.
    estimated_bytes_in : int
        Raw size read (upper bound).
    estimated_bytes_out : int
        Raw size written (upper bound for compressing codecs).
    estimated_peak_memory_per_worker : int
        The largest array's peak memory per worker.
    """

    arrays: int
    shards: int
    source_chunks: int
    estimated_bytes_in: int
    estimated_bytes_out: int
    estimated_peak_memory_per_worker: int


@dataclass(frozen=True)
class Plan:
    """What :func:`zshard.plan` found a conversion would do (``zshard plan --json``; the document in
    ``document``).

    Attributes
    ----------
    source : str
        The source's location.
    destination : str
        The destination's location.
    threads : int
        Worker threads per CPU stage the conversion would use.
    io_threads : int
        Threads fetching chunks and threads writing shards, each.
    memory_limit : int | None
        The memory limit the plan was made for, in bytes.
    memory_limit_source : str
        Where the memory limit came from (given, or which of the machine's limits the default is half
        of).
    part_bytes : int | None
        The size of the parts shards are written in.
    arrays : list[PlannedArray]
        Every array converted, in hierarchy order.
    groups : list[str]
        Group paths written (the root is ``""``).
    warnings : list[str]
        What readers will see differently in the output than in the source.
    skipped_arrays : list[tuple[str, str]]
        ``(array, reason)`` for each array left out by ``on_unsupported="skip"``.
    totals : PlanTotals
        Sums over the arrays.
    icechunk_chunks : dict[str, int] | None
        An Icechunk source's chunks by kind (``native``, ``inline``, ``virtual``).
    cost : PlanCost | None
        What the whole job would request from storage: the source's stored bytes beside their raw
        upper bound, and every request by kind on each side, the state's included.
    estimate : PlanEstimate | None
        How long the job's storage traffic would take and what its requests would cost, with the
        assumptions the estimate is made from.
    document : dict[str, Any]
        The whole plan document.
    """

    source: str
    destination: str
    threads: int
    io_threads: int
    memory_limit: int | None
    memory_limit_source: str
    part_bytes: int | None
    arrays: list[PlannedArray]
    groups: list[str]
    warnings: list[str]
    skipped_arrays: list[tuple[str, str]]
    totals: PlanTotals
    icechunk_chunks: dict[str, int] | None
    cost: PlanCost | None
    estimate: PlanEstimate | None
    document: dict[str, Any] = field(repr=False)

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> Plan:
        totals = doc["totals"]
        return cls(
            source=doc["source"],
            destination=doc["destination"],
            threads=doc["threads"],
            io_threads=doc["io_threads"],
            memory_limit=doc.get("memory_limit"),
            memory_limit_source=doc.get("memory_limit_source", ""),
            part_bytes=doc.get("part_bytes"),
            arrays=[PlannedArray._from_dict(a) for a in doc["arrays"]],
            groups=list(doc.get("groups") or []),
            warnings=list(doc.get("warnings") or []),
            skipped_arrays=_skipped(doc),
            totals=PlanTotals(**{name: totals.get(name, 0) for name in PlanTotals.__dataclass_fields__}),
            icechunk_chunks=doc.get("icechunk_chunks"),
            cost=PlanCost._from_dict(doc["cost"]) if doc.get("cost") is not None else None,
            estimate=PlanEstimate._from_dict(doc["estimate"]) if doc.get("estimate") is not None else None,
            document=doc,
        )


@dataclass(frozen=True)
class PlanCost:
    """The requests and bytes a whole conversion would take from storage: a cost estimate a migration
    can be budgeted with (``zshard plan --json``'s ``cost``).

    Attributes
    ----------
    get_requests : int
        GET requests for source chunks: for a kerchunk reference set its byte ranges coalesced as an
        unpartitioned run coalesces them (Parquet: for arrays of at most 64 reference files); for
        other sources one per source chunk (at most).
    get_bytes : int
        Bytes those GETs request (raw sizes when not from references: an upper bound).
    gets_from_references : bool
        Whether every array's GETs were counted from its references' byte ranges.
    put_requests : int
        PUT requests of data: one per shard (with its multipart requests on object stores), one per
        metadata document (the state's are in ``destination_requests``).
    put_bytes : int
        Bytes those PUTs send (raw sizes: an upper bound for compressing codecs).
    raw_bytes_in : int
        Raw (decoded) bytes of every source chunk the job reads: an upper bound.
    stored_bytes_in : int | None
        Bytes those chunks are stored in: from one listing of each array's chunks, or the byte
        ranges its references name; ``None`` when the source cannot be listed.
    source_requests : PlanRequests
        Every request of the source by kind (the chunks' GETs, the listings of its chunks).
    destination_requests : PlanRequests
        Every request of the destination by kind (shards, documents and the state's files).
    state_requests : PlanStateRequests
        The state's share of ``destination_requests``, by file.
    """

    get_requests: int
    get_bytes: int
    gets_from_references: bool
    put_requests: int
    put_bytes: int
    raw_bytes_in: int
    stored_bytes_in: int | None
    source_requests: PlanRequests
    destination_requests: PlanRequests
    state_requests: PlanStateRequests

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> PlanCost:
        return cls(
            get_requests=doc["get_requests"],
            get_bytes=doc["get_bytes"],
            gets_from_references=doc["gets_from_references"],
            put_requests=doc["put_requests"],
            put_bytes=doc["put_bytes"],
            raw_bytes_in=doc["raw_bytes_in"],
            stored_bytes_in=doc.get("stored_bytes_in"),
            source_requests=PlanRequests(**doc["source_requests"]),
            destination_requests=PlanRequests(**doc["destination_requests"]),
            state_requests=PlanStateRequests(**doc["state_requests"]),
        )


@dataclass(frozen=True)
class PlanRequests:
    """Requests by kind, as object stores bill them (on a local filesystem: the same file
    operations).

    Attributes
    ----------
    list : int
        Listing requests (one per page of up to 1,000 keys).
    head : int
        HEAD requests.
    get : int
        GET requests.
    put : int
        PUT requests (multipart requests included).
    delete : int
        DELETE requests (a bulk delete of up to 1,000 keys counts one).
    """

    list: int
    head: int
    get: int
    put: int
    delete: int

    @property
    def total(self) -> int:
        """Every request."""
        return self.list + self.head + self.get + self.put + self.delete


@dataclass(frozen=True)
class PlanStateRequests:
    """The requests of the destination's state, by file (each a total of all kinds).

    Attributes
    ----------
    claim : int
        The claim, each worker's options record and lease (with renewals), the listings that check
        the destination, and their removal.
    records : int
        The records of done shards (a file per batch, their compaction), what a finished conversion
        keeps per array, and their reading and removal at the end.
    manifest : int
        The manifest records beside each record file, and the manifest kept with
        ``keep_manifest=True``.
    """

    claim: int
    records: int
    manifest: int


@dataclass(frozen=True)
class PlanPrices:
    """Request prices an estimate is made with, in US dollars per 1,000 requests.

    Attributes
    ----------
    name : str
        Where the prices come from (S3 Standard's published prices in us-east-1).
    usd_per_1000_put_list : float
        PUT, COPY, POST and LIST requests.
    usd_per_1000_get_head : float
        GET, HEAD and other reads.
    usd_per_1000_delete : float
        DELETE requests.
    """

    name: str
    usd_per_1000_put_list: float
    usd_per_1000_get_head: float
    usd_per_1000_delete: float


@dataclass(frozen=True)
class PlanAssumptions:
    """What a :class:`PlanEstimate` assumes.

    Attributes
    ----------
    workers : int
        Workers sharing the job side by side.
    object_store_bytes_per_second : int
        Bytes per second one worker moves to or from an object store.
    object_store_latency_ms : float
        One request's round trip to an object store, in milliseconds.
    local_bytes_per_second : int
        Bytes per second one worker reads or writes on a local filesystem.
    local_latency_ms : float
        One file operation's latency on a local filesystem, in milliseconds.
    requests_in_flight : int
        Requests a worker has in flight at once (``max_requests``).
    prices : PlanPrices
        The request prices the price is made with.
    """

    workers: int
    object_store_bytes_per_second: int
    object_store_latency_ms: float
    local_bytes_per_second: int
    local_latency_ms: float
    requests_in_flight: int
    prices: PlanPrices


@dataclass(frozen=True)
class PlanEstimate:
    """How long a job's storage traffic would take and what its requests would cost: an estimate
    from the stated :class:`PlanAssumptions`, not a measurement (``zshard plan --json``'s
    ``estimate``).

    Attributes
    ----------
    seconds : float
        Seconds of storage I/O with the workers side by side (CPU time for codecs not counted).
    bytes : int
        Bytes moved: the source's stored bytes and the output's, taken to compress as the source
        does (raw sizes where unknown).
    request_price_usd : float | None
        The request price of the sides on an object store, in US dollars; ``None`` when neither
        side is one. Transfer and storage are not counted.
    assumptions : PlanAssumptions
        What the estimate assumes.
    note : str
        What the estimate is, in one sentence.
    """

    seconds: float
    bytes: int
    request_price_usd: float | None
    assumptions: PlanAssumptions
    note: str

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> PlanEstimate:
        assumptions = dict(doc["assumptions"])
        assumptions["prices"] = PlanPrices(**assumptions["prices"])
        return cls(
            seconds=doc["seconds"],
            bytes=doc["bytes"],
            request_price_usd=doc.get("request_price_usd"),
            assumptions=PlanAssumptions(**assumptions),
            note=doc["note"],
        )


@dataclass(frozen=True)
class ListedArray:
    """One array of a :class:`Listing`.

    Attributes
    ----------
    path : str
        Path in the hierarchy (empty when the source is a single array).
    shape : list[int]
        Extent per dimension.
    data_type : str | dict[str, Any]
        The Zarr v3 ``data_type`` (a name, or an object for parametrised types).
    chunk_shape : list[int]
        The chunks the source is read by: its chunks, or an already sharded source's inner chunks.
    shard_shape : list[int] | None
        An already sharded source's shard shape.
    codecs : list[Any]
        The chunks' codec chain as Zarr v3 codecs (v2 compressors, filters and byte order
        translated).
    """

    path: str
    shape: list[int]
    data_type: str | dict[str, Any]
    chunk_shape: list[int]
    shard_shape: list[int] | None
    codecs: list[Any]


@dataclass(frozen=True)
class Listing:
    """What :func:`zshard.ls` found in a source (``zshard ls --json``).

    Attributes
    ----------
    source : str
        The source's location.
    arrays : list[ListedArray]
        Arrays in hierarchy order.
    groups : list[str]
        Group paths in hierarchy order (the root is ``""``).
    skipped_arrays : list[tuple[str, str]]
        ``(array, reason)`` for each array zshard does not read (with ``on_unsupported="skip"``).
    """

    source: str
    arrays: list[ListedArray]
    groups: list[str]
    skipped_arrays: list[tuple[str, str]]

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> Listing:
        return cls(
            source=doc["source"],
            arrays=[ListedArray(**{n: a.get(n) for n in ListedArray.__dataclass_fields__}) for a in doc["arrays"]],
            groups=list(doc.get("groups") or []),
            skipped_arrays=_skipped(doc),
        )


@dataclass(frozen=True)
class ArrayStatus:
    """One array of a conversion's recorded plan, as :func:`zshard.status` sees it.

    Attributes
    ----------
    path : str
        Its path in the hierarchy (``""`` at the root).
    shards_planned : int
        Shards it has.
    shards_done : int
        Shards recorded written or all fill (each once).
    shards_written : int
        Of those, shards recorded written.
    shards_empty : int
        Of those, shards recorded all fill (never written).
    bytes_written : int
        The recorded sizes of the written shards.
    """

    path: str
    shards_planned: int
    shards_done: int
    shards_written: int
    shards_empty: int
    bytes_written: int

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> ArrayStatus:
        return cls(**{name: doc[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class StatusTotals:
    """The totals of a status over every array.

    Attributes
    ----------
    shards_planned : int
        Shards of every array.
    shards_done : int
        Shards done (recorded written or all fill).
    bytes_written : int
        Bytes of the shards recorded written.
    """

    shards_planned: int
    shards_done: int
    bytes_written: int

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> StatusTotals:
        return cls(**{name: doc[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class LeaseStatus:
    """A worker's lease on the destination, held while a run converts or finalizes.

    Attributes
    ----------
    key : str
        The lease object's key.
    host : str
        The host holding it.
    pid : int
        The holder's process id.
    started : str
        When the run started (RFC 3339).
    renewed_ms : int
        When it was last renewed, in milliseconds since the Unix epoch.
    age_ms : int
        Milliseconds since then, by this host's clock.
    stale_after_ms : int
        After how long without renewal it is stale.
    live : bool
        Renewed within ``stale_after_ms`` by a run that still runs: its run is live.
    ended : bool
        Held by a process of this host that no longer runs (killed before it could remove it):
        not live however recently it was renewed.
    """

    key: str
    host: str
    pid: int
    started: str
    renewed_ms: int
    age_ms: int
    stale_after_ms: int
    live: bool
    ended: bool

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> LeaseStatus:
        return cls(**{name: doc[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class WorkerStatus:
    """One worker of a partitioned conversion (``"w0of1"`` is an unpartitioned run).

    Attributes
    ----------
    worker : str
        Its tag, ``"w<index>of<count>"``.
    index : int
        Its index.
    count : int
        The number of workers.
    started : bool
        Whether it has recorded its options.
    shards_planned : int
        Shards it owns.
    shards_done : int
        Of those, shards done.
    leases : list[LeaseStatus]
        Its leases: one per run of it that is converting, or was killed and could not remove it.
    live : bool
        Whether any of its leases is live.
    """

    worker: str
    index: int
    count: int
    started: bool
    shards_planned: int
    shards_done: int
    leases: list[LeaseStatus]
    live: bool

    @property
    def stale(self) -> bool:
        """It holds leases, none of them live: its run was killed or hangs."""
        return bool(self.leases) and not self.live

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> WorkerStatus:
        values = {name: doc[name] for name in cls.__dataclass_fields__}
        values["leases"] = [LeaseStatus._from_dict(lease) for lease in doc["leases"]]
        return cls(**values)


@dataclass(frozen=True)
class Rate:
    """How fast shards were recorded done lately, and when the rest would be done at that pace.

    Attributes
    ----------
    window_s : int
        The window the rate is measured over, in seconds, ending now.
    shards_per_s : float
        Shards recorded done per second within the window.
    bytes_per_s : float
        Bytes of shards recorded written per second within the window.
    eta_s : int or None
        Seconds until every planned shard is done at this rate; ``None`` when none was done in the
        window.
    """

    window_s: int
    shards_per_s: float
    bytes_per_s: float
    eta_s: int | None

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> Rate:
        return cls(**{name: doc[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class UpdateStatus:
    """The progress of an update in progress (``Status.update``): a run over a finished conversion
    whose source changed, writing only the shards made from what changed.

    Attributes
    ----------
    shards_to_update : int
        Shards the update set out to write (over every worker that started it).
    shards_done : int
        Of those, the shards recorded done.
    """

    shards_to_update: int
    shards_done: int

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> UpdateStatus:
        return cls(**{name: doc[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Status:
    """How far a conversion into a destination has come, from the destination alone (``zshard status
    --json``).

    Attributes
    ----------
    destination : str
        The destination.
    phase : str
        ``"not_started"``, ``"in_progress"`` or ``"complete"``.
    arrays : list[ArrayStatus]
        The recorded plan's arrays (empty unless in progress).
    totals : StatusTotals
        Over every array.
    workers : list[WorkerStatus]
        The workers that partition the conversion, in order.
    finalize_waits_for : list[str]
        The workers whose shards are not all done (their tags), which :func:`zshard.finalize` waits for.
    unreadable : list[str]
        Lines of record files that could not be read, each naming its key and line (not counted).
    rate : Rate or None
        The pace of the last two minutes and the time left at it (while in progress, with a plan).
    finished : bool
        Nothing moves on by itself: complete (or never started), or every shard recorded done and no
        worker live (what is left is :func:`zshard.finalize`).
    update : UpdateStatus or None
        While an update is in progress, how far it has come (the totals count every shard of the
        arrays, most of them done before it started).
    """

    destination: str
    phase: str
    arrays: list[ArrayStatus]
    totals: StatusTotals
    workers: list[WorkerStatus]
    finalize_waits_for: list[str]
    unreadable: list[str]
    rate: Rate | None
    finished: bool
    update: UpdateStatus | None = None

    @classmethod
    def _from_dict(cls, doc: dict[str, Any]) -> Status:
        return cls(
            destination=doc["destination"],
            phase=doc["phase"],
            arrays=[ArrayStatus._from_dict(a) for a in doc["arrays"]],
            totals=StatusTotals._from_dict(doc["totals"]),
            workers=[WorkerStatus._from_dict(w) for w in doc["workers"]],
            finalize_waits_for=list(doc["finalize_waits_for"]),
            unreadable=list(doc["unreadable"]),
            rate=Rate._from_dict(doc["rate"]) if doc.get("rate") is not None else None,
            finished=doc["finished"],
            update=UpdateStatus._from_dict(doc["update"]) if doc.get("update") is not None else None,
        )
