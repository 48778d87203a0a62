"""Trace and span ids that no ``random.seed`` call can repeat.

OpenTelemetry's default id generator draws from the module-level :mod:`random`, which every
RL run seeds on every rank (``random.seed(seed)``): two ranks then emit identical trace and
span ids, and the analysis drops one of each "duplicate" pair (issue #9). Each tracer
provider gets its own generator, seeded once from the operating system (``os.urandom``), so
the user's seeding never reaches it; a forked child builds a new provider, hence a new seed.
"""

from __future__ import annotations

import os
import random

from opentelemetry.sdk.trace.id_generator import IdGenerator

__all__ = ["SeedIndependentIdGenerator"]


class SeedIndependentIdGenerator(IdGenerator):
    """Random 64-bit span ids and 128-bit trace ids from a private, OS-seeded generator."""

    __slots__ = ("_bits",)

    def __init__(self) -> None:
        # A private Random (not SystemRandom): as fast as the SDK's default per id, and a
        # seed of 256 OS bits makes two processes' sequences collide with negligible odds.
        self._bits = random.Random(int.from_bytes(os.urandom(32), "big")).getrandbits

    def generate_span_id(self) -> int:
        span_id = self._bits(64)
        while span_id == 0:
            span_id = self._bits(64)
        return span_id

    def generate_trace_id(self) -> int:
        trace_id = self._bits(128)
        while trace_id == 0:
            trace_id = self._bits(128)
        return trace_id

    def is_trace_id_random(self) -> bool:
        return True
