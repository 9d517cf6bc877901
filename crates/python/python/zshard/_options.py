"""The settings of ``zshard``'s functions: their types, the checks made on them at the edge (each
message names the keyword), and their lowering to the ``zshard`` command's flags.

Today the checked values become a command line that the extension parses as the command does
(``zshard_cli::request``), so the library's defaults and deeper checks stay in one place; this module
is the only one that knows about flags. The public signatures in ``zshard`` do not depend on it.
"""

from __future__ import annotations

import json
import operator
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import Any, Literal, Union, get_args

from ._errors import OptionsError

#: A source or destination: a path, a ``pathlib.Path`` or a URL (``file://``, ``s3://``, ``gs://``,
#: ``az://``, ``abfs://``, ``http(s)://`` for sources).
Location = Union[str, os.PathLike[str]]

#: A shape: one extent per dimension (``(4096, 4096)``), or extents by dimension name
#: (``{"time": 48, "lat": 720}``).
Shape = Union[Sequence[int], Mapping[str, int]]

#: A size in bytes: an int, or a str with a unit (``"512MiB"``, ``"4G"``; G and GiB are 2**30, GB 10**9).
Size = Union[int, str]

#: A codec: a Zarr v3 codec as a dict (``{"name": "gzip", "configuration": {"level": 6}}``) or a name
#: (``"crc32c"``).
Codec = Union[str, Mapping[str, Any]]

#: A compressor: a spec (``"zstd:3"``, ``"gzip:6"``, ``"blosc:zstd:5:bitshuffle"``, ``"none"``,
#: ``"source"``) or a whole inner codec chain (a sequence of codecs).
Compressor = Union[str, Sequence[Codec]]

#: One str, or several (a repeatable setting).
Strings = Union[str, Sequence[str]]

#: A share of a partitioned conversion: ``(index, count)`` or ``"index/count"`` (0-based index).
Worker = Union[tuple[int, int], str]

IndexLocation = Literal["start", "end"]
OmeMetadata = Literal["upgrade", "keep"]
SourceFormat = Literal["zarr", "kerchunk-json", "kerchunk-parquet", "icechunk", "n5"]
OnUnsupported = Literal["refuse", "skip"]
OutputFormat = Literal["zarr", "icechunk"]
IcechunkSpec = Literal[1, 2]


def _kind(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


def location(value: object, name: str = "a location") -> str:
    """A path or URL as the command takes it."""
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        path = os.fspath(value)
        if isinstance(path, str):
            return path
    raise TypeError(f"{name}: a path is a str or a pathlib.Path, got {_kind(value)}")


def _integer(name: str, value: object, what: str) -> int:
    """``value`` as an int (numpy integers too), refusing bools and floats."""
    if isinstance(value, bool):
        raise TypeError(f"{name}: {what}, got {_kind(value)}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name}: {what}, got {_kind(value)}") from None


def shape(name: str, value: object) -> tuple[int, ...] | dict[str, int]:
    if isinstance(value, Mapping):
        named: dict[str, int] = {}
        for dim, n in value.items():
            if not isinstance(dim, str):
                raise TypeError(f"{name}: dimension names are str, got {_kind(dim)}")
            named[dim] = _integer(name, n, "extents are ints")
        extents = list(named.values())
    elif isinstance(value, Iterable) and not isinstance(value, (str, bytes, Set)):
        # A sequence, or anything iterated in order (a numpy array).
        extents = [_integer(name, n, "extents are ints") for n in value]
        named = {}
    else:
        raise TypeError(
            f"{name}: a shape is a sequence of ints or a mapping of dimension names to ints, got {_kind(value)}"
        )
    if not extents:
        raise OptionsError(f"{name}: a shape has at least one extent", kind="options")
    for n in extents:
        if n < 1:
            raise OptionsError(f"{name}: extents are at least 1, got {n}", kind="options")
    return named if named else tuple(extents)


def size(name: str, value: object) -> int | str:
    if isinstance(value, str):
        if not value.strip():
            raise OptionsError(f"{name}: an empty size", kind="options")
        return value
    n = _integer(name, value, "a size is an int (bytes) or a str such as '4GiB'")
    if n < 0:
        raise OptionsError(f"{name} must not be negative, got {n}", kind="options")
    return n


def count(minimum: int) -> Callable[[str, object], int]:
    def check(name: str, value: object) -> int:
        n = _integer(name, value, "an int")
        if n < minimum:
            raise OptionsError(f"{name} must be at least {minimum}, got {n}", kind="options")
        return n

    return check


def flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: a bool, got {_kind(value)}")
    return value


def text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: a str, got {_kind(value)}")
    return value


def path(name: str, value: object) -> str:
    return location(value, name)


def strings(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Sequence) or isinstance(value, bytes):
        raise TypeError(f"{name}: a str or a sequence of str, got {_kind(value)}")
    for item in value:
        if not isinstance(item, str):
            raise TypeError(f"{name}: items are str, got {_kind(item)}")
    return tuple(value)


def choice(values: Any) -> Callable[[str, object], str]:
    allowed: tuple[str, ...] = get_args(values)

    def check(name: str, value: object) -> str:
        if not isinstance(value, str):
            raise TypeError(f"{name}: one of {', '.join(map(repr, allowed))}, got {_kind(value)}")
        if value not in allowed:
            raise OptionsError(
                f"{name} is one of {', '.join(map(repr, allowed))}, got {value!r}", kind="options"
            )
        return value

    check.allowed = allowed  # type: ignore[attr-defined]
    return check


def compressor(name: str, value: object) -> str | list[Any] | dict[str, Any]:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        chain: list[Any] = []
        for codec in value:
            if isinstance(codec, str):
                chain.append(codec)
            elif isinstance(codec, Mapping):
                chain.append(dict(codec))
            else:
                raise TypeError(f"{name}: codecs are dicts or names, got {_kind(codec)}")
        return chain
    raise TypeError(f"{name}: a spec such as 'zstd:3' or a list of Zarr v3 codecs, got {_kind(value)}")


def worker(name: str, value: object) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, tuple) or len(value) != 2:
        raise TypeError(f"{name}: (index, count) or 'index/count', got {_kind(value)}")
    index = _integer(name, value[0], "the index is an int")
    total = _integer(name, value[1], "the count is an int")
    if total < 1 or not 0 <= index < total:
        raise OptionsError(f"{name}: index {index} is not in 0..{total}", kind="options")
    return f"{index}/{total}"


