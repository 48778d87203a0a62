"""Trace and span ids stay unique when every process seeds Python's ``random`` (issue #9.1)."""

from __future__ import annotations

import random

import pytest
import ray

from _ray_support import RayCluster, wait_for_spans
from rlsight import RL, span
from rlsight.testing import Capture


def _ids_after_seeding(seed: int) -> tuple[int, int]:
    random.seed(seed)
    with span(RL.TRAINING, "rl.test.seeded") as s:
        ctx = s.get_span_context()
    return ctx.trace_id, ctx.span_id


def test_reseeding_random_does_not_repeat_ids(capture: Capture) -> None:
    """Two ranks that both call random.seed(0) must not emit the same trace or span id."""
    first, second = _ids_after_seeding(0), _ids_after_seeding(0)
    assert first[0] != second[0]
    assert first[1] != second[1]


def test_span_ids_do_not_consume_the_users_random_stream(capture: Capture) -> None:
    """Opening a span leaves the user's seeded sequence exactly where it was."""
    random.seed(7)
    expected = [random.random() for _ in range(3)]
    random.seed(7)
    got = []
    for _ in range(3):
        with span(RL.TRAINING, "rl.test.seeded"):
            got.append(random.random())
    assert got == expected


@pytest.mark.ray
def test_seeded_ray_workers_emit_distinct_ids(ray_cluster: RayCluster) -> None:
    """Each Ray worker seeds random the same way; every span still reaches the store."""
    from _trap_actors import SeededRank

    ranks = [SeededRank.remote() for _ in range(2)]
    try:
        ids = ray.get([r.emit.remote(f"rank-{i}") for i, r in enumerate(ranks)])
        wanted = {span_id for _, span_id in ids}
        spans = wait_for_spans(
            ray_cluster.run_dir,
            lambda s: wanted <= {x.span_id for x in s if x.name == "rl.test.seeded"},
        )
    finally:
        for r in ranks:
            ray.kill(r)
    assert ids[0][0] != ids[1][0]
    assert ids[0][1] != ids[1][1]
    assert wanted <= {x.span_id for x in spans if x.name == "rl.test.seeded"}
