"""Generates python/zshard/_api.py, the public functions of ``zshard`` with one explicit keyword per
setting, from one table of parameters (name, type, description, commands), so that a keyword has the
same type and description in every function that takes it.

    python crates/python/generate_api.py           # rewrites python/zshard/_api.py
    python crates/python/generate_api.py --check   # fails when _api.py differs (tests/python runs it)

A new setting of the library (``zshard_core::Setting``): add a row here, its kind in the extension's
``crates/python/src/lower.rs``, and regenerate; tests/python/test_typed.py fails until the keywords of
every function are the settings the model gives its command (``_zshard.settings``) and every flag of
``zshard COMMAND --help`` has its keyword.
"""

import sys
import textwrap
from pathlib import Path

# name, annotation, doc, commands (C convert, P plan, F finalize, V verify, L ls, S status)
LAYOUT = "CPF"; SOURCE = "CPFVL"; STORAGE = "CPFVLS"
P = [
 ("shard_shape", "Shape", "Shard shape: one extent per dimension, e.g. ``(4096, 4096)``, or extents by dimension name for every array that has those dimensions, e.g. ``{'time': 48, 'lat': 720}`` (names from ``dimension_names`` or xarray's ``_ARRAY_DIMENSIONS``; a name no array has is an error). Default: chosen per array (and for the dimensions not named): grown from the inner chunk shape while the shard's uncompressed size stays within 64 MiB and the shard does not extend past the array.", LAYOUT),
 ("chunk_shape", "Shape", "Inner chunk shape, given as ``shard_shape``; each extent divides the shard's. Default: the source's chunk shape (an already sharded source's inner chunk shape).", LAYOUT),
 ("compressor", "Compressor", "Inner chunk compressor: ``'zstd:LEVEL'``, ``'gzip:LEVEL'``, ``'blosc:CNAME:CLEVEL:SHUFFLE'`` or ``'none'``; ``'source'`` keeps each array's own codecs where they are a valid Zarr v3 chain; or the whole inner codec chain as a list of Zarr v3 codecs (dicts, or names such as ``'crc32c'``). Default: ``'zstd:3'``.", LAYOUT),
 ("index_location", "IndexLocation", "Where each shard's index goes. Default: ``'end'``.", LAYOUT),
 ("passthrough", "bool", "``False`` always decodes and re-encodes. By default source chunks that already have the output's inner chunk shape and codec chain are copied into the shards without decoding.", LAYOUT),
 ("consolidate", "bool", "``False`` does not consolidate the metadata of a hierarchy into its root ``zarr.json``. By default it is, as zarr-python's ``consolidate_metadata`` does.", LAYOUT),
 ("level_shapes", "Strings", "Shapes of levels of every multiscale (OME-Zarr) pyramid, one ``'LEVEL:SHARD[/CHUNK]'`` per level, e.g. ``['2:1,256,256/1,64,64']`` (level 0 is the full resolution). By default each level's shapes follow from level 0's through the level's scale factors.", LAYOUT),
 ("ome", "OmeMetadata", "OME-Zarr metadata: ``'upgrade'`` (the default) writes a 0.4 image, plate or bioformats2raw hierarchy as OME-Zarr 0.5 (0.5 and other versions are copied as they are); ``'keep'`` copies every attribute as it is. :func:`verify` takes the value the conversion was given.", LAYOUT + "V"),
 ("source_format", "SourceFormat", "Input kind: ``'zarr'``, ``'kerchunk-json'`` (a kerchunk JSON reference file, optionally .zst/.gz compressed), ``'kerchunk-parquet'``, ``'icechunk'`` (a repository) or ``'n5'``. Default: detected.", SOURCE),
 ("ref_root", "Location", "Kerchunk references: the folder (or URL) that relative target paths resolve against and that local targets must lie under. Default: the folder of the reference file (or of the Parquet reference folder).", SOURCE),
 ("allow_ref_prefix", "Strings", "Kerchunk references: also read targets that start with these prefixes, e.g. ``['http://127.0.0.1:8000/']`` (needed for http(s) targets on loopback, link-local or private addresses and for local files outside ``ref_root``).", SOURCE),
 ("ref_coalesce_gap", "Size", "Kerchunk references: byte ranges of one target file at most this far apart are read with one request; ``'off'`` reads every reference with its own request. Default: 64 KiB.", SOURCE),
 ("include", "Strings", "Only the arrays whose path matches one of these globs, e.g. ``'climate/*'`` or ``'**/temp*'`` (``*`` stays within one level, ``**`` crosses levels; a group's path selects everything below it); a glob that matches no array is an error.", SOURCE),
 ("exclude", "Strings", "Leave out the arrays whose path (or a group above them) matches one of these globs, even when included.", SOURCE),
 ("strict_refs", "bool", "Kerchunk Parquet references: a missing ``refs.<i>.parq`` file is an error (by default it reads as a record without references).", SOURCE),
 ("source_ref", "str", "Icechunk source: the branch, tag or snapshot id to read. Default: the branch ``main``.", SOURCE),
 ("on_unsupported", "OnUnsupported", "What becomes of an array whose data type or codecs zshard does not read: ``'refuse'`` (the default) fails before anything is written, naming it; ``'skip'`` leaves it out and lists it in ``skipped_arrays``.", SOURCE),
 ("output_format", "OutputFormat", "Output kind: ``'zarr'`` (plain sharded Zarr v3) or ``'icechunk'``: commit the shards to a branch of the Icechunk repository ``dst`` (created when missing) in one commit. Default: ``'icechunk'`` when ``dst`` already is a repository, else ``'zarr'``.", LAYOUT),
 ("branch", "str", "Icechunk output: the branch to commit to (created from ``main`` when missing). Default: ``'main'``.", LAYOUT),
 ("message", "str", "Icechunk output: the commit message. Default: one naming zshard, the source and the options.", LAYOUT),
 ("icechunk_spec", "IcechunkSpec", "Icechunk output: the spec version of a new repository: ``2`` (the default; icechunk 2.x reads it) or ``1`` (for readers on icechunk 1.x). An existing repository is written in its own version; asking for the other is refused.", LAYOUT),
 ("threads", "int", "Worker threads per CPU stage (at least 1). Default: the number of cores. More than 4 per core (or 1024) are capped to that, with a warning.", "CPV"),
 ("memory_limit", "Size", "Peak memory not to exceed, in bytes or as ``'512MiB'``, ``'4G'`` (G and GiB: 2**30 bytes, GB: 10**9). Shards bigger than fits are processed in parts; a conversion that cannot fit is refused before it starts. Default: half of the machine's memory (or of the cgroup's limit). :func:`verify` compares shards in parts that fit it, as a conversion writes them.", "CPV"),
 ("worker", "Worker", "Convert only share ``index`` of ``count`` of all shards: ``(index, count)`` or ``'index/count'`` (0-based). A partitioned run writes no metadata: call :func:`finalize` once every worker is done. Default: from a SLURM job array or a Kubernetes Indexed Job (with ``workers``), else every shard.", "C"),
 ("workers", "int", "Number of workers when the index comes from ``JOB_COMPLETION_INDEX``.", "C"),
 ("keep_manifest", "bool", "Keep the manifest of every shard written (its size and crc32c, and a hash of each inner chunk's values) at ``dst/.zshard/manifest.tsv`` after the run, for ``zshard verify --manifest`` to check the output without reading the source. By default it is removed with the rest of the state.", "CF"),
 ("checkpoint_interval", "float | str", "How often the shards written are recorded as done: seconds, or a duration such as ``'10s'``, ``'500ms'``, ``'2m'`` (from 10 ms to 1 h). On local disk shards are renamed into place without an fsync of their own, and each recording follows a checkpoint (one ``syncfs`` of ``dst``'s filesystem): a power loss or node crash can lose or damage only the shards written after the last checkpoint, which a resume checks against the manifest (size and crc32c) and rewrites if they do not match; a killed process loses nothing written. Shorter means less to check after a crash and more syncs. Default: ``'10s'`` (records are also written every 10,000 shards).", "C"),
 ("overwrite", "bool", "Replace what ``dst`` holds (otherwise a ``dst`` from a run with other options is refused, and one from a run with the same options is resumed).", "C"),
 ("report", "Location", "Write the run's JSON report to this file however the run ends; ``{worker}``, ``{host}`` and ``{date}`` in it are replaced.", "C"),
 ("sample", "float", "Check only this fraction of the shards, in (0, 1] (a deterministic sample), e.g. ``0.01``. Default: 1 (every shard).", "V"),
 ("manifest", "bool", "Check the output alone against the checksum manifest its conversion kept (``keep_manifest=True``), without reading the source: every shard's size and crc32c, and objects at chunk keys the manifest does not name. The output is then the one location given (``verify(dst, manifest=True)``).", "V"),
 ("watch", "float", "Read the status again every this many seconds until the conversion is finished (complete, or every shard done and no worker live), returning the last reading; Ctrl-C (``KeyboardInterrupt``) stops waiting. By default the status is read once.", "S"),
 ("s3_endpoint", "str", "Endpoint of an S3-compatible store, e.g. ``'http://127.0.0.1:9000'`` (overrides ``AWS_ENDPOINT_URL``).", STORAGE),
 ("s3_region", "str", "S3 region. Default: ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else ``us-east-1``.", STORAGE),
 ("s3_path_style", "bool", "Path-style S3 requests (endpoint/bucket/key), as most S3-compatible servers want.", STORAGE),
 ("anonymous", "bool", "Unsigned requests, for public buckets and containers.", STORAGE),
 ("retries", "int", "Retries of one request at most. Default: as many as ``retry_timeout`` allows.", STORAGE),
 ("retry_timeout", "int", "How long a request is retried, in seconds. Default: 120.", STORAGE),
 ("max_requests", "int", "Storage requests in flight per batch (at least 1). Default: 32.", STORAGE),
 ("part_size", "Size", "Shards larger than this are uploaded to object stores in parts of this size (at least 5 MiB). Default: ``'32MiB'``.", STORAGE),
 ("io_threads", "int", "Threads fetching chunks and threads writing shards, each (at least 1). Default: 2 for local paths, 8 when the source or destination is remote; a conversion of small shards gets up to 32, as many as keep twice that many shards within 64 MiB and the memory limit.", STORAGE),
]
DEPRECATED = [
 ("no_passthrough", "bool", "Deprecated: ``passthrough=False``.", LAYOUT),
 ("no_consolidate", "bool", "Deprecated: ``consolidate=False``.", LAYOUT),
]
PROGRESS = ("progress", "ProgressCallback | bool", "A callable given a :class:`Progress` as the run advances (at most ten times a second, on the calling thread), or ``True`` for a tqdm bar when tqdm is installed.", "C")

