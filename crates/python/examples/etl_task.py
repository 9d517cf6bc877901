"""zshard as the tasks of an ETL scheduler (Prefect, Airflow, Dagster, ...): plain functions whose
arguments and results are JSON, so a scheduler can pass them between tasks (Airflow's XCom,
Prefect's results) and retry them.

With Prefect, for example::

    from prefect import flow, task

    convert = task(retries=3)(convert_task)
    finalize = task(finalize_task)

    @flow
    def shard(src: str, dst: str, workers: int = 8) -> dict:
        done = convert.map(src, dst, range(workers), workers)
        return finalize(src, dst, wait_for=done)

With Airflow: ``convert_task.expand(worker_index=list(range(8)))`` in a TaskFlow DAG, then
``finalize_task``. A retried task resumes its share: shards it completed before are not converted
again. Every task and ``finalize_task`` must get the same options.
"""

from __future__ import annotations

from typing import Any

import zshard


def convert_task(src: str, dst: str, worker_index: int, worker_count: int, **options: Any) -> dict[str, Any]:
    """Converts share ``worker_index`` of ``worker_count`` of the shards; returns the run's report
    (the same JSON document as ``zshard convert --report``)."""
    report = zshard.convert(src, dst, worker=(worker_index, worker_count), **options)
    return report.document


def finalize_task(src: str, dst: str, **options: Any) -> dict[str, Any]:
    """Once every share is done: checks it and writes the metadata; returns what was written."""
    finalized = zshard.finalize(src, dst, **options)
    return {"destination": finalized.destination, "arrays": finalized.arrays, "groups": finalized.groups}


if __name__ == "__main__":
    import json
    import sys

    src, dst, count = sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2
    reports = [convert_task(src, dst, i, count) for i in range(count)]
    print(json.dumps(finalize_task(src, dst)))
