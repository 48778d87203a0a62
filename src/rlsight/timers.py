"""Spans from the timers a framework already has: :class:`TimerBridge`.

RL frameworks time their phases already: NeMo-RL with ``Timer.time(label)``, verl with
``marked_timer(name, timing_raw)``, many loops with a dict of seconds per step that feeds the
logger. Rewriting those call sites as spans doubles the instrumentation and lets the two
drift apart. A bridge keeps the framework's timer (its dict fills exactly as before) and opens
one span per label as well, so the trace and the logged timings measure the same block.

Which group a label belongs to is a table the user writes, never a guess: a wrong group
would put seconds in the wrong goodput bucket. A label missing from the table is still
timed by the framework, opens no span, and is reported once per bridge.
"""

from __future__ import annotations

import inspect
import threading
import time
import warnings
from collections.abc import Callable, Mapping, MutableMapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Concatenate, Final, Generic, ParamSpec, TypeVar, cast

from opentelemetry.trace import Span

from rlsight._semconv import TIMER_SPAN_PREFIX
from rlsight._span_manager import NOOP
from rlsight.errors import RlsightWarning
from rlsight.span_context import SpanContextManager
from rlsight.spans import span

__all__ = ["TimerBridge"]

P = ParamSpec("P")
T = TypeVar("T")


class _Timed:
    """A span around one timed block that also adds the block's seconds to a dict."""

    __slots__ = ("_label", "_span", "_t0", "_timings")

    def __init__(
        self, label: str, timings: MutableMapping[str, float], opened: SpanContextManager
    ) -> None:
        self._label = label
        self._timings = timings
        self._span = opened
        self._t0 = 0.0

    def __enter__(self) -> Span:
        entered = self._span.__enter__()
        self._t0 = time.perf_counter()
        return entered

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        elapsed = time.perf_counter() - self._t0
        self._timings[self._label] = self._timings.get(self._label, 0.0) + elapsed
        self._span.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> Span:
        raise TypeError(
            f"bridge.time({self._label!r}, ...) is a plain context manager: write `with "
            "bridge.time(...)`, also inside async def (it times the block either way)"
        )

    async def __aexit__(self, *exc_info: object) -> None:  # never reached: __aenter__ refuses
        raise AssertionError("unreachable")


def _label_parameter(timer: Callable[..., object]) -> str | None:
    """The name of ``timer``'s first parameter (``name`` for verl's ``marked_timer``), through
    which a call may pass the label by keyword; ``None`` when its signature cannot be read."""
    try:
        parameters = list(inspect.signature(timer).parameters.values())
    except (TypeError, ValueError):
        return None
    first = parameters[0] if parameters else None
    keywordable = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return first.name if first is not None and first.kind in keywordable else None


class _Wrapped(Generic[T]):
    """The framework's own timer context manager, entered inside the label's span."""

    __slots__ = ("_inner", "_span")

    def __init__(self, inner: AbstractContextManager[T], opened: SpanContextManager) -> None:
        self._inner = inner
        self._span = opened

    def __enter__(self) -> T:
        self._span.__enter__()
        try:
            return self._inner.__enter__()
        except BaseException as exc:
            self._span.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        try:
            suppressed = self._inner.__exit__(exc_type, exc, tb)
        except BaseException as raised:
            self._span.__exit__(type(raised), raised, raised.__traceback__)
            raise
        if suppressed:
            self._span.__exit__(None, None, None)
        else:
            self._span.__exit__(exc_type, exc, tb)
        return suppressed


class TimerBridge:
    """Open a span per timer label, from a label -> group table, beside the framework's timer.

    Args:
        labels: For each timer label, the span group its time belongs to (the span is then
            named ``rl.timer.<label>``), or a ``(group, span_name)`` pair to name it yourself.
            Write it as a dict literal at the call site: ``rlsight check`` reads the names
            from it.

    Example:
        ``bridge = TimerBridge({"gen": RL.GENERATION, "update_actor": RL.TRAINING})``, then
        ``with bridge.time("gen", timing_raw): ...`` fills ``timing_raw["gen"]`` like verl's
        ``marked_timer`` and records ``rl.timer.gen`` in group ``generation``.
    """

    __slots__ = ("_lock", "_reported", "_table")

    def __init__(self, labels: Mapping[str, str | tuple[str, str]], /) -> None:
        table: dict[str, tuple[str, str]] = {}
        for label, target in labels.items():
            if isinstance(target, str):
                table[label] = (target, TIMER_SPAN_PREFIX + label)
            elif isinstance(target, tuple) and len(target) == 2 and all(isinstance(t, str) for t in target):
                table[label] = (target[0], target[1])
            else:
                raise TypeError(
                    f"TimerBridge label {label!r} maps to {target!r}; give a span group name "
                    "(RL.GENERATION) or a (group, span_name) pair"
                )
        self._table: Final = table
        self._reported: set[str] = set()
        self._lock: Final = threading.Lock()

    @property
    def labels(self) -> dict[str, tuple[str, str]]:
        """Each mapped label with its ``(group, span_name)``."""
        return dict(self._table)

    def _span(self, label: str) -> SpanContextManager:
        target = self._table.get(label)
        if target is None:
            self._report_unmapped(label)
            return NOOP
        group, name = target
        # The check reads these names and groups from the TimerBridge(...) table instead.
        return span(group, name)  # rlsight: ignore[span-names,span-groups,group-usage]

    def _report_unmapped(self, label: str) -> None:
        with self._lock:
            if label in self._reported:
                return
            self._reported.add(label)
        warnings.warn(
            f"rlsight: timer label {label!r} is not in the TimerBridge table, so its block opens no "
            f"span (the framework still times it); add {label!r}: <span group> to the table "
            f"(mapped: {', '.join(sorted(self._table)) or 'none'})",
            RlsightWarning,
            stacklevel=4,
        )

    def time(self, label: str, timings: MutableMapping[str, float]) -> AbstractContextManager[Span]:
        """A drop-in timer: adds the block's seconds to ``timings[label]`` and spans it.

        The seconds accumulate (``timings[label] += elapsed``, starting from 0), which is
        what verl's ``marked_timer`` / ``simple_timer`` do with ``timing_raw``; they are
        measured with ``time.perf_counter`` whether or not telemetry is on.
        """
        return _Timed(label, timings, self._span(label))

    def wrap(
        self, timer: Callable[Concatenate[str, P], AbstractContextManager[T]]
    ) -> Callable[Concatenate[str, P], AbstractContextManager[T]]:
        """Wrap the framework's own timer function so each call also spans its label.

        ``timer`` is called exactly as before (``timer(label, *args, **kwargs)``, or with the
        label by its parameter's name, ``marked_timer(name="gen", ...)``) and keeps doing all it
        did (filling its dict, NVTX ranges...); the label's span encloses it.
        NeMo-RL: ``timer.time = bridge.wrap(timer.time)``; verl:
        ``marked_timer = bridge.wrap(marked_timer)``.
        """

        keyword = _label_parameter(timer)

        def timed(*args: Any, **kwargs: Any) -> AbstractContextManager[T]:
            # The label is the first argument, positional or (``name="gen"``) by its name; a
            # call without one is the timer's own business, and fails as it would unwrapped.
            label = args[0] if args else kwargs.get(keyword) if keyword is not None else None
            inner = timer(*args, **kwargs)
            return _Wrapped(inner, self._span(label)) if isinstance(label, str) else inner

        timed.__wrapped__ = timer  # type: ignore[attr-defined]
        return cast("Callable[Concatenate[str, P], AbstractContextManager[T]]", timed)
