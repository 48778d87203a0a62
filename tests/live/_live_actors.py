"""Actors for the live-view tests: a trainer that can hang inside a span, and a refitter.

Workers cannot import a test folder, so the module registers itself to be pickled by value.
"""

from __future__ import annotations

import os
import sys
import time

import ray

from rlsight import RL, span


@ray.remote
class Trainer:
    """Trains for ``seconds`` inside a training span; one rank is told to hang."""

    def pid(self) -> int:
        return os.getpid()

    def train(self, seconds: float) -> float:
        with span(RL.TRAINING, "rl.test.live.train"):
            time.sleep(seconds)
        return seconds

    def refit(self, seconds: float) -> None:
        with span(RL.REFIT, "rl.test.live.refit"):
            time.sleep(seconds)


@ray.remote(max_restarts=1)
class Crasher:
    """A generation worker that dies inside its span when told to; Ray restarts it once."""

    def pid(self) -> int:
        return os.getpid()

    def generate(self, crash: bool) -> int:
        with span(RL.GENERATION, "rl.test.live.generate"):
            if crash:
                time.sleep(0.2)  # the start record reaches the live file (written every 50 ms)
                os._exit(1)
        return os.getpid()


ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
