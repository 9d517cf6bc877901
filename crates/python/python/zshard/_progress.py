"""The ``progress=`` argument of :func:`zshard.convert`: a callable, or ``True`` for a tqdm bar."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ._errors import ZshardWarning
from ._results import Progress

#: A callable given a :class:`Progress` as a conversion advances.
ProgressCallback = Callable[[Progress], object]


@contextmanager
def progress_callback(
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
        raise TypeError(f"progress: a callable or a bool, got {type(progress).__name__} {progress!r}")


@contextmanager
def _tqdm_bar() -> Iterator[Callable[[dict[str, int]], object] | None]:
    try:
        from tqdm.auto import tqdm  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        warnings.warn("progress=True needs tqdm (pip install tqdm)", ZshardWarning, stacklevel=5)
        yield None
        return
    bar = tqdm(total=0, unit="shard", file=sys.stderr)

    def update(figures: dict[str, int]) -> None:
        bar.total = figures["shards_total"]
        bar.n = figures["shards_done"]
        if figures["shards_total"]:
            bar.set_postfix_str(f"{figures['bytes_written'] / 2**20:.1f} MiB written", refresh=False)
        else:
            bar.set_postfix_str(f"listing: {figures['objects_listed']} objects", refresh=False)
        bar.refresh()

    try:
        yield update
    finally:
        bar.close()
