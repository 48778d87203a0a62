"""The prompt loader: a background thread that reads prompt batches ahead of the trainer.

Training data arrives from storage in shards; reading one takes time, and when the trainer
outruns the reader it waits. That wait is the demo's ``idle/buffer_starvation``: the driver
wraps the blocking ``get`` in ``efficiency_span``, and the report shows how much of each
step it cost. The read latency is simulated (the demo has no dataset to read); the wait is
real.
"""

from __future__ import annotations

import queue
import threading
import time

import numpy as np

from rlsight.demo.policy import I64, VOCAB

__all__ = ["PromptLoader"]

class PromptLoader:
    """Reads shards of prompt batches in a daemon thread, a bounded number ahead.

    Args:
        prompts_per_step: Distinct prompts in one batch.
        shard_batches: Batches per shard; a shard is read in one go.
        shard_read_s: Simulated time to read one shard.
        seed: Seeds the prompt draw.
    """

    def __init__(
        self, *, prompts_per_step: int, shard_batches: int, shard_read_s: float, seed: int
    ) -> None:
        self._prompts_per_step = prompts_per_step
        self._shard_batches = shard_batches
        self._shard_read_s = shard_read_s
        self._rng = np.random.default_rng(seed)
        self._ready: queue.Queue[I64] = queue.Queue(maxsize=shard_batches)
        self._stop = threading.Event()
        self._first_ready = threading.Event()
        self._thread = threading.Thread(target=self._read, name="rlsight-demo-prompts", daemon=True)

    def start(self) -> None:
        """Start reading."""
        self._thread.start()

    def wait_until_ready(self) -> None:
        """Block until the first batch is ready (the run's initial fill)."""
        self._first_ready.wait()

    def next_batch(self) -> I64:
        """The next batch of prompts, waiting for the reader when it is behind."""
        return self._ready.get()

    def stop(self) -> None:
        """Stop the reader; a batch it is holding is dropped."""
        self._stop.set()

    def _read(self) -> None:
        while not self._stop.is_set():
            time.sleep(self._shard_read_s)
            for _ in range(self._shard_batches):
                batch = self._rng.integers(1, VOCAB, size=self._prompts_per_step).astype(np.int64)
                while not self._stop.is_set():
                    try:
                        self._ready.put(batch, timeout=0.05)
                        self._first_ready.set()
                        break
                    except queue.Full:
                        continue
