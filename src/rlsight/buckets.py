"""Goodput buckets and the two context scopes that steer how a span is classified.

A leaf span's bucket normally comes from its span group. Two things can change that without
touching the shared helper that opens the span: :func:`bucket_scope` reclassifies the bucketed
spans opened inside it (a validation pass drives the same generate path as training, but its
time is overhead, not goodput), and :func:`per_prompt_scope` tells shared helpers that they
run once per prompt, so their spans are gated by the ``per_prompt`` group. Both are
``contextvars``, so they follow asyncio tasks and threads started with a copied context, and
never leak into a sibling task.
"""

from __future__ import annotations

import contextvars
from contextvars import Token
from enum import StrEnum
from types import TracebackType
from typing import Final, Literal, TypeAlias

__all__ = [
    "BUCKET_PRIORITY",
    "Bucket",
    "BucketName",
    "bucket_scope",
    "current_bucket_override",
    "in_per_prompt_scope",
    "per_prompt_scope",
]

BucketName: TypeAlias = Literal["productive", "overhead", "idle", "wasted"]


class Bucket(StrEnum):
    """Where a second of wall time went. The string value is the wire value of ``rl.bucket``."""

    PRODUCTIVE = "productive"
    """Work the run exists for: generation, reward, training, optimizer steps."""
    OVERHEAD = "overhead"
    """Necessary work that is not the goal: refit, checkpoint, logprob, validation, data plane."""
    IDLE = "idle"
    """Waiting: buffer starvation, refit bubbles, barriers."""
    WASTED = "wasted"
    """Work thrown away: stale groups discarded, aborted rollouts, steps recomputed."""


#: Which bucket wins when two spans of equal depth overlap on one timeline.
BUCKET_PRIORITY: Final[tuple[Bucket, ...]] = (
    Bucket.PRODUCTIVE,
    Bucket.WASTED,
    Bucket.OVERHEAD,
    Bucket.IDLE,
)

#: Internal contract with the span managers (``rlsight._span_manager``, ``rlsight.spans``),
#: which read both on the hot path; only ``bucket_scope`` and ``per_prompt_scope`` set them.
BUCKET_OVERRIDE: contextvars.ContextVar[Bucket | None] = contextvars.ContextVar(
    "rlsight_bucket_override", default=None
)
PER_PROMPT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "rlsight_per_prompt", default=False
)


class bucket_scope:
    """Reclassify every group-bucketed span opened inside the block as ``bucket``.

    Use it where a shared code path is doing work of a different kind than usual: the
    validation loop calls the same generation helper as training, and without a scope its
    spans would count as productive. Efficiency spans keep their declared category: an
    ``idle/...`` wait inside validation is still a wait. Umbrella spans are unaffected.

    Write ``with bucket_scope(...)`` at each use: a scope object remembers the one block it
    is entered for, so a single instance shared by concurrent tasks cannot restore them all.

    Args:
        bucket: A :class:`Bucket` or its string value.

    Raises:
        ValueError: ``bucket`` is not one of the four bucket names.
    """

    __slots__ = ("_bucket", "_token")

    def __init__(self, bucket: Bucket | BucketName) -> None:
        try:
            self._bucket = Bucket(bucket)
        except ValueError:
            raise ValueError(
                f"bucket_scope({bucket!r}): not a bucket; use one of "
                + ", ".join(b.value for b in Bucket)
            ) from None
        self._token: Token[Bucket | None] | None = None

    def __enter__(self) -> Bucket:
        self._token = BUCKET_OVERRIDE.set(self._bucket)
        return self._bucket

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            BUCKET_OVERRIDE.reset(self._token)
            self._token = None


class per_prompt_scope:
    """Mark the block as per-prompt work: spans opened inside it need the ``per_prompt`` group.

    A data-plane client used both by batch stages (once per step) and by the rollout path
    (once per prompt) cannot tell from its op name which one it is serving. The rollout path
    enters this scope; inside it a span is emitted only when its own group *and*
    ``per_prompt`` are enabled, and it is labelled ``rl.span_group=per_prompt``. That keeps
    the ``per_step`` preset's cost proportional to steps, never to dataset size.
    """

    __slots__ = ("_token",)

    def __init__(self) -> None:
        self._token: Token[bool] | None = None

    def __enter__(self) -> None:
        self._token = PER_PROMPT.set(True)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            PER_PROMPT.reset(self._token)
            self._token = None


def current_bucket_override() -> Bucket | None:
    """The bucket an enclosing :func:`bucket_scope` imposes, or ``None``."""
    return BUCKET_OVERRIDE.get()


def in_per_prompt_scope() -> bool:
    """Whether the caller runs inside :func:`per_prompt_scope`."""
    return PER_PROMPT.get()
