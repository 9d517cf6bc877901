"""Convert chunked arrays (Zarr v2/v3, kerchunk references, Icechunk, N5) into sharded Zarr v3.

>>> import zshard
>>> report = zshard.convert("in.zarr", "out.zarr", shard_shape=(4096, 4096), chunk_shape=(256, 256))
>>> zshard.verify("in.zarr", "out.zarr").ok
True

Functions: :func:`convert`, :func:`plan` (what a conversion would do, from metadata alone),
:func:`finalize` (after a conversion partitioned over workers), :func:`verify` (compare the output
with its source, or with its kept manifest), :func:`ls` (the arrays of a source) and :func:`status`
(how far a conversion into a destination has come), the ``zshard`` command's ``convert``, ``plan``,
``finalize``, ``verify``, ``ls`` and ``status``; :func:`run` runs a job file's conversions
(``zshard run JOB.toml``) and returns their reports. Each takes the source and destination (a path, a
``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://``, ``az://`` URL; ``http(s)://`` for sources),
then keyword-only settings, each with its own type and its own documentation (``help(zshard.convert)``):

- layout: ``shard_shape``, ``chunk_shape`` (a tuple of ints, or ``{dimension name: extent}``),
  ``compressor`` (``"zstd:3"``, ... or a codec chain as a list of dicts), ``index_location``,
  ``passthrough``, ``consolidate``, ``level_shapes``, ``ome``;
- source: ``source_format``, ``include``, ``exclude``, ``on_unsupported``, ``ref_root``,
  ``allow_ref_prefix``, ``ref_coalesce_gap``, ``strict_refs``, ``source_ref``;
- output: ``output_format``, ``branch``, ``message`` (Icechunk);
- run: ``threads``, ``memory_limit`` (bytes or ``"4GiB"``), ``worker``, ``workers``, ``overwrite``,
  ``report``, ``progress`` (convert), ``sample`` and ``manifest`` (verify), ``watch`` (status);
- storage: ``s3_endpoint``, ``s3_region``, ``s3_path_style``, ``anonymous``, ``retries``,
  ``retry_timeout``, ``max_requests``, ``part_size``, ``io_threads``.

A setting left at ``None`` takes the library's default. Values of the wrong type raise ``TypeError``,
values out of range :class:`OptionsError` (a ``ValueError``), both naming the keyword. Results are
frozen dataclasses (:class:`Report`, :class:`Plan`, :class:`Finalized`, :class:`VerifyResult`,
:class:`Listing`, :class:`Status`). Failures raise a :class:`ConversionError` subclass naming the array and key. The
package is typed (``py.typed``): mypy and IDEs check the keywords and their values.
"""

from __future__ import annotations

from . import _zshard
from ._api import convert, finalize, ls, plan, status, verify
from ._job import run
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
from ._options import (
    Codec,
    Compressor,
    Downsample,
    IcechunkSpec,
    IndexLocation,
    Location,
    OmeMetadata,
    OnUnsupported,
    OutputFormat,
    Pyramid,
    Shape,
    Size,
    SourceFormat,
    Strings,
    Worker,
)
from ._progress import ProgressCallback
from ._results import (
    ArrayStatus,
    Counts,
    Finalized,
    ListedArray,
    Listing,
    Plan,
    PlanAssumptions,
    PlanCost,
    PlanEstimate,
    PlannedArray,
    PlanPrices,
    PlanRequests,
    PlanStateRequests,
    PlanTotals,
    Progress,
    PyramidLevel,
    Rate,
    Report,
    Status,
    StatusTotals,
    LeaseStatus,
    Update,
    UpdateStatus,
    VerifyResult,
    WorkerStatus,
)

__version__: str = _zshard.__version__

__all__ = [
    "ArrayStatus",
    "Cancelled",
    "ChunkError",
    "Codec",
    "Compressor",
    "ConversionError",
    "Counts",
    "DestinationError",
    "Downsample",
    "Finalized",
    "IcechunkSpec",
    "IndexLocation",
    "LeaseStatus",
    "ListedArray",
    "Listing",
    "Location",
    "MemoryLimitError",
    "OmeMetadata",
    "OnUnsupported",
    "OptionsError",
    "OutputFormat",
    "Plan",
    "PlanAssumptions",
    "PlanCost",
    "PlanEstimate",
    "PlanPrices",
    "PlanRequests",
    "PlanStateRequests",
    "PlanTotals",
    "PlannedArray",
    "Progress",
    "ProgressCallback",
    "Pyramid",
    "PyramidLevel",
    "Rate",
    "Report",
    "Shape",
    "Size",
    "SourceError",
    "SourceFormat",
    "Status",
    "StatusTotals",
    "StorageError",
    "Strings",
    "Update",
    "UpdateStatus",
    "VerifyResult",
    "Worker",
    "WorkerStatus",
    "ZshardWarning",
    "convert",
    "finalize",
    "ls",
    "plan",
    "run",
    "status",
    "verify",
]
