"""The typed API: every setting is a keyword with a type, checked by mypy (``mypy --strict``) before
anything runs, and by zshard when it is called.

    python typed_options.py SRC DST

Lists the arrays of SRC, plans the conversion under a memory limit, converts with shapes by dimension
name where the source names them, and verifies the output.
"""

from __future__ import annotations

import sys

import zshard


def shard(src: str, dst: str, *, memory_limit: zshard.Size = "1GiB", threads: int = 2) -> zshard.VerifyResult:
    """Converts ``src`` into ``dst`` (shards of two source chunks along the first dimension, index at the start) and
    verifies it; returns what the verification found."""
    listing: zshard.Listing = zshard.ls(src)
    for array in listing.arrays:
        print(f"{array.path or '.'}: {array.data_type} {array.shape} in chunks {array.chunk_shape}")
    first = listing.arrays[0]
    shard_shape: zshard.Shape = (first.chunk_shape[0] * 2, *first.chunk_shape[1:])
    index_location: zshard.IndexLocation = "start"
    plan: zshard.Plan = zshard.plan(
        src, dst, shard_shape=shard_shape, index_location=index_location, memory_limit=memory_limit, threads=threads
    )
    print(f"{plan.totals.shards} shards, peak {plan.totals.estimated_peak_memory_per_worker} bytes per worker")
    report: zshard.Report = zshard.convert(
        src,
        dst,
        shard_shape=shard_shape,
        index_location=index_location,
        compressor="zstd:5",
        memory_limit=memory_limit,
        threads=threads,
    )
    print(f"{report.status}: {report.totals.shards_written} shards written")
    return zshard.verify(src, dst, threads=threads)


if __name__ == "__main__":
    result = shard(sys.argv[1], sys.argv[2])
    print("ok" if result.ok else "\n".join(result.mismatches))
    sys.exit(0 if result.ok else 1)