FUNCS = {
 "convert": ("C", "Report", True, '''Converts ``src`` into sharded Zarr v3 at ``dst`` and returns the run's :class:`Report`.

Resumes an interrupted conversion with the same options (only the shards not done are converted).
The GIL is released while converting. Ctrl-C (``KeyboardInterrupt``), or an exception raised by
``progress``, stops the run cleanly (shards not complete are abandoned, what is done is kept) and is
raised once it has: call again to resume.''', "Report\n    What the run did."),
 "plan": ("P", "Plan", True, '''What converting ``src`` into ``dst`` would do, from metadata alone (``zshard plan --json``).

Per array the shapes, shard and chunk counts, codecs, sizes and the peak memory estimate. Reads no
chunk and writes nothing; raises on everything :func:`convert` would reject.''', "Plan\n    The plan."),
 "finalize": ("F", "Finalized", True, '''After a partitioned conversion (``convert(..., worker=(i, n))`` on every worker): checks that
every shard is done and writes the metadata.

Takes the same layout and source options as the workers.''', "Finalized\n    What was written."),
 "verify": ("V", "VerifyResult", True, '''Compares the output ``dst`` with its source ``src`` element by element and checks every shard
index (or a deterministic ``sample`` of the shards); also reports stray objects and differing metadata.
With ``manifest=True``, checks the output (given alone, as ``src``) against its kept manifest instead.

Raises only when the comparison cannot be made: mismatches are in the result.''', "VerifyResult\n    What the comparison found (``.ok`` when nothing differs)."),
 "status": ("S", "Status", False, '''How far a conversion into ``dst`` has come, from ``dst`` alone (``zshard status --json``): per
array shards done and planned and bytes written, the rate and time left, per worker its shards and
whether its lease is live or stale, and what :func:`finalize` still waits for.

Read-only and cheap: a listing of the state and a few small records, never a shard.''', "Status\n    The status (``.finished`` when nothing moves on by itself)."),
 "ls": ("L", "Listing", False, '''The arrays of ``src`` as :func:`convert` reads them: path, data type, shape, chunks (an already
sharded source's inner chunks and shards) and codecs, from metadata alone (``zshard ls --json``).''', "Listing\n    The arrays and groups."),
}

