"""The exceptions and warnings zshard raises, one class per kind of failure."""

from __future__ import annotations


class ConversionError(Exception):
    """A conversion, plan, finalize or verify that could not be done.

    ``kind`` is the library's kind of failure (``options``, ``source``, ``destination``, ``storage``,
    ``read``, ``decode``, ``encode``, ``write``, ``memory``, ``cancelled``, ``file``, ``system``,
    ``internal``); ``array`` is the array it is about (its path in the hierarchy) and ``key`` the chunk
    or shard key, when the failure is about one.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str = "internal",
        array: str | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.array = array
        self.key = key


class OptionsError(ConversionError, ValueError):
    """Options that do not parse or do not fit the source (checked before anything is written)."""


class SourceError(ConversionError):
    """The source cannot be found or read as a Zarr hierarchy or a kerchunk reference set."""


class DestinationError(ConversionError):
    """The destination holds something this conversion must not resume or overwrite, or shards of a
    partitioned run are not done when finalizing."""


class StorageError(ConversionError):
    """A storage request failed (after the retries)."""


class ChunkError(ConversionError):
    """A chunk could not be read, decoded or encoded, or a shard could not be written; ``array`` and
    ``key`` name it."""


class MemoryLimitError(ConversionError):
    """The conversion cannot fit in the memory limit."""


class Cancelled(ConversionError):
    """The conversion was cancelled; what was done is kept and the same call resumes it."""


class ZshardWarning(UserWarning):
    """Something that does not stop the run, e.g. an output that a reader will read differently."""


_BY_KIND: dict[str, type[ConversionError]] = {
    "options": OptionsError,
    "source": SourceError,
    "destination": DestinationError,
    "storage": StorageError,
    "read": ChunkError,
    "decode": ChunkError,
    "encode": ChunkError,
    "downsample": ChunkError,
    "write": ChunkError,
    "memory": MemoryLimitError,
    "cancelled": Cancelled,
}


def from_kind(kind: str, message: str, array: str | None, key: str | None) -> ConversionError:
    """The exception for a failure of ``kind`` (called by the extension)."""
    return _BY_KIND.get(kind, ConversionError)(message, kind=kind, array=array, key=key)
