"""``zshard.run``: a job file's conversions, as ``zshard run JOB.toml`` runs them."""

from __future__ import annotations

import os

from . import _zshard
from ._progress import ProgressCallback, progress_callback
from ._results import Report


def run(
    job: str | os.PathLike[str],
    *,
    worker: str | None = None,
    workers: int | None = None,
    progress: ProgressCallback | bool | None = None,
) -> list[Report]:
    """Runs every conversion of the job file ``job`` (TOML: sources, destinations, per-array shapes,
    compressor, ...; see ``zshard run --help``) as ``zshard run JOB.toml`` does, and returns their
    :class:`Report` in the job's order.

    Every conversion is checked before the first starts. A conversion that fails raises its
    :class:`ConversionError` (those before it are done, and their reports are written where the job's
    ``report`` says).

    Parameters
    ----------
    job : str | os.PathLike
        The job file.
    worker : str, optional
        ``"I/N"``: convert part I of N of every conversion's shards (as ``--worker``); without it, a
        SLURM job array's or Kubernetes Indexed Job's share, else all.
    workers : int, optional
        The number of workers when the index comes from ``JOB_COMPLETION_INDEX``.
    progress : ProgressCallback | bool, optional
        As for :func:`zshard.convert`, called for each conversion in turn.
    """
    with progress_callback(progress) as callback:
        reports = _zshard.run(os.fspath(job), worker, workers, callback)
    return [Report._from_dict(report) for report in reports]