RAISES = '''Raises
------
TypeError
    A keyword's value is of the wrong type (the message names the keyword).
OptionsError
    A keyword's value is out of range, or the options do not fit the source (a ``ValueError``).
ConversionError
    The subclass for what failed (source, destination, storage, chunk, memory).'''

out = ['"""The public functions of ``zshard``, one explicit keyword per setting, generated by\n``crates/python/generate_api.py`` from one table of parameters (a keyword has the same type and\ndescription in every function that takes it). The extension builds the library\'s options model from\nthe keywords given; tests/python checks them against the model\'s settings of each command."""', "", "from __future__ import annotations", "", "import warnings", "", "from . import _zshard", "from ._errors import OptionsError",
 "from ._options import (", "    Compressor,", "    IcechunkSpec,", "    IndexLocation,", "    Location,", "    OmeMetadata,", "    OnUnsupported,", "    OutputFormat,", "    Shape,", "    Size,", "    SourceFormat,", "    Strings,", "    Worker,", ")",
 "from ._results import Finalized, Listing, Plan, Report, Status, VerifyResult", "from ._progress import ProgressCallback, progress_callback", "", ""]

def doc_param(name, ann, doc):
    ann = {"Strings": "str | Sequence[str]", "IndexLocation": "{'start', 'end'}", "OmeMetadata": "{'upgrade', 'keep'}",
           "SourceFormat": "{'zarr', 'kerchunk-json', 'kerchunk-parquet', 'icechunk', 'n5'}",
           "OnUnsupported": "{'refuse', 'skip'}", "OutputFormat": "{'zarr', 'icechunk'}", "IcechunkSpec": "{1, 2}", "Location": "str | os.PathLike[str]",
           "Size": "int | str", "Worker": "tuple[int, int] | str", "Shape": "Sequence[int] | Mapping[str, int]",
           "Compressor": "str | Sequence[str | Mapping[str, Any]]"}.get(ann, ann)
    lines = [f"{name} : {ann}, optional"]
    lines += textwrap.wrap(doc, 100, initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False, break_long_words=False)
    return lines

