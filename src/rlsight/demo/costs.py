"""The demo's cost model: how long each phase of a step takes, shaped like an LLM run's.

The policy is a 16-token bigram model, so its real compute takes microseconds. To give the
report a run worth reading, every phase *also* waits for the time the same work would take
on an LLM-sized run, computed from what the phase really did:

* generation: tokens decoded / the worker's decode rate (``--decode-tps``, tokens/s);
* reference log-probabilities: tokens scored / ``logprob_tps``;
* training: tokens trained on the rank / ``train_tps``;
* the weight push (refit): parameter bytes / ``refit_bytes_per_s``;
* a checkpoint: parameter bytes / ``checkpoint_bytes_per_s``;
* the environment: ``env_s_per_completion`` per scored completion.

The waits are real sleeps inside the spans that do the work, so every figure in the report is
measured, not written in; the shaping is only *what* the work costs. With the defaults a
synchronous step lasts a few seconds and generation is about two thirds of it, as in real
GRPO runs (60-80%).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_DECODE_TPS", "Costs", "shaped_wait"]

#: Tokens per second one generation worker decodes (the whole batch, all sequences).
DEFAULT_DECODE_TPS: Final = 100.0


@dataclass(frozen=True, slots=True)
class Costs:
    """Rates that turn the work a phase did into the seconds it takes.

    Attributes:
        decode_tps: Tokens per second each generation worker decodes, one per worker; a
            worker past the end of the tuple uses its last value.
        logprob_tps: Tokens per second the reference worker scores.
        train_tps: Tokens per second one policy rank trains on (forward and backward).
        refit_bytes_per_s: Bandwidth of the weight push to one generation worker.
        checkpoint_bytes_per_s: Bandwidth of a checkpoint write.
        param_bytes: Bytes of parameters the pushes and checkpoints move (the shaped model's).
        env_s_per_completion: Seconds the environment spends scoring one completion.
    """

    decode_tps: tuple[float, ...] = (DEFAULT_DECODE_TPS,)
    logprob_tps: float = 4000.0
    train_tps: float = 900.0
    refit_bytes_per_s: float = 4e9
    checkpoint_bytes_per_s: float = 2e9
    param_bytes: int = 1_000_000_000
    env_s_per_completion: float = 0.002

    def __post_init__(self) -> None:
        rates = (*self.decode_tps, self.logprob_tps, self.train_tps, self.refit_bytes_per_s,
                 self.checkpoint_bytes_per_s)
        if not self.decode_tps or any(not r > 0 for r in rates):
            raise ValueError(f"demo costs: every rate must be > 0, got {self!r}")

    def decode_rate(self, rank: int) -> float:
        """The decode rate of generation worker ``rank``."""
        return self.decode_tps[min(rank, len(self.decode_tps) - 1)]


def shaped_wait(seconds: float) -> None:
    """Spend ``seconds`` as the shaped cost of the work just done (a sleep, so the CPU stays free)."""
    if seconds > 0:
        time.sleep(seconds)