def spec_version(name: str, value: object) -> int:
    version = _integer(name, value, "an int")
    allowed: tuple[int, ...] = get_args(IcechunkSpec)
    if version not in allowed:
        raise OptionsError(f"{name} is one of {', '.join(map(str, allowed))}, got {version}", kind="options")
    return version


def fraction(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: a float, got {_kind(value)}")
    if not 0 < value <= 1:
        raise OptionsError(f"{name} is a fraction in (0, 1], got {value}", kind="options")
    return float(value)


#: Every setting of the functions, with its check. A setting's keyword is its name; its flag is
#: ``--`` and the name with ``-`` for ``_``, except the two that default to true (``FLAGS``).
CHECKS: dict[str, Callable[[str, object], object]] = {
    # Layout
    "shard_shape": shape,
    "chunk_shape": shape,
    "compressor": compressor,
    "index_location": choice(IndexLocation),
    "passthrough": flag,
    "consolidate": flag,
    "level_shapes": strings,
    "ome": choice(OmeMetadata),
    # Output
    "output_format": choice(OutputFormat),
    "branch": text,
    "message": text,
    "icechunk_spec": spec_version,
    # Source
    "source_format": choice(SourceFormat),
    "ref_root": path,
    "allow_ref_prefix": strings,
    "ref_coalesce_gap": size,
    "include": strings,
    "exclude": strings,
    "strict_refs": flag,
    "source_ref": text,
    "on_unsupported": choice(OnUnsupported),
    # Run
    "threads": count(1),
    "memory_limit": size,
    "worker": worker,
    "workers": count(1),
    "overwrite": flag,
    "keep_manifest": flag,
    "report": path,
    "sample": fraction,
    # Storage
    "s3_endpoint": text,
    "s3_region": text,
    "s3_path_style": flag,
    "anonymous": flag,
    "retries": count(0),
    "retry_timeout": count(0),
    "max_requests": count(1),
    "part_size": size,
    "io_threads": count(1),
}

#: Settings whose flag is not their name: a false value gives the flag, a true one nothing.
NEGATED_FLAGS = {"passthrough": "--no-passthrough", "consolidate": "--no-consolidate"}


def checked(given: Mapping[str, object]) -> dict[str, object]:
    """The settings given (those not ``None``), checked and normalised."""
    return {name: CHECKS[name](name, value) for name, value in given.items() if value is not None}


def command_line(command: str, src: Location, dst: Location | None, options: Mapping[str, object]) -> list[str]:
    """The command line ``zshard COMMAND SRC [DST] --flags`` (no program name) for ``checked`` options."""
    args = [command, location(src, "src")]
    if dst is not None:
        args.append(location(dst, "dst"))
    for name, value in options.items():
        if name in NEGATED_FLAGS:
            if value is False:
                args.append(NEGATED_FLAGS[name])
            continue
        flag_name = "--" + name.replace("_", "-")
        if value is True:
            args.append(flag_name)
        elif value is False:
            continue
        elif isinstance(value, dict) and name in ("shard_shape", "chunk_shape"):
            args += [flag_name, ",".join(f"{dim}={n}" for dim, n in value.items())]
        elif name == "compressor" and isinstance(value, (list, dict)):
            args += [flag_name, json.dumps(value)]
        elif name in ("shard_shape", "chunk_shape") and isinstance(value, tuple):
            args += [flag_name, ",".join(str(n) for n in value)]
        elif isinstance(value, tuple):
            for item in value:
                args += [flag_name, str(item)]
        else:
            args += [flag_name, str(value)]
    return args


def python_spelling(message: str) -> str:
    """``message`` (the command's parser's or the library's) with the flags of settings spelled as
    keywords: ``invalid value 'x' for '--memory-limit <SIZE>'`` -> ``... for 'memory_limit'``,
    ``--no-passthrough`` -> ``passthrough=False``. Other text, such as a command line to run, is kept."""

    def keyword(found: re.Match[str]) -> str:
        flag_name = "--" + found[1]
        for name, negated in NEGATED_FLAGS.items():
            if negated == flag_name:
                return f"{name}=False"
        name = found[1].replace("-", "_")
        return name if name in CHECKS else found[0]

    message = re.sub(r"--([a-z][a-z0-9-]*) <[^>]*>", keyword, message)
    return re.sub(r"(?<![\w`-])--([a-z][a-z0-9-]*)", keyword, message)