for fname, (cmd, ret, has_dst, summary, returns) in FUNCS.items():
    params = [p for p in P if cmd in p[3]]
    deps = [p for p in DEPRECATED if cmd in p[3]]
    first = "dst" if cmd == "S" else "src"
    sig = [f"def {fname}(", f"    {first}: Location,"]
    if has_dst and cmd == "V":
        sig.append("    dst: Location | None = None,")
    elif has_dst:
        sig.append("    dst: Location,")
    sig.append("    *,")
    for name, ann, _, _ in params + deps:
        sig.append(f"    {name}: {ann} | None = None,")
    if cmd == "C":
        sig.append(f"    progress: ProgressCallback | bool | None = None,")
    sig.append(f") -> {ret}:")
    out += sig
    d = summary.splitlines()
    d += ["", "Parameters", "----------"]
    if cmd == "S":
        d += ["dst : str | os.PathLike[str]", "    The destination of the conversion (a path, a ``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://``", "    or ``az://`` URL)."]
    else:
        d += ["src : str | os.PathLike[str]", "    The source: a Zarr v2 or v3 array or group, a kerchunk reference set, an Icechunk repository or", "    an N5 container (a path, a ``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://``, ``az://`` or", "    ``http(s)://`` URL)."]
    if has_dst and cmd == "V":
        d += ["dst : str | os.PathLike[str], optional", "    The destination (a path, a ``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://`` or ``az://`` URL);", "    not given with ``manifest=True``, which checks ``src``, the output, alone."]
    elif has_dst:
        d += ["dst : str | os.PathLike[str]", "    The destination (a path, a ``pathlib.Path`` or a ``file://``, ``s3://``, ``gs://`` or ``az://`` URL)."]
    for name, ann, doc, _ in params + deps:
        d += doc_param(name, ann, doc)
    if cmd == "C":
        d += doc_param(*PROGRESS[:3])
    d += ["", "Returns", "-------"] + returns.splitlines() + [""] + RAISES.splitlines()
    out.append('    """' + d[0])
    out += [("    " + l) if l else "" for l in d[1:]]
    out.append('    """')
    names = [p[0] for p in params]
    if deps:
        out.append(f"    passthrough, consolidate = _deprecated(passthrough, no_passthrough, consolidate, no_consolidate)")
    out.append("    options = _given(")
    out.append("        {")
    for n in names:
        out.append(f'            "{n}": {n},')
    out.append("        }")
    out.append("    )")
    dst = "dst, " if has_dst else ""
    if cmd == "S":
        fname_args = "dst, "
    else:
        fname_args = f"src, {dst}"
    if cmd == "C":
        out.append("    with progress_callback(progress) as callback:")
        out.append(f'        return Report._from_dict(_zshard.convert(src, dst, options, callback))')
    else:
        out.append(f'    return {ret}._from_dict(_zshard.{fname}({fname_args}options))')
    out += ["", ""]

