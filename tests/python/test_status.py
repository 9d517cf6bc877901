"""``zshard.status`` (how far a conversion into a destination has come, as a typed dataclass, with
``watch=`` waiting until it is finished) and ``zshard.verify(..., manifest=True)`` (the output checked
against its kept manifest, without the source)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import zshard


def shard_sizes(dst: Path) -> list[int]:
    return [p.stat().st_size for p in (dst / "c").rglob("*") if p.is_file()]


def plant_lease(dst: Path, worker: str, renewed_ms: int) -> Path:
    """A lease as a run of ``worker`` writes it (`lease.rs`), last renewed at ``renewed_ms``."""
    lease = dst / ".zshard" / "leases" / f"{worker}-elsewhere-4242-1.json"
    lease.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "host": "elsewhere",
        "pid": 4242,
        "worker": worker,
        "started": "2026-11-27T00:00:00Z",
        "renewed_ms": renewed_ms,
        "stale_after_ms": 60000,
    }
    lease.write_text(json.dumps(document))
    return lease


def test_status_of_two_stale_workers_and_a_live_one_then_watched_until_finished(small, tmp_path):
    src, _ = small
    dst = tmp_path / "out.zarr"
    # 100x80 in 20x40 shards: 10 shards; worker 0 of 3 owns shards 0, 3, 6 and 9.
    zshard.convert(src, dst, shard_shape=(20, 40), worker=(0, 3))
    now_ms = int(time.time() * 1000)
    plant_lease(dst, "w0of3", now_ms - 3_600_000)
    plant_lease(dst, "w1of3", now_ms - 600_000)
    live = plant_lease(dst, "w2of3", now_ms)

    s = zshard.status(dst)
    assert isinstance(s, zshard.Status)
    assert s.phase == "in_progress" and not s.finished
    assert s.totals == zshard.StatusTotals(shards_planned=10, shards_done=4, bytes_written=sum(shard_sizes(dst)))
    assert [(a.path, a.shards_planned, a.shards_done, a.shards_written) for a in s.arrays] == [
        ("", 10, 4, len(shard_sizes(dst)))
    ]
    workers = [(w.worker, w.started, w.shards_planned, w.shards_done, w.live, w.stale) for w in s.workers]
    assert workers == [
        ("w0of3", True, 4, 4, False, True),
        ("w1of3", False, 3, 0, False, True),
        ("w2of3", False, 3, 0, True, False),
    ]
    assert all(isinstance(lease, zshard.LeaseStatus) for w in s.workers for lease in w.leases)
    assert s.workers[1].leases[0].age_ms >= 600_000
    assert s.finalize_waits_for == ["w1of3", "w2of3"]
    assert s.rate is not None and s.rate.window_s == 120 and s.rate.eta_s is not None

    # The same as the command's JSON.
    out = zshard._zshard.cli_main(["status", str(dst), "--json"])
    assert out == 0

    # Watching: it waits while worker 2 is live and shards are left, and returns once every shard is
    # done and no worker is live (the stale leases of workers 0 and 1 stay).
    found: list[zshard.Status] = []
    watcher = threading.Thread(target=lambda: found.append(zshard.status(dst, watch=0.1)))
    watcher.start()
    time.sleep(0.6)
    assert watcher.is_alive(), "the watch returned while a worker was live and shards were left"
    live.unlink()
    zshard.convert(src, dst, shard_shape=(20, 40), worker=(1, 3))
    zshard.convert(src, dst, shard_shape=(20, 40), worker=(2, 3))
    watcher.join(timeout=30)
    assert not watcher.is_alive(), "the watch went on after every shard was done"
    (last,) = found
    assert last.finished and last.finalize_waits_for == []
    assert last.totals.shards_done == 10
    assert [w.stale for w in last.workers] == [True, True, False]

    zshard.finalize(src, dst, shard_shape=(20, 40))
    done = zshard.status(dst, watch=5)
    assert done.phase == "complete" and done.finished
    # Its arrays and totals come from the metadata once the state is gone (issue 44, point 4).
    assert [(a.path, a.shards_planned, a.shards_done) for a in done.arrays] == [("", 10, 10)]
    assert done.totals.shards_done == done.totals.shards_planned == 10


def test_status_keywords_are_checked(small, tmp_path):
    dst = tmp_path / "none.zarr"
    dst.mkdir()
    assert zshard.status(dst).phase == "not_started"
    with pytest.raises(zshard.OptionsError, match="watch is a number of seconds above 0"):
        zshard.status(dst, watch=0)
    with pytest.raises(TypeError, match="watch: a number of seconds"):
        zshard.status(dst, watch="2")  # type: ignore[arg-type]
    with pytest.raises(zshard.ConversionError):
        zshard.status(tmp_path / "missing.zarr")


def test_verify_with_the_manifest_alone_finds_a_corrupted_shard(small, tmp_path):
    src, _ = small
    dst = tmp_path / "out.zarr"
    zshard.convert(src, dst, shard_shape=(20, 40), keep_manifest=True)
    assert (dst / ".zshard" / "manifest.tsv").is_file()
    clean = zshard.verify(dst, manifest=True)
    assert isinstance(clean, zshard.VerifyResult)
    assert clean.ok and clean.shards_checked == len(shard_sizes(dst)), clean
    shard = dst / "c" / "0" / "1"
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0xFF
    shard.write_bytes(bytes(data))
    broken = zshard.verify(dst, manifest=True)
    assert not broken.ok
    assert any("c/0/1" in m for m in broken.mismatches), broken.mismatches
    # The source is not read with the manifest: giving it is refused, as is a source setting.
    with pytest.raises(zshard.OptionsError, match="manifest=True checks the output alone"):
        zshard.verify(src, dst, manifest=True)
    with pytest.raises(zshard.OptionsError, match="sample= is about the source"):
        zshard.verify(dst, manifest=True, sample=0.5)
    with pytest.raises(zshard.OptionsError, match="needs the output dst"):
        zshard.verify(dst)


def test_plan_gives_the_cost_of_the_job(small, tmp_path):
    src, data = small
    plan = zshard.plan(src, tmp_path / "out.zarr", shard_shape=(20, 40))
    assert isinstance(plan.cost, zshard.PlanCost)
    # The 72 chunks zarr-python stored (the last row of 8 holds only the fill value), as listed.
    stored = sum(p.stat().st_size for p in src.iterdir() if not p.name.startswith("."))
    assert len([p for p in src.iterdir() if not p.name.startswith(".")]) == 72
    # Zarr: one GET per source chunk (10x8), raw sizes; one PUT per shard (5x2) and the array's zarr.json.
    # Issue 44: the stored bytes beside the raw ones, every request by kind with the state's (one short
    # run: the claim 9, one batch of records 3, one manifest file 1; see the CLI's test of the same).
    assert plan.cost == zshard.PlanCost(
        get_requests=80,
        get_bytes=data.nbytes,
        gets_from_references=False,
        put_requests=11,
        put_bytes=data.nbytes,
        raw_bytes_in=data.nbytes,
        stored_bytes_in=stored,
        source_requests=zshard.PlanRequests(list=1, head=0, get=80, put=0, delete=0),
        destination_requests=zshard.PlanRequests(list=2, head=0, get=2, put=11 + 6, delete=3),
        state_requests=zshard.PlanStateRequests(claim=9, records=3, manifest=1),
    )
    assert plan.cost.destination_requests.total == 2 + 2 + 17 + 3
    estimate = plan.estimate
    assert isinstance(estimate, zshard.PlanEstimate)
    assert estimate.seconds > 0 and estimate.request_price_usd is None  # neither side is an object store
    assert estimate.assumptions.workers == 1
    assert estimate.assumptions.object_store_bytes_per_second == 100_000_000
    assert estimate.assumptions.prices.usd_per_1000_put_list == 0.005
    assert estimate.assumptions.prices.usd_per_1000_get_head == 0.0004
    assert "S3 Standard" in estimate.assumptions.prices.name and "an estimate" in estimate.note
    # Issue 44, point 6: the figures can be given.
    given = zshard.plan(src, tmp_path / "out.zarr", shard_shape=(20, 40),
                        estimate_with="bandwidth=1GB,latency=5ms,workers=3,get=0.01").estimate
    assert given.assumptions.workers == 3
    assert given.assumptions.object_store_bytes_per_second == 1_000_000_000
    assert given.assumptions.object_store_latency_ms == 5.0
    assert given.assumptions.prices.usd_per_1000_get_head == 0.01
    assert given.assumptions.prices.name.startswith("given")
    with pytest.raises(zshard.OptionsError, match="estimate_with"):
        zshard.plan(src, tmp_path / "out.zarr", shard_shape=(20, 40), estimate_with="workers=0")
