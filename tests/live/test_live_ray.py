"""Open spans on a real Ray cluster: a hanging rank is stalled, a killed rank is in the post-mortem."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from _live_actors import Crasher, Trainer

from _ray_support import RayCluster, wait_for_spans
from rlsight import StallRecord, setup_telemetry, shutdown_telemetry, step_span
from rlsight.analysis._read import read_span_columns
from rlsight.analysis.live import post_mortem
from rlsight.ray import worker_options
from rlsight.store._live import read_live

pytestmark = pytest.mark.ray


def _watch_json(run_dir: Path, *flags: str) -> tuple[int, dict[str, Any]]:
    """``rlsight watch RUN_DIR --once --json`` as a user runs it: its own process."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from rlsight.cli import main; sys.exit(main())",
         "watch", str(run_dir), "--once", "--json", *flags],
        capture_output=True, text=True, check=False, timeout=120,
    )
    return done.returncode, json.loads(done.stdout)


def _processes(doc: dict[str, Any], group: str) -> dict[int, dict[str, Any]]:
    return {p["rank"]: p for p in doc["processes"] if p["worker_group"] == group}


def test_a_rank_that_sleeps_far_past_its_peers_is_stalled_in_watch_json(ray_cluster: RayCluster) -> None:
    """rlsight watch --once --json names the hanging rank's training span and its age; exit 3."""
    group = "live_stall"
    trainers = [Trainer.options(**worker_options(worker_group=group, rank=r, world_size=3)).remote()
                for r in range(3)]
    try:
        ray.get([t.train.remote(0.05) for t in trainers for _ in range(3)])  # history: a median
        trainers[2].train.remote(60.0)  # killed in the finally below
        peers = [t.train.remote(0.05) for t in trainers[:2]]
        ray.get(peers)
        time.sleep(2.0)  # the hanging rank's span is now ~40x its name's median
        code, doc = _watch_json(ray_cluster.run_dir, "--min-age", "1")
        ranks = _processes(doc, group)
        assert code == 3 and doc["stalled"] is True
        hung = ranks[2]
        assert hung["stalled"] is True
        assert hung["innermost"]["name"] == "rl.test.live.train"
        assert hung["innermost"]["age_ns"] >= 2e9
        assert hung["innermost"]["median_ns"] < 1e9
        assert not ranks[0]["stalled"] and not ranks[1]["stalled"]
        assert ranks[0]["innermost"] is None  # idle between calls: nothing open
        # A floor above the span's age: nothing is stalled yet.
        code, doc = _watch_json(ray_cluster.run_dir, "--min-age", "3600")
        assert not any(p["stalled"] for p in _processes(doc, group).values())
    finally:
        for t in trainers:
            ray.kill(t)


def test_an_actor_killed_inside_a_refit_span_is_in_the_post_mortem(ray_cluster: RayCluster) -> None:
    """ray.kill mid-refit: the refit span is open, and the process has no clean shutdown."""
    group = "live_killed"
    trainer = Trainer.options(**worker_options(worker_group=group, rank=0, world_size=1)).remote()
    pid = ray.get(trainer.pid.remote())
    trainer.refit.remote(60.0)
    run_dir = ray_cluster.run_dir

    def started() -> bool:
        return any(s.name == "rl.test.live.refit" and s.process.endswith(f"/{pid}")
                   for s in read_live(run_dir).starts)

    deadline = time.monotonic() + 20
    while not started() and time.monotonic() < deadline:
        time.sleep(0.1)
    ray.kill(trainer)
    wait_for_spans(run_dir, lambda spans: True, timeout_s=0)
    cols, _, _ = read_span_columns(run_dir, workers=1)
    pm = post_mortem(cols, read_live(run_dir))
    assert pm is not None
    (proc,) = [p for p in pm.processes if p.worker_group == group]
    assert proc.pid == pid and not proc.clean_shutdown
    assert [o.name for o in proc.open] == ["rl.test.live.refit"]
    assert proc.innermost is not None and proc.innermost.name == "rl.test.live.refit"


def test_the_watchdog_fires_once_and_names_the_hanging_ranks_span(ray_cluster: RayCluster) -> None:
    """Driver watchdog on the shared cluster: rank 1 hangs in training, the record names it."""
    group = "live_watchdog"
    fired: list[StallRecord] = []
    trainers = [Trainer.options(**worker_options(worker_group=group, rank=r, world_size=2)).remote()
                for r in range(2)]
    ray.get([t.pid.remote() for t in trainers])  # started: worker start-up is not a stall here
    config = ray_cluster.config.with_changes(stall_after_s=1.5)
    setup_telemetry(config, worker_group="watchdog_driver", on_stall=fired.append)
    try:
        for n in range(3):
            with step_span(n):
                ray.get([t.train.remote(0.05) for t in trainers])
        with step_span(3):
            refs = [t.train.remote(60.0 if r == 1 else 0.05) for r, t in enumerate(trainers)]
            ray.get(refs[0])
            deadline = time.monotonic() + 30
            while not fired and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(2.0)  # past the threshold again: still only one firing
    finally:
        shutdown_telemetry()
        for t in trainers:
            ray.kill(t)
    assert len(fired) == 1
    record = fired[0]
    ranks = {p.rank: p for p in record.processes if p.worker_group == group}
    assert set(ranks) == {1}  # rank 0 finished its call: nothing open
    assert ranks[1].stalled and ranks[1].innermost is not None
    assert ranks[1].innermost.name == "rl.test.live.train"
    assert "rl.test.live.train" in record.describe()


def test_a_rank_ray_restarted_is_two_processes_the_dead_one_replaced(ray_cluster: RayCluster) -> None:
    """max_restarts=1: the first process dies inside a span and Ray starts another for the same
    rank; watch names the dead one's replacement and does not call its span stalled."""
    group = "live_restarted"
    crasher = Crasher.options(**worker_options(worker_group=group, rank=0, world_size=1)).remote()
    try:
        first = ray.get(crasher.pid.remote())
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(crasher.generate.remote(True))
        deadline = time.monotonic() + 60
        second = None
        while second is None and time.monotonic() < deadline:
            try:
                second = ray.get(crasher.generate.remote(False))
            except ray.exceptions.RayActorError:  # still restarting
                time.sleep(0.2)
        assert second is not None and second != first
        _code, doc = _watch_json(ray_cluster.run_dir, "--min-age", "0")
    finally:
        ray.kill(crasher)
    procs = {p["pid"]: p for p in doc["processes"] if p["worker_group"] == group}
    assert set(procs) == {first, second}
    dead = procs[first]
    assert dead["replaced_by_pid"] == second and dead["alive"] is False
    assert dead["innermost"]["name"] == "rl.test.live.generate" and dead["stalled"] is False
    assert procs[second]["replaced_by_pid"] is None
