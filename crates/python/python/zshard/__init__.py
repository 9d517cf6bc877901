"""Convert chunked arrays (Zarr v2/v3, kerchunk references) into sharded Zarr v3.

>>> import zshard
>>> report = zshard.convert("in.zarr", "out.zarr", shard_shape=(4096, 4096), chunk_shape=(256, 256))
>>> zshard.verify("in.zarr", "out.zarr").ok
True

Every function takes the ``zshard`` command's options in snake case (``zshard convert --help``):
``shard_shape=(4096, 4096)``, ``chunk_shape``, ``compressor="zstd:3"`` (or a codec chain as a list of
dicts), ``index_location="start"``, ``no_passthrough=True``, ``no_consolidate=True``, ``threads``,
``memory_limit="4G"`` (or bytes), ``overwrite=True``, ``report="run.json"``, ``source_format``,
``ref_root``, ``allow_ref_prefix=[...]``, ``ref_coalesce_gap``, ``s3_endpoint``, ``s3_region``,
``s3_path_style=True``, ``anonymous=True``, ``retries``, ``retry_timeout``, ``max_requests``,
``part_size``, ``io_threads``. Sources and destinations are paths, ``pathlib.Path`` objects or URLs
(``file://``, ``s3://``, ``gs://``, ``az://``; ``http(s)://`` sources). Failures raise a
:class:`ConversionError` subclass naming the array and key.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from . import _zshard
from ._errors import (
    Cancelled,
    ChunkError,
    ConversionError,
    DestinationError,
    MemoryLimitError,
    OptionsError,
    SourceError,
    StorageError,
    ZshardWarning,
)
from ._options import Location, command_line

__version__: str = _zshard.__version__

__all__ = [
    "Cancelled",
    "ChunkError",
    "ConversionError",
    "Counts",
    "DestinationError",
    "Finalized",
    "Location",
    "MemoryLimitError",
    "OptionsError",
    "Progress",
    "Report",
    "SourceError",
    "StorageError",
    "VerifyResult",
    "ZshardWarning",
    "convert",
    "finalize",
    "plan",
    "verify",
]


class Progress(NamedTuple):
    """How far a conversion is, as handed to a ``progress=`` callback (figures of this run only:
    shards done by an earlier run are not counted in ``shards_total``)."""

    shards_done: int
    shards_total: int
    chunks_read: int
    bytes_read: int
    bytes_written: int


@dataclass(frozen=True)
class Counts:
    """Shard, chunk and byte counts of one array or of all of them."""

    shards_total: int = 0
    shards_skipped: int = 0
    shards_written: int = 0
    shards_empty: int = 0
    chunks_read: int = 0
    chunks_missing: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    @classmethod
    def _from_json(cls, doc: dict[str, Any]) -> Counts:
        return cls(**{name: doc.get(name, 0) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Report:
    """What :func:`convert` did: the same document as the command's ``--report`` (in ``document``).

    ``status`` is ``ok`` or ``complete`` (the destination was already converted with these options:
    nothing was done); ``totals`` and ``arrays`` count shards, chunks and bytes; ``skipped_arrays``
    lists ``(array, reason)`` for each array left out by ``on_unsupported="skip"`` (zshard does not
    read its data type or codecs).
    """

    status: str
    source: str
    destination: str
    worker: tuple[int, int]
    duration_seconds: float
    totals: Counts
    arrays: dict[str, Counts]
    skipped_arrays: list[tuple[str, str]]
    document: dict[str, Any] = field(repr=False)

    @classmethod
    def _from_json(cls, text: str) -> Report:
        doc = json.loads(text)
        return cls(
            status=doc["status"],
            source=doc["source"],
            destination=doc["destination"],
            worker=(doc["worker"]["index"], doc["worker"]["count"]),
            duration_seconds=doc["duration_seconds"],
            totals=Counts._from_json(doc["totals"]),
            arrays={a["path"]: Counts._from_json(a) for a in doc["arrays"]},
            skipped_arrays=[(s["path"], s["reason"]) for s in doc.get("skipped_arrays", [])],
            document=doc,
        )


@dataclass(frozen=True)
class VerifyResult:
    """What :func:`verify` found: ``ok`` when every element equals the source and every shard index
    is valid; otherwise ``mismatches`` lists the first differences (of ``mismatch_count``)."""

    destination: str
    shards_checked: int
    arrays: int
    mismatch_count: int
    mismatches: list[str]

    @property
    def ok(self) -> bool:
        """No mismatch."""
        return self.mismatch_count == 0


@dataclass(frozen=True)
class Finalized:
    """What :func:`finalize` wrote: the metadata of ``arrays`` arrays and ``groups`` groups, or
    nothing when it ``already_finalized``."""

    destination: str
    arrays: int
    groups: int
    already_finalized: bool


ProgressCallback = Callable[[Progress], object]


def plan(src: Location, dst: Location, **options: Any) -> dict[str, Any]:
    """What converting ``src`` into ``dst`` would do, from metadata alone (``zshard plan --json``):
    per array the shapes, shard and chunk counts, codecs, sizes, and the peak memory estimate.
    Reads no chunk and writes nothing; raises on everything :func:`convert` would reject."""
    return json.loads(_zshard.run(command_line("plan", src, dst, options)))


def convert(
    src: Location,
    dst: Location,
    *,
    worker: tuple[int, int] | str | None = None,
    progress: ProgressCallback | bool | None = None,
    **options: Any,
) -> Report:
    """Converts ``src`` into sharded Zarr v3 at ``dst`` and returns the run's :class:`Report`.

    Resumes an interrupted conversion with the same options (only the shards not done are
    converted). ``worker=(i, n)`` converts only share ``i`` of ``n`` of the shards and writes no
    metadata: call :func:`finalize` once every worker is done. ``progress`` is a callable given a
    :class:`Progress` as the run advances (at most ten times a second, on the calling thread), or
    ``True`` for a tqdm bar when tqdm is installed. The GIL is released while converting. Ctrl-C
    (``KeyboardInterrupt``), or an exception raised by ``progress``, stops the run cleanly (shards not
    complete are abandoned, what is done is kept) and is raised once it has: call again to resume.
    """
    with _progress_callback(progress) as callback:
        args = command_line("convert", src, dst, {"worker": worker, **options})
        return Report._from_json(_zshard.run(args, callback))


def finalize(src: Location, dst: Location, **options: Any) -> Finalized:
    """After a partitioned conversion (``convert(..., worker=(i, n))`` on every worker): checks that
    every shard is done and writes the metadata. Takes the same layout options as the workers."""
    doc = json.loads(_zshard.run(command_line("finalize", src, dst, options)))
    return Finalized(**doc)


def verify(src: Location, dst: Location, *, sample: float | None = None, **options: Any) -> VerifyResult:
    """Compares the output ``dst`` with its source ``src`` element by element and checks every shard
    index (or a deterministic ``sample`` fraction of the shards); also reports stray objects and
    differing metadata. Raises only when the comparison cannot be made."""
    doc = json.loads(_zshard.run(command_line("verify", src, dst, {"sample": sample, **options})))
    return VerifyResult(**doc)


@contextmanager
def _progress_callback(
    progress: ProgressCallback | bool | None,
) -> Iterator[Callable[[dict[str, int]], object] | None]:
    """The extension's callback for ``progress`` (a tqdm bar for ``True``), closed afterwards."""
    if progress is None or progress is False:
        yield None
    elif progress is True:
        with _tqdm_bar() as bar:
            yield bar
    elif callable(progress):
        user = progress
        yield lambda figures: user(Progress(**figures))
    else:
        raise TypeError(f"progress is a callable or a bool, not {type(progress).__name__}")


@contextmanager
def _tqdm_bar() -> Iterator[Callable[[dict[str, int]], object] | None]:
    try:
        from tqdm.auto import tqdm
    except ImportError:
        warnings.warn("progress=True needs tqdm (pip install tqdm)", ZshardWarning, stacklevel=4)
        yield None
        return
    bar = tqdm(total=0, unit="shard", file=sys.stderr)

    def update(figures: dict[str, int]) -> None:
        bar.total = figures["shards_total"]
        bar.n = figures["shards_done"]
        bar.set_postfix_str(f"{figures['bytes_written'] / 2**20:.1f} MiB written", refresh=False)
        bar.refresh()

    try:
        yield update
    finally:
        bar.close()
