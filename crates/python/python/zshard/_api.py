"""The public functions of ``zshard``, one explicit keyword per setting (generated from one table of
parameters: a keyword has the same type and description in every function that takes it; the tests
check that they match the ``zshard`` command's flags)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

from . import _zshard
from ._errors import ConversionError
from ._options import (
    Compressor,
    IndexLocation,
    Location,
    OmeMetadata,
    OnUnsupported,
    OutputFormat,
    Shape,
    Size,
    SourceFormat,
    Strings,
    Worker,
    checked,
    command_line,
    python_spelling,
)
from ._results import Finalized, Listing, Plan, Report, VerifyResult
from ._progress import ProgressCallback, progress_callback


def convert(
    src: Location,
    dst: Location,
    *,
    shard_shape: Shape | None = None,
    chunk_shape: Shape | None = None,
    compressor: Compressor | None = None,
    index_location: IndexLocation | None = None,
    passthrough: bool | None = None,
    consolidate: bool | None = None,
    level_shapes: Strings | None = None,
    ome: OmeMetadata | None = None,
    source_format: SourceFormat | None = None,
    ref_root: Location | None = None,
    allow_ref_prefix: Strings | None = None,
    ref_coalesce_gap: Size | None = None,
    include: Strings | None = None,
    exclude: Strings | None = None,
    strict_refs: bool | None = None,
    source_ref: str | None = None,
    on_unsupported: OnUnsupported | None = None,
    output_format: OutputFormat | None = None,
    branch: str | None = None,
    message: str | None = None,
    threads: int | None = None,
    memory_limit: Size | None = None,
    worker: Worker | None = None,
    workers: int | None = None,
    overwrite: bool | None = None,
    report: Location | None = None,
    s3_endpoint: str | None = None,
    s3_region: str | None = None,
    s3_path_style: bool | None = None,
    anonymous: bool | None = None,
    retries: int | None = None,
    retry_timeout: int | None = None,
    max_requests: int | None = None,
    part_size: Size | None = None,
    io_threads: int | None = None,
    no_passthrough: bool | None = None,
    no_consolidate: bool | None = None,
    progress: ProgressCallback | bool | None = None,
) -> Report:
    """Converts ``src`` into sharded Zarr v3 at ``dst`` and returns the run's :class:`Report`.

    Resumes an interrupted conversion with the same options (only the shards not done are converted).
    The GIL is released while converting. Ctrl-C (``KeyboardInterrupt``), or an exception raised by
    ``progress``, stops the run cleanly (shards not complete are abandoned, what is done is kept) and is
    raised once it has: call again to resume.

    Parameters
    ----------
    src : str | os.PathLike[str]
        The source: a Zarr v2 or v3 array or group, a kerchunk reference set, an Icechunk repository or
        an N5 container (a path, a ``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://``, ``az://`` or
        ``http(s)://`` URL).
    dst : str | os.PathLike[str]
        The destination (a path, a ``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://`` or ``az://`` URL).
    shard_shape : Sequence[int] | Mapping[str, int], optional
        Shard shape: one extent per dimension, e.g. ``(4096, 4096)``, or extents by dimension name for
        every array that has those dimensions, e.g. ``{'time': 48, 'lat': 720}`` (names from
        ``dimension_names`` or xarray's ``_ARRAY_DIMENSIONS``; a name no array has is an error).
        Default: chosen per array (and for the dimensions not named): grown from the inner chunk shape
        while the shard's uncompressed size stays within 64 MiB and the shard does not extend past the
        array.
    chunk_shape : Sequence[int] | Mapping[str, int], optional
        Inner chunk shape, given as ``shard_shape``; each extent divides the shard's. Default: the
        source's chunk shape (an already sharded source's inner chunk shape).
    compressor : str | Sequence[str | Mapping[str, Any]], optional
        Inner chunk compressor: ``'zstd:LEVEL'``, ``'gzip:LEVEL'``, ``'blosc:CNAME:CLEVEL:SHUFFLE'`` or
        ``'none'``; ``'source'`` keeps each array's own codecs where they are a valid Zarr v3 chain; or
        the whole inner codec chain as a list of Zarr v3 codecs (dicts, or names such as ``'crc32c'``).
        Default: ``'zstd:3'``.
    index_location : {'start', 'end'}, optional
        Where each shard's index goes. Default: ``'end'``.
    passthrough : bool, optional
        ``False`` always decodes and re-encodes. By default source chunks that already have the output's
        inner chunk shape and codec chain are copied into the shards without decoding.
    consolidate : bool, optional
        ``False`` does not consolidate the metadata of a hierarchy into its root ``zarr.json``. By
        default it is, as zarr-python's ``consolidate_metadata`` does.
    level_shapes : str | Sequence[str], optional
        Shapes of levels of every multiscale (OME-Zarr) pyramid, one ``'LEVEL:SHARD[/CHUNK]'`` per
        level, e.g. ``['2:1,256,256/1,64,64']`` (level 0 is the full resolution). By default each
        level's shapes follow from level 0's through the level's scale factors.
    ome : {'upgrade', 'keep'}, optional
        OME-Zarr metadata: ``'upgrade'`` (the default) writes a 0.4 image, plate or bioformats2raw
        hierarchy as OME-Zarr 0.5 (0.5 and other versions are copied as they are); ``'keep'`` copies
        every attribute as it is. :func:`verify` takes the value the conversion was given.
    source_format : {'zarr', 'kerchunk-json', 'kerchunk-parquet', 'icechunk', 'n5'}, optional
        Input kind: ``'zarr'``, ``'kerchunk-json'`` (a kerchunk JSON reference file, optionally .zst/.gz
        compressed), ``'kerchunk-parquet'``, ``'icechunk'`` (a repository) or ``'n5'``. Default:
        detected.
    ref_root : str | os.PathLike[str], optional
        Kerchunk references: the folder (or URL) that relative target paths resolve against and that
        local targets must lie under. Default: the folder of the reference file (or of the Parquet
        reference folder).
    allow_ref_prefix : str | Sequence[str], optional
        Kerchunk references: also read targets that start with these prefixes, e.g.
        ``['http://127.0.0.1:8000/']`` (needed for http(s) targets on loopback, link-local or private
        addresses and for local files outside ``ref_root``).
    ref_coalesce_gap : int | str, optional
        Kerchunk references: byte ranges of one target file at most this far apart are read with one
        request; ``'off'`` reads every reference with its own request. Default: 64 KiB.
    include : str | Sequence[str], optional
        Only the arrays whose path matches one of these globs, e.g. ``'climate/*'`` or ``'**/temp*'``
        (``*`` stays within one level, ``**`` crosses levels; a group's path selects everything below
        it); a glob that matches no array is an error.
    exclude : str | Sequence[str], optional
        Leave out the arrays whose path (or a group above them) matches one of these globs, even when
        included.
    strict_refs : bool, optional
        Kerchunk Parquet references: a missing ``refs.<i>.parq`` file is an error (by default it reads
        as a record without references).
    source_ref : str, optional
        Icechunk source: the branch, tag or snapshot id to read. Default: the branch ``main``.
    on_unsupported : {'refuse', 'skip'}, optional
        What becomes of an array whose data type or codecs zshard does not read: ``'refuse'`` (the
        default) fails before anything is written, naming it; ``'skip'`` leaves it out and lists it in
        ``skipped_arrays``.
    output_format : {'zarr', 'icechunk'}, optional
        Output kind: ``'zarr'`` (plain sharded Zarr v3) or ``'icechunk'``: commit the shards to a branch
        of the Icechunk repository ``dst`` (created when missing) in one commit. Default: ``'icechunk'``
        when ``dst`` already is a repository, else ``'zarr'``.
    branch : str, optional
        Icechunk output: the branch to commit to (created from ``main`` when missing). Default:
        ``'main'``.
    message : str, optional
        Icechunk output: the commit message. Default: one naming zshard, the source and the options.
    threads : int, optional
        Worker threads per CPU stage (at least 1). Default: the number of cores.
    memory_limit : int | str, optional
        Peak memory not to exceed, in bytes or as ``'512MiB'``, ``'4G'`` (G and GiB: 2**30 bytes, GB:
        10**9). Shards bigger than fits are processed in parts; a conversion that cannot fit is refused
        before it starts. Default: half of the machine's memory (or of the cgroup's limit).
    worker : tuple[int, int] | str, optional
        Convert only share ``index`` of ``count`` of all shards: ``(index, count)`` or ``'index/count'``
        (0-based). A partitioned run writes no metadata: call :func:`finalize` once every worker is
        done. Default: from a SLURM job array or a Kubernetes Indexed Job (with ``workers``), else every
        shard.
    workers : int, optional
        Number of workers when the index comes from ``JOB_COMPLETION_INDEX``.
    overwrite : bool, optional
        Replace what ``dst`` holds (otherwise a ``dst`` from a run with other options is refused, and
        one from a run with the same options is resumed).
    report : str | os.PathLike[str], optional
        Write the run's JSON report to this file however the run ends; ``{worker}``, ``{host}`` and
        ``{date}`` in it are replaced.
    s3_endpoint : str, optional
        Endpoint of an S3-compatible store, e.g. ``'http://127.0.0.1:9000'`` (overrides
        ``AWS_ENDPOINT_URL``).
    s3_region : str, optional
        S3 region. Default: ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else ``us-east-1``.
    s3_path_style : bool, optional
        Path-style S3 requests (endpoint/bucket/key), as most S3-compatible servers want.
    anonymous : bool, optional
        Unsigned requests, for public buckets and containers.
    retries : int, optional
        Retries of one request at most. Default: as many as ``retry_timeout`` allows.
    retry_timeout : int, optional
        How long a request is retried, in seconds. Default: 120.
    max_requests : int, optional
        Storage requests in flight per batch (at least 1). Default: 32.
    part_size : int | str, optional
        Shards larger than this are uploaded to object stores in parts of this size (at least 5 MiB).
        Default: ``'32MiB'``.
    io_threads : int, optional
        Threads fetching chunks and threads writing shards, each (at least 1). Default: 2 for local
        paths, 8 when the source or destination is remote.
    no_passthrough : bool, optional
        Deprecated: ``passthrough=False``.
    no_consolidate : bool, optional
        Deprecated: ``consolidate=False``.
    progress : ProgressCallback | bool, optional
        A callable given a :class:`Progress` as the run advances (at most ten times a second, on the
        calling thread), or ``True`` for a tqdm bar when tqdm is installed.

    Returns
    -------
    Report
        What the run did.

    Raises
    ------
    TypeError
        A keyword's value is of the wrong type (the message names the keyword).
    OptionsError
        A keyword's value is out of range, or the options do not fit the source (a ``ValueError``).
    ConversionError
        The subclass for what failed (source, destination, storage, chunk, memory).
    """
    passthrough, consolidate = _deprecated(passthrough, no_passthrough, consolidate, no_consolidate)
    options = checked(
        {
            "shard_shape": shard_shape,
            "chunk_shape": chunk_shape,
            "compressor": compressor,
            "index_location": index_location,
            "passthrough": passthrough,
            "consolidate": consolidate,
            "level_shapes": level_shapes,
            "ome": ome,
            "source_format": source_format,
            "ref_root": ref_root,
            "allow_ref_prefix": allow_ref_prefix,
            "ref_coalesce_gap": ref_coalesce_gap,
            "include": include,
            "exclude": exclude,
            "strict_refs": strict_refs,
            "source_ref": source_ref,
            "on_unsupported": on_unsupported,
            "output_format": output_format,
            "branch": branch,
            "message": message,
            "threads": threads,
            "memory_limit": memory_limit,
            "worker": worker,
            "workers": workers,
            "overwrite": overwrite,
            "report": report,
            "s3_endpoint": s3_endpoint,
            "s3_region": s3_region,
            "s3_path_style": s3_path_style,
            "anonymous": anonymous,
            "retries": retries,
            "retry_timeout": retry_timeout,
            "max_requests": max_requests,
            "part_size": part_size,
            "io_threads": io_threads,
        }
    )
    with progress_callback(progress) as callback:
        return Report._from_json(_run(command_line("convert", src, dst, options), callback))


def plan(
    src: Location,
    dst: Location,
    *,
    shard_shape: Shape | None = None,
    chunk_shape: Shape | None = None,
    compressor: Compressor | None = None,
    index_location: IndexLocation | None = None,
    passthrough: bool | None = None,
    consolidate: bool | None = None,
    level_shapes: Strings | None = None,
    ome: OmeMetadata | None = None,
    source_format: SourceFormat | None = None,
    ref_root: Location | None = None,
    allow_ref_prefix: Strings | None = None,
    ref_coalesce_gap: Size | None = None,
    include: Strings | None = None,
    exclude: Strings | None = None,
    strict_refs: bool | None = None,
    source_ref: str | None = None,
    on_unsupported: OnUnsupported | None = None,
    output_format: OutputFormat | None = None,
    branch: str | None = None,
    message: str | None = None,
    threads: int | None = None,
    memory_limit: Size | None = None,
    s3_endpoint: str | None = None,
    s3_region: str | None = None,
    s3_path_style: bool | None = None,
    anonymous: bool | None = None,
    retries: int | None = None,
    retry_timeout: int | None = None,
    max_requests: int | None = None,
    part_size: Size | None = None,
    io_threads: int | None = None,
    no_passthrough: bool | None = None,
    no_consolidate: bool | None = None,
) -> Plan:
    """What converting ``src`` into ``dst`` would do, from metadata alone (``zshard plan --json``).

    Per array the shapes, shard and chunk counts, codecs, sizes and the peak memory estimate. Reads no
    chunk and writes nothing; raises on everything :func:`convert` would reject.

    Parameters
    ----------
    src : str | os.PathLike[str]
        The source: a Zarr v2 or v3 array or group, a kerchunk reference set, an Icechunk repository or
        an N5 container (a path, a ``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://``, ``az://`` or
        ``http(s)://`` URL).
    dst : str | os.PathLike[str]
        The destination (a path, a ``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://`` or ``az://`` URL).
    shard_shape : Sequence[int] | Mapping[str, int], optional
        Shard shape: one extent per dimension, e.g. ``(4096, 4096)``, or extents by dimension name for
        every array that has those dimensions, e.g. ``{'time': 48, 'lat': 720}`` (names from
        ``dimension_names`` or xarray's ``_ARRAY_DIMENSIONS``; a name no array has is an error).
        Default: chosen per array (and for the dimensions not named): grown from the inner chunk shape
        while the shard's uncompressed size stays within 64 MiB and the shard does not extend past the
        array.
    chunk_shape : Sequence[int] | Mapping[str, int], optional
        Inner chunk shape, given as ``shard_shape``; each extent divides the shard's. Default: the
        source's chunk shape (an already sharded source's inner chunk shape).
    compressor : str | Sequence[str | Mapping[str, Any]], optional
        Inner chunk compressor: ``'zstd:LEVEL'``, ``'gzip:LEVEL'``, ``'blosc:CNAME:CLEVEL:SHUFFLE'`` or
        ``'none'``; ``'source'`` keeps each array's own codecs where they are a valid Zarr v3 chain; or
        the whole inner codec chain as a list of Zarr v3 codecs (dicts, or names such as ``'crc32c'``).
        Default: ``'zstd:3'``.
    index_location : {'start', 'end'}, optional
        Where each shard's index goes. Default: ``'end'``.
    passthrough : bool, optional
        ``False`` always decodes and re-encodes. By default source chunks that already have the output's
        inner chunk shape and codec chain are copied into the shards without decoding.
    consolidate : bool, optional
        ``False`` does not consolidate the metadata of a hierarchy into its root ``zarr.json``. By
        default it is, as zarr-python's ``consolidate_metadata`` does.
    level_shapes : str | Sequence[str], optional
        Shapes of levels of every multiscale (OME-Zarr) pyramid, one ``'LEVEL:SHARD[/CHUNK]'`` per
        level, e.g. ``['2:1,256,256/1,64,64']`` (level 0 is the full resolution). By default each
        level's shapes follow from level 0's through the level's scale factors.
    ome : {'upgrade', 'keep'}, optional
        OME-Zarr metadata: ``'upgrade'`` (the default) writes a 0.4 image, plate or bioformats2raw
        hierarchy as OME-Zarr 0.5 (0.5 and other versions are copied as they are); ``'keep'`` copies
        every attribute as it is. :func:`verify` takes the value the conversion was given.
    source_format : {'zarr', 'kerchunk-json', 'kerchunk-parquet', 'icechunk', 'n5'}, optional
        Input kind: ``'zarr'``, ``'kerchunk-json'`` (a kerchunk JSON reference file, optionally .zst/.gz
        compressed), ``'kerchunk-parquet'``, ``'icechunk'`` (a repository) or ``'n5'``. Default:
        detected.
    ref_root : str | os.PathLike[str], optional
        Kerchunk references: the folder (or URL) that relative target paths resolve against and that
        local targets must lie under. Default: the folder of the reference file (or of the Parquet
        reference folder).
    allow_ref_prefix : str | Sequence[str], optional
        Kerchunk references: also read targets that start with these prefixes, e.g.
        ``['http://127.0.0.1:8000/']`` (needed for http(s) targets on loopback, link-local or private
        addresses and for local files outside ``ref_root``).
    ref_coalesce_gap : int | str, optional
        Kerchunk references: byte ranges of one target file at most this far apart are read with one
        request; ``'off'`` reads every reference with its own request. Default: 64 KiB.
    include : str | Sequence[str], optional
        Only the arrays whose path matches one of these globs, e.g. ``'climate/*'`` or ``'**/temp*'``
        (``*`` stays within one level, ``**`` crosses levels; a group's path selects everything below
        it); a glob that matches no array is an error.
    exclude : str | Sequence[str], optional
        Leave out the arrays whose path (or a group above them) matches one of these globs, even when
        included.
    strict_refs : bool, optional
        Kerchunk Parquet references: a missing ``refs.<i>.parq`` file is an error (by default it reads
        as a record without references).
    source_ref : str, optional
        Icechunk source: the branch, tag or snapshot id to read. Default: the branch ``main``.
    on_unsupported : {'refuse', 'skip'}, optional
        What becomes of an array whose data type or codecs zshard does not read: ``'refuse'`` (the
        default) fails before anything is written, naming it; ``'skip'`` leaves it out and lists it in
        ``skipped_arrays``.
    output_format : {'zarr', 'icechunk'}, optional
        Output kind: ``'zarr'`` (plain sharded Zarr v3) or ``'icechunk'``: commit the shards to a branch
        of the Icechunk repository ``dst`` (created when missing) in one commit. Default: ``'icechunk'``
        when ``dst`` already is a repository, else ``'zarr'``.
    branch : str, optional
        Icechunk output: the branch to commit to (created from ``main`` when missing). Default:
        ``'main'``.
    message : str, optional
        Icechunk output: the commit message. Default: one naming zshard, the source and the options.
    threads : int, optional
        Worker threads per CPU stage (at least 1). Default: the number of cores.
    memory_limit : int | str, optional
        Peak memory not to exceed, in bytes or as ``'512MiB'``, ``'4G'`` (G and GiB: 2**30 bytes, GB:
        10**9). Shards bigger than fits are processed in parts; a conversion that cannot fit is refused
        before it starts. Default: half of the machine's memory (or of the cgroup's limit).
    s3_endpoint : str, optional
        Endpoint of an S3-compatible store, e.g. ``'http://127.0.0.1:9000'`` (overrides
        ``AWS_ENDPOINT_URL``).
    s3_region : str, optional
        S3 region. Default: ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else ``us-east-1``.
    s3_path_style : bool, optional
        Path-style S3 requests (endpoint/bucket/key), as most S3-compatible servers want.
    anonymous : bool, optional
        Unsigned requests, for public buckets and containers.
    retries : int, optional
        Retries of one request at most. Default: as many as ``retry_timeout`` allows.
    retry_timeout : int, optional
        How long a request is retried, in seconds. Default: 120.
    max_requests : int, optional
        Storage requests in flight per batch (at least 1). Default: 32.
    part_size : int | str, optional
        Shards larger than this are uploaded to object stores in parts of this size (at least 5 MiB).
        Default: ``'32MiB'``.
    io_threads : int, optional
        Threads fetching chunks and threads writing shards, each (at least 1). Default: 2 for local
        paths, 8 when the source or destination is remote.
    no_passthrough : bool, optional
        Deprecated: ``passthrough=False``.
    no_consolidate : bool, optional
        Deprecated: ``consolidate=False``.

    Returns
    -------
    Plan
        The plan.

    Raises
    ------
    TypeError
        A keyword's value is of the wrong type (the message names the keyword).
    OptionsError
        A keyword's value is out of range, or the options do not fit the source (a ``ValueError``).
    ConversionError
        The subclass for what failed (source, destination, storage, chunk, memory).
    """
    passthrough, consolidate = _deprecated(passthrough, no_passthrough, consolidate, no_consolidate)
    options = checked(
        {
            "shard_shape": shard_shape,
            "chunk_shape": chunk_shape,
            "compressor": compressor,
            "index_location": index_location,
            "passthrough": passthrough,
            "consolidate": consolidate,
            "level_shapes": level_shapes,
            "ome": ome,
            "source_format": source_format,
            "ref_root": ref_root,
            "allow_ref_prefix": allow_ref_prefix,
            "ref_coalesce_gap": ref_coalesce_gap,
            "include": include,
            "exclude": exclude,
            "strict_refs": strict_refs,
            "source_ref": source_ref,
            "on_unsupported": on_unsupported,
            "output_format": output_format,
            "branch": branch,
            "message": message,
            "threads": threads,
            "memory_limit": memory_limit,
            "s3_endpoint": s3_endpoint,
            "s3_region": s3_region,
            "s3_path_style": s3_path_style,
            "anonymous": anonymous,
            "retries": retries,
            "retry_timeout": retry_timeout,
            "max_requests": max_requests,
            "part_size": part_size,
            "io_threads": io_threads,
        }
    )
    return Plan._from_json(_run(command_line("plan", src, dst, options)))


def finalize(
    src: Location,
    dst: Location,
    *,
    shard_shape: Shape | None = None,
    chunk_shape: Shape | None = None,
    compressor: Compressor | None = None,
    index_location: IndexLocation | None = None,
    passthrough: bool | None = None,
    consolidate: bool | None = None,
    level_shapes: Strings | None = None,
    ome: OmeMetadata | None = None,
    source_format: SourceFormat | None = None,
    ref_root: Location | None = None,
    allow_ref_prefix: Strings | None = None,
    ref_coalesce_gap: Size | None = None,
    include: Strings | None = None,
    exclude: Strings | None = None,
    strict_refs: bool | None = None,
    source_ref: str | None = None,
    on_unsupported: OnUnsupported | None = None,
    output_format: OutputFormat | None = None,
    branch: str | None = None,
    message: str | None = None,
    s3_endpoint: str | None = None,
    s3_region: str | None = None,
    s3_path_style: bool | None = None,
    anonymous: bool | None = None,
    retries: int | None = None,
    retry_timeout: int | None = None,
    max_requests: int | None = None,
    part_size: Size | None = None,
    io_threads: int | None = None,
    no_passthrough: bool | None = None,
    no_consolidate: bool | None = None,
) -> Finalized:
    """After a partitioned conversion (``convert(..., worker=(i, n))`` on every worker): checks that
    every shard is done and writes the metadata.

    Takes the same layout and source options as the workers.

    Parameters
    ----------
    src : str | os.PathLike[str]
        The source: a Zarr v2 or v3 array or group, a kerchunk reference set, an Icechunk repository or
        an N5 container (a path, a ``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://``, ``az://`` or
        ``http(s)://`` URL).
    dst : str | os.PathLike[str]
        The destination (a path, a ``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://`` or ``az://`` URL).
    shard_shape : Sequence[int] | Mapping[str, int], optional
        Shard shape: one extent per dimension, e.g. ``(4096, 4096)``, or extents by dimension name for
        every array that has those dimensions, e.g. ``{'time': 48, 'lat': 720}`` (names from
        ``dimension_names`` or xarray's ``_ARRAY_DIMENSIONS``; a name no array has is an error).
        Default: chosen per array (and for the dimensions not named): grown from the inner chunk shape
        while the shard's uncompressed size stays within 64 MiB and the shard does not extend past the
        array.
    chunk_shape : Sequence[int] | Mapping[str, int], optional
        Inner chunk shape, given as ``shard_shape``; each extent divides the shard's. Default: the
        source's chunk shape (an already sharded source's inner chunk shape).
    compressor : str | Sequence[str | Mapping[str, Any]], optional
        Inner chunk compressor: ``'zstd:LEVEL'``, ``'gzip:LEVEL'``, ``'blosc:CNAME:CLEVEL:SHUFFLE'`` or
        ``'none'``; ``'source'`` keeps each array's own codecs where they are a valid Zarr v3 chain; or
        the whole inner codec chain as a list of Zarr v3 codecs (dicts, or names such as ``'crc32c'``).
        Default: ``'zstd:3'``.
    index_location : {'start', 'end'}, optional
        Where each shard's index goes. Default: ``'end'``.
    passthrough : bool, optional
        ``False`` always decodes and re-encodes. By default source chunks that already have the output's
        inner chunk shape and codec chain are copied into the shards without decoding.
    consolidate : bool, optional
        ``False`` does not consolidate the metadata of a hierarchy into its root ``zarr.json``. By
        default it is, as zarr-python's ``consolidate_metadata`` does.
    level_shapes : str | Sequence[str], optional
        Shapes of levels of every multiscale (OME-Zarr) pyramid, one ``'LEVEL:SHARD[/CHUNK]'`` per
        level, e.g. ``['2:1,256,256/1,64,64']`` (level 0 is the full resolution). By default each
        level's shapes follow from level 0's through the level's scale factors.
    ome : {'upgrade', 'keep'}, optional
        OME-Zarr metadata: ``'upgrade'`` (the default) writes a 0.4 image, plate or bioformats2raw
        hierarchy as OME-Zarr 0.5 (0.5 and other versions are copied as they are); ``'keep'`` copies
        every attribute as it is. :func:`verify` takes the value the conversion was given.
    source_format : {'zarr', 'kerchunk-json', 'kerchunk-parquet', 'icechunk', 'n5'}, optional
        Input kind: ``'zarr'``, ``'kerchunk-json'`` (a kerchunk JSON reference file, optionally .zst/.gz
        compressed), ``'kerchunk-parquet'``, ``'icechunk'`` (a repository) or ``'n5'``. Default:
        detected.
    ref_root : str | os.PathLike[str], optional
        Kerchunk references: the folder (or URL) that relative target paths resolve against and that
        local targets must lie under. Default: the folder of the reference file (or of the Parquet
        reference folder).
    allow_ref_prefix : str | Sequence[str], optional
        Kerchunk references: also read targets that start with these prefixes, e.g.
        ``['http://127.0.0.1:8000/']`` (needed for http(s) targets on loopback, link-local or private
        addresses and for local files outside ``ref_root``).
    ref_coalesce_gap : int | str, optional
        Kerchunk references: byte ranges of one target file at most this far apart are read with one
        request; ``'off'`` reads every reference with its own request. Default: 64 KiB.
    include : str | Sequence[str], optional
        Only the arrays whose path matches one of these globs, e.g. ``'climate/*'`` or ``'**/temp*'``
        (``*`` stays within one level, ``**`` crosses levels; a group's path selects everything below
        it); a glob that matches no array is an error.
    exclude : str | Sequence[str], optional
        Leave out the arrays whose path (or a group above them) matches one of these globs, even when
        included.
    strict_refs : bool, optional
        Kerchunk Parquet references: a missing ``refs.<i>.parq`` file is an error (by default it reads
        as a record without references).
    source_ref : str, optional
        Icechunk source: the branch, tag or snapshot id to read. Default: the branch ``main``.
    on_unsupported : {'refuse', 'skip'}, optional
        What becomes of an array whose data type or codecs zshard does not read: ``'refuse'`` (the
        default) fails before anything is written, naming it; ``'skip'`` leaves it out and lists it in
        ``skipped_arrays``.
    output_format : {'zarr', 'icechunk'}, optional
        Output kind: ``'zarr'`` (plain sharded Zarr v3) or ``'icechunk'``: commit the shards to a branch
        of the Icechunk repository ``dst`` (created when missing) in one commit. Default: ``'icechunk'``
        when ``dst`` already is a repository, else ``'zarr'``.
    branch : str, optional
        Icechunk output: the branch to commit to (created from ``main`` when missing). Default:
        ``'main'``.
    message : str, optional
        Icechunk output: the commit message. Default: one naming zshard, the source and the options.
    s3_endpoint : str, optional
        Endpoint of an S3-compatible store, e.g. ``'http://127.0.0.1:9000'`` (overrides
        ``AWS_ENDPOINT_URL``).
    s3_region : str, optional
        S3 region. Default: ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else ``us-east-1``.
    s3_path_style : bool, optional
        Path-style S3 requests (endpoint/bucket/key), as most S3-compatible servers want.
    anonymous : bool, optional
        Unsigned requests, for public buckets and containers.
    retries : int, optional
        Retries of one request at most. Default: as many as ``retry_timeout`` allows.
    retry_timeout : int, optional
        How long a request is retried, in seconds. Default: 120.
    max_requests : int, optional
        Storage requests in flight per batch (at least 1). Default: 32.
    part_size : int | str, optional
        Shards larger than this are uploaded to object stores in parts of this size (at least 5 MiB).
        Default: ``'32MiB'``.
    io_threads : int, optional
        Threads fetching chunks and threads writing shards, each (at least 1). Default: 2 for local
        paths, 8 when the source or destination is remote.
    no_passthrough : bool, optional
        Deprecated: ``passthrough=False``.
    no_consolidate : bool, optional
        Deprecated: ``consolidate=False``.

    Returns
    -------
    Finalized
        What was written.

    Raises
    ------
    TypeError
        A keyword's value is of the wrong type (the message names the keyword).
    OptionsError
        A keyword's value is out of range, or the options do not fit the source (a ``ValueError``).
    ConversionError
        The subclass for what failed (source, destination, storage, chunk, memory).
    """
    passthrough, consolidate = _deprecated(passthrough, no_passthrough, consolidate, no_consolidate)
    options = checked(
        {
            "shard_shape": shard_shape,
            "chunk_shape": chunk_shape,
            "compressor": compressor,
            "index_location": index_location,
            "passthrough": passthrough,
            "consolidate": consolidate,
            "level_shapes": level_shapes,
            "ome": ome,
            "source_format": source_format,
            "ref_root": ref_root,
            "allow_ref_prefix": allow_ref_prefix,
            "ref_coalesce_gap": ref_coalesce_gap,
            "include": include,
            "exclude": exclude,
            "strict_refs": strict_refs,
            "source_ref": source_ref,
            "on_unsupported": on_unsupported,
            "output_format": output_format,
            "branch": branch,
            "message": message,
            "s3_endpoint": s3_endpoint,
            "s3_region": s3_region,
            "s3_path_style": s3_path_style,
            "anonymous": anonymous,
            "retries": retries,
            "retry_timeout": retry_timeout,
            "max_requests": max_requests,
            "part_size": part_size,
            "io_threads": io_threads,
        }
    )
    return Finalized._from_json(_run(command_line("finalize", src, dst, options)))


def verify(
    src: Location,
    dst: Location,
    *,
    ome: OmeMetadata | None = None,
    source_format: SourceFormat | None = None,
    ref_root: Location | None = None,
    allow_ref_prefix: Strings | None = None,
    ref_coalesce_gap: Size | None = None,
    include: Strings | None = None,
    exclude: Strings | None = None,
    strict_refs: bool | None = None,
    source_ref: str | None = None,
    on_unsupported: OnUnsupported | None = None,
    threads: int | None = None,
    sample: float | None = None,
    s3_endpoint: str | None = None,
    s3_region: str | None = None,
    s3_path_style: bool | None = None,
    anonymous: bool | None = None,
    retries: int | None = None,
    retry_timeout: int | None = None,
    max_requests: int | None = None,
    part_size: Size | None = None,
    io_threads: int | None = None,
) -> VerifyResult:
    """Compares the output ``dst`` with its source ``src`` element by element and checks every shard
    index (or a deterministic ``sample`` of the shards); also reports stray objects and differing metadata.

    Raises only when the comparison cannot be made: mismatches are in the result.

    Parameters
    ----------
    src : str | os.PathLike[str]
        The source: a Zarr v2 or v3 array or group, a kerchunk reference set, an Icechunk repository or
        an N5 container (a path, a ``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://``, ``az://`` or
        ``http(s)://`` URL).
    dst : str | os.PathLike[str]
        The destination (a path, a ``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://`` or ``az://`` URL).
    ome : {'upgrade', 'keep'}, optional
        OME-Zarr metadata: ``'upgrade'`` (the default) writes a 0.4 image, plate or bioformats2raw
        hierarchy as OME-Zarr 0.5 (0.5 and other versions are copied as they are); ``'keep'`` copies
        every attribute as it is. :func:`verify` takes the value the conversion was given.
    source_format : {'zarr', 'kerchunk-json', 'kerchunk-parquet', 'icechunk', 'n5'}, optional
        Input kind: ``'zarr'``, ``'kerchunk-json'`` (a kerchunk JSON reference file, optionally .zst/.gz
        compressed), ``'kerchunk-parquet'``, ``'icechunk'`` (a repository) or ``'n5'``. Default:
        detected.
    ref_root : str | os.PathLike[str], optional
        Kerchunk references: the folder (or URL) that relative target paths resolve against and that
        local targets must lie under. Default: the folder of the reference file (or of the Parquet
        reference folder).
    allow_ref_prefix : str | Sequence[str], optional
        Kerchunk references: also read targets that start with these prefixes, e.g.
        ``['http://127.0.0.1:8000/']`` (needed for http(s) targets on loopback, link-local or private
        addresses and for local files outside ``ref_root``).
    ref_coalesce_gap : int | str, optional
        Kerchunk references: byte ranges of one target file at most this far apart are read with one
        request; ``'off'`` reads every reference with its own request. Default: 64 KiB.
    include : str | Sequence[str], optional
        Only the arrays whose path matches one of these globs, e.g. ``'climate/*'`` or ``'**/temp*'``
        (``*`` stays within one level, ``**`` crosses levels; a group's path selects everything below
        it); a glob that matches no array is an error.
    exclude : str | Sequence[str], optional
        Leave out the arrays whose path (or a group above them) matches one of these globs, even when
        included.
    strict_refs : bool, optional
        Kerchunk Parquet references: a missing ``refs.<i>.parq`` file is an error (by default it reads
        as a record without references).
    source_ref : str, optional
        Icechunk source: the branch, tag or snapshot id to read. Default: the branch ``main``.
    on_unsupported : {'refuse', 'skip'}, optional
        What becomes of an array whose data type or codecs zshard does not read: ``'refuse'`` (the
        default) fails before anything is written, naming it; ``'skip'`` leaves it out and lists it in
        ``skipped_arrays``.
    threads : int, optional
        Worker threads per CPU stage (at least 1). Default: the number of cores.
    sample : float, optional
        Check only this fraction of the shards, in (0, 1] (a deterministic sample), e.g. ``0.01``.
        Default: 1 (every shard).
    s3_endpoint : str, optional
        Endpoint of an S3-compatible store, e.g. ``'http://127.0.0.1:9000'`` (overrides
        ``AWS_ENDPOINT_URL``).
    s3_region : str, optional
        S3 region. Default: ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else ``us-east-1``.
    s3_path_style : bool, optional
        Path-style S3 requests (endpoint/bucket/key), as most S3-compatible servers want.
    anonymous : bool, optional
        Unsigned requests, for public buckets and containers.
    retries : int, optional
        Retries of one request at most. Default: as many as ``retry_timeout`` allows.
    retry_timeout : int, optional
        How long a request is retried, in seconds. Default: 120.
    max_requests : int, optional
        Storage requests in flight per batch (at least 1). Default: 32.
    part_size : int | str, optional
        Shards larger than this are uploaded to object stores in parts of this size (at least 5 MiB).
        Default: ``'32MiB'``.
    io_threads : int, optional
        Threads fetching chunks and threads writing shards, each (at least 1). Default: 2 for local
        paths, 8 when the source or destination is remote.

    Returns
    -------
    VerifyResult
        What the comparison found (``.ok`` when nothing differs).

    Raises
    ------
    TypeError
        A keyword's value is of the wrong type (the message names the keyword).
    OptionsError
        A keyword's value is out of range, or the options do not fit the source (a ``ValueError``).
    ConversionError
        The subclass for what failed (source, destination, storage, chunk, memory).
    """
    options = checked(
        {
            "ome": ome,
            "source_format": source_format,
            "ref_root": ref_root,
            "allow_ref_prefix": allow_ref_prefix,
            "ref_coalesce_gap": ref_coalesce_gap,
            "include": include,
            "exclude": exclude,
            "strict_refs": strict_refs,
            "source_ref": source_ref,
            "on_unsupported": on_unsupported,
            "threads": threads,
            "sample": sample,
            "s3_endpoint": s3_endpoint,
            "s3_region": s3_region,
            "s3_path_style": s3_path_style,
            "anonymous": anonymous,
            "retries": retries,
            "retry_timeout": retry_timeout,
            "max_requests": max_requests,
            "part_size": part_size,
            "io_threads": io_threads,
        }
    )
    return VerifyResult._from_json(_run(command_line("verify", src, dst, options)))


def ls(
    src: Location,
    *,
    source_format: SourceFormat | None = None,
    ref_root: Location | None = None,
    allow_ref_prefix: Strings | None = None,
    ref_coalesce_gap: Size | None = None,
    include: Strings | None = None,
    exclude: Strings | None = None,
    strict_refs: bool | None = None,
    source_ref: str | None = None,
    on_unsupported: OnUnsupported | None = None,
    s3_endpoint: str | None = None,
    s3_region: str | None = None,
    s3_path_style: bool | None = None,
    anonymous: bool | None = None,
    retries: int | None = None,
    retry_timeout: int | None = None,
    max_requests: int | None = None,
    part_size: Size | None = None,
    io_threads: int | None = None,
) -> Listing:
    """The arrays of ``src`` as :func:`convert` reads them: path, data type, shape, chunks (an already
    sharded source's inner chunks and shards) and codecs, from metadata alone (``zshard ls --json``).

    Parameters
    ----------
    src : str | os.PathLike[str]
        The source: a Zarr v2 or v3 array or group, a kerchunk reference set, an Icechunk repository or
        an N5 container (a path, a ``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://``, ``az://`` or
        ``http(s)://`` URL).
    source_format : {'zarr', 'kerchunk-json', 'kerchunk-parquet', 'icechunk', 'n5'}, optional
        Input kind: ``'zarr'``, ``'kerchunk-json'`` (a kerchunk JSON reference file, optionally .zst/.gz
        compressed), ``'kerchunk-parquet'``, ``'icechunk'`` (a repository) or ``'n5'``. Default:
        detected.
    ref_root : str | os.PathLike[str], optional
        Kerchunk references: the folder (or URL) that relative target paths resolve against and that
        local targets must lie under. Default: the folder of the reference file (or of the Parquet
        reference folder).
    allow_ref_prefix : str | Sequence[str], optional
        Kerchunk references: also read targets that start with these prefixes, e.g.
        ``['http://127.0.0.1:8000/']`` (needed for http(s) targets on loopback, link-local or private
        addresses and for local files outside ``ref_root``).
    ref_coalesce_gap : int | str, optional
        Kerchunk references: byte ranges of one target file at most this far apart are read with one
        request; ``'off'`` reads every reference with its own request. Default: 64 KiB.
    include : str | Sequence[str], optional
        Only the arrays whose path matches one of these globs, e.g. ``'climate/*'`` or ``'**/temp*'``
        (``*`` stays within one level, ``**`` crosses levels; a group's path selects everything below
        it); a glob that matches no array is an error.
    exclude : str | Sequence[str], optional
        Leave out the arrays whose path (or a group above them) matches one of these globs, even when
        included.
    strict_refs : bool, optional
        Kerchunk Parquet references: a missing ``refs.<i>.parq`` file is an error (by default it reads
        as a record without references).
    source_ref : str, optional
        Icechunk source: the branch, tag or snapshot id to read. Default: the branch ``main``.
    on_unsupported : {'refuse', 'skip'}, optional
        What becomes of an array whose data type or codecs zshard does not read: ``'refuse'`` (the
        default) fails before anything is written, naming it; ``'skip'`` leaves it out and lists it in
        ``skipped_arrays``.
    s3_endpoint : str, optional
        Endpoint of an S3-compatible store, e.g. ``'http://127.0.0.1:9000'`` (overrides
        ``AWS_ENDPOINT_URL``).
    s3_region : str, optional
        S3 region. Default: ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else ``us-east-1``.
    s3_path_style : bool, optional
        Path-style S3 requests (endpoint/bucket/key), as most S3-compatible servers want.
    anonymous : bool, optional
        Unsigned requests, for public buckets and containers.
    retries : int, optional
        Retries of one request at most. Default: as many as ``retry_timeout`` allows.
    retry_timeout : int, optional
        How long a request is retried, in seconds. Default: 120.
    max_requests : int, optional
        Storage requests in flight per batch (at least 1). Default: 32.
    part_size : int | str, optional
        Shards larger than this are uploaded to object stores in parts of this size (at least 5 MiB).
        Default: ``'32MiB'``.
    io_threads : int, optional
        Threads fetching chunks and threads writing shards, each (at least 1). Default: 2 for local
        paths, 8 when the source or destination is remote.

    Returns
    -------
    Listing
        The arrays and groups.

    Raises
    ------
    TypeError
        A keyword's value is of the wrong type (the message names the keyword).
    OptionsError
        A keyword's value is out of range, or the options do not fit the source (a ``ValueError``).
    ConversionError
        The subclass for what failed (source, destination, storage, chunk, memory).
    """
    options = checked(
        {
            "source_format": source_format,
            "ref_root": ref_root,
            "allow_ref_prefix": allow_ref_prefix,
            "ref_coalesce_gap": ref_coalesce_gap,
            "include": include,
            "exclude": exclude,
            "strict_refs": strict_refs,
            "source_ref": source_ref,
            "on_unsupported": on_unsupported,
            "s3_endpoint": s3_endpoint,
            "s3_region": s3_region,
            "s3_path_style": s3_path_style,
            "anonymous": anonymous,
            "retries": retries,
            "retry_timeout": retry_timeout,
            "max_requests": max_requests,
            "part_size": part_size,
            "io_threads": io_threads,
        }
    )
    return Listing._from_json(_run(command_line("ls", src, None, options)))


def _run(args: list[str], progress: Callable[[dict[str, int]], object] | None = None) -> str:
    """Runs ``args`` in the extension; its errors name settings by their keywords."""
    try:
        return _zshard.run(args, progress)
    except ConversionError as e:
        message = python_spelling(str(e))
        if message == str(e):
            raise
        raise type(e)(message, kind=e.kind, array=e.array, key=e.key).with_traceback(e.__traceback__) from None


def _deprecated(
    passthrough: bool | None, no_passthrough: bool | None, consolidate: bool | None, no_consolidate: bool | None
) -> tuple[bool | None, bool | None]:
    """``passthrough`` and ``consolidate`` from the deprecated ``no_passthrough`` and ``no_consolidate``."""
    for old, new in (("no_passthrough", "passthrough"), ("no_consolidate", "consolidate")):
        given = {"no_passthrough": no_passthrough, "no_consolidate": no_consolidate}[old]
        if given is None:
            continue
        warnings.warn(f"{old}=True is deprecated: give {new}=False", DeprecationWarning, stacklevel=3)
    if no_passthrough is not None and passthrough is None:
        passthrough = not no_passthrough
    if no_consolidate is not None and consolidate is None:
        consolidate = not no_consolidate
    return passthrough, consolidate
