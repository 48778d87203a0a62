"""The two single controllers: synchronous GRPO, and asynchronous GRPO with a replay buffer.

``sync``: every step generates, scores, computes reference log-probabilities, trains and
pushes the weights, one phase after the other; while one fleet works the others wait.

``async``: one producer thread per generation worker keeps generating and scoring groups
into a replay buffer while the trainer trains. A group is tagged with the weights version it
was generated with; the trainer takes groups at most ``max_staleness`` versions old and
evicts older ones with :func:`rlsight.discard`, which moves their generation and scoring
seconds to ``wasted``. Waiting for the buffer is
``idle/buffer_starvation``; before a weight push the trainer pauses the producers and waits
for their in-flight rollouts to finish (``idle/refit_bubble``), as engines cannot swap weights
in the middle of a batch.
"""

from __future__ import annotations

import contextvars
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np
import ray

from rlsight import RL, discard, dispatch_with_trace_context, efficiency_span, span, umbrella_span
from rlsight.demo.fleet import Fleet, concat_rollouts
from rlsight.demo.policy import F64, I64, Rollout
from rlsight.demo.prompts import PromptLoader

__all__ = ["AsyncController", "Controller", "StepResult", "SyncController"]


@dataclass(frozen=True, slots=True)
class StepResult:
    """What a controller's step produced, for the driver's log and progress line."""

    rollout: Rollout
    rewards: F64
    env_failures: int
    evicted_groups: int = 0
    staleness: float = 0.0


class Controller:
    """What the driver needs from a controller."""

    def rollout(self, step: int) -> StepResult:
        """This step's training batch."""
        raise NotImplementedError

    def refit(self, during_pause: Callable[[], None]) -> None:
        """Push the new weights; ``during_pause`` runs while no rollout is in flight."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop background work."""


class SyncController(Controller):
    """Generate -> score -> (the driver trains) -> refit, one phase after the other."""

    def __init__(self, fleet: Fleet, loader: PromptLoader, group_size: int) -> None:
        self._fleet = fleet
        self._loader = loader
        self._group_size = group_size

    def rollout(self, step: int) -> StepResult:
        with efficiency_span("idle/buffer_starvation"):
            prompts = self._loader.next_batch()
        workers = list(self._fleet.generation.values())
        shards = np.array_split(prompts, len(workers))
        with umbrella_span(RL.ROLLOUT, "rl.rollout", prompts=len(prompts)):
            with span(RL.GENERATION, "rl.rollout.generate", batch_size=len(prompts) * self._group_size):
                rollouts: list[Rollout] = ray.get([
                    dispatch_with_trace_context(w.generate, shard, self._group_size)
                    for w, shard in zip(workers, shards, strict=True)
                ])
            with span(RL.REWARD, "rl.rollout.reward"):
                scored: list[tuple[F64, int]] = ray.get([
                    dispatch_with_trace_context(w.score, r, self._group_size)
                    for w, r in zip(workers, rollouts, strict=True)
                ])
        return StepResult(
            concat_rollouts(rollouts),
            np.concatenate([rewards for rewards, _ in scored]),
            sum(failures for _, failures in scored),
        )

    def refit(self, during_pause: Callable[[], None]) -> None:
        self._fleet.push_weights()
        during_pause()


@dataclass(frozen=True, slots=True)
class _Group:
    """One rollout call's output in the replay buffer."""

    group_id: str
    version: int
    prompts: int
    rollout: Rollout
    rewards: F64
    failures: int


