"""Keyword arguments into the ``zshard`` command's flags: the one place where Python values become
options. The command line's own parser then checks them (``zshard_cli::request``), so the module and
the command share every option's name, default, check and error message."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Union

#: A source or destination: a path, a ``pathlib.Path`` or a URL (``file://``, ``s3://``, ``gs://``,
#: ``az://``, ``abfs://``, ``http(s)://`` for sources).
Location = Union[str, "os.PathLike[str]"]


def location(value: Location) -> str:
    """A path or URL as the command takes it."""
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"a location is a str, a pathlib.Path or a URL, not {type(value).__name__}")


def command_line(command: str, src: Location, dst: Location, options: Mapping[str, Any]) -> list[str]:
    """The command line ``zshard COMMAND SRC DST --flags`` (no program name) for ``options``.

    A name becomes a flag with ``_`` as ``-`` (``shard_shape`` -> ``--shard-shape``). ``True`` gives
    the bare flag, ``False`` and ``None`` leave it out; a shape (sequence of ints) becomes ``a,b,...``;
    ``worker=(i, n)`` becomes ``--worker i/n``; a list of strings repeats the flag
    (``allow_ref_prefix``); a codec chain (list of dicts, or a dict) becomes its JSON.
    """
    args = [command, location(src), location(dst)]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif name == "worker" and isinstance(value, tuple):
            index, count = value
            args += [flag, f"{int(index)}/{int(count)}"]
        elif name == "compressor" and isinstance(value, (list, dict)):
            args += [flag, json.dumps(value)]
        elif isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
            args += [flag, ",".join(str(v) for v in value)]
        elif isinstance(value, (list, tuple)):
            for item in value:
                args += [flag, flag_value(item)]
        else:
            args += [flag, flag_value(value)]
    return args


def flag_value(value: object) -> str:
    """One flag's value as text (paths through ``os.fspath``)."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
