"""The types of the settings of ``zshard``'s functions, as their signatures and stubs name them.

The values are checked by the extension (``crates/python/src/lower.rs``), which builds the library's
options model from them: a value of the wrong type raises ``TypeError``, one out of range
:class:`OptionsError` (a ``ValueError``), both naming the keyword.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

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
OmeMetadata = Literal["upgrade", "keep", "0.6"]
#: A number of pyramid levels (level 0, the source, included), or ``"auto"``.
Pyramid = Union[int, Literal["auto"]]
Downsample = Literal["mean", "mode", "nearest", "min", "max"]
SourceFormat = Literal["zarr", "kerchunk-json", "kerchunk-parquet", "icechunk", "n5"]
OnUnsupported = Literal["refuse", "skip"]
OutputFormat = Literal["zarr", "icechunk"]
IcechunkSpec = Literal[1, 2]