class AsyncController(Controller):
    """Producers fill a replay buffer ahead of the trainer, at most ``max_staleness`` versions.

    Args:
        fleet: The workers.
        loader: Where prompts come from.
        group_size: Completions per prompt.
        prompts_per_step: Prompts in one training batch.
        max_staleness: Oldest weights version (behind the current one) a group may be trained on.
    """

    _CAPACITY_STEPS: Final = 2

    def __init__(
        self, fleet: Fleet, loader: PromptLoader, *, group_size: int, prompts_per_step: int,
        max_staleness: int,
    ) -> None:
        self._fleet = fleet
        self._loader = loader
        self._group_size = group_size
        self._prompts_per_step = prompts_per_step
        self._max_staleness = max_staleness
        self._chunk = max(1, prompts_per_step // max(1, len(fleet.generation)))
        self._version = 0
        self._calls = 0
        self._buffer: deque[_Group] = deque()
        self._pending_prompts: deque[int] = deque()
        self._lock = threading.Condition()
        self._paused = False
        self._busy: set[int] = set()
        self._stopping = False
        self._errors: list[BaseException] = []
        self._threads: dict[int, threading.Thread] = {}
        for rank in fleet.generation:
            # The job's context, so each rollout's spans join the run's trace.
            context = contextvars.copy_context()
            thread = threading.Thread(
                target=context.run, args=(self._produce, rank), name=f"rlsight-demo-producer-{rank}",
                daemon=True,
            )
            self._threads[rank] = thread
            thread.start()

    def _next_prompts(self) -> I64:
        # Called with the lock held.
        while len(self._pending_prompts) < self._chunk:
            self._pending_prompts.extend(int(p) for p in self._loader.next_batch())
        return np.asarray([self._pending_prompts.popleft() for _ in range(self._chunk)], dtype=np.int64)

    def _buffered_prompts(self) -> int:
        return sum(g.prompts for g in self._buffer)

    def _produce(self, rank: int) -> None:
        capacity = self._CAPACITY_STEPS * self._prompts_per_step
        while True:
            with self._lock:
                self._lock.wait_for(
                    lambda: self._stopping
                    or (not self._paused and self._buffered_prompts() < capacity)
                )
                worker = self._fleet.generation.get(rank)
                if self._stopping or worker is None:
                    return
                prompts = self._next_prompts()
                version = self._version
                self._calls += 1
                group_id = f"{rank}-{self._calls}"
                self._busy.add(rank)
            try:
                rollout, rewards, failures = ray.get(
                    dispatch_with_trace_context(worker.rollout, prompts, self._group_size, group_id)
                )
            except ray.exceptions.RayActorError:
                return  # killed (a fault): the others carry on
            except BaseException as exc:  # surfaced to the trainer, which raises it
                with self._lock:
                    self._errors.append(exc)
                    self._lock.notify_all()
                return
            finally:
                with self._lock:
                    self._busy.discard(rank)
                    self._lock.notify_all()
            with self._lock:
                self._buffer.append(_Group(group_id, version, len(prompts), rollout, rewards, failures))
                self._lock.notify_all()

    def _evict_stale(self) -> int:
        """Drop groups older than ``max_staleness`` versions; returns how many (lock held).

        A GRPO group is one prompt's completions, so a buffer entry (one rollout call, tagged
        with one ``group_id``) holds several; :func:`rlsight.discard` charges the entry's work
        to ``wasted``.
        """
        stale = [g for g in self._buffer if self._version - g.version > self._max_staleness]
        if stale:
            # Their generation and scoring, seconds ago on the workers, now count as wasted.
            discard([g.group_id for g in stale], "stale")
            self._buffer = deque(g for g in self._buffer if g not in stale)
        return sum(g.prompts for g in stale)

    def rollout(self, step: int) -> StepResult:
        evicted = 0
        taken: list[_Group] = []
        need = self._prompts_per_step
        with self._lock:
            evicted += self._evict_stale()
            if self._buffered_prompts() < need:
                with efficiency_span("idle/buffer_starvation"):
                    self._lock.wait_for(lambda: self._errors or self._buffered_prompts() >= need)
            if self._errors:
                raise self._errors[0]
            evicted += self._evict_stale()
            while need > 0 and self._buffer:
                group = self._buffer.popleft()
                taken.append(group)
                need -= group.prompts
            if need > 0:  # evicted what it waited for; take what arrives next
                with efficiency_span("idle/buffer_starvation"):
                    self._lock.wait_for(lambda: self._errors or self._buffered_prompts() >= need)
                while need > 0 and self._buffer:
                    group = self._buffer.popleft()
                    taken.append(group)
                    need -= group.prompts
            self._lock.notify_all()
        staleness = float(np.mean([self._version - g.version for g in taken]))
        return StepResult(
            concat_rollouts([g.rollout for g in taken]),
            np.concatenate([g.rewards for g in taken]),
            sum(g.failures for g in taken),
            evicted_groups=evicted,
            staleness=staleness,
        )

    def refit(self, during_pause: Callable[[], None]) -> None:
        with self._lock:
            self._paused = True
            with efficiency_span("idle/refit_bubble"):
                self._lock.wait_for(lambda: not self._busy)
        try:
            self._fleet.push_weights()
            during_pause()
        finally:
            with self._lock:
                self._version += 1
                self._paused = False
                self._lock.notify_all()

    def close(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        for thread in self._threads.values():
            thread.join(timeout=60)

