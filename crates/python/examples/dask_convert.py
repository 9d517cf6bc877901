"""Convert one dataset with the workers of a Dask cluster, then finalize: no SLURM needed.

    python dask_convert.py SRC DST [WORKERS]

Each Dask task converts a deterministic share of the shards (``worker=(i, n)``: shard g of the whole
hierarchy goes to worker g mod n) and writes no metadata; once all are done, ``finalize`` checks that
every shard is there and writes the ``zarr.json`` documents. A task that fails or is killed can be
run again: it resumes its share. Every task and ``finalize`` must get the same options.
"""

from __future__ import annotations

import sys
from typing import Any

import zshard


def convert_on_dask(client: Any, src: str, dst: str, workers: int, **options: Any) -> list[zshard.Report]:
    """Converts ``src`` into ``dst`` with ``workers`` tasks on the cluster of ``client`` (a
    ``dask.distributed.Client``), then finalizes; returns the tasks' reports."""
    futures = [
        client.submit(zshard.convert, src, dst, worker=(i, workers), pure=False, **options)
        for i in range(workers)
    ]
    reports: list[zshard.Report] = client.gather(futures)
    zshard.finalize(src, dst, **options)
    return reports


def main() -> None:
    from dask.distributed import Client, LocalCluster

    src, dst = sys.argv[1], sys.argv[2]
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    # dask.distributed's constructors have no annotations: mypy --strict asks to say so.
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1)  # type: ignore[no-untyped-call]
    with cluster, Client(cluster) as client:  # type: ignore[no-untyped-call]
        reports = convert_on_dask(client, src, dst, workers)
    written = sum(r.totals.shards_written for r in reports)
    print(f"{dst}: {written} shards written by {workers} workers")


if __name__ == "__main__":
    main()
