"""A Ray actor that seeds Python's ``random`` the way every RL rank does, then emits a span.

Workers cannot import a test folder, so the module registers itself to be pickled by value.
"""

from __future__ import annotations

import random
import sys

import ray

from rlsight import RL, span


@ray.remote
class SeededRank:
    """One "rank" of a run: ``random.seed(0)`` first, like ``set_seed(seed)`` in a trainer."""

    def emit(self, label: str) -> tuple[str, str]:
        random.seed(0)
        with span(RL.TRAINING, "rl.test.seeded", label=label) as s:
            ctx = s.get_span_context()
        return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