out += ['''def _given(options: dict[str, object]) -> dict[str, object]:
    """The settings given (not ``None``), for the extension, which checks them and builds the model."""
    return {name: value for name, value in options.items() if value is not None}


def _deprecated(
    passthrough: bool | None, no_passthrough: bool | None, consolidate: bool | None, no_consolidate: bool | None
) -> tuple[bool | None, bool | None]:
    """``passthrough`` and ``consolidate``, given the deprecated ``no_passthrough`` and ``no_consolidate``."""
    values = {"passthrough": passthrough, "consolidate": consolidate}
    deprecated = (("passthrough", "no_passthrough", no_passthrough), ("consolidate", "no_consolidate", no_consolidate))
    for new, old, given in deprecated:
        if given is None:
            continue
        if not isinstance(given, bool):
            raise TypeError(f"{old}: a bool, got {type(given).__name__} {given!r}")
        negated = not given
        warnings.warn(f"{old} is deprecated: give {new}={negated}", DeprecationWarning, stacklevel=3)
        if values[new] is not None and values[new] != negated:
            raise OptionsError(f"{old}={given} contradicts {new}={values[new]}", kind="options")
        values[new] = negated
    return values["passthrough"], values["consolidate"]
''']

TARGET = Path(__file__).resolve().parent / "python" / "zshard" / "_api.py"
text = "\n".join(out)
if sys.argv[1:] == ["--check"]:
    if TARGET.read_text() != text:
        sys.exit(f"{TARGET} is not what {Path(__file__).name} generates: run it")
else:
    TARGET.write_text(text)
