"""Generates python/zshard/_api.py, the public functions of ``zshard`` with one explicit keyword per
setting, from the settings' one definition (name, type, description, commands), so that a keyword has
the same type and description in every function that takes it.

    python crates/python/generate_api.py           # rewrites python/zshard/_api.py
    python crates/python/generate_api.py --check   # fails when _api.py differs (tests/python runs it)

The keywords are the library's settings (``zshard_core::Setting``), read from their one definition,
the ``settings!`` rows of ``crates/core/src/setting.rs`` (key, commands, Python annotation and doc). A
new setting: its row there, its kind in the extension's ``crates/python/src/lower.rs``, and
regenerate; tests/python/test_typed.py fails until the keywords of every function are the settings the
model gives its command (``_zshard.settings``) and every flag of ``zshard COMMAND --help`` has its
keyword.
"""

import re
import sys
import textwrap
from pathlib import Path

# The settings, read from their one definition (the `settings!` rows of crates/core/src/setting.rs):
# (name, annotation, doc, commands), commands as letters (C convert, P plan, F finalize, V verify,
# L ls, S status). SRC and DST (no annotation) are the functions' positional parameters.
LETTERS = {"convert": "C", "plan": "P", "finalize": "F", "verify": "V", "ls": "L", "status": "S"}
SETTING_RS = Path(__file__).resolve().parents[1] / "core" / "src" / "setting.rs"


def rust_str(text):
    """The value of a Rust string literal's body (its escapes and line continuations)."""
    text = re.sub(r"\\\n\s*", "", text)
    return re.sub(r'\\(["\\])', r"\1", text)


def settings():
    rows = re.findall(
        r'\n    \w+ \{\s*key: "(\w+)",\s*group: \w+,\s*commands: "([a-z ]*)",\s*value: "[^"]*",\s*'
        r'python: "([^"]*)",\s*short: "[^"]*",\s*help: "(?:[^"\\]|\\[\s\S])*",\s*doc: "((?:[^"\\]|\\[\s\S])*)",\s*\}',
        SETTING_RS.read_text(),
    )
    assert len(rows) > 40, f"{SETTING_RS}: the settings! rows were not found"
    return [
        (key, python, rust_str(doc), "".join(LETTERS[c] for c in commands.split()))
        for key, commands, python, doc in rows
        if python
    ]


P = settings()
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

out = ['"""The public functions of ``zshard``, one explicit keyword per setting, generated by\n``crates/python/generate_api.py`` from the settings\x27 one definition (a keyword has the same type\nand description in every function that takes it). The extension builds the library\'s options model from\nthe keywords given; tests/python checks them against the model\'s settings of each command."""', "", "from __future__ import annotations", "", "from . import _zshard",
 "from ._options import (", "    Compressor,", "    IcechunkSpec,", "    IndexLocation,", "    Location,", "    Downsample,", "    OmeMetadata,", "    OnUnsupported,", "    OutputFormat,", "    Pyramid,", "    Shape,", "    Size,", "    SourceFormat,", "    Strings,", "    Worker,", ")",
 "from ._results import Finalized, Listing, Plan, Report, Status, VerifyResult", "from ._progress import ProgressCallback, progress_callback", "", ""]

def doc_param(name, ann, doc):
    ann = {"Strings": "str | Sequence[str]", "IndexLocation": "{'start', 'end'}", "OmeMetadata": "{'upgrade', 'keep', '0.6'}", "Pyramid": "int | 'auto'",
           "Downsample": "{'mean', 'mode', 'nearest', 'min', 'max'}",
           "SourceFormat": "{'zarr', 'kerchunk-json', 'kerchunk-parquet', 'icechunk', 'n5'}",
           "OnUnsupported": "{'refuse', 'skip'}", "OutputFormat": "{'zarr', 'icechunk'}", "IcechunkSpec": "{1, 2}", "Location": "str | os.PathLike[str]",
           "Size": "int | str", "Worker": "tuple[int, int] | str", "Shape": "Sequence[int] | Mapping[str, int]",
           "Compressor": "str | Sequence[str | Mapping[str, Any]]"}.get(ann, ann)
    lines = [f"{name} : {ann}, optional"]
    lines += textwrap.wrap(doc, 100, initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False, break_long_words=False)
    return lines

for fname, (cmd, ret, has_dst, summary, returns) in FUNCS.items():
    params = [p for p in P if cmd in p[3]]
    first = "dst" if cmd == "S" else "src"
    sig = [f"def {fname}(", f"    {first}: Location,"]
    if has_dst and cmd == "V":
        sig.append("    dst: Location | None = None,")
    elif has_dst:
        sig.append("    dst: Location,")
    sig.append("    *,")
    for name, ann, _, _ in params:
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
    for name, ann, doc, _ in params:
        d += doc_param(name, ann, doc)
    if cmd == "C":
        d += doc_param(*PROGRESS[:3])
    d += ["", "Returns", "-------"] + returns.splitlines() + [""] + RAISES.splitlines()
    out.append('    """' + d[0])
    out += [("    " + l) if l else "" for l in d[1:]]
    out.append('    """')
    names = [p[0] for p in params]
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

''']

TARGET = Path(__file__).resolve().parent / "python" / "zshard" / "_api.py"
text = "\n".join(out)
if sys.argv[1:] == ["--check"]:
    if TARGET.read_text() != text:
        sys.exit(f"{TARGET} is not what {Path(__file__).name} generates: run it")
else:
    TARGET.write_text(text)
